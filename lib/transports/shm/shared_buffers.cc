#include "lib/transports/shm/shared_buffers.h"

#include <algorithm>
#include <mutex>

namespace ddl {
namespace {

struct Allocation {
  std::unique_ptr<ShmSegment> segment;
  uint64_t id = 0;
};

std::mutex g_mutex;
uint64_t g_next_id = 1;
// By base address, for the lookup of the allocation that holds a pointer.
std::map<uintptr_t, Allocation> &allocations() {
  static std::map<uintptr_t, Allocation> live;
  return live;
}

}  // namespace

Status shared_buffer_alloc(size_t bytes, void **ptr) {
  std::unique_ptr<ShmSegment> segment;
  DDL_RETURN_IF_ERROR(ShmSegment::create(bytes == 0 ? 1 : bytes, &segment));
  *ptr = segment->base();
  std::lock_guard<std::mutex> lock(g_mutex);
  Allocation &entry = allocations()[reinterpret_cast<uintptr_t>(*ptr)];
  entry.segment = std::move(segment);
  entry.id = g_next_id++;
  return Status::Ok();
}

Status shared_buffer_free(void *ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (allocations().erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
    return invalid_argument("%p was not returned by ddl_mem_alloc (or was freed already)", ptr);
  return Status::Ok();
}

bool shared_buffer_find(const void *ptr, size_t bytes, SharedRef *ref) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = allocations().upper_bound(p);
  if (it == allocations().begin()) return false;
  --it;
  const size_t size = it->second.segment->size();
  if (p - it->first > size || bytes > size - (p - it->first)) return false;
  ref->fd = it->second.segment->fd();
  ref->id = it->second.id;
  ref->offset = p - it->first;
  return true;
}

void PeerBufferMaps::make_room(const std::vector<std::pair<pid_t, SharedRef>> &refs) {
  size_t missing = 0;
  for (const auto &ref : refs)
    missing += maps_.count(std::make_pair(ref.first, ref.second.id)) == 0;
  if (maps_.size() + missing > std::max(kMaxMaps, refs.size())) maps_.clear();
}

Status PeerBufferMaps::map(pid_t pid, const SharedRef &ref, size_t bytes, char **address) {
  const auto key = std::make_pair(pid, ref.id);
  auto it = maps_.find(key);
  if (it == maps_.end()) {
    std::unique_ptr<ShmSegment> segment;
    DDL_RETURN_IF_ERROR(ShmSegment::open(pid, ref.fd, &segment));
    it = maps_.emplace(key, std::move(segment)).first;
  }
  const size_t size = it->second->size();
  if (ref.offset > size || bytes > size - ref.offset)
    return internal_error("process %d's allocation %llu holds %zu B, not %zu B at offset %llu",
                          static_cast<int>(pid), static_cast<unsigned long long>(ref.id), size,
                          bytes, static_cast<unsigned long long>(ref.offset));
  *address = static_cast<char *>(it->second->base()) + ref.offset;
  return Status::Ok();
}

}  // namespace ddl
