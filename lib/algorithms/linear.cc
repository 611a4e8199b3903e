#include "lib/algorithms/linear.h"

namespace ddl {

void build_linear_gather(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, root = args.root;
  schedule->algorithm = "linear";
  schedule->input_count = args.count;
  if (args.rank != root) {
    add_step(schedule, send_step(root, 0, input_at(0), args.count, {}));
    return;
  }
  const std::shared_ptr<const BlockLayout> layout = layout_of(args);
  const std::vector<size_t> &counts = layout->recv_counts, &displs = layout->recv_displs;
  schedule->output_count = BlockLayout::extent(counts, displs);
  // In place the root's block already lies in its output (the input inside it).
  schedule->in_place = args.in_place;
  schedule->in_place_offset = BlockLayout::at(counts, displs, root);
  if (!args.in_place && args.count > 0)
    add_step(schedule, copy_step(input_at(0), output_at(displs[root]), args.count, {}));
  for (int k = 1; k < n; ++k) {
    const int from = ring_index(root + k, n);
    add_step(schedule, recv_step(from, 0, output_at(BlockLayout::at(counts, displs, from)),
                                 counts[from], {}));
  }
}

void build_linear_scatter(const CollectiveArgs &args, Schedule *schedule) {
  const int n = args.nranks, root = args.root;
  schedule->algorithm = "linear";
  schedule->output_count = args.count;
  if (args.rank != root) {
    add_step(schedule, recv_step(root, 0, output_at(0), args.count, {}));
    return;
  }
  const std::shared_ptr<const BlockLayout> layout = layout_of(args);
  const std::vector<size_t> &counts = layout->send_counts, &displs = layout->send_displs;
  schedule->input_count = BlockLayout::extent(counts, displs);
  // In place the root's block already lies in its input (the output inside it).
  schedule->in_place = args.in_place;
  schedule->in_place_offset = BlockLayout::at(counts, displs, root);
  for (int k = 1; k < n; ++k) {
    const int to = ring_index(root + k, n);
    add_step(schedule,
             send_step(to, 0, input_at(BlockLayout::at(counts, displs, to)), counts[to], {}));
  }
  if (!args.in_place && args.count > 0)
    add_step(schedule, copy_step(input_at(displs[root]), output_at(0), args.count, {}));
}

}  // namespace ddl
