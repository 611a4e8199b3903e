// memcpy_bandwidth: the memory-bandwidth bound of this machine for large messages. Starts P
// processes (1 by default) that each copy their own buffer (256 MiB by default) between two
// page-touched buffers, all at once, several times. Every repeat starts all P copies behind a
// barrier and lasts from the first start to the last finish (one monotonic clock for all), so
// it is the time in which every process has copied its bytes while the others did the same:
//
//   per-process copy GB/s = bytes each process copied / seconds of the repeat / 1e9
//
// (10^9 bytes per second; the memory moves twice that per process, a read and a write per
// byte). That is the least traffic of an allreduce over P ranks on one host: each rank reads
// its input and writes its output.
//
//   memcpy_bandwidth [-s SIZE] [-r REPEATS] [-p PROCS]      prints one JSON object
#include <getopt.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "lib/common/params.h"

namespace {

// Heads a MAP_SHARED mapping; every process's start and stop times follow it.
struct Shared {
  pthread_barrier_t barrier;
  int failed;  // some process could not allocate its buffers: nobody copies
};

// [proc][repeat][start, stop], seconds on CLOCK_MONOTONIC (one clock for every process).
double *times_of(Shared *shared, int64_t proc, int64_t repeats) {
  return reinterpret_cast<double *>(shared + 1) + proc * repeats * 2;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One process: allocate and touch its buffers, then copy once per repeat, behind the barrier.
int copier(Shared *shared, int proc, uint64_t bytes, int64_t repeats) {
  void *src = nullptr, *dst = nullptr;
  if (posix_memalign(&src, 4096, bytes) != 0 || posix_memalign(&dst, 4096, bytes) != 0) {
    std::fprintf(stderr, "memcpy_bandwidth: process %d cannot allocate 2 x %llu bytes\n", proc,
                 static_cast<unsigned long long>(bytes));
    __atomic_store_n(&shared->failed, 1, __ATOMIC_SEQ_CST);
  } else {
    // Touch every page first: the first copy must not measure page faults.
    std::memset(src, 1, bytes);
    std::memset(dst, 0, bytes);
  }
  pthread_barrier_wait(&shared->barrier);
  if (__atomic_load_n(&shared->failed, __ATOMIC_SEQ_CST)) return 1;
  double *times = times_of(shared, proc, repeats);
  for (int64_t i = 0; i < repeats; ++i) {
    pthread_barrier_wait(&shared->barrier);
    times[2 * i] = now();
    std::memcpy(dst, src, bytes);
    asm volatile("" : : "r"(dst) : "memory");  // the copy must happen, here
    times[2 * i + 1] = now();
  }
  std::free(src);
  std::free(dst);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  uint64_t bytes = 256ull << 20;
  int64_t repeats = 7, procs = 1;
  int opt;
  while ((opt = getopt(argc, argv, "s:r:p:h")) != -1) {
    if (opt == 's' && ddl::parse_bytes(optarg, &bytes) && bytes > 0) continue;
    if (opt == 'r' && ddl::parse_int(optarg, 1, 1000, &repeats)) continue;
    if (opt == 'p' && ddl::parse_int(optarg, 1, 1024, &procs)) continue;
    std::fprintf(stderr,
                 "usage: %s [-s SIZE (default 256M)] [-r REPEATS (default 7)] "
                 "[-p PROCESSES copying at once (default 1)]\n",
                 argv[0]);
    return opt == 'h' ? 0 : 2;
  }
  size_t shared_bytes = sizeof(Shared) + sizeof(double) * static_cast<size_t>(procs * repeats * 2);
  void *mapping =
      mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    std::perror("memcpy_bandwidth: mmap");
    return 1;
  }
  Shared *shared = new (mapping) Shared{};
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&shared->barrier, &attr, static_cast<unsigned>(procs));

  std::fflush(nullptr);  // nothing buffered may be written twice by the children
  std::vector<pid_t> children;
  for (int64_t p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) _exit(copier(shared, static_cast<int>(p), bytes, repeats));
    if (pid < 0) {
      // The barrier counts on every process: without them all, the others would wait forever.
      std::perror("memcpy_bandwidth: fork");
      for (pid_t child : children) kill(child, SIGKILL);
      for (pid_t child : children) waitpid(child, nullptr, 0);
      return 1;
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t child : children) {
    int status = 0;
    ok = waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  if (!ok) {
    std::fprintf(stderr, "memcpy_bandwidth: a copying process failed\n");
    return 1;
  }

  // Each repeat lasts from the first process's start to the last one's stop.
  std::vector<double> seconds;
  for (int64_t i = 0; i < repeats; ++i) {
    double first = 0, last = 0;
    for (int64_t p = 0; p < procs; ++p) {
      const double *t = times_of(shared, p, repeats) + i * 2;
      first = p == 0 ? t[0] : std::min(first, t[0]);
      last = p == 0 ? t[1] : std::max(last, t[1]);
    }
    seconds.push_back(last - first);
  }
  std::sort(seconds.begin(), seconds.end());
  double best = static_cast<double>(bytes) / seconds.front() / 1e9;
  double median = static_cast<double>(bytes) / seconds[seconds.size() / 2] / 1e9;
  std::printf(
      "{\"bytes\": %llu, \"repeats\": %lld, \"processes\": %lld, \"copy_gbs_best\": %.3f, "
      "\"copy_gbs_median\": %.3f, \"method\": \"%lld process(es) each memcpy %llu bytes between "
      "two page-touched buffers, all at once behind a barrier; per-process copy GB/s = bytes "
      "each copied / seconds from the first start to the last stop / 1e9\"}\n",
      static_cast<unsigned long long>(bytes), static_cast<long long>(repeats),
      static_cast<long long>(procs), best, median, static_cast<long long>(procs),
      static_cast<unsigned long long>(bytes));
  pthread_barrier_destroy(&shared->barrier);
  munmap(mapping, shared_bytes);
  return 0;
}
