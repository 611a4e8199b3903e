// Ranks as threads in one process, for ThreadSanitizer (scripts/sanitize.sh thread): Criterion
// cannot start under TSan here ("Could not initialize inheritable arena"), so the threaded
// paths get this plain program instead. Every thread is one rank of a communicator over
// loopback; all of them run collectives at once, which shares in one address space what ranks
// as processes keep apart: the communicator registry, logging, the reduction kernels' dispatch,
// topology discovery (hwloc), UCX contexts. Then ddl_comm_abort from a third thread while a
// barrier waits, and calls from a second thread on a busy communicator.
//
//   ddl_threads_stress [ranks=4] [iterations=300]      exit 0 when every check passed
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ddl/ddl.h"
#include "tests/loopback.h"

namespace {

std::atomic<int> g_failures{0};

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      g_failures++;                                                                 \
      return;                                                                       \
    }                                                                               \
  } while (0)

using ddltest::free_port;

ddl_comm_t init_rank(int nranks, int rank, const std::string &root) {
  ddl_config_t config = DDL_CONFIG_INITIALIZER;
  config.timeout_ms = 60000;
  config.job_token = "threads";
  ddl_comm_t comm = nullptr;
  ddl_result_t r = ddl_comm_init(&comm, nranks, rank, root.c_str(), &config);
  if (r != DDL_SUCCESS) {
    std::fprintf(stderr, "rank %d: init: %s: %s\n", rank, ddl_result_string(r),
                 ddl_comm_last_error(nullptr));
    g_failures++;
    return nullptr;
  }
  return comm;
}

// Collectives of pseudo-random sizes, the same sequence on every rank, results checked.
void collectives(int nranks, int rank, const std::string &root, int iterations,
                 std::atomic<ddl_comm_t> *published) {
  ddl_comm_t comm = init_rank(nranks, rank, root);
  if (!comm) return;
  if (published) published->store(comm);
  std::vector<float> buf(1 << 18), gathered((1 << 12) * nranks);
  uint64_t state = 12345;
  for (int it = 0; it < iterations; ++it) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    size_t count = 1 + (state >> 33) % buf.size();
    const int kind = it % 4;
    if (kind == 0 || kind == 3) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1);
      ddl_result_t r = ddl_allreduce(buf.data(), buf.data(), count, DDL_FLOAT32, DDL_SUM, comm);
      CHECK(r == DDL_SUCCESS, "rank %d: allreduce: %s", rank, ddl_comm_last_error(comm));
      const float want = static_cast<float>(nranks * (nranks + 1) / 2);
      CHECK(buf[0] == want && buf[count - 1] == want, "rank %d: allreduce #%d gave %g", rank, it,
            buf[0]);
    } else if (kind == 1) {
      size_t n = 1 + count % 4096;
      for (size_t i = 0; i < n; ++i) buf[i] = rank == it % nranks ? 7.0f : -1.0f;
      ddl_result_t r = ddl_broadcast(buf.data(), n, DDL_FLOAT32, it % nranks, comm);
      CHECK(r == DDL_SUCCESS && buf[n - 1] == 7.0f, "rank %d: broadcast: %s", rank,
            ddl_comm_last_error(comm));
    } else {
      size_t n = 1 + count % 4096;
      for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(rank);
      ddl_result_t r = ddl_allgather(buf.data(), gathered.data(), n, DDL_FLOAT32, comm);
      CHECK(r == DDL_SUCCESS, "rank %d: allgather: %s", rank, ddl_comm_last_error(comm));
      for (int q = 0; q < nranks; ++q)
        CHECK(gathered[q * n] == static_cast<float>(q), "rank %d: allgather block %d", rank, q);
    }
  }
  CHECK(ddl_barrier(comm) == DDL_SUCCESS, "rank %d: barrier: %s", rank, ddl_comm_last_error(comm));
  if (published) {
    while (published->load() != nullptr) usleep(1000);  // the poker lets go first
  }
  CHECK(ddl_comm_destroy(comm) == DDL_SUCCESS, "rank %d: destroy", rank);
}

}  // namespace

int main(int argc, char **argv) {
  const int nranks = argc > 1 ? std::atoi(argv[1]) : 4;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 300;

  // Phase 1: every rank a thread, collectives at once; a poker thread calls into rank 0's
  // communicator while it is busy (refused cleanly: "another thread is inside a call").
  {
    const std::string root = "127.0.0.1:" + std::to_string(free_port());
    std::atomic<ddl_comm_t> rank0{nullptr};
    std::atomic<bool> done{false};
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r)
      threads.emplace_back(collectives, nranks, r, root, iterations, r == 0 ? &rank0 : nullptr);
    std::thread poker([&] {
      int refused = 0, answered = 0;
      while (!done.load()) {
        ddl_comm_t c = rank0.load();
        if (!c) {
          usleep(1000);
          continue;
        }
        int size = 0;
        (ddl_comm_size(c, &size) == DDL_SUCCESS ? answered : refused)++;
        if (answered + refused > 2000) break;
        usleep(100);
      }
      std::fprintf(stderr, "poker: %d answered, %d refused while busy\n", answered, refused);
      rank0.store(nullptr);
    });
    for (int r = 1; r < nranks; ++r) threads[r].join();
    done = true;
    poker.join();
    threads[0].join();
  }

  // Phase 2: abort from another thread unblocks a barrier that rank 1 never joins.
  {
    const std::string root = "127.0.0.1:" + std::to_string(free_port());
    ddl_comm_t comms[2] = {nullptr, nullptr};
    std::thread t1([&] { comms[1] = init_rank(2, 1, root); });
    comms[0] = init_rank(2, 0, root);
    t1.join();
    if (comms[0] && comms[1]) {
      std::atomic<ddl_result_t> waited{DDL_SUCCESS};
      std::thread waiter([&] { waited = ddl_barrier(comms[0]); });
      usleep(200 * 1000);
      if (ddl_comm_abort(comms[0]) != DDL_SUCCESS) g_failures++;
      waiter.join();
      if (waited != DDL_ERR_INVALID_USAGE) {
        std::fprintf(stderr, "abort: the barrier returned %s\n", ddl_result_string(waited));
        g_failures++;
      }
      ddl_comm_destroy(comms[0]);
      ddl_comm_destroy(comms[1]);
    }
  }
  std::fprintf(stderr, "threads_stress: %d ranks, %d iterations: %d failures\n", nranks, iterations,
               g_failures.load());
  return g_failures.load() == 0 ? 0 : 1;
}
