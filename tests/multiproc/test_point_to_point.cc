// ddl_send / ddl_recv across real processes: order per pair, every size through shared
// memory's cells and UCX, grouped exchanges that cannot deadlock, many in flight, mixed with
// collectives; bad arguments, sizes that disagree and a peer killed mid-transfer.
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace ddltest;

namespace {

const size_t kSizes[] = {0, 1, 24, 25, 4096, 32768, 100003, 1 << 21};

// Byte i of message k from rank `from`: distinct per sender, message and position.
std::vector<unsigned char> message(int from, int k, size_t bytes) {
  std::vector<unsigned char> m(bytes);
  for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<unsigned char>(from * 31 + k * 7 + i * 13);
  return m;
}

bool contains(const std::string &text, const char *words) {
  return text.find(words) != std::string::npos;
}

// Rank 0 and 1 ping-pong every size, blocking; the others sit it out.
int check_ping_pong(ddl_comm_t comm, int rank) {
  if (rank > 1) return 0;
  int k = 0;
  for (size_t bytes : kSizes) {
    std::vector<unsigned char> got(bytes + 1, 0xEE);
    const std::vector<unsigned char> ping = message(0, k, bytes), pong = message(1, k, bytes);
    if (rank == 0) {
      RANK_OK(ddl_send(ping.data(), bytes, DDL_UINT8, 1, comm));
      RANK_OK(ddl_recv(got.data(), bytes, DDL_UINT8, 1, comm));
      RANK_CHECK(bytes == 0 || std::memcmp(got.data(), pong.data(), bytes) == 0, "pong %zu", bytes);
    } else {
      RANK_OK(ddl_recv(got.data(), bytes, DDL_UINT8, 0, comm));
      RANK_CHECK(bytes == 0 || std::memcmp(got.data(), ping.data(), bytes) == 0, "ping %zu", bytes);
      RANK_OK(ddl_send(pong.data(), bytes, DDL_UINT8, 0, comm));
    }
    RANK_CHECK(got.back() == 0xEE, "rank %d: recv wrote past the end", rank);
    ++k;
  }
  return 0;
}

// Several messages to one peer arrive in the order they were sent, whatever their sizes.
int check_order(ddl_comm_t comm, int rank, int n) {
  if (n < 2) return 0;
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  std::vector<std::vector<unsigned char>> sent, got;
  std::vector<ddl_request_t> requests;
  for (int k = 0; k < 6; ++k) {
    const size_t bytes = kSizes[(k * 3) % 8];
    sent.push_back(message(rank, k, bytes));
    got.push_back(std::vector<unsigned char>(kSizes[(k * 3) % 8]));
  }
  RANK_OK(ddl_group_start());
  for (int k = 0; k < 6; ++k) {
    ddl_request_t request = nullptr;
    RANK_OK(ddl_irecv(got[k].data(), got[k].size(), DDL_UINT8, from, comm, &request));
    requests.push_back(request);
    RANK_OK(ddl_isend(sent[k].data(), sent[k].size(), DDL_UINT8, to, comm, &request));
    requests.push_back(request);
  }
  RANK_OK(ddl_group_end());
  for (ddl_request_t request : requests) {
    RANK_OK(ddl_wait(request));
    RANK_OK(ddl_request_free(request));
  }
  for (int k = 0; k < 6; ++k)
    RANK_CHECK(got[k] == message(from, k, got[k].size()), "rank %d: message %d from %d wrong", rank,
               k, from);
  return 0;
}

// Every rank sends 2 MB to the next and receives from the previous, sends first: grouped,
// blocking calls; as back-to-back nonblocking calls outside a group; and a receive posted
// before a blocking send.
int check_ring_exchange(ddl_comm_t comm, int rank, int n) {
  if (n < 2) return 0;
  const size_t bytes = 1 << 21;
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  for (int round = 0; round < 3; ++round) {
    std::vector<unsigned char> out = message(rank, round, bytes), in(bytes);
    if (round == 0) {
      RANK_OK(ddl_group_start());
      RANK_OK(ddl_send(out.data(), bytes, DDL_UINT8, to, comm));
      RANK_OK(ddl_recv(in.data(), bytes, DDL_UINT8, from, comm));
      RANK_OK(ddl_group_end());
    } else if (round == 2) {  // MPI's classic: receive posted first, then a blocking send
      ddl_request_t recv = nullptr;
      RANK_OK(ddl_irecv(in.data(), bytes, DDL_UINT8, from, comm, &recv));
      RANK_OK(ddl_send(out.data(), bytes, DDL_UINT8, to, comm));
      RANK_OK(ddl_wait(recv));
      RANK_OK(ddl_request_free(recv));
    } else {
      ddl_request_t send = nullptr, recv = nullptr;
      RANK_OK(ddl_isend(out.data(), bytes, DDL_UINT8, to, comm, &send));
      RANK_OK(ddl_irecv(in.data(), bytes, DDL_UINT8, from, comm, &recv));
      RANK_OK(ddl_wait(send));
      RANK_OK(ddl_wait(recv));
      RANK_OK(ddl_request_free(send));
      RANK_OK(ddl_request_free(recv));
    }
    RANK_CHECK(in == message(from, round, bytes), "rank %d: exchange round %d wrong", rank, round);
  }
  return 0;
}

// A group that mixes sends and receives with collectives, recorded in a different order on
// each rank: the point-to-point part goes first everywhere.
int check_mixed_group(ddl_comm_t comm, int rank, int n) {
  if (n < 2) return 0;
  std::vector<float> grad(1000, 1.0f);
  std::vector<unsigned char> out = message(rank, 9, 300000), in(300000);
  const int to = (rank + 1) % n, from = (rank + n - 1) % n;
  RANK_OK(ddl_group_start());
  if (rank % 2 == 0) {
    RANK_OK(ddl_send(out.data(), out.size(), DDL_UINT8, to, comm));
    RANK_OK(ddl_allreduce(grad.data(), grad.data(), grad.size(), DDL_FLOAT32, DDL_SUM, comm));
    RANK_OK(ddl_recv(in.data(), in.size(), DDL_UINT8, from, comm));
  } else {
    RANK_OK(ddl_allreduce(grad.data(), grad.data(), grad.size(), DDL_FLOAT32, DDL_SUM, comm));
    RANK_OK(ddl_recv(in.data(), in.size(), DDL_UINT8, from, comm));
    RANK_OK(ddl_send(out.data(), out.size(), DDL_UINT8, to, comm));
  }
  RANK_OK(ddl_group_end());
  RANK_CHECK(grad[999] == static_cast<float>(n), "rank %d: allreduce in the group", rank);
  RANK_CHECK(in == message(from, 9, in.size()), "rank %d: recv in the group", rank);
  return 0;
}

void expect_all_pass(int n) {
  std::string failures = run_ranks(n, [](ddl_comm_t comm, int rank, int nranks) {
    if (int rc = check_ping_pong(comm, rank)) return rc;
    if (int rc = check_order(comm, rank, nranks)) return rc;
    if (int rc = check_ring_exchange(comm, rank, nranks)) return rc;
    return check_mixed_group(comm, rank, nranks);
  });
  cr_assert(failures.empty(), "%d ranks:\n%s", n, failures.c_str());
}

}  // namespace

Test(point_to_point, two_ranks) {
  expect_all_pass(2);
}
Test(point_to_point, three_ranks) {
  expect_all_pass(3);
}
Test(point_to_point, four_ranks) {
  expect_all_pass(4);
}

Test(point_to_point, bad_arguments_are_local) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int n) {
    int value = rank;
    ddl_result_t r = ddl_send(&value, 1, DDL_INT32, n, comm);
    RANK_CHECK(
        r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "peer 2 is not"), "%s",
        ddl_comm_last_error(comm));
    r = ddl_recv(&value, 1, DDL_INT32, rank, comm);
    RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "itself"), "%s",
               ddl_comm_last_error(comm));
    r = ddl_send(nullptr, 4, DDL_INT32, 1 - rank, comm);
    RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "NULL"), "%s",
               ddl_comm_last_error(comm));
    // Still working.
    int other = -1;
    RANK_OK(ddl_group_start());
    RANK_OK(ddl_send(&value, 1, DDL_INT32, 1 - rank, comm));
    RANK_OK(ddl_recv(&other, 1, DDL_INT32, 1 - rank, comm));
    RANK_OK(ddl_group_end());
    RANK_CHECK(other == 1 - rank, "exchange after the errors");
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A receive that expects more than was sent fails naming the sender and both sizes; the
// sender hears of it at its next call.
Test(point_to_point, sizes_that_disagree) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> buf(16, 1.0f);
        if (rank == 1) {
          RANK_OK(ddl_send(buf.data(), 8, DDL_FLOAT32, 0, comm));
          const ddl_result_t r = ddl_barrier(comm);
          RANK_CHECK(r != DDL_SUCCESS && contains(ddl_comm_last_error(comm), "rank 0 reports"),
                     "sender: %s", ddl_comm_last_error(comm));
          return 0;
        }
        const ddl_result_t r = ddl_recv(buf.data(), 16, DDL_FLOAT32, 1, comm);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "%s", ddl_result_string(r));
        RANK_CHECK(
            contains(ddl_comm_last_error(comm), "rank 1 sent 32 B but this receive expects 64 B"),
            "%s", ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A receive whose sender dies fails within seconds, naming it; nobody waits for the deadline.
Test(point_to_point, a_killed_sender_is_named) {
  RunOptions options;
  options.comm_timeout_ms = 30000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<unsigned char> buf(1 << 20);
        if (rank == 1) raise(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        const ddl_result_t r = ddl_recv(buf.data(), buf.size(), DDL_UINT8, 1, comm);
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        RANK_CHECK(r == DDL_ERR_REMOTE, "%s: %s", ddl_result_string(r), ddl_comm_last_error(comm));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 1"), "%s", ddl_comm_last_error(comm));
        RANK_CHECK(waited < 5.0, "took %.1f s", waited);
        return 0;
      },
      options);
  cr_assert(failures.find("rank 0 ") == std::string::npos, "%s", failures.c_str());
}

// Two ranks that both send 2 MB first, without a group, wait for each other at most until
// the deadline, and say what to do.
Test(point_to_point, sends_that_wait_for_each_other_time_out_with_advice) {
  RunOptions options;
  options.comm_timeout_ms = 2000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<unsigned char> out(8 << 20, 1), in(8 << 20);
        ddl_result_t r = ddl_send(out.data(), out.size(), DDL_UINT8, 1 - rank, comm);
        if (r == DDL_SUCCESS) r = ddl_recv(in.data(), in.size(), DDL_UINT8, 1 - rank, comm);
        if (r == DDL_SUCCESS) return 0;  // a transport that buffered it all: also fine
        RANK_CHECK(r == DDL_ERR_TIMEOUT || r == DDL_ERR_REMOTE || r == DDL_ERR_INVALID_USAGE, "%s",
                   ddl_result_string(r));
        if (r == DDL_ERR_TIMEOUT)
          RANK_CHECK(contains(ddl_comm_last_error(comm), "ddl_group_start"), "%s",
                     ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// The threads of this process (/proc/self/task).
int thread_count() {
  int n = 0;
  if (DIR *dir = opendir("/proc/self/task")) {
    while (dirent *entry = readdir(dir)) n += entry->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

// Nonblocking sends and receives on the caller's thread (start_point_to_point): one over at
// once (a small send copied out, a receive whose message has arrived) ends there; a small
// receive from a peer on this host through shared memory that must wait is polled by its
// ddl_wait; neither starts the progress thread (over UCX alone, DDL_SHM=0, such a receive
// goes on there). A call that needs the transport meanwhile (here a barrier) hands a waiting
// one to the progress thread, which then ends it.
Test(point_to_point, waited_transfers_run_on_the_callers_thread) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    int value = rank == 0 ? 42 : 0;
    RANK_OK(ddl_barrier(comm));  // the transport warmed up, on this thread
    const int before = thread_count();
    ddl_request_t request = nullptr;
    if (rank == 0) RANK_OK(ddl_isend(&value, 1, DDL_INT32, 1, comm, &request));
    RANK_OK(ddl_barrier(comm));  // the message has arrived at rank 1 when this ends
    if (rank == 1) RANK_OK(ddl_irecv(&value, 1, DDL_INT32, 0, comm, &request));
    int done = 0;
    RANK_OK(ddl_test(request, &done));
    RANK_CHECK(done, "rank %d: the transfer is not over at once", rank);
    RANK_OK(ddl_request_free(request));
    RANK_CHECK(value == 42, "rank %d: got %d", rank, value);
    // A ping-pong whose receives wait for their message: polled by ddl_wait.
    for (int k = 0; k < 100; ++k) {
      const int peer = 1 - rank;
      if (rank == 0) {
        value = k;
        RANK_OK(ddl_isend(&value, 1, DDL_INT32, peer, comm, &request));
        RANK_OK(ddl_wait(request));
        RANK_OK(ddl_request_free(request));
      }
      RANK_OK(ddl_irecv(&value, 1, DDL_INT32, peer, comm, &request));
      RANK_OK(ddl_wait(request));
      RANK_OK(ddl_request_free(request));
      RANK_CHECK(value == k + 1 - rank, "rank %d: got %d in exchange %d", rank, value, k);
      if (rank == 1) {
        value = k + 1;
        RANK_OK(ddl_isend(&value, 1, DDL_INT32, peer, comm, &request));
        RANK_OK(ddl_wait(request));
        RANK_OK(ddl_request_free(request));
      }
    }
    const char *shm = getenv("DDL_SHM");
    const bool parked = !(shm && strcmp(shm, "0") == 0);
    RANK_CHECK(!parked || thread_count() == before, "rank %d: %d threads, %d before", rank,
               thread_count(), before);
    // Parked, then a barrier: the receive goes on on the progress thread.
    if (rank == 1) {
      RANK_OK(ddl_irecv(&value, 1, DDL_INT32, 0, comm, &request));
      RANK_OK(ddl_barrier(comm));
      RANK_OK(ddl_wait(request));
      RANK_OK(ddl_request_free(request));
      RANK_CHECK(value == 43, "rank 1: got %d", value);
      RANK_CHECK(!parked || thread_count() == before + 1, "rank 1: %d threads, %d before",
                 thread_count(), before);
    } else {
      RANK_OK(ddl_barrier(comm));
      value = 43;
      RANK_OK(ddl_send(&value, 1, DDL_INT32, 1, comm));
    }
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A receive too large to wait parked goes on on the progress thread while its caller is
// elsewhere: rank 1 posts it, then waits outside ddl (for a file) until rank 0's blocking send
// of it has returned, which needs rank 1's side of the transfer to move meanwhile.
Test(point_to_point, a_large_receive_moves_while_its_caller_is_elsewhere) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    const std::string sent_file = "/tmp/ddl_p2p_sent." + std::to_string(getppid());
    std::vector<float> data(1 << 20, rank == 0 ? 3.0f : 0.0f);  // 4 MB: beyond any ring
    if (rank == 0) {
      RANK_OK(ddl_send(data.data(), data.size(), DDL_FLOAT32, 1, comm));
      FILE *f = fopen(sent_file.c_str(), "w");
      RANK_CHECK(f != nullptr, "cannot write %s", sent_file.c_str());
      fclose(f);
      return 0;
    }
    ddl_request_t request = nullptr;
    RANK_OK(ddl_irecv(data.data(), data.size(), DDL_FLOAT32, 0, comm, &request));
    bool sent = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(sent = access(sent_file.c_str(), F_OK) == 0) &&
           std::chrono::steady_clock::now() < give_up)
      usleep(1000);
    remove(sent_file.c_str());
    RANK_CHECK(sent, "rank 0's send did not return while rank 1 was outside ddl");
    RANK_OK(ddl_wait(request));
    RANK_OK(ddl_request_free(request));
    RANK_CHECK(data.front() == 3.0f && data.back() == 3.0f, "rank 1: got %g", data.back());
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}
