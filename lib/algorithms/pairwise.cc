#include "lib/algorithms/pairwise.h"

#include <algorithm>

namespace ddl {

void build_pairwise_alltoall(const CollectiveArgs &args, Schedule *schedule) {
  const std::shared_ptr<const BlockLayout> layout = layout_of(args);
  const int n = args.nranks, r = args.rank;
  // In place the data to send is where it will be received (MPI_IN_PLACE).
  const std::vector<size_t> &send_counts =
      args.in_place ? layout->recv_counts : layout->send_counts;
  const std::vector<size_t> &send_displs =
      args.in_place ? layout->recv_displs : layout->send_displs;
  const size_t out_extent = BlockLayout::extent(layout->recv_counts, layout->recv_displs);
  schedule->algorithm = "pairwise";
  schedule->input_count =
      args.in_place ? out_extent : BlockLayout::extent(send_counts, send_displs);
  schedule->output_count = out_extent;
  schedule->in_place = args.in_place;
  std::vector<uint32_t> after_copy;
  Range (*source)(size_t) = input_at;
  if (args.in_place && n > 1 && out_extent > 0) {
    schedule->scratch_count = out_extent;
    after_copy = {add_step(schedule, copy_step(input_at(0), scratch_at(0), out_extent, {}))};
    source = scratch_at;
  }
  const std::vector<size_t> &recv_counts = layout->recv_counts;
  auto send_at = [&](int j) { return BlockLayout::at(send_counts, send_displs, j); };
  auto recv_at = [&](int j) { return BlockLayout::at(recv_counts, layout->recv_displs, j); };
  if (!args.in_place && recv_counts[r] > 0)
    add_step(schedule, copy_step(input_at(send_at(r)), output_at(recv_at(r)), recv_counts[r], {}));
  NetworkSendWindow window(args);
  for (int k = 1; k < n; ++k) {
    const int to = ring_index(r + k, n), from = ring_index(r - k, n);
    window.add(schedule, send_step(to, 0, source(send_at(to)), send_counts[to], after_copy));
    add_step(schedule, recv_step(from, 0, output_at(recv_at(from)), recv_counts[from], after_copy));
  }
}

void build_pairwise_allgatherv(const CollectiveArgs &args, Schedule *schedule) {
  const std::shared_ptr<const BlockLayout> layout = layout_of(args);
  const int n = args.nranks, r = args.rank;
  const std::vector<size_t> &counts = layout->recv_counts;
  auto at = [&](int j) { return BlockLayout::at(counts, layout->recv_displs, j); };
  schedule->algorithm = "pairwise";
  schedule->input_count = args.count;
  schedule->output_count = BlockLayout::extent(counts, layout->recv_displs);
  schedule->in_place = args.in_place;
  schedule->in_place_offset = at(r);
  if (!args.in_place && args.count > 0)
    add_step(schedule, copy_step(input_at(0), output_at(at(r)), args.count, {}));
  NetworkSendWindow window(args);
  for (int k = 1; k < n; ++k) {
    const int to = ring_index(r + k, n), from = ring_index(r - k, n);
    window.add(schedule, send_step(to, 0, input_at(0), args.count, {}));
    add_step(schedule, recv_step(from, 0, output_at(at(from)), counts[from], {}));
  }
}

void build_pairwise_reduce_scatterv(const CollectiveArgs &args, Schedule *schedule) {
  // Receive staging: each slot's next use waits for the reduction of its last one.
  constexpr int kSlots = 4;
  const std::shared_ptr<const BlockLayout> layout = layout_of(args);
  const int n = args.nranks, r = args.rank;
  const std::vector<size_t> &counts = layout->send_counts;
  auto at = [&](int j) { return BlockLayout::at(counts, layout->send_displs, j); };
  const size_t mine = counts[r];
  schedule->algorithm = "pairwise";
  schedule->input_count = BlockLayout::extent(counts, layout->send_displs);
  schedule->output_count = mine;
  schedule->in_place = args.in_place;
  schedule->in_place_offset = at(r);
  if (n == 1) {
    if (!args.in_place && mine > 0)
      add_step(schedule, copy_step(input_at(at(r)), output_at(0), mine, {}));
    return;
  }
  NetworkSendWindow window(args);
  for (int k = 1; k < n; ++k) {
    const int to = ring_index(r + k, n);
    window.add(schedule, send_step(to, 0, input_at(at(to)), counts[to], {}));
  }
  const int slots = std::min(n - 1, kSlots);
  schedule->scratch_count = static_cast<size_t>(slots) * mine;
  std::vector<uint32_t> reduced;  // by round
  for (int k = 1; k < n; ++k) {
    std::vector<uint32_t> after;
    if (k > 1) after.push_back(reduced.back());
    if (k > slots) after.push_back(reduced[static_cast<size_t>(k - 1 - slots)]);
    const Range slot = scratch_at(static_cast<size_t>((k - 1) % slots) * mine);
    const Range operand = k == 1 ? input_at(at(r)) : output_at(0);
    reduced.push_back(add_step(schedule, recv_reduce_step(ring_index(r - k, n), 0, slot, operand,
                                                          output_at(0), mine, k == n - 1, after)));
  }
}

}  // namespace ddl
