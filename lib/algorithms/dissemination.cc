#include "lib/algorithms/dissemination.h"

namespace ddl {

void build_dissemination_barrier(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, r = args.rank;
  schedule->algorithm = "dissemination";
  schedule->in_place = true;
  std::vector<uint32_t> heard;  // the receive of the previous round
  uint32_t round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    // The signal of round k must carry everything heard in rounds < k.
    add_step(schedule, send_step(ring_index(r + distance, n), round, output_at(0), 0, heard));
    heard = {
        add_step(schedule, recv_step(ring_index(r - distance, n), round, output_at(0), 0, heard))};
  }
}

}  // namespace ddl
