#include "lib/algorithms/every_rank.h"

#include <algorithm>
#include <thread>

namespace ddl {

Status for_every_rank_schedule(const CollectiveArgs &args,
                               const std::function<void(int rank, Schedule &&schedule)> &take,
                               std::string *why) {
  const size_t n = static_cast<size_t>(std::max(args.nranks, 0));
  std::vector<Status> failures(n, Status::Ok());
  auto build = [&](size_t first, size_t step) {
    for (size_t r = first; r < n; r += step) {
      CollectiveArgs mine = args;
      mine.rank = static_cast<int>(r);
      Schedule schedule;
      failures[r] = build_schedule(mine, &schedule, r == 0 ? why : nullptr);
      if (failures[r].ok()) take(static_cast<int>(r), std::move(schedule));
    }
  };
  // A thread for every 64 ranks at most: below that, starting threads costs more than it saves.
  const size_t threads =
      std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), n / 64));
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(build, t, threads);
  build(0, threads);
  for (std::thread &worker : workers) worker.join();
  for (size_t r = 0; r < n; ++r)
    if (!failures[r].ok()) return failures[r].prefix(strprintf("rank %zu's schedule: ", r));
  return Status::Ok();
}

Status build_every_schedule(const CollectiveArgs &args, std::vector<Schedule> *by_rank) {
  by_rank->assign(static_cast<size_t>(std::max(args.nranks, 0)), Schedule());
  return for_every_rank_schedule(args, [by_rank](int rank, Schedule &&schedule) {
    (*by_rank)[static_cast<size_t>(rank)] = std::move(schedule);
  });
}

}  // namespace ddl
