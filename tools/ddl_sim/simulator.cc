#include "tools/ddl_sim/simulator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <unordered_map>

#include "lib/algorithms/every_rank.h"
#include "lib/algorithms/hier.h"
#include "lib/algorithms/hier_bruck_allreduce.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/walk.h"

namespace ddl_sim {
namespace {

using ddl::Status;
using ddl::StepKind;

// One step, as small as the simulation needs it: a 4096-rank call has millions of steps.
struct SimStep {
  StepKind kind = StepKind::kCopy;
  int32_t peer = -1;
  uint32_t tag = 0;
  uint32_t pending = 0;  // dependencies not yet done
  uint32_t matched = 0;  // a send: the receiver's step
  double bytes = 0;
  double ready = -1;    // a receive: when it was ready (-1: not yet); a peer copy: when the
                        // rank's share of its work ends
  double arrival = -1;  // a receive: when its message arrived (-1: not yet sent)
  bool done = false;
};

// Every rank's steps, who waits on whom and its receives by (peer, tag), the pieces of the
// schedule checkers' graph (lib/algorithms/walk.h) kept per rank: the whole schedules of
// 16,384 ranks are never held at once.
struct RankSteps {
  std::vector<SimStep> steps;
  ddl::DependentRows rows;
  ddl::MatchIndex receives;
};

RankSteps compact(const ddl::Schedule &schedule, size_t elem_size) {
  RankSteps out;
  out.steps.resize(schedule.steps.size());
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const ddl::Step &step = schedule.steps[i];
    SimStep &s = out.steps[i];
    s.kind = step.kind;
    s.peer = step.peer;
    s.tag = step.tag;
    s.bytes = static_cast<double>(step.count) * static_cast<double>(elem_size);
    s.pending = static_cast<uint32_t>(step.deps.size());
  }
  out.rows = ddl::dependent_rows(schedule.steps);
  out.receives = ddl::match_index(schedule.steps, true);
  return out;
}

// A message on a fairly shared link: the bytes served per message at its end, its flow and
// which link of the flow's path this is.
struct OnLink {
  double ends_at = 0;
  uint32_t flow = 0;
  uint32_t hop = 0;
  bool operator>(const OnLink &other) const { return ends_at > other.ends_at; }
};

struct Link {
  double rate = 0;
  double free_at = 0;  // first come, first served: when the bytes queued so far are through
  double busy = 0;
  double bytes = 0;
  Tier tier = Tier::kLocal;
  // Shared fairly: the bytes each message being served has been served since the start (all
  // alike, each getting rate / n), when that was brought up to date, the messages being
  // served (by the count they end at), and the version of the link's next "through" event.
  double served = 0, updated = 0;
  uint32_t version = 0;
  std::priority_queue<OnLink, std::vector<OnLink>, std::greater<OnLink>> serving;
};

// The cluster's links, numbered.
class Fabric {
 public:
  explicit Fabric(const Cluster &c) : c_(c) {
    const int n = c.nranks();
    for (int r = 0; r < n; ++r) {
      add(c.local_rate, Tier::kLocal);  // out of rank r: 2r
      add(c.local_rate, Tier::kLocal);  // into rank r: 2r + 1
    }
    bus_base_ = links_.size();
    if (c.local_bus_rate > 0)
      for (int h = 0; h < c.hosts; ++h) add(c.local_bus_rate, Tier::kBus);
    nic_base_ = links_.size();
    const double nic = c.nic_rate * c.net_efficiency;
    for (int i = 0; i < 2 * c.hosts * c.nics; ++i) add(nic, Tier::kNic);
    leaf_base_ = links_.size();
    if (c.leaves() > 1) {
      const double uplink = c.hosts_per_leaf * nic / c.oversubscription;
      for (int i = 0; i < 2 * c.leaves() * c.nics; ++i) add(uplink, Tier::kFabric);
    }
  }

  // The links of a message from rank `from` to rank `to` (a peer copy's too), and its latency.
  void path(int from, int to, std::vector<size_t> *links, double *latency) const {
    links->clear();
    const int hf = c_.host_of(from), ht = c_.host_of(to);
    if (hf == ht) {
      links->push_back(2 * static_cast<size_t>(from));
      links->push_back(2 * static_cast<size_t>(to) + 1);
      if (c_.local_bus_rate > 0) links->push_back(bus_base_ + static_cast<size_t>(hf));
      *latency = c_.local_latency;
      return;
    }
    const int rail_from = c_.local_of(from) % c_.nics, rail_to = c_.local_of(to) % c_.nics;
    links->push_back(nic_base_ + 2 * static_cast<size_t>(hf * c_.nics + rail_from));
    const int lf = c_.leaf_of(hf), lt = c_.leaf_of(ht);
    if (lf != lt) {
      // Up from the sender's leaf and down into the receiver's, on the sender's rail's plane.
      links->push_back(leaf_base_ + 2 * static_cast<size_t>(rail_from * c_.leaves() + lf));
      links->push_back(leaf_base_ + 2 * static_cast<size_t>(rail_from * c_.leaves() + lt) + 1);
    }
    links->push_back(nic_base_ + 2 * static_cast<size_t>(ht * c_.nics + rail_to) + 1);
    *latency = c_.net_latency;
  }

  // Sends `bytes` along `links` no earlier than `earliest`; returns when the last byte is
  // through. Each link is a queue of bytes served at its rate, first come first served: the
  // message is through a link once the bytes queued before it and its own have passed, and
  // through the path once it is through every link. A link does not wait for the others
  // (the flows of a real network share a link rather than take turns on the whole path), so
  // a message moves at its slowest link's rate, a congested receiver slows only what goes
  // to it, and a shared uplink faster than the NICs under it adds no delay of its own.
  double transfer(const std::vector<size_t> &links, double bytes, double earliest) {
    double finish = earliest;
    for (size_t l : links) {
      Link &link = links_[l];
      const double held = bytes / link.rate;
      link.free_at = std::max(earliest, link.free_at) + held;
      link.busy += held;
      link.bytes += bytes;
      finish = std::max(finish, link.free_at);
    }
    return finish;
  }

  // Fair sharing: link l serves hop `hop` of message `flow` (`bytes`) from time t on. The
  // caller then asks when the link's next message is through (next_through).
  void serve(size_t l, double bytes, double t, uint32_t flow, uint32_t hop) {
    Link &link = links_[l];
    bring_up_to(link, t);
    link.bytes += bytes;
    link.serving.push(OnLink{link.served + bytes, flow, hop});
  }

  // Fair sharing: link l's "through" event of `version` at time t. Unless a later change has
  // replaced it (false), moves the messages now through to *through.
  bool pass(size_t l, uint32_t version, double t, std::vector<OnLink> *through) {
    Link &link = links_[l];
    if (version != link.version) return false;
    bring_up_to(link, t);
    through->clear();
    // The message the event was for, and any that end within rounding of it.
    do {
      through->push_back(link.serving.top());
      link.serving.pop();
    } while (!link.serving.empty() &&
             link.serving.top().ends_at <= link.served * (1 + 1e-12) + 1e-6);
    return true;
  }

  // Fair sharing: when link l's next message will be through as things stand at time t, the
  // event's version in *version; -1 when it serves none.
  double next_through(size_t l, double t, uint32_t *version) {
    Link &link = links_[l];
    *version = ++link.version;
    if (link.serving.empty()) return -1;
    const double left = std::max(0.0, link.serving.top().ends_at - link.served);
    return t + left * static_cast<double>(link.serving.size()) / link.rate;
  }

  void account(SimResult *result) const {
    for (const Link &link : links_) {
      TierUse &use = result->tiers[static_cast<int>(link.tier)];
      use.busiest_seconds = std::max(use.busiest_seconds, link.busy);
      use.bytes += link.bytes;
    }
  }

 private:
  static void bring_up_to(Link &link, double t) {
    if (!link.serving.empty() && t > link.updated) {
      link.served += (t - link.updated) * link.rate / static_cast<double>(link.serving.size());
      link.busy += t - link.updated;
    }
    link.updated = std::max(link.updated, t);
  }

  void add(double rate, Tier tier) {
    Link link;
    link.rate = rate;
    link.tier = tier;
    links_.push_back(link);
  }

  const Cluster &c_;
  std::vector<Link> links_;
  size_t bus_base_ = 0, nic_base_ = 0, leaf_base_ = 0;
};

// What happens to a step at an event's time.
enum class Happens : uint8_t {
  kDone,      // the step is done
  kArrived,   // a receive's message is in and the receive was posted
  kOnWire,    // a send's or peer copy's bytes start onto their links (queued there from now on)
  kLinkPass,  // fair sharing: a link's next message is through it (Event: rank = the link,
              // step = the event's version, stale once another message joined the link)
};

// A message (or peer copy) on its way through its links.
// Fair sharing is among connections (a sender and a receiver: a NIC's queue pair, a TCP
// connection); a connection's messages cross each link in turn, each once the one before it
// is through that link.
constexpr uint32_t kNoFlow = UINT32_MAX;
constexpr int kMaxHops = 4;  // a path's links: NIC, leaf up, leaf down, NIC

struct Flow {
  int32_t rank = 0;
  uint32_t step = 0;
  double earliest = 0;  // its stack copy's end: it is not sent before
  double latency = 0;   // of its path
  // Fair sharing only:
  double bytes = 0;
  uint64_t connection = 0;
  uint32_t next = kNoFlow;  // the connection's next message
  uint32_t hops = 0, links_left = 0;
  uint32_t through_hops = 0, waiting_hops = 0;  // bit k: through / waiting at link k
  uint32_t links[kMaxHops] = {};
};

struct Event {
  double time;
  uint64_t order;  // ties: first scheduled first, so runs are deterministic
  int32_t rank;
  uint32_t step;
  Happens what;
  bool operator>(const Event &other) const {
    return time != other.time ? time > other.time : order > other.order;
  }
};

class Simulation {
 public:
  Simulation(const Cluster &cluster, std::vector<RankSteps> ranks, int trace_ranks)
      : c_(cluster),
        fabric_(cluster),
        ranks_(std::move(ranks)),
        free_{std::vector<double>(ranks_.size(), 0), std::vector<double>(ranks_.size(), 0)},
        busy_{std::vector<double>(ranks_.size(), 0), std::vector<double>(ranks_.size(), 0)},
        finish_(ranks_.size(), 0),
        cores_(static_cast<size_t>(cluster.machine_cores), 0.0) {
    ready_.resize(std::min(ranks_.size(), static_cast<size_t>(std::max(0, trace_ranks))));
    for (size_t r = 0; r < ready_.size(); ++r) ready_[r].assign(ranks_[r].steps.size(), 0);
  }

  Status run(SimResult *result) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      Status s = match_sends(static_cast<int>(r));
      if (!s.ok()) return s;
    }
    for (size_t r = 0; r < ranks_.size(); ++r)
      for (uint32_t i = 0; i < ranks_[r].steps.size(); ++i)
        if (ranks_[r].steps[i].pending == 0) start(static_cast<int>(r), i, 0.0);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      switch (e.what) {
        case Happens::kArrived:
          complete_receive(e.rank, e.step, e.time);
          break;
        case Happens::kOnWire:
          onto_links(e.rank, e.step, e.time);
          break;
        case Happens::kDone:
          finish(e.rank, e.step, e.time);
          break;
        case Happens::kLinkPass:
          pass_link(static_cast<size_t>(e.rank), e.step, e.time);
          break;
      }
    }
    double last = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (uint32_t i = 0; i < ranks_[r].steps.size(); ++i) {
        const SimStep &s = ranks_[r].steps[i];
        if (!s.done)
          return ddl::internal_error(
              "the schedules stall: rank %zu's step %u (%s rank %d, tag %u) never ran", r, i,
              ddl::step_kind_text(s.kind), s.peer, s.tag);
      }
      last = std::max(last, finish_[r]);
      result->steps += ranks_[r].steps.size();
    }
    result->seconds = last + c_.call_overhead;
    fabric_.account(result);
    TierUse &compute = result->tiers[static_cast<int>(Tier::kCompute)];
    for (const std::vector<double> &unit : busy_)
      compute.busiest_seconds =
          std::max(compute.busiest_seconds, *std::max_element(unit.begin(), unit.end()));
    compute.bytes = compute_bytes_;
    result->messages = messages_;
    result->trace = std::move(trace_);
    return Status::Ok();
  }

 private:
  // Finds each of rank r's sends the receive it feeds.
  Status match_sends(int r) {
    const int n = static_cast<int>(ranks_.size());
    for (SimStep &s : ranks_[static_cast<size_t>(r)].steps) {
      if (s.kind != StepKind::kSend) continue;
      if (s.peer < 0 || s.peer >= n)
        return ddl::invalid_argument("rank %d sends to rank %d of %d", r, s.peer, n);
      const int64_t found =
          ddl::find_match(ranks_[static_cast<size_t>(s.peer)].receives, ddl::match_key(r, s.tag));
      if (found < 0)
        return ddl::invalid_argument("rank %d's send to rank %d (tag %u) has no receive", r, s.peer,
                                     s.tag);
      s.matched = static_cast<uint32_t>(found);
    }
    return Status::Ok();
  }

  void push(double time, int rank, uint32_t step, Happens what) {
    events_.push(Event{time, order_++, rank, step, what});
  }

  // What a rank's work runs on: its CPU posts and completes messages; reductions and copies
  // run on its GPU when the ranks are GPUs (beside the CPU), else on the same CPU.
  enum Unit { kCpu = 0, kDevice = 1 };

  // Holds rank r's `unit` for `work` seconds from `earliest` on (and one of the machine's
  // shared cores, when the cluster has them and the work is the CPU's); returns when it is
  // done.
  double compute(int r, double earliest, double work, Unit unit = kCpu) {
    const int u = c_.gpu ? unit : kCpu;
    double &free = free_[u][static_cast<size_t>(r)];
    double begin = std::max(earliest, free);
    if (u == kCpu && !cores_.empty() && work > 0) {
      auto core = std::min_element(cores_.begin(), cores_.end());
      begin = std::max(begin, *core);
      *core = begin + work;
    }
    free = begin + work;
    busy_[u][static_cast<size_t>(r)] += work;
    return begin + work;
  }

  // The CPU time of a message's bytes through the network stack, on either side.
  double stack_seconds(int from, int to, double bytes) const {
    if (c_.net_cpu_rate <= 0 || c_.host_of(from) == c_.host_of(to)) return 0;
    return bytes / c_.net_cpu_rate;
  }

  // Rank r's step i has its dependencies done at time t. A send or peer copy joins its links'
  // queues only when its bytes start (onto_links, an event at that time): joining them now
  // would queue it ahead of bytes that other ranks start earlier but that are simulated
  // later, as every rank's first steps start at time 0 one rank after another.
  void start(int r, uint32_t i, double t) {
    SimStep &s = ranks_[static_cast<size_t>(r)].steps[i];
    if (static_cast<size_t>(r) < ready_.size()) ready_[static_cast<size_t>(r)][i] = t;
    switch (s.kind) {
      case StepKind::kSend:
        push(compute(r, t, c_.message_overhead), r, i, Happens::kOnWire);
        return;
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        s.ready = t;
        if (s.arrival >= 0) push(std::max(s.arrival, t), r, i, Happens::kArrived);
        return;
      case StepKind::kCopy:
        compute_bytes_ += s.bytes;
        push(compute(r, t, c_.step_overhead + s.bytes / c_.copy_rate, kDevice), r, i,
             Happens::kDone);
        return;
      case StepKind::kReduce:
        compute_bytes_ += s.bytes;
        push(compute(r, t, c_.step_overhead + s.bytes / c_.reduce_rate, kDevice), r, i,
             Happens::kDone);
        return;
      case StepKind::kPeerRead:
      case StepKind::kPeerWrite: {
        // The rank copies across the host itself while the bytes cross the host's links,
        // where other copies may slow them. A CPU core works at its port's rate; a GPU's
        // copy is its memory's work (copy_rate), and the ports, one link each way, set the
        // pace: a GPU reads from its peers and writes into them at once, as NVLink is full
        // duplex, where a CPU core does one copy after the other.
        const double rate = c_.gpu ? c_.copy_rate : c_.local_rate;
        s.ready = compute(r, t, c_.step_overhead + s.bytes / rate, kDevice);
        push(s.ready - s.bytes / rate, r, i, Happens::kOnWire);
        return;
      }
    }
  }

  // Rank r's step i (a send or a peer copy) starts its bytes onto their links at time t.
  void onto_links(int r, uint32_t i, double t) {
    const SimStep &s = ranks_[static_cast<size_t>(r)].steps[i];
    double latency = 0, earliest = t;
    if (s.kind == StepKind::kSend) {
      fabric_.path(r, s.peer, &path_, &latency);
      // The stack copies the bytes out as the link takes them: the later of the two. A send
      // with no stack copy to make (net_cpu_rate 0: an RDMA NIC reads the buffer itself; or a
      // message inside a host, whose copy the host's links carry) leaves once posted: the
      // rank's CPU, already reserved for the sends it posts after this one, is not waited for
      // (it was: a leader's remote send left after its local ones, hier's broadcast among 512
      // hosts x 8 took 164 us at 4 KB; the emulated clusters moved by at most 2.4 %, 2 x 4 at
      // 10 Gbit/s, broadcast 64 MB).
      const double stack = stack_seconds(r, s.peer, s.bytes);
      if (stack > 0) earliest = compute(r, t, stack);
    } else {
      const bool read = s.kind == StepKind::kPeerRead;
      fabric_.path(read ? s.peer : r, read ? r : s.peer, &path_, &latency);
    }
    const uint32_t id = new_flow(Flow{r, i, earliest, latency});
    if (!c_.fair_links || path_.empty()) {
      through(id, fabric_.transfer(path_, s.bytes, t));
      return;
    }
    const int from = s.kind == StepKind::kPeerRead ? s.peer : r;
    const int to = s.kind == StepKind::kPeerRead ? r : s.peer;
    Flow &flow = flows_[id];
    flow.bytes = s.bytes;
    flow.connection = static_cast<uint64_t>(from) * ranks_.size() + static_cast<uint64_t>(to);
    flow.hops = flow.links_left = static_cast<uint32_t>(path_.size());
    std::copy(path_.begin(), path_.end(), flow.links);
    // On each link, behind the connection's last message if that is not through it yet.
    auto [last, first] = last_of_connection_.try_emplace(flow.connection, id);
    const uint32_t before = first ? kNoFlow : last->second;
    last->second = id;
    if (before != kNoFlow) flows_[before].next = id;
    for (uint32_t k = 0; k < flow.hops; ++k) {
      if (before != kNoFlow && !(flows_[before].through_hops & (1u << k))) {
        flow.waiting_hops |= 1u << k;
        continue;
      }
      fabric_.serve(flow.links[k], flow.bytes, t, id, k);
      schedule_pass(flow.links[k], t);
    }
  }

  void schedule_pass(size_t l, double t) {
    uint32_t version = 0;
    const double when = fabric_.next_through(l, t, &version);
    if (when >= 0) push(when, static_cast<int32_t>(l), version, Happens::kLinkPass);
  }

  // Fair sharing: link l's event of `version` at time t (stale ones do nothing). The messages
  // through it let their connections' next ones onto it.
  void pass_link(size_t l, uint32_t version, double t) {
    if (!fabric_.pass(l, version, t, &passed_)) return;
    for (const OnLink &o : passed_) {
      Flow &flow = flows_[o.flow];
      flow.through_hops |= 1u << o.hop;
      if (flow.next == kNoFlow) continue;
      Flow &next = flows_[flow.next];
      if (!(next.waiting_hops & (1u << o.hop))) continue;
      next.waiting_hops &= ~(1u << o.hop);
      fabric_.serve(l, next.bytes, t, flow.next, o.hop);
    }
    schedule_pass(l, t);
    for (const OnLink &o : passed_)
      if (--flows_[o.flow].links_left == 0) through(o.flow, t);
  }

  uint32_t new_flow(const Flow &flow) {
    if (free_flows_.empty()) {
      flows_.push_back(flow);
      return static_cast<uint32_t>(flows_.size() - 1);
    }
    const uint32_t id = free_flows_.back();
    free_flows_.pop_back();
    flows_[id] = flow;
    return id;
  }

  // A message's last byte is through its last link at time t: the send is done and the
  // receive's message arrives a latency later; a peer copy is done when its rank's share of
  // the work is too.
  void through(uint32_t id, double t) {
    const Flow flow = flows_[id];
    free_flows_.push_back(id);
    if (flow.hops > 0) {
      auto last = last_of_connection_.find(flow.connection);
      if (last->second == id) last_of_connection_.erase(last);
    }
    const SimStep &s = ranks_[static_cast<size_t>(flow.rank)].steps[flow.step];
    if (s.kind != StepKind::kSend) {
      push(std::max(s.ready, t), flow.rank, flow.step, Happens::kDone);
      return;
    }
    const double sent = std::max(flow.earliest, t);
    ++messages_;
    SimStep &receive = ranks_[static_cast<size_t>(s.peer)].steps[s.matched];
    receive.arrival = sent + flow.latency;
    if (receive.ready >= 0)
      push(std::max(receive.arrival, receive.ready), s.peer, s.matched, Happens::kArrived);
    push(sent, flow.rank, flow.step, Happens::kDone);
  }

  // A receive whose message is in: the rank completes it (and reduces) when its CPU is free.
  void complete_receive(int r, uint32_t i, double t) {
    const SimStep &s = ranks_[static_cast<size_t>(r)].steps[i];
    double done = compute(r, t, c_.message_overhead + stack_seconds(s.peer, r, s.bytes));
    if (s.kind == StepKind::kRecvReduce) {
      done = compute(r, done, c_.step_overhead + s.bytes / c_.reduce_rate, kDevice);
      compute_bytes_ += s.bytes;
    }
    push(done, r, i, Happens::kDone);
  }

  void finish(int r, uint32_t i, double t) {
    RankSteps &rank = ranks_[static_cast<size_t>(r)];
    rank.steps[i].done = true;
    if (static_cast<size_t>(r) < ready_.size()) {
      const SimStep &s = rank.steps[i];
      trace_.push_back(
          TracedStep{r, i, s.kind, s.peer, s.bytes, ready_[static_cast<size_t>(r)][i], t});
    }
    finish_[static_cast<size_t>(r)] = std::max(finish_[static_cast<size_t>(r)], t);
    for (uint32_t k = rank.rows.first[i]; k < rank.rows.first[i + 1]; ++k) {
      const uint32_t next = rank.rows.dependents[k];
      if (--rank.steps[next].pending == 0) start(r, next, t);
    }
  }

  const Cluster &c_;
  Fabric fabric_;
  std::vector<RankSteps> ranks_;
  std::vector<double> free_[2], busy_[2];  // per unit (Unit), per rank
  std::vector<double> finish_;
  std::vector<double> cores_;               // when each shared core is free (none: a core per rank)
  std::vector<std::vector<double>> ready_;  // traced ranks: when each step's deps were done
  std::vector<TracedStep> trace_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<size_t> path_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_flows_;
  std::vector<OnLink> passed_;
  std::unordered_map<uint64_t, uint32_t> last_of_connection_;  // fair sharing
  uint64_t order_ = 0;
  size_t messages_ = 0;
  double compute_bytes_ = 0;
};

}  // namespace

const char *tier_name(Tier tier) {
  switch (tier) {
    case Tier::kLocal:
      return "local";
    case Tier::kBus:
      return "bus";
    case Tier::kNic:
      return "nic";
    case Tier::kFabric:
      return "fabric";
    case Tier::kCompute:
      return "compute";
  }
  return "?";
}

Status simulate_schedules(const Cluster &cluster, const std::vector<ddl::Schedule> &by_rank,
                          size_t elem_size, SimResult *result, int trace_ranks) {
  if (static_cast<int>(by_rank.size()) != cluster.nranks())
    return ddl::invalid_argument("%zu schedules for a cluster of %d ranks", by_rank.size(),
                                 cluster.nranks());
  std::vector<RankSteps> ranks;
  ranks.reserve(by_rank.size());
  for (const ddl::Schedule &schedule : by_rank) ranks.push_back(compact(schedule, elem_size));
  *result = SimResult();
  if (!by_rank.empty()) result->algorithm = by_rank.front().algorithm;
  return Simulation(cluster, std::move(ranks), trace_ranks).run(result);
}

Status simulate(const Cluster &cluster, const ddl::CollectiveArgs &args, SimResult *result,
                int trace_ranks) {
  if (args.nranks != cluster.nranks())
    return ddl::invalid_argument("a call of %d ranks on a cluster of %d", args.nranks,
                                 cluster.nranks());
  // Built and compacted one rank at a time (the full schedules of 4096 ranks need not exist
  // at once), by as many threads as there are cores: building is most of a large projection.
  std::vector<RankSteps> ranks(static_cast<size_t>(args.nranks));
  std::string algorithm, why;
  DDL_RETURN_IF_ERROR(ddl::for_every_rank_schedule(
      args,
      [&](int r, ddl::Schedule &&schedule) {
        if (r == 0) algorithm = schedule.algorithm;
        ranks[static_cast<size_t>(r)] = compact(schedule, args.elem_size);
      },
      &why));
  *result = SimResult();
  // hier's pieces and the algorithm among hosts it prices them with are part of its choice
  // (lib/algorithms/hier.h): "hier/8/rhd" for 8 pieces of rhd among hosts.
  result->algorithm = algorithm;
  if (algorithm == "hier" && args.collective == ddl::Collective::kAllreduce) {
    const ddl::HierPlan plan = ddl::hier_plan(args);
    if (plan.pieces > 1) result->algorithm += ddl::strprintf("/%d", plan.pieces);
    if (plan.leaf) result->algorithm += ddl::strprintf("/%s", plan.leaf);
  }
  if (algorithm == "hier_bruck" && args.collective == ddl::Collective::kAllreduce &&
      ddl::hier_bruck_pieces(args) > 1)
    result->algorithm += ddl::strprintf("/%d", ddl::hier_bruck_pieces(args));
  result->why = why;
  return Simulation(cluster, std::move(ranks), trace_ranks).run(result);
}

}  // namespace ddl_sim
