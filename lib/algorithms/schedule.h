// Schedules as data: what one rank does during one collective.
//
// An algorithm is a function from (ranks, rank, count, ...) to a Schedule: a list of steps
// (send a range to a peer, receive a range, receive and reduce, copy) with dependencies.
// The same schedule feeds the executor (real transports), the verifier (a symbolic check
// that every rank ends with every contribution exactly once) and, later, a simulator.
//
// Ranges are in elements, not bytes, so one schedule serves every datatype of that size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/algorithms/cost_model.h"
#include "lib/common/call.h"
#include "lib/common/tags.h"

namespace ddl {

// The buffers a step can name. kScratch is allocated by the executor (Schedule::scratch).
enum class BufferId : uint8_t { kInput, kOutput, kScratch };

struct Range {
  BufferId buffer = BufferId::kInput;
  size_t offset = 0;  // elements
};

enum class StepKind : uint8_t {
  kSend,        // send `count` elements at `src` to `peer` with `tag`
  kRecv,        // receive `count` elements from `peer` with `tag` into `dst`
  kRecvReduce,  // receive into `tmp`, then dst = tmp (op) src
  kCopy,        // dst = src, locally
  kReduce,      // dst = tmp (op) src, locally (tmp typically holds what a kRecv brought)
  // Single copy between ranks of one host (the caller publishes the buffers' addresses around
  // the plan; Schedule::peer_memory): `src` names the peer's memory for a read, `dst` for a
  // write. Nothing synchronizes with the peer: the schedule must leave it alone there.
  kPeerRead,   // dst = `count` elements of `peer`'s input at `src`
  kPeerWrite,  // `count` elements at `src` into `peer`'s output at `dst`
};

struct Step {
  StepKind kind = StepKind::kCopy;
  int peer = -1;
  uint32_t tag = 0;  // unique per (sender, receiver) pair within one collective
  size_t count = 0;  // elements
  Range src;         // kSend, kCopy, kPeerWrite, kPeerRead (the peer's input); the second
                     // operand of kRecvReduce and kReduce
  Range dst;         // kRecv, kCopy, kRecvReduce, kReduce, kPeerRead, kPeerWrite (the peer's
                     // output)
  Range tmp;         // kRecvReduce's landing area; kReduce's first operand
  // The step completes the reduction of its range: AVG divides by the rank count here.
  bool final_reduce = false;
  // Steps (indices into Schedule::steps) that must complete before this one starts. Every
  // dependency points backwards, so list order is a valid execution order.
  std::vector<uint32_t> deps;
};

// What a step does, in the words of reports and errors: "send to", "local copy", ...
const char *step_kind_text(StepKind kind);
// A send is matched to a receive by its (peer, tag): the receiver's key names the sender, the
// sender's the receiver (one 64-bit key, for the walkers that index steps by it).
inline uint64_t match_key(int peer, uint32_t tag) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32) | tag;
}

struct Schedule {
  std::vector<Step> steps;
  size_t input_count = 0;    // elements the input buffer holds
  size_t output_count = 0;   // elements the output buffer holds
  size_t scratch_count = 0;  // elements of scratch the executor must provide
  // When the input and output are the same memory (in place) the schedule must still be
  // right; builders are told so and the verifier checks it.
  bool in_place = false;
  // In place, the smaller of input and output lies inside the larger from this offset
  // (elements), as in NCCL: 0 for allreduce; rank * count for allgather (the input inside
  // the output) and for reduce_scatter (the output inside the input).
  size_t in_place_offset = 0;
  std::string algorithm;  // "ring", ... for logs and ddl_perf
  // It has kPeerRead or kPeerWrite steps: around it every rank publishes where its buffers
  // are and opens its write gate, and no rank returns before its peers are done with them
  // (lib/core/peer_buffers.h).
  bool peer_memory = false;
};

// Where each peer's block lies (elements), for alltoall, gather and scatter and their v forms:
// send_*[j] is what this rank sends to rank j, recv_*[j] what it receives from rank j. Only
// an alltoall uses both sides; a gather's root only the receive side and a scatter's root
// only the send side (its own block included); the other ranks of a gather or scatter have
// one block, CollectiveArgs::count, and an empty layout. An allgatherv has the receive side on
// every rank (each rank sends its one block, CollectiveArgs::count, to every rank); a
// reduce_scatterv the send side, alike on every rank: block j (send_counts[j] elements,
// packed in rank order) of every rank's input is reduced into rank j's output.
struct BlockLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  // One past the last element the blocks reach.
  static size_t extent(const std::vector<size_t> &counts, const std::vector<size_t> &displs);
  // Where block j starts: an empty block may name any displacement (MPI's rule), and is
  // placed at 0 so that its range stays inside the buffer.
  static size_t at(const std::vector<size_t> &counts, const std::vector<size_t> &displs, int j) {
    return counts[j] ? displs[j] : 0;
  }
};

// What a builder is asked for.
struct CollectiveArgs {
  Collective collective = Collective::kAllreduce;
  int nranks = 1;
  int rank = 0;
  size_t count = 0;  // allreduce/broadcast: elements; allgather: per-rank send count;
                     // reduce_scatter: per-rank receive count
  int root = 0;      // broadcast, reduce, gather, scatter
  bool in_place = false;
  size_t chunk_elems = 0;  // pipelining granularity; 0 = no chunking
  size_t elem_size = 4;    // bytes per element, for the cost models
  std::string algorithm;   // a name from the algorithm table, or "" to let the models pick
  // The ranks' tiers, fastest first, without the last (the whole communicator): tiers[t][r]
  // is rank r's group at tier t (tiers[0]: its host, unless DDL_TIERS says otherwise); each
  // group lies within one group of the next tier. Empty: one flat tier. Read by hier.
  std::vector<std::vector<int>> tiers;
  int hosts = 1;  // hosts the ranks span: the models price messages between hosts higher
  // Each group of tiers[0] lies on one host whose ranks may read and write each other's
  // buffers (cross-memory attach): hier's fastest tier goes single-copy (kPeerRead/Write).
  bool peer_memory = false;
  // The v forms: this rank's blocks. Null for the forms with one count (layout_of).
  std::shared_ptr<const BlockLayout> layout;
  // What the models price: messages inside a host (`local`) and between hosts (`net`), and
  // how many NICs each host drives at once (`rails`; hier's ranks of one host each drive
  // their own). The library's defaults are cost_model.h's; ddl_sim sets its cluster's.
  CostConstants local = kCostConstants;
  CostConstants net = kNetCostConstants;
  int rails = 1;
  // hier: the vector is cut into this many pieces whose tiers overlap (piece k crosses the
  // network while piece k+1 is reduced inside the hosts); 0: the models choose (hier.h).
  int pieces = 0;
};

// The blocks of an alltoall, gather or scatter: args.layout, or for the forms with one count
// every block args.count elements, in rank order.
std::shared_ptr<const BlockLayout> layout_of(const CollectiveArgs &args);

// Appends a step and returns its index (for later steps' deps).
uint32_t add_step(Schedule *schedule, Step step);

// The usual step shapes.
Step send_step(int peer, uint32_t tag, Range src, size_t count, std::vector<uint32_t> deps);
Step recv_step(int peer, uint32_t tag, Range dst, size_t count, std::vector<uint32_t> deps);
Step recv_reduce_step(int peer, uint32_t tag, Range tmp, Range src, Range dst, size_t count,
                      bool final_reduce, std::vector<uint32_t> deps);
Step copy_step(Range src, Range dst, size_t count, std::vector<uint32_t> deps);
Step reduce_step(Range tmp, Range src, Range dst, size_t count, bool final_reduce,
                 std::vector<uint32_t> deps);
Step peer_read_step(int peer, Range src, Range dst, size_t count, std::vector<uint32_t> deps);
Step peer_write_step(int peer, Range src, Range dst, size_t count, std::vector<uint32_t> deps);
// Whether a step exchanges messages with its peer (not local, not through peer memory).
inline bool is_message(StepKind kind) {
  return kind == StepKind::kSend || kind == StepKind::kRecv || kind == StepKind::kRecvReduce;
}
inline bool is_peer_memory(StepKind kind) {
  return kind == StepKind::kPeerRead || kind == StepKind::kPeerWrite;
}

inline Range input_at(size_t offset) {
  return Range{BufferId::kInput, offset};
}
inline Range output_at(size_t offset) {
  return Range{BufferId::kOutput, offset};
}
inline Range scratch_at(size_t offset) {
  return Range{BufferId::kScratch, offset};
}

// A single rank's whole schedule: its input copied to `output_offset` of its output when
// not in place (nothing when in place or empty).
void add_single_rank_copy(const CollectiveArgs &args, size_t count, size_t output_offset,
                          Schedule *schedule);

// Fills in what every allreduce schedule states (name, buffer sizes, in place) and, for a
// single rank, its whole schedule (a copy when out of place). False when nothing is left to
// build.
bool start_allreduce_schedule(const CollectiveArgs &args, const char *algorithm,
                              Schedule *schedule);

// The same for an allgather or a reduce-scatter (`collective`), whose blocks belong to ranks:
// buffer sizes, the in-place offset, the copy of an allgather's own block into the output (out
// of place), and a lone rank's whole reduce-scatter. False when nothing is left to build.
bool start_blocks_schedule(const CollectiveArgs &args, Collective collective, const char *algorithm,
                           Schedule *schedule);

// The pipeline chunk of schedules whose messages cross hosts (hier's, the chain's): at most
// 64 KB when the ranks span hosts, args.chunk_elems otherwise.
size_t network_chunk_elems(const CollectiveArgs &args);

// How many NICs a host's `local` ranks share between hosts, as the models price it:
// min(rails, local) from 64 KB a call; below, a call's bytes do not fill one link and the rails
// would change nothing but rounding (an exact tie of rd and hier at 8 B on 2 hosts x 4 went to
// hier with 2 rails, where hier measured 3x rd's time on 2 x 2).
int rails_for(const CollectiveArgs &args, int local);

// What the cost models read from the arguments: the bytes of args.count elements, and how
// the fastest tier's groups (hosts; one group without tiers) divide the ranks.
double count_bytes(const CollectiveArgs &args);
struct TierGroups {
  int groups = 1;   // how many
  int largest = 1;  // ranks in the largest
};
TierGroups fastest_tier_groups(const CollectiveArgs &args);

// A rank's sends to other hosts go to at most a few peers at once (two by default): the sends
// to a peer wait for the last send to the peer that many before it (sends inside the host do
// not count; several sends in a row to one peer, a message's chunks, count as one). Posted all
// at once, a rank's messages to many hosts share its NIC and their receivers' (TCP
// connections share a link, and a NIC serves its queue pairs in turn), so all of them arrive
// near the end, and what the receivers do with each (forward it inside their host, copy it
// out of the stack) cannot overlap the others' transfer. Two keep the link busy (one on the
// wire, the next queued behind it). On 4 emulated hosts x 1 rank, a 64 MB alltoall went from
// 71-78 to 90-92 % of the link bound (bench/across-hosts.md). Only for schedules whose
// receives never wait for this rank's later sends (the pairwise exchanges, hier's
// allgather), or a send held back could hold up its own receiver.
class NetworkSendWindow {
 public:
  explicit NetworkSendWindow(const CollectiveArgs &args, size_t peers_at_once = 2)
      : args_(args), peers_at_once_(peers_at_once) {}
  // Adds `send` to the schedule (after the window's step, when it goes to another host);
  // returns its index.
  uint32_t add(Schedule *schedule, Step send);

 private:
  struct Peer {
    int rank;
    uint32_t last_send;
  };
  const CollectiveArgs &args_;
  const size_t peers_at_once_;
  std::vector<Peer> peers_;  // on other hosts, in the order this rank sends to them
};

// The largest power of two <= n (n >= 1), and its log2 in *rounds: the ranks that take part
// in recursive doubling or halving; the others fold into them.
int power_of_two_below(int n, int *rounds);

// (a mod n) for a possibly negative a.
inline int ring_index(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace ddl
