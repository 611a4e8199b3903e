// What the verifier tests of hier's schedules share (test_hier_schedules.cc,
// test_bruck_schedules.cc): hosts as tiers, and a sweep of one call's shapes through the
// verifier.
#pragma once

#include <criterion/criterion.h>

#include <vector>

#include "lib/algorithms/schedule.h"
#include "lib/algorithms/verifier.h"

namespace ddl {

// Tiers for hosts of the given sizes (ranks numbered host by host).
inline std::vector<std::vector<int>> hosts_of_sizes(const std::vector<int> &sizes) {
  std::vector<int> group_of;
  for (size_t h = 0; h < sizes.size(); ++h)
    for (int i = 0; i < sizes[h]; ++i) group_of.push_back(static_cast<int>(h));
  return {group_of};
}

// Every count, chunk, in place and not, through the verifier.
inline void verify_hier(const std::vector<std::vector<int>> &tiers, int nranks,
                        const std::vector<size_t> &counts, const std::vector<size_t> &chunks,
                        Collective collective = Collective::kAllreduce, bool peer_memory = false,
                        int pieces = 0, const char *algorithm = "hier") {
  for (size_t count : counts)
    for (size_t chunk : chunks)
      for (bool in_place : {false, true}) {
        CollectiveArgs a;
        a.collective = collective;
        a.nranks = nranks;
        a.count = count;
        a.chunk_elems = chunk;
        a.in_place = in_place;
        a.algorithm = algorithm;
        a.tiers = tiers;
        a.hosts = 2;
        a.peer_memory = peer_memory;
        a.pieces = pieces;
        const Status s = verify_collective(a);
        cr_assert(s.ok(), "%s %s n=%d count=%zu chunk=%zu in_place=%d peer_memory=%d pieces=%d: %s",
                  algorithm, collective_name(collective), nranks, count, chunk, in_place,
                  peer_memory, pieces, s.message().c_str());
      }
}

}  // namespace ddl
