// Bad input gets a clear error and loses nothing; waits end at their deadline; abort and
// concurrent calls are refused cleanly.
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
#include "lib/bootstrap/bootstrap.h"
#include "lib/transports/ucx/ucx_transport.h"

using namespace ddltest;

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

// Values a C caller may pass that no enumerator has. The library reads them as integers and
// never holds them in the C++ enum types (that would be undefined behaviour, which UBSan's
// enum check in scripts/sanitize.sh reports); the message shows the value itself, not the
// name of the valid value that a byte-truncated copy would hold (264 = 256 + DDL_FLOAT32).
// (The static_casts below stand for what a C caller passes; UBSan does not check them.)
Test(errors, out_of_range_enum_values_are_refused) {
  ddl_comm_t comm = single_rank_comm();
  std::vector<float> send(16, 1.0f), recv(16, 7.0f);
  for (int raw : {-1, static_cast<int>(DDL_DATATYPE_COUNT), 99, 264, INT32_MAX, INT32_MIN}) {
    const ddl_datatype_t dtype = static_cast<ddl_datatype_t>(raw);
    const std::string needle = "datatype " + std::to_string(raw) + " ";
    expect_error(ddl_allreduce(send.data(), recv.data(), 4, dtype, DDL_SUM, comm),
                 DDL_ERR_INVALID_ARGUMENT, comm, needle.c_str());
    cr_assert(!contains(ddl_comm_last_error(comm), "float32"), "%s", ddl_comm_last_error(comm));
    expect_error(ddl_broadcast(send.data(), 4, dtype, 0, comm), DDL_ERR_INVALID_ARGUMENT, comm,
                 needle.c_str());
    expect_error(ddl_allgather(send.data(), recv.data(), 4, dtype, comm), DDL_ERR_INVALID_ARGUMENT,
                 comm, needle.c_str());
    expect_error(ddl_reduce_scatter(send.data(), recv.data(), 4, dtype, DDL_MAX, comm),
                 DDL_ERR_INVALID_ARGUMENT, comm, needle.c_str());
    // Even an empty call checks its arguments.
    expect_error(ddl_allreduce(nullptr, nullptr, 0, dtype, DDL_SUM, comm), DDL_ERR_INVALID_ARGUMENT,
                 comm, needle.c_str());
    cr_assert_eq(ddl_datatype_size(dtype), 0u);
    cr_assert_str_eq(ddl_datatype_name(dtype), "invalid");
  }
  for (int raw : {-7, -1, static_cast<int>(DDL_OP_COUNT), 256 + DDL_SUM, INT32_MAX}) {
    const ddl_op_t op = static_cast<ddl_op_t>(raw);
    const std::string needle = "op " + std::to_string(raw) + " ";
    expect_error(ddl_allreduce(send.data(), recv.data(), 4, DDL_FLOAT32, op, comm),
                 DDL_ERR_INVALID_ARGUMENT, comm, needle.c_str());
    expect_error(ddl_reduce_scatter(send.data(), recv.data(), 4, DDL_FLOAT32, op, comm),
                 DDL_ERR_INVALID_ARGUMENT, comm, needle.c_str());
    cr_assert_str_eq(ddl_op_name(op), "invalid");
  }
  cr_assert(contains(ddl_result_string(static_cast<ddl_result_t>(77)), "unknown"));
  cr_assert(contains(ddl_result_string(static_cast<ddl_result_t>(-1)), "unknown"));
  for (float v : recv) cr_assert_eq(v, 7.0f, "a refused call wrote to recvbuf");
  // The communicator still works after refused calls.
  cr_assert_eq(ddl_allreduce(send.data(), recv.data(), 16, DDL_FLOAT32, DDL_SUM, comm), DDL_SUCCESS,
               "%s", ddl_comm_last_error(comm));
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
  // A deadline beyond a day is no deadline (and usually seconds taken for milliseconds).
  config.timeout_ms = 24 * 3600 * 1000 + 1;
  expect_error(ddl_comm_init(&comm, 1, 0, nullptr, &config), DDL_ERR_INVALID_ARGUMENT, nullptr,
               "at most 24 h");
  cr_assert_null(comm, "a refused init left a communicator behind");
  config.timeout_ms = 24 * 3600 * 1000;
  cr_assert_eq(ddl_comm_init(&comm, 1, 0, nullptr, &config), DDL_SUCCESS, "%s",
               ddl_comm_last_error(nullptr));
  cr_assert_eq(ddl_comm_destroy(comm), DDL_SUCCESS);
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
  static float big[1 << 16];
  const MismatchCase cases[] = {
      {"count", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, rank == 0 ? 10 : 20, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 20"},
      // 256 KB takes the single-copy path (lib/core/direct_allreduce.h), 4 KB the shared
      // slots (lib/core/flat_collectives.h).
      {"count across the single-copy threshold", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(big, big, rank == 0 ? 1 << 16 : 1 << 10, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 65536"},
      // 4 KB goes through the shared slots, 96 KB (beyond them, below the single copy) the
      // schedule the models choose.
      {"count across the slots' threshold", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(big, big, rank == 0 ? 1 << 10 : 24576, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 24576"},
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
      {"allgather count, both through the shared slots", 3,
       [](ddl_comm_t comm, int rank) {
         return ddl_allgather(buf, buf + 16, rank == 2 ? 4 : 3, DDL_FLOAT32, comm);
       },
       "count 4"},
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
      // An empty call moves no data but still checks its signature: the rank with count 0
      // must not return success while its peer waits for data that never comes.
      {"count 0 against count 5", 2,
       [](ddl_comm_t comm, int rank) {
         return ddl_allreduce(buf, buf, rank == 0 ? 0 : 5, DDL_FLOAT32, DDL_SUM, comm);
       },
       "count 0"},
      {"count 0 on one rank of three", 3,
       [](ddl_comm_t comm, int rank) {
         return ddl_allgather(buf, buf + 16, rank == 1 ? 0 : 5, DDL_FLOAT32, comm);
       },
       "count 0"},
      {"empty broadcast against a barrier", 2,
       [](ddl_comm_t comm, int rank) {
         return rank == 0 ? ddl_broadcast(nullptr, 0, DDL_FLOAT32, 0, comm) : ddl_barrier(comm);
       },
       "barrier #0"},
  };
  for (const MismatchCase &c : cases) expect_mismatch_detected(c);
}

namespace {

// A rank dies in the middle of a stream of allreduces of `count` floats: every survivor, not
// only its ring neighbours, fails within two seconds with an error that names it.
void expect_survivors_name_a_killed_rank(size_t count) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      4,
      [count](ddl_comm_t comm, int rank, int) {
        std::vector<float> data(count, 1.0f);
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
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos,
              "%zu floats: %s", count, failures.c_str());
}

}  // namespace

Test(errors, every_survivor_names_a_killed_rank) {
  expect_survivors_name_a_killed_rank(1 << 18);
}

// The same through the shared slots (lib/core/flat_collectives.h): nobody waits for a flag
// that a dead rank will never set.
Test(errors, every_survivor_of_slotted_allreduces_names_a_killed_rank) {
  expect_survivors_name_a_killed_rank(16);
}

// A peer on this host that died before this rank created its endpoint: UCX cannot map the
// dead process's shared memory ("Shared memory error", forced here with UCX_TLS=posix,self).
// That is the peer's death, not this rank's system error: the peer is recorded as dead, and
// everything after names it with DDL_ERR_REMOTE.
Test(errors, an_endpoint_to_a_dead_peer_names_it) {
  for (const char *tls : {"posix,self", ""}) {
    if (*tls)
      setenv("UCX_TLS", tls, 1);
    else
      unsetenv("UCX_TLS");
    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    if (child == 0) {
      std::unique_ptr<ddl::UcxTransport> peer;
      if (!ddl::UcxTransport::create(1, 2, &peer).ok()) _exit(2);
      const std::string &address = peer->worker_address();
      const uint32_t length = static_cast<uint32_t>(address.size());
      if (write(pipe_fds[1], &length, sizeof length) != sizeof length ||
          write(pipe_fds[1], address.data(), length) != static_cast<ssize_t>(length))
        _exit(3);
      raise(SIGKILL);  // dies with its UCX worker open
    }
    close(pipe_fds[1]);
    uint32_t length = 0;
    cr_assert_eq(read(pipe_fds[0], &length, sizeof length), (ssize_t)sizeof length);
    std::string address(length, '\0');
    size_t got = 0;
    while (got < length) {
      ssize_t n = read(pipe_fds[0], &address[got], length - got);
      cr_assert_gt(n, 0);
      got += static_cast<size_t>(n);
    }
    close(pipe_fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFSIGNALED(status), "the peer process did not die as planned (status %#x)", status);

    std::unique_ptr<ddl::UcxTransport> transport;
    ddl::Status s = ddl::UcxTransport::create(0, 2, &transport);
    cr_assert(s.ok(), "%s", s.message().c_str());
    std::vector<ddl::PeerAddress> peers(2);
    peers[0].address = transport->worker_address();
    peers[0].same_host = true;
    peers[0].pid = getpid();
    peers[1].address = address;
    peers[1].same_host = true;
    peers[1].pid = child;
    s = transport->connect(peers);
    cr_assert(s.ok() || s.code() == DDL_ERR_REMOTE, "UCX_TLS=%s: connect: %s", tls,
              s.message().c_str());
    ddl::Status peer = transport->peer_status(1);
    cr_assert_eq(peer.code(), DDL_ERR_REMOTE, "UCX_TLS=%s: %s", tls, peer.message().c_str());
    cr_assert(contains(peer.message().c_str(), "rank 1"), "%s", peer.message().c_str());
    cr_assert(contains(peer.message().c_str(), "died"), "%s", peer.message().c_str());
    uint8_t byte = 0;
    ddl::TransferRequest req;
    s = transport->post_send(1, 0, 1, &byte, 1, &req);
    cr_assert_eq(s.code(), DDL_ERR_REMOTE, "UCX_TLS=%s: send: %s", tls, s.message().c_str());
    cr_log_info("UCX_TLS=%s: %s", tls, peer.message().c_str());
  }
  unsetenv("UCX_TLS");
}

// Rank 0 takes this rank's connection, then dies before answering (its port closes): the
// rank fails at once, naming rank 0, instead of retrying until its deadline. A listening
// socket on 127.0.0.1 stands in for rank 0's rendezvous.
Test(errors, a_root_that_dies_during_the_connect_phase_is_named_at_once) {
  int port = 0;
  int listener = listen_loopback(0, &port);
  cr_assert_geq(listener, 0);
  std::thread root([listener] {
    int conn = accept(listener, nullptr, nullptr);
    char hello[64];
    if (conn >= 0) {
      (void)!read(conn, hello, sizeof hello);  // the start of the hello, then "death"
      close(conn);
    }
    close(listener);
  });
  ddl::BootstrapOptions options;
  options.rank = 1;
  options.nranks = 2;
  options.root_addr = "127.0.0.1:" + std::to_string(port);
  options.timeout_ms = 20000;
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<ddl::Bootstrap> bootstrap;
  ddl::Status s = ddl::Bootstrap::create(options, &bootstrap);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  root.join();
  cr_assert_eq(s.code(), DDL_ERR_REMOTE, "%s", s.message().c_str());
  cr_assert(contains(s.message().c_str(), "rank 0 (the rendezvous root)"), "%s",
            s.message().c_str());
  cr_assert(waited < 5.0, "took %.1f s of a 20 s deadline: %s", waited, s.message().c_str());
  cr_log_info("after %.2f s: %s", waited, s.message().c_str());
}

// A root that never answers: the error at the deadline still says who was awaited.
Test(errors, a_root_that_never_answers_is_named) {
  ddl::BootstrapOptions options;
  options.rank = 1;
  options.nranks = 2;
  options.root_addr = "127.0.0.1:" + std::to_string(free_port());
  options.timeout_ms = 500;
  std::unique_ptr<ddl::Bootstrap> bootstrap;
  ddl::Status s = ddl::Bootstrap::create(options, &bootstrap);
  cr_assert_eq(s.code(), DDL_ERR_TIMEOUT, "%s", s.message().c_str());
  cr_assert(contains(s.message().c_str(), "rank 0 (the rendezvous root)"), "%s",
            s.message().c_str());
}
