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
