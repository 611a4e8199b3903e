// The bootstrap's allgather, timed: ranks first..last of a job of nranks as threads of this
// process (bench/bootstrap_relays.sh runs rank 0 on one emulated host and the others on
// another). Per round: a barrier, then an allgather of `blob`-byte blobs (UCX's addresses are
// a few hundred bytes); prints the slowest of this process's ranks, from the barrier's end.
//
//   bootstrap_bench NRANKS FIRST LAST ROOT_HOST:PORT FANOUT ROUNDS BLOB
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/bootstrap/bootstrap.h"

int main(int argc, char **argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s NRANKS FIRST LAST ROOT FANOUT ROUNDS BLOB\n", argv[0]);
    return 2;
  }
  const int nranks = std::atoi(argv[1]), first = std::atoi(argv[2]), last = std::atoi(argv[3]);
  const std::string root = argv[4];
  const int fanout = std::atoi(argv[5]), rounds = std::atoi(argv[6]);
  const size_t blob = static_cast<size_t>(std::atol(argv[7]));
  const int local = last - first + 1;
  std::vector<std::vector<double>> seconds(static_cast<size_t>(local),
                                           std::vector<double>(static_cast<size_t>(rounds)));
  std::vector<std::string> errors(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int i = 0; i < local; ++i) {
    threads.emplace_back([&, i] {
      ddl::BootstrapOptions o;
      o.rank = first + i;
      o.nranks = nranks;
      o.root_addr = root;
      o.job_token = "bootstrap-bench";
      o.timeout_ms = 120000;
      o.relay_fanout = fanout;
      std::unique_ptr<ddl::Bootstrap> b;
      ddl::Status s = ddl::Bootstrap::create(o, &b);
      const std::string mine(blob, static_cast<char>('a' + o.rank % 26));
      for (int k = 0; s.ok() && k < rounds; ++k) {
        s = b->barrier();
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::string> all;
        if (s.ok()) s = b->allgather(mine, &all);
        seconds[i][k] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (s.ok() && (all.size() != static_cast<size_t>(nranks) || all.back().size() != blob))
          s = ddl::internal_error("rank %d: a wrong answer", o.rank);
      }
      if (!s.ok()) errors[i] = s.message();
    });
  }
  for (auto &t : threads) t.join();
  for (const std::string &e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "bootstrap_bench: %s\n", e.c_str());
      return 1;
    }
  for (int k = 0; k < rounds; ++k) {
    double slowest = 0;
    for (const auto &rank : seconds) slowest = std::max(slowest, rank[k]);
    std::printf("round %d: %.4f s\n", k, slowest);
  }
  return 0;
}
