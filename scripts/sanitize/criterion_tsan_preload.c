// Preloaded by scripts/sanitize.sh (thread) so that Criterion's test runner can start under
// ThreadSanitizer.
//
// Criterion's BoxFort maps its "inheritable arena" (shared with each test's sandbox process)
// at a random address: 0x200000000000 + ((rand_r(&seed) & 0x3fffff) << 24), at most 10 tries,
// skipping addresses whose pages look mapped (boxfort src/arena.c, bxf_arena_init). Under TSan
// nearly all of that range is TSan's own (shadow, metadata, protected gaps), so every try fails
// and the runner aborts: "Could not initialize inheritable arena". This rand_r steers only the
// calls made from libcriterion (where BoxFort is linked in) to 0x558000000000..0x568000000000,
// inside the range TSan leaves to the application (0x550000000000..0x568000000000, where PIE
// binaries live); a taken address is still skipped by BoxFort's own check. Every other caller
// (UCX picks its random ids with rand_r) gets the real rand_r untouched.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

int rand_r(unsigned *seed) {
  static int (*real)(unsigned *);
  if (!real) real = (int (*)(unsigned *))dlsym(RTLD_NEXT, "rand_r");
  int value = real(seed);
  Dl_info info;
  if (dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
      strstr(info.dli_fname, "libcriterion"))
    value = 0x358000 + value % 0x10000;  // (0x558000000000 - 0x200000000000) >> 24 = 0x358000
  return value;
}
