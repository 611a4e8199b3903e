// memcpy_bandwidth: the memory-bandwidth bound of this machine for large messages. Copies a
// buffer (256 MiB by default) several times and reports copy GB/s = bytes copied / time
// (10^9 bytes per second; the memory moves twice that, a read and a write per byte).
//
//   memcpy_bandwidth [-s SIZE] [-r REPEATS]      prints one JSON object
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lib/common/params.h"

int main(int argc, char **argv) {
  uint64_t bytes = 256ull << 20;
  int64_t repeats = 7;
  int opt;
  while ((opt = getopt(argc, argv, "s:r:h")) != -1) {
    if (opt == 's' && ddl::parse_bytes(optarg, &bytes) && bytes > 0) continue;
    if (opt == 'r' && ddl::parse_int(optarg, 1, 1000, &repeats)) continue;
    std::fprintf(stderr, "usage: %s [-s SIZE (default 256M)] [-r REPEATS (default 7)]\n", argv[0]);
    return opt == 'h' ? 0 : 2;
  }
  void *src = nullptr, *dst = nullptr;
  if (posix_memalign(&src, 4096, bytes) != 0 || posix_memalign(&dst, 4096, bytes) != 0) {
    std::fprintf(stderr, "memcpy_bandwidth: cannot allocate 2 x %llu bytes\n",
                 static_cast<unsigned long long>(bytes));
    return 1;
  }
  // Touch every page first: the first copy must not measure page faults.
  std::memset(src, 1, bytes);
  std::memset(dst, 0, bytes);
  std::vector<double> seconds;
  for (int64_t i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    asm volatile("" : : "r"(dst) : "memory");  // the copy must happen, here
    auto stop = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  double best = static_cast<double>(bytes) / seconds.front() / 1e9;
  double median = static_cast<double>(bytes) / seconds[seconds.size() / 2] / 1e9;
  std::printf(
      "{\"bytes\": %llu, \"repeats\": %lld, \"copy_gbs_best\": %.3f, \"copy_gbs_median\": %.3f, "
      "\"method\": \"memcpy of %llu bytes between two page-touched buffers; copy GB/s = bytes "
      "copied / seconds / 1e9\"}\n",
      static_cast<unsigned long long>(bytes), static_cast<long long>(repeats), best, median,
      static_cast<unsigned long long>(bytes));
  std::free(src);
  std::free(dst);
  return 0;
}
