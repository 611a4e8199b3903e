// Bad input gets a clear error and loses nothing; waits end at their deadline; abort and
// concurrent calls are refused cleanly.
#include <criterion/criterion.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace ddl_test;

namespace {

ddl_comm_t single_rank_comm() {
  ddl_comm_t comm = nullptr;
  cr_assert_eq(ddl_comm_init(&comm, 1, 0, nullptr, nullptr), DDL_SUCCESS, "%s",
               ddl_comm_last_error(nullptr));
  return comm;
}

void expect_error(ddl_result_t got, ddl_result_t want, ddl_comm_t comm, const char *needle) {
  cr_assert_eq(got, want, "got %s, wanted %s: %s", ddl_result_string(got), ddl_result_string(want),
               ddl_comm_last_error(comm));
  std::string message = ddl_comm_last_error(comm);
  cr_assert(message.find(needle) != std::string::npos, "message \"%s\" lacks \"%s\"",
            message.c_str(), needle);
}

bool contains(const char *text, const char *needle) {
  return std::strstr(text, needle) != nullptr;
}

}  // namespace

Test(errors, bad_arguments_are_refused_and_touch_nothing) {
  ddl_comm_t comm = single_rank_comm();
  std::vector<float> send(16, 1.0f), recv(16, 7.0f);
  expect_error(ddl_allreduce(nullptr, recv.data(), 4, DDL_FLOAT32, DDL_SUM, comm),
               DDL_ERR_INVALID_ARGUMENT, comm, "sendbuf is NULL");
  expect_error(ddl_allreduce(send.data(), nullptr, 4, DDL_FLOAT32, DDL_SUM, comm),
               DDL_ERR_INVALID_ARGUMENT, comm, "recvbuf is NULL");
  expect_error(
      ddl_allreduce(send.data(), recv.data(), 4, static_cast<ddl_datatype_t>(99), DDL_SUM, comm),
      DDL_ERR_INVALID_ARGUMENT, comm, "datatype 99");
  expect_error(
      ddl_allreduce(send.data(), recv.data(), 4, DDL_FLOAT32, static_cast<ddl_op_t>(-1), comm),
      DDL_ERR_INVALID_ARGUMENT, comm, "op -1");
  expect_error(ddl_allreduce(send.data(), send.data() + 1, 4, DDL_FLOAT32, DDL_SUM, comm),
               DDL_ERR_INVALID_ARGUMENT, comm, "overlap");
  expect_error(ddl_allreduce(send.data(), recv.data(), SIZE_MAX / 2, DDL_FLOAT32, DDL_SUM, comm),
               DDL_ERR_INVALID_ARGUMENT, comm, "overflow");
  expect_error(ddl_broadcast(send.data(), 4, DDL_FLOAT32, 1, comm), DDL_ERR_INVALID_ARGUMENT, comm,
               "root 1");
  expect_error(ddl_allgather(send.data(), nullptr, 4, DDL_FLOAT32, comm), DDL_ERR_INVALID_ARGUMENT,
               comm, "allgather");
  // The message names the rank and the collective with its sequence number.
  cr_assert(contains(ddl_comm_last_error(comm), "rank 0: allgather #"), "%s",
            ddl_comm_last_error(comm));
  for (float v : recv) cr_assert_eq(v, 7.0f, "a refused call wrote to recvbuf");
  for (float v : send) cr_assert_eq(v, 1.0f, "a refused call wrote to sendbuf");
  // The communicator still works after refused calls.
  cr_assert_eq(ddl_allreduce(send.data(), recv.data(), 16, DDL_FLOAT32, DDL_SUM, comm),
               DDL_SUCCESS);
  cr_assert_eq(recv[3], 1.0f);
  int value = -1;
  cr_assert_eq(ddl_comm_rank(comm, nullptr), DDL_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ddl_comm_size(comm, &value), DDL_SUCCESS);
  cr_assert_eq(value, 1);
  cr_assert_eq(ddl_comm_destroy(comm), DDL_SUCCESS);
}

Test(errors, null_and_destroyed_communicators) {
  float x = 1;
  expect_error(ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, nullptr), DDL_ERR_INVALID_ARGUMENT,
               nullptr, "NULL");
  ddl_comm_t comm = single_rank_comm();
  cr_assert_eq(ddl_comm_destroy(comm), DDL_SUCCESS);
  expect_error(ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm), DDL_ERR_INVALID_USAGE, nullptr,
               "not a live communicator");
  expect_error(ddl_comm_destroy(comm), DDL_ERR_INVALID_USAGE, nullptr, "not a live communicator");
}

Test(errors, bad_init_arguments) {
  ddl_comm_t comm = nullptr;
  expect_error(ddl_comm_init(&comm, 2, 2, "127.0.0.1:1", nullptr), DDL_ERR_INVALID_ARGUMENT,
               nullptr, "rank 2");
  expect_error(ddl_comm_init(&comm, 0, 0, "127.0.0.1:1", nullptr), DDL_ERR_INVALID_ARGUMENT,
               nullptr, "nranks 0");
  expect_error(ddl_comm_init(&comm, 2, 1, nullptr, nullptr), DDL_ERR_INVALID_ARGUMENT, nullptr,
               "root_addr");
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  config.size = 3;
  expect_error(ddl_comm_init(&comm, 1, 0, nullptr, &config), DDL_ERR_INVALID_ARGUMENT, nullptr,
               "DDL_CONFIG_INITIALIZER");
  config = DDL_CONFIG_INITIALIZER;
  config.timeout_ms = -5;
  expect_error(ddl_comm_init(&comm, 1, 0, nullptr, &config), DDL_ERR_INVALID_ARGUMENT, nullptr,
               "timeout_ms");
  cr_assert_null(comm);
}

Test(errors, a_silent_peer_times_out_naming_it) {
  RunOptions options;
  options.comm_timeout_ms = 1000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        float x = 1;
        if (rank == 1) {  // never joins the allreduce
          usleep(2500 * 1000);
          return 0;
        }
        auto start = std::chrono::steady_clock::now();
        ddl_result_t r = ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm);
        double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        RANK_CHECK(r == DDL_ERR_TIMEOUT, "got %s: %s", ddl_result_string(r),
                   ddl_comm_last_error(comm));
        RANK_CHECK(waited >= 0.9 && waited < 2.0, "waited %.2f s for a 1 s deadline", waited);
        RANK_CHECK(contains(ddl_comm_last_error(comm), "waiting for ranks 1"), "%s",
                   ddl_comm_last_error(comm));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "allreduce #0"), "%s",
                   ddl_comm_last_error(comm));
        // The communicator is unusable afterwards, and says so.
        r = ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_TIMEOUT && contains(ddl_comm_last_error(comm), "failed earlier"),
                   "%s", ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(errors, abort_unblocks_a_waiting_call_and_a_second_thread_is_refused) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    if (rank == 1) {
      usleep(3000 * 1000);
      return 0;
    }
    std::atomic<ddl_result_t> waiter_result{DDL_SUCCESS};
    std::thread waiter([&] { waiter_result = ddl_barrier(comm); });
    usleep(200 * 1000);  // the waiter is now inside the barrier
    float x = 1;
    ddl_result_t r = ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm);
    RANK_CHECK(
        r == DDL_ERR_INVALID_USAGE && contains(ddl_comm_last_error(nullptr), "another thread"),
        "%s: %s", ddl_result_string(r), ddl_comm_last_error(nullptr));
    auto start = std::chrono::steady_clock::now();
    RANK_OK(ddl_comm_abort(comm));
    waiter.join();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RANK_CHECK(waiter_result == DDL_ERR_INVALID_USAGE, "barrier returned %s",
               ddl_result_string(waiter_result));
    RANK_CHECK(waited < 0.5, "abort took %.2f s to unblock the barrier", waited);
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(errors, a_killed_peer_is_an_error_naming_it) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(1 << 20, 1.0f);
        RANK_OK(ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm));
        if (rank == 1) raise(SIGKILL);
        auto start = std::chrono::steady_clock::now();
        ddl_result_t r = DDL_SUCCESS;
        for (int i = 0; i < 100 && r == DDL_SUCCESS; ++i)
          r = ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm);
        double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        fprintf(stderr, "rank 0 learned of the death in %.2f s: %s\n", waited,
                ddl_comm_last_error(comm));
        RANK_CHECK(r == DDL_ERR_REMOTE || r == DDL_ERR_TIMEOUT, "got %s", ddl_result_string(r));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 1"), "%s", ddl_comm_last_error(comm));
        return 0;
      },
      options);
  // Rank 1 was killed on purpose; only rank 0's verdict counts.
  cr_assert(failures.find("rank 0") == std::string::npos, "%s", failures.c_str());
}

namespace {

// Runs `ranks` processes that each make the call `call(rank)` and checks each result.
struct MismatchCase {
  const char *name;
  int nranks;
  std::function<ddl_result_t(ddl_comm_t, int)> call;
  const char *needle;  // every rank's error must name the odd call
};

void expect_mismatch_detected(const MismatchCase &c) {
  RunOptions options;
  options.comm_timeout_ms = 3000;
  std::string failures = run_ranks(
      c.nranks,
      [&](ddl_comm_t comm, int rank, int) {
        ddl_result_t r = c.call(comm, rank);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "%s: rank %d got %s: %s", c.name, rank,
                   ddl_result_string(r), ddl_comm_last_error(comm));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "mismatched collective calls") &&
                       contains(ddl_comm_last_error(comm), c.needle),
                   "%s: rank %d: %s", c.name, rank, ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s:\n%s", c.name, failures.c_str());
}

}  // namespace

// Every rank fails with an error naming the odd call: the neighbours of the odd rank find
// it by the ring's signature check and tell everyone else.
Test(errors, mismatched_calls_are_named_on_every_rank) {
  static float buf[64];
  const MismatchCase cases[] = {
      {"count", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, rank == 0 ? 10 : 20, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 20"},
      {"datatype of the same size", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, 8, rank == 0 ? DDL_FLOAT32 : DDL_INT32, DDL_SUM, comm);
       },
       "int32"},
      {"collective", 2,
       [](ddl_comm_t comm, int rank) {
         return rank == 0 ? ddl_allreduce(buf, buf, 8, DDL_FLOAT32, DDL_SUM, comm)
                          : ddl_broadcast(buf, 8, DDL_FLOAT32, 0, comm);
       },
       "broadcast #0"},
      {"broadcast root", 2,
       [](ddl_comm_t comm, int rank) { return ddl_broadcast(buf, 8, DDL_FLOAT32, rank, comm); },
       "root 1"},
      {"op", 3,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, 8, DDL_FLOAT32, rank == 2 ? DDL_MAX : DDL_SUM, comm);
       },
       "max"},
      {"count on one rank of five", 5,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, rank == 3 ? 9 : 8, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 9"},
  };
  for (const MismatchCase &c : cases) expect_mismatch_detected(c);
}

// A rank dies in the middle of a stream of allreduces: every survivor, not only its ring
// neighbours, fails within two seconds with an error that names it.
Test(errors, every_survivor_names_a_killed_rank) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(1 << 18, 1.0f);
        for (int i = 0;; ++i) {
          if (rank == 2 && i == 20) raise(SIGKILL);
          auto start = std::chrono::steady_clock::now();
          ddl_result_t r =
              ddl_allreduce(data.data(), data.data(), data.size(), DDL_FLOAT32, DDL_SUM, comm);
          if (r == DDL_SUCCESS) continue;
          double waited =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d got %s: %s", rank, ddl_result_string(r),
                     ddl_comm_last_error(comm));
          RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 2"), "rank %d: %s", rank,
                     ddl_comm_last_error(comm));
          RANK_CHECK(waited < 2.0, "rank %d took %.2f s to notice", rank, waited);
          return 0;
        }
      },
      options);
  for (int survivor : {0, 1, 3})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos, "%s",
              failures.c_str());
}
