// What the bootstrap's threads-as-ranks tests share (test_bootstrap.cc, test_relays.cc):
// ranks as threads of one process, each with its own Bootstrap; statuses collected per rank
// and asserted on the test's main thread (Criterion's asserts are not thread-safe).
#pragma once

#include <criterion/criterion.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/common/log.h"
#include "tests/loopback.h"

namespace ddltest {

using ddl::Bootstrap;
using ddl::BootstrapOptions;
using ddl::Status;

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// fanout: BootstrapOptions::relay_fanout (0: the default, a star up to 64 ranks).
inline BootstrapOptions opts_for(int rank, int nranks, const std::string &root,
                                 int timeout_ms = 5000, int fanout = 0) {
  BootstrapOptions o;
  o.relay_fanout = fanout;
  o.rank = rank;
  o.nranks = nranks;
  o.root_addr = root;
  o.job_token = "test-token";
  o.timeout_ms = timeout_ms;
  return o;
}

inline bool contains(const Status &st, const std::string &text) {
  return st.message().find(text) != std::string::npos;
}

// Runs body(rank) for ranks 0..n-1 on threads; returns each rank's status.
inline std::vector<Status> run_ranks(int n, const std::function<Status(int)> &body) {
  std::vector<Status> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = body(r); });
  for (auto &t : threads) t.join();
  return out;
}

inline void assert_all_ok(const std::vector<Status> &sts) {
  for (size_t r = 0; r < sts.size(); ++r)
    cr_assert(sts[r].ok(), "rank %zu: %s", r, sts[r].message().c_str());
}

// The blob rank r contributes in round k: sizes from 0 to the 64 KiB maximum.
inline std::string blob(int r, int k, int n) {
  size_t sizes[] = {0, 1, 1000, 5000, Bootstrap::kMaxBlobBytes};
  size_t size = sizes[(r + k) % 5];
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 31 + r * 7 + k + n) & 0xff);
  return s;
}

// A job of n ranks doing `rounds` allgathers with barriers between them; every rank checks
// what it got. Returns each rank's status.
inline std::vector<Status> run_job(int n, const std::string &root, int rounds, int fanout = 0) {
  return run_ranks(n, [&](int r) -> Status {
    std::unique_ptr<Bootstrap> b;
    DDL_RETURN_IF_ERROR(Bootstrap::create(opts_for(r, n, root, 5000, fanout), &b));
    size_t want_fds = n == 1 ? 0 : r == 0 ? static_cast<size_t>(n - 1) : 1;
    if (b->fds().size() != want_fds)
      return ddl::internal_error("rank %d: %zu fds", r, b->fds().size());
    for (int k = 0; k < rounds; ++k) {
      std::vector<std::string> all;
      DDL_RETURN_IF_ERROR(b->allgather(blob(r, k, n), &all));
      if (all.size() != static_cast<size_t>(n))
        return ddl::internal_error("rank %d: %zu blobs", r, all.size());
      for (int q = 0; q < n; ++q)
        if (all[q] != blob(q, k, n))
          return ddl::internal_error("rank %d round %d: blob %d differs", r, k, q);
      DDL_RETURN_IF_ERROR(b->barrier());
    }
    return Status::Ok();
  });
}

// The tests provoke warnings on purpose; DDL_TEST_VERBOSE=1 shows them.
inline void quiet_logs() {
  if (!getenv("DDL_TEST_VERBOSE")) ddl::set_log_level(ddl::LogLevel::kError);
}

}  // namespace ddltest
