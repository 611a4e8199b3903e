// The entry point of every Criterion test binary (ddl_add_test links it in place of Criterion's
// own main, which it mirrors): a binary whose tests were all skipped (no GPU, no shared
// topology files, not root) exits with kSkipped, which CTest's SKIP_RETURN_CODE reports as
// skipped rather than passed, and says on stdout why each test was skipped.
#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kSkipped = 77;  // SKIP_RETURN_CODE in tests/CMakeLists.txt (automake's value)

size_t g_ran = 0;  // tests that passed, failed or crashed
bool g_saw_results = false;
std::vector<std::string> g_skips;  // "suite::test: reason"

}  // namespace

ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
  if (stats->test_status != CR_STATUS_SKIPPED) return;
  std::string line = std::string(stats->test->category) + "::" + stats->test->name;
  if (stats->message && *stats->message) line += std::string(": ") + stats->message;
  g_skips.push_back(line);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  g_saw_results = true;
  g_ran = stats->tests_passed + stats->tests_failed + stats->tests_crashed;
}

int main(int argc, char *argv[]) {
  struct criterion_test_set *tests = criterion_initialize();
  if (!criterion_handle_args(argc, argv, true)) {
    criterion_finalize(tests);
    return 0;  // --help, --list, --version
  }
  int result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  for (const std::string &skip : g_skips) std::printf("skipped: %s\n", skip.c_str());
  if (result == 0 && g_saw_results && g_ran == 0) {
    std::printf("skipped: no test ran%s\n", g_skips.empty() ? " (none selected)" : "");
    return kSkipped;
  }
  return result;
}
