// Buffers the ranks of a host can map into each other's address space (ddl_mem_alloc).
//
// Each allocation is an anonymous memfd of its own, mapped shared, its descriptor kept open
// for as long as it lives so that peers can open it through /proc/<pid>/fd/<fd> (as the
// shm segment is opened). A collective whose buffers are such allocations on every rank
// reads its peers' data with plain loads: no kernel copy, no landing buffer.
//
// A peer's mapping keeps the memory alive after its owner frees it, so a slow peer never
// touches memory the owner has reused for something else.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "lib/common/status.h"
#include "lib/transports/shm/shm_segment.h"

namespace ddl {

// Where a byte range lies in a shared allocation, as published to peers. fd < 0: nowhere.
struct SharedRef {
  int32_t fd = -1;
  uint32_t reserved = 0;
  uint64_t id = 0;      // unique per allocation within its process (fds are reused)
  uint64_t offset = 0;  // of the range within the allocation
};

Status shared_buffer_alloc(size_t bytes, void **ptr);
// DDL_ERR_INVALID_ARGUMENT for a pointer that shared_buffer_alloc did not return.
Status shared_buffer_free(void *ptr);
// Whether [ptr, ptr + bytes) lies inside one live allocation of this process; *ref says where.
bool shared_buffer_find(const void *ptr, size_t bytes, SharedRef *ref);

// A communicator's mappings of its peers' allocations, by (pid, allocation id).
class PeerBufferMaps {
 public:
  // Makes room for the mappings of `refs` (pid, ref) that are not cached yet: when they
  // would take the cache past its size, every mapping goes (addresses map() gave before are
  // then invalid). The cache holds at least one call's worth. Call before a call's map()s.
  void make_room(const std::vector<std::pair<pid_t, SharedRef>> &refs);
  // The address, in this process, of `bytes` at ref in process pid's allocation.
  Status map(pid_t pid, const SharedRef &ref, size_t bytes, char **address);

 private:
  // Mappings kept: a peer's allocation stays mapped (and its memory alive) after the peer
  // frees it, until the cache starts over. Training loops reuse a few buffers.
  static constexpr size_t kMaxMaps = 32;
  std::map<std::pair<pid_t, uint64_t>, std::unique_ptr<ShmSegment>> maps_;
};

}  // namespace ddl
