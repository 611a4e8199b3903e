#include "lib/algorithms/walk.h"

#include <algorithm>
#include <deque>
#include <utility>

namespace ddl {
namespace {

constexpr uint32_t kNoPartner = UINT32_MAX;

bool is_receive(StepKind kind) {
  return kind == StepKind::kRecv || kind == StepKind::kRecvReduce;
}

}  // namespace

DependentRows dependent_rows(const std::vector<Step> &steps) {
  DependentRows rows;
  rows.first.assign(steps.size() + 1, 0);
  for (const Step &step : steps)
    for (uint32_t d : step.deps) ++rows.first[d + 1];
  for (size_t i = 0; i < steps.size(); ++i) rows.first[i + 1] += rows.first[i];
  rows.dependents.resize(rows.first.back());
  std::vector<uint32_t> filled(rows.first.begin(), rows.first.end() - 1);
  for (uint32_t i = 0; i < steps.size(); ++i)
    for (uint32_t d : steps[i].deps) rows.dependents[filled[d]++] = i;
  return rows;
}

MatchIndex match_index(const std::vector<Step> &steps, bool receives) {
  MatchIndex index;
  for (uint32_t i = 0; i < steps.size(); ++i)
    if (receives ? is_receive(steps[i].kind) : steps[i].kind == StepKind::kSend)
      index.emplace_back(match_key(steps[i].peer, steps[i].tag), i);
  std::sort(index.begin(), index.end());
  return index;
}

int64_t find_match(const MatchIndex &index, uint64_t key) {
  const auto found = std::lower_bound(index.begin(), index.end(), std::make_pair(key, uint32_t{0}));
  if (found == index.end() || found->first != key) return -1;
  return found->second;
}

Status ScheduleGraph::check_rank(const std::vector<Schedule> &by_rank, int r,
                                 const StepName &name) const {
  const int n = static_cast<int>(by_rank.size());
  const std::vector<Step> &steps = by_rank[static_cast<size_t>(r)].steps;
  for (uint32_t i = 0; i < steps.size(); ++i) {
    const Step &step = steps[i];
    for (uint32_t d : step.deps)
      if (d >= i) return internal_error("%s: dependency %u points forward", name(r, i).c_str(), d);
    const bool peer_step = is_message(step.kind) || is_peer_memory(step.kind);
    if (peer_step && (step.peer < 0 || step.peer >= n || step.peer == r))
      return internal_error("%s names no other rank", name(r, i).c_str());
    if (is_message(step.kind) && step.tag > kMaxStepTag)
      return internal_error("%s: tag beyond the transport's %u", name(r, i).c_str(), kMaxStepTag);
  }
  return Status::Ok();
}

Status ScheduleGraph::build(const std::vector<Schedule> &by_rank, const StepName &name) {
  const int n = static_cast<int>(by_rank.size());
  partner_.assign(by_rank.size(), {});
  rows_.assign(by_rank.size(), {});
  std::vector<MatchIndex> sends(by_rank.size()), receives(by_rank.size());
  for (int r = 0; r < n; ++r) {
    DDL_RETURN_IF_ERROR(check_rank(by_rank, r, name));
    const std::vector<Step> &steps = by_rank[static_cast<size_t>(r)].steps;
    rows_[static_cast<size_t>(r)] = dependent_rows(steps);
    partner_[static_cast<size_t>(r)].assign(steps.size(), kNoPartner);
    sends[static_cast<size_t>(r)] = match_index(steps, false);
    receives[static_cast<size_t>(r)] = match_index(steps, true);
    for (const MatchIndex *index :
         {&sends[static_cast<size_t>(r)], &receives[static_cast<size_t>(r)]})
      for (size_t k = 1; k < index->size(); ++k)
        if ((*index)[k].first == (*index)[k - 1].first)
          return internal_error("%s: a second message of this tag with that peer",
                                name(r, (*index)[k].second).c_str());
  }
  // Each send to its receive; a receive left over waits for a message nobody sends.
  for (int r = 0; r < n; ++r) {
    for (const auto &[key, i] : sends[static_cast<size_t>(r)]) {
      const Step &send = by_rank[static_cast<size_t>(r)].steps[i];
      const int64_t found =
          find_match(receives[static_cast<size_t>(send.peer)], match_key(r, send.tag));
      if (found < 0)
        return internal_error("%s: rank %d never receives this message", name(r, i).c_str(),
                              send.peer);
      const uint32_t at = static_cast<uint32_t>(found);
      const Step &receive = by_rank[static_cast<size_t>(send.peer)].steps[at];
      if (receive.count != send.count)
        return internal_error("%s sends %zu elements, %s expects %zu", name(r, i).c_str(),
                              send.count, name(send.peer, at).c_str(), receive.count);
      partner_[static_cast<size_t>(r)][i] = at;
      partner_[static_cast<size_t>(send.peer)][at] = i;
    }
  }
  for (int r = 0; r < n; ++r)
    for (const auto &[key, i] : receives[static_cast<size_t>(r)])
      if (partner(r, i) == kNoPartner)
        return internal_error("%s never runs: rank %d never sends this message (a deadlock)",
                              name(r, i).c_str(), by_rank[static_cast<size_t>(r)].steps[i].peer);
  return Status::Ok();
}

Status walk_schedules(const std::vector<Schedule> &by_rank, const ScheduleGraph &graph,
                      const StepName &name, const StepVisitor &visit) {
  const int n = static_cast<int>(by_rank.size());
  enum : uint8_t { kWaiting, kReady, kDone };
  std::vector<std::vector<uint8_t>> state(by_rank.size());
  std::vector<std::vector<uint32_t>> pending(by_rank.size());
  std::deque<std::pair<int, uint32_t>> ready;
  for (int r = 0; r < n; ++r) {
    const std::vector<Step> &steps = by_rank[static_cast<size_t>(r)].steps;
    state[static_cast<size_t>(r)].assign(steps.size(), kWaiting);
    pending[static_cast<size_t>(r)].resize(steps.size());
    for (uint32_t i = 0; i < steps.size(); ++i) {
      pending[static_cast<size_t>(r)][i] = static_cast<uint32_t>(steps[i].deps.size());
      if (steps[i].deps.empty()) ready.emplace_back(r, i);
    }
  }
  auto complete = [&](int r, uint32_t i) {
    state[static_cast<size_t>(r)][i] = kDone;
    for (const uint32_t *next = graph.dependents_begin(r, i); next != graph.dependents_end(r, i);
         ++next)
      if (--pending[static_cast<size_t>(r)][*next] == 0) ready.emplace_back(r, *next);
  };
  while (!ready.empty()) {
    const auto [r, i] = ready.front();
    ready.pop_front();
    const Step &step = by_rank[static_cast<size_t>(r)].steps[i];
    if (!is_message(step.kind)) {
      DDL_RETURN_IF_ERROR(visit.local(r, i));
      complete(r, i);
      continue;
    }
    // The message moves once both sides are ready: the later of the two moves it.
    state[static_cast<size_t>(r)][i] = kReady;
    const uint32_t other = graph.partner(r, i);
    if (state[static_cast<size_t>(step.peer)][other] != kReady) continue;
    const bool sending = step.kind == StepKind::kSend;
    DDL_RETURN_IF_ERROR(sending ? visit.message(r, i, step.peer, other)
                                : visit.message(step.peer, other, r, i));
    complete(r, i);
    complete(step.peer, other);
  }
  for (int r = 0; r < n; ++r)
    for (uint32_t i = 0; i < state[static_cast<size_t>(r)].size(); ++i)
      if (state[static_cast<size_t>(r)][i] != kDone)
        return internal_error("%s never runs: the schedules deadlock", name(r, i).c_str());
  return Status::Ok();
}

}  // namespace ddl
