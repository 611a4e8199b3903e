#include "lib/algorithms/recursive_doubling.h"

namespace ddl {

void build_recursive_doubling_allreduce(const CollectiveArgs &args, Schedule *schedule) {
  if (!start_allreduce_schedule(args, "rd", schedule)) return;
  const int n = args.nranks, r = args.rank;
  const size_t count = args.count;
  int rounds = 0;
  const int p = power_of_two_below(n, &rounds);
  const int extra = n - p;
  const uint32_t fold_tag = 0, unfold_tag = static_cast<uint32_t>(rounds) + 1;
  schedule->scratch_count = count;  // one landing area: rounds run one after another

  if (r >= p) {  // folds into r - p, then waits for the result
    const uint32_t sent = add_step(schedule, send_step(r - p, fold_tag, input_at(0), count, {}));
    add_step(schedule, recv_step(r - p, unfold_tag, output_at(0), count, {sent}));
    return;
  }
  // `partial` is where this rank's running result lives: the input until the first reduce
  // writes the output, the output after.
  Range partial = input_at(0);
  std::vector<uint32_t> last;  // the step that produced the current partial
  if (r < extra) {
    last = {add_step(schedule, recv_reduce_step(r + p, fold_tag, scratch_at(0), input_at(0),
                                                output_at(0), count, false, {}))};
    partial = output_at(0);
  }
  for (int k = 0; k < rounds; ++k) {
    const int partner = r ^ (1 << k);
    const uint32_t tag = static_cast<uint32_t>(k) + 1;
    // Both sides post their receive before their send can finish (a rendezvous send waits
    // for it), and reduce only once both are done: the reduce overwrites what the send reads.
    const uint32_t sent = add_step(schedule, send_step(partner, tag, partial, count, last));
    if (partial.buffer == BufferId::kInput && !args.in_place) {
      // The reduce writes the output, which the send does not read: one receive-and-reduce
      // step (reduced on arrival by transports that can) need not wait for the send.
      last = {add_step(schedule, recv_reduce_step(partner, tag, scratch_at(0), partial,
                                                  output_at(0), count, k == rounds - 1, last))};
    } else {
      const uint32_t got = add_step(schedule, recv_step(partner, tag, scratch_at(0), count, last));
      last = {add_step(schedule, reduce_step(scratch_at(0), partial, output_at(0), count,
                                             k == rounds - 1, {sent, got}))};
    }
    partial = output_at(0);
  }
  if (r < extra) add_step(schedule, send_step(r + p, unfold_tag, output_at(0), count, last));
}

void build_recursive_doubling_scan(const CollectiveArgs &args, Schedule *schedule) {
  const bool exclusive = args.collective == Collective::kExscan;
  const size_t count = args.count;
  const int n = args.nranks, r = args.rank;
  schedule->algorithm = "rd";
  schedule->input_count = schedule->output_count = count;
  schedule->in_place = args.in_place;
  // A landing area, and an exscan's partial (its result lives in the output).
  schedule->scratch_count = exclusive ? 2 * count : count;
  if (count == 0) return;
  const Range landing = scratch_at(0);
  // The partial: the input until a reduce first writes it to its home. A scan's partial is
  // its result, in the output.
  const Range partial_home = exclusive ? scratch_at(count) : output_at(0);
  Range partial = input_at(0);
  // Whether two of the call's whole-count ranges are one memory (in place: input, output).
  auto same_memory = [&](Range a, Range b) {
    return a.buffer == b.buffer ||
           (args.in_place && a.buffer != BufferId::kScratch && b.buffer != BufferId::kScratch);
  };
  std::vector<uint32_t> partial_done, result_done;  // the steps that last wrote them
  uint32_t round = 0;
  for (int64_t d = 1; d < n; d *= 2, ++round) {
    std::vector<uint32_t> sent;
    const Range sent_from = partial;
    if (r + d < n)
      sent = {add_step(schedule,
                       send_step(static_cast<int>(r + d), round, partial, count, partial_done))};
    if (r - d < 0) continue;
    // From this round on the rank holds the terms of ranks 0..r (0..r-1 for an exscan).
    const bool complete = r < 2 * d;
    // The landing area is free once the last round's reduces have read it.
    std::vector<uint32_t> after = partial_done;
    after.insert(after.end(), result_done.begin(), result_done.end());
    after = {add_step(schedule, recv_step(static_cast<int>(r - d), round, landing, count, after))};
    // A write waits for this round's send when the send reads what it overwrites.
    auto before_writing = [&](Range written) {
      std::vector<uint32_t> deps = after;
      if (same_memory(written, sent_from)) deps.insert(deps.end(), sent.begin(), sent.end());
      return deps;
    };
    // An exscan's partial matters only to its later sends.
    if (!exclusive || r + 2 * d < n) {
      const std::vector<uint32_t> deps = before_writing(partial_home);
      partial_done = {add_step(schedule, reduce_step(landing, partial, partial_home, count,
                                                     !exclusive && complete, deps))};
      partial = partial_home;
    }
    if (!exclusive) continue;
    // The exscan's result: the first terms copied in, the later ones reduced into it. In
    // place it overwrites the input, which the partial's reduce may have read just now.
    std::vector<uint32_t> deps = before_writing(output_at(0));
    deps.insert(deps.end(), partial_done.begin(), partial_done.end());
    deps.insert(deps.end(), result_done.begin(), result_done.end());
    result_done = {add_step(
        schedule, result_done.empty()
                      ? copy_step(landing, output_at(0), count, deps)
                      : reduce_step(landing, output_at(0), output_at(0), count, complete, deps))};
  }
  // A scan's rank that received nothing (rank 0, or alone) holds its own input.
  if (!exclusive && partial.buffer == BufferId::kInput && !args.in_place)
    add_step(schedule, copy_step(input_at(0), output_at(0), count, {}));
}

double recursive_doubling_allreduce_cost(int nranks, double bytes, const RoundCosts &costs) {
  if (nranks <= 1) return 0.0;
  int rounds = 0;
  const int p = power_of_two_below(nranks, &rounds);
  double t = 0;
  for (int64_t distance = 1; distance < p; distance *= 2) {
    const CostConstants &c = costs.round(distance);
    t += c.alpha + bytes * c.beta + bytes * c.gamma;
  }
  // The ranks beyond p fold into and out of ranks p apart.
  const CostConstants &c = costs.across;
  if (p != nranks) t += 2 * (c.alpha + bytes * c.beta) + bytes * c.gamma;
  return t;
}

}  // namespace ddl
