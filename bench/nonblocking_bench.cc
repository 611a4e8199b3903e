// Nonblocking collectives and groups, measured (run under ddlrun, any rank count):
//
//  fusion:  1,000 allreduces of 4 KB issued one by one (blocking), all queued as nonblocking
//           requests then waited for, and inside one ddl_group (fused by DDL_FUSION_BYTES);
//  overlap: an allreduce of N bytes beside a compute loop of about the same length: compute
//           then a blocking allreduce (what progress only inside ddl_wait would give), against
//           ddl_iallreduce, compute, ddl_wait (the progress thread runs it meanwhile).
//
// Rounds alternate the modes; each time is the maximum over ranks; medians are printed.
//   ddlrun -n 2 -- build/bench/nonblocking_bench [-r ROUNDS] [-s OVERLAP_BYTES]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddl/ddl.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The slowest rank's time: a collective is as fast as its last rank.
double slowest(const ddl::Communicator &comm, double t) {
  comm.allreduce(&t, 1, DDL_MAX);
  return t;
}

// Dependent floating-point work of `iters` steps (no memory traffic, like a GEMM's inner
// loop); the result is kept so that the compiler cannot drop it.
volatile double g_sink;
void compute(long iters) {
  double x = 1.0, y = 0.5;
  for (long i = 0; i < iters; ++i) {
    x = x * 1.0000001 + y;
    y = y * 0.9999999 - 1e-9;
  }
  g_sink = x + y;
}

struct Fusion {
  static constexpr int kCalls = 1000;
  static constexpr size_t kFloats = 1024;  // 4 KB
  std::vector<std::vector<float>> buffers =
      std::vector<std::vector<float>>(kCalls, std::vector<float>(kFloats, 1.0f));

  double one_by_one(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    for (auto &b : buffers) comm.allreduce(b.data(), b.size());
    return slowest(comm, seconds_since(start));
  }
  double queued(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    std::vector<ddl::Request> requests;
    requests.reserve(buffers.size());
    for (auto &b : buffers) requests.push_back(comm.iallreduce(b.data(), b.size()));
    for (auto &r : requests) r.wait();
    return slowest(comm, seconds_since(start));
  }
  double grouped(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    ddl::Group group;
    for (auto &b : buffers) comm.allreduce(b.data(), b.size());
    group.end();
    return slowest(comm, seconds_since(start));
  }
};

struct Overlap {
  std::vector<float> data;
  long compute_iters = 0;

  double allreduce_alone(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    comm.allreduce(data.data(), data.size());
    return slowest(comm, seconds_since(start));
  }
  double compute_alone(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    compute(compute_iters);
    return slowest(comm, seconds_since(start));
  }
  double serial(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    compute(compute_iters);
    comm.allreduce(data.data(), data.size());
    return slowest(comm, seconds_since(start));
  }
  double overlapped(const ddl::Communicator &comm) {
    comm.barrier();
    const auto start = Clock::now();
    ddl::Request r = comm.iallreduce(data.data(), data.size());
    compute(compute_iters);
    r.wait();
    return slowest(comm, seconds_since(start));
  }
};

}  // namespace

int main(int argc, char **argv) {
  int rounds = 7;
  size_t overlap_bytes = 16u << 20;
  for (int opt; (opt = getopt(argc, argv, "r:s:")) != -1;) {
    if (opt == 'r') rounds = std::atoi(optarg);
    if (opt == 's') overlap_bytes = std::strtoull(optarg, nullptr, 10);
  }
  try {
    ddl::Communicator comm = ddl::Communicator::from_env();
    const bool print = comm.rank() == 0;

    Fusion fusion;
    std::vector<double> one, queued, grouped;
    fusion.one_by_one(comm);  // warm-up: plans, connections
    fusion.grouped(comm);
    for (int r = 0; r < rounds; ++r) {
      one.push_back(fusion.one_by_one(comm));
      queued.push_back(fusion.queued(comm));
      grouped.push_back(fusion.grouped(comm));
    }
    if (print) {
      printf("# %d ranks, 1000 allreduces of 4 KB float32 sum, median of %d rounds\n", comm.size(),
             rounds);
      printf("one by one (blocking)      %8.2f ms  %6.2f us/call\n", median(one) * 1e3,
             median(one) * 1e3);
      printf("queued (ddl_iallreduce)    %8.2f ms  %6.2f us/call  %.2fx\n", median(queued) * 1e3,
             median(queued) * 1e3, median(one) / median(queued));
      printf("grouped (fused)            %8.2f ms  %6.2f us/call  %.2fx\n", median(grouped) * 1e3,
             median(grouped) * 1e3, median(one) / median(grouped));
    }

    Overlap overlap;
    overlap.data.assign(overlap_bytes / sizeof(float), 1.0f);
    overlap.allreduce_alone(comm);
    // Compute as long as the allreduce takes: that is where overlap matters most.
    const double comm_time = overlap.allreduce_alone(comm);
    overlap.compute_iters = 1000000;
    const double per_iter = overlap.compute_alone(comm) / 1e6;
    overlap.compute_iters = static_cast<long>(comm_time / per_iter);
    comm.broadcast(&overlap.compute_iters, 1, 0);  // identical work on every rank
    std::vector<double> alone, work, serial, overlapped;
    for (int r = 0; r < rounds; ++r) {
      alone.push_back(overlap.allreduce_alone(comm));
      work.push_back(overlap.compute_alone(comm));
      serial.push_back(overlap.serial(comm));
      overlapped.push_back(overlap.overlapped(comm));
    }
    if (print) {
      const double a = median(alone), c = median(work), s = median(serial), o = median(overlapped);
      printf("\n# %d ranks, allreduce of %zu B beside compute, median of %d rounds\n", comm.size(),
             overlap_bytes, rounds);
      printf("allreduce alone            %8.2f ms\n", a * 1e3);
      printf("compute alone              %8.2f ms\n", c * 1e3);
      printf("compute, then allreduce    %8.2f ms\n", s * 1e3);
      printf("iallreduce, compute, wait  %8.2f ms  (hidden: %.0f%% of the shorter of the two)\n",
             o * 1e3, 100.0 * (s - o) / std::min(a, c));
    }
  } catch (const ddl::Error &e) {
    fprintf(stderr, "nonblocking_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
