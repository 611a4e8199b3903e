#include "lib/algorithms/schedule.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ddl {

const char *step_kind_text(StepKind kind) {
  switch (kind) {
    case StepKind::kSend:
      return "send to";
    case StepKind::kRecv:
      return "receive from";
    case StepKind::kRecvReduce:
      return "receive-and-reduce from";
    case StepKind::kCopy:
      return "local copy";
    case StepKind::kReduce:
      return "local reduce";
    case StepKind::kPeerRead:
      return "single-copy read from";
    case StepKind::kPeerWrite:
      return "single-copy write into";
  }
  return "?";
}

size_t BlockLayout::extent(const std::vector<size_t> &counts, const std::vector<size_t> &displs) {
  size_t end = 0;
  for (size_t j = 0; j < counts.size(); ++j)
    if (counts[j] > 0) end = std::max(end, displs[j] + counts[j]);
  return end;
}

std::shared_ptr<const BlockLayout> layout_of(const CollectiveArgs &args) {
  if (args.layout) return args.layout;
  const Collective collective = args.collective;
  const int rank = args.rank, root = args.root;
  const size_t count = args.count;
  auto layout = std::make_shared<BlockLayout>();
  const size_t n = static_cast<size_t>(args.nranks);
  std::vector<size_t> counts(n, count), displs(n);
  for (size_t j = 0; j < n; ++j) displs[j] = j * count;
  // Which sides this rank uses (BlockLayout); the v forms' callers pass their own layouts,
  // these (every block `count`) serve tests and tools that give only a count.
  const bool alltoall = collective == Collective::kAlltoall;
  const bool reduce_scatterv = collective == Collective::kReduceScatterv;
  const bool sends =
      alltoall || reduce_scatterv || (collective == Collective::kScatter && rank == root);
  const bool receives = alltoall || collective == Collective::kAllgatherv ||
                        (collective == Collective::kGather && rank == root);
  if (sends) {
    layout->send_counts = counts;
    layout->send_displs = displs;
  }
  if (receives) {
    layout->recv_counts = counts;
    layout->recv_displs = displs;
  }
  return layout;
}

uint32_t add_step(Schedule *schedule, Step step) {
  schedule->steps.push_back(std::move(step));
  return static_cast<uint32_t>(schedule->steps.size() - 1);
}

Step send_step(int peer, uint32_t tag, Range src, size_t count, std::vector<uint32_t> deps) {
  Step s;
  s.kind = StepKind::kSend;
  s.peer = peer;
  s.tag = tag;
  s.src = src;
  s.count = count;
  s.deps = std::move(deps);
  return s;
}

Step recv_step(int peer, uint32_t tag, Range dst, size_t count, std::vector<uint32_t> deps) {
  Step s;
  s.kind = StepKind::kRecv;
  s.peer = peer;
  s.tag = tag;
  s.dst = dst;
  s.count = count;
  s.deps = std::move(deps);
  return s;
}

Step recv_reduce_step(int peer, uint32_t tag, Range tmp, Range src, Range dst, size_t count,
                      bool final_reduce, std::vector<uint32_t> deps) {
  Step s;
  s.kind = StepKind::kRecvReduce;
  s.peer = peer;
  s.tag = tag;
  s.tmp = tmp;
  s.src = src;
  s.dst = dst;
  s.count = count;
  s.final_reduce = final_reduce;
  s.deps = std::move(deps);
  return s;
}

Step copy_step(Range src, Range dst, size_t count, std::vector<uint32_t> deps) {
  Step s;
  s.kind = StepKind::kCopy;
  s.src = src;
  s.dst = dst;
  s.count = count;
  s.deps = std::move(deps);
  return s;
}

Step reduce_step(Range tmp, Range src, Range dst, size_t count, bool final_reduce,
                 std::vector<uint32_t> deps) {
  Step s = copy_step(src, dst, count, std::move(deps));
  s.kind = StepKind::kReduce;
  s.tmp = tmp;
  s.final_reduce = final_reduce;
  return s;
}

Step peer_read_step(int peer, Range src, Range dst, size_t count, std::vector<uint32_t> deps) {
  Step s = copy_step(src, dst, count, std::move(deps));
  s.kind = StepKind::kPeerRead;
  s.peer = peer;
  return s;
}

Step peer_write_step(int peer, Range src, Range dst, size_t count, std::vector<uint32_t> deps) {
  Step s = peer_read_step(peer, src, dst, count, std::move(deps));
  s.kind = StepKind::kPeerWrite;
  return s;
}

bool start_allreduce_schedule(const CollectiveArgs &args, const char *algorithm,
                              Schedule *schedule) {
  schedule->algorithm = algorithm;
  schedule->input_count = schedule->output_count = args.count;
  schedule->in_place = args.in_place;
  if (args.nranks > 1) return true;
  add_single_rank_copy(args, args.count, 0, schedule);
  return false;
}

// Chunks of 64 KB across hosts: a phase starts on a chunk as soon as the phase before has
// finished it, so small chunks keep the host link busy from the start. Measured on 2
// emulated hosts x 2 ranks at 1 Gbit/s (ddl_perf -a hier, 16 MB / 64 MB): 512 KB chunks
// 235 / 698 ms, 128 KB 170 / 610 ms, 64 KB 164 / 597 ms (link bound 134 / 537 ms). On a
// fast network a chunk must also outlast the rank's own cost of a message, or the rank, not
// the link, sets the pace: at 400 Gbit/s 64 KB pass in 1.3 us, about one message's overhead
// (ddl_sim's dgx-h100). So at least 8 overheads' worth of the network's bytes, in powers of
// two (64 KB at 1-10 Gbit/s with the library's constants; 512 KB at 400 Gbit/s).
constexpr size_t kNetworkChunkBytes = 64 * 1024;
constexpr double kOverheadsPerChunk = 8;
constexpr size_t kMaxNetworkChunkBytes = 64 << 20;

size_t network_chunk_elems(const CollectiveArgs &args) {
  if (args.hosts < 2 || args.elem_size == 0) return args.chunk_elems;
  size_t bytes = kNetworkChunkBytes;
  while (bytes < kMaxNetworkChunkBytes &&
         static_cast<double>(bytes) * args.net.beta < kOverheadsPerChunk * args.net.overhead)
    bytes *= 2;
  const size_t network = std::max<size_t>(1, bytes / args.elem_size);
  return args.chunk_elems == 0 ? network : std::min(args.chunk_elems, network);
}

int rails_for(const CollectiveArgs &args, int local) {
  if (count_bytes(args) < 64.0 * 1024) return 1;
  return std::max(1, std::min(args.rails, local));
}

double count_bytes(const CollectiveArgs &args) {
  return static_cast<double>(args.count) * static_cast<double>(args.elem_size);
}

TierGroups fastest_tier_groups(const CollectiveArgs &args) {
  if (args.tiers.empty()) return TierGroups{1, args.nranks};
  // Sorted ids, counted in runs, and the last answer kept per thread: a projection of
  // thousands of ranks asks again for every rank's schedule with the same tiers.
  thread_local std::vector<int> last_tier;
  thread_local TierGroups last_answer;
  if (args.tiers.front() == last_tier) return last_answer;
  std::vector<int> ids = args.tiers.front();
  std::sort(ids.begin(), ids.end());
  TierGroups out;
  out.groups = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    ++out.groups;
    out.largest = std::max(out.largest, static_cast<int>(j - i));
    i = j;
  }
  last_tier = args.tiers.front();
  last_answer = out;
  return out;
}

bool start_blocks_schedule(const CollectiveArgs &args, Collective collective, const char *algorithm,
                           Schedule *schedule) {
  const size_t block = args.count, all = block * static_cast<size_t>(args.nranks);
  const bool gather = collective == Collective::kAllgather;
  schedule->algorithm = algorithm;
  schedule->input_count = gather ? block : all;
  schedule->output_count = gather ? all : block;
  schedule->in_place = args.in_place;
  schedule->in_place_offset = block * static_cast<size_t>(args.rank);
  if (gather)
    add_single_rank_copy(args, block, schedule->in_place_offset, schedule);
  else if (args.nranks == 1)
    add_single_rank_copy(args, block, 0, schedule);
  return args.nranks > 1;
}

void add_single_rank_copy(const CollectiveArgs &args, size_t count, size_t output_offset,
                          Schedule *schedule) {
  if (!args.in_place && count > 0)
    add_step(schedule, copy_step(input_at(0), output_at(output_offset), count, {}));
}

uint32_t NetworkSendWindow::add(Schedule *schedule, Step send) {
  // tiers[0] are the hosts when the ranks span several (DDL_TIERS may make them sockets).
  const bool across = args_.hosts > 1 && !args_.tiers.empty() &&
                      args_.tiers[0][static_cast<size_t>(send.peer)] !=
                          args_.tiers[0][static_cast<size_t>(args_.rank)];
  if (!across) return add_step(schedule, std::move(send));
  if (peers_.empty() || peers_.back().rank != send.peer) peers_.push_back(Peer{send.peer, 0});
  if (peers_.size() > peers_at_once_)
    send.deps.push_back(peers_[peers_.size() - 1 - peers_at_once_].last_send);
  peers_.back().last_send = add_step(schedule, std::move(send));
  return peers_.back().last_send;
}

int power_of_two_below(int n, int *rounds) {
  int p = 1;
  *rounds = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++*rounds;
  }
  return p;
}

}  // namespace ddl
