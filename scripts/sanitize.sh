#!/usr/bin/env bash
# Builds ddl with sanitizers and runs the test suite under them.
#
#   scripts/sanitize.sh [address|thread] [ctest args...]
#
#   address  build-asan/, -DDDL_SANITIZE=address,undefined: every CTest test (but
#            install_consumers, see below).
#   thread   build-tsan/, -DDDL_SANITIZE=thread: the CTest tests that do not fork ranks, with
#            scripts/sanitize/criterion_tsan_preload.c preloaded (without it Criterion aborts at
#            startup: "Could not initialize inheritable arena", see there); then the threaded
#            and multi-process paths in two plain programs: ddl_threads_stress (ranks as
#            threads in one process: collectives at once, calls from a second thread, abort
#            from a third) and chaos runs (ddlrun + ddl_chaos_driver, every rank a process of
#            its own, a rank SIGKILLed; scripts/chaos/chaos.py). Left out of CTest: the tests
#            whose harness forks ranks without exec (tests/multiproc, the shm transport's):
#            Criterion's test process already runs threads, and TSan cannot follow a fork of
#            a threaded process that then starts threads (UCX does): "dup thread with used
#            id", exit 66. The chaos runs cover those paths with exec'd ranks.
#
# Extra arguments go to ctest (e.g. -R test_bootstrap) and replace the default selection.
# JOBS (default 2) sets the build parallelism; SANITIZE_BUILD another build directory (so that
# two people can run it at once). ASan, LSan and TSan reports are written to
# <build>/sanitizer-logs/ (one file per process: Criterion forks each test and the
# multi-process tests fork ranks, so reports would otherwise be lost in children's stderr);
# UBSan's are collected from the tests' output. The script ends with a summary of the
# distinct reports, and exits non-zero when a test failed or anything was reported.
# Suppressions: scripts/sanitize/*.supp (each entry says why it is there).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-address}
[ $# -gt 0 ] && shift
jobs=${JOBS:-2}
supp=$root/scripts/sanitize

case $kind in
  address) build=${SANITIZE_BUILD:-$root/build-asan} sanitize=address,undefined ;;
  thread) build=${SANITIZE_BUILD:-$root/build-tsan} sanitize=thread ;;
  *) echo "usage: $0 [address|thread] [ctest args...]" >&2; exit 2 ;;
esac

# Warnings stay warnings: gcc's sanitizer instrumentation adds false -Wmaybe-uninitialized
# and friends that -Werror would turn into a failed build. The bench needs MPI and has no tests.
echo "== configure $build (DDL_SANITIZE=$sanitize)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDL_SANITIZE="$sanitize" \
  -DDDL_WERROR=OFF -DDDL_BUILD_BENCH=OFF > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
echo "== build (-j$jobs)"
cmake --build "$build" -j "$jobs" > "$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 1; }

logs=$build/sanitizer-logs
rm -rf "$logs" "$build"/ctest-*.log
mkdir -p "$logs"
# UCX intercepts malloc/mmap (its memory hooks) to track registered memory; under a
# sanitizer, which intercepts the same calls, that breaks. Nothing here registers memory
# for RDMA, so the hooks are off.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
if [ "$kind" = address ]; then
  # fast_unwind_on_malloc=0: full allocation stacks, so that lsan.supp can match a frame
  # below a library that is unloaded before exit (see there); costs ~25% more time.
  export ASAN_OPTIONS="log_path=$logs/san:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:abort_on_error=0:fast_unwind_on_malloc=0"
  # UBSan findings are reported, not fatal, so that one finding does not hide the next.
  export UBSAN_OPTIONS="log_path=$logs/san:print_stacktrace=1:halt_on_error=0"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  # Left out under ASan: install_consumers builds programs against the installed (here:
  # instrumented) libddl without -fsanitize; ASan refuses to start when its runtime is not
  # the first library ("ASan runtime does not come first"). Nothing to learn there.
  # test_schedules (the verifier: millions of small allocations, no hwloc, no UCX) runs in a
  # pass of its own with the fast unwinder: with the slow one it overruns its 300 s limit.
  select=(-E '^(install_consumers|test_schedules)$')
  fast_pass=(-R '^test_schedules$')
else
  export TSAN_OPTIONS="log_path=$logs/san:suppressions=$supp/tsan.supp:second_deadlock_stack=1:halt_on_error=0:report_signal_unsafe=1"
  # UCX installs handlers for SIGSEGV & co. that print a backtrace (calling free() inside the
  # signal handler, which TSan reports): a crash should be TSan's to report.
  export UCX_HANDLE_ERRORS=none
  # test_schedules: the verifier, single-threaded, minutes under TSan for nothing to find.
  # The fork-without-exec tests (see the top): every test of tests/multiproc, and the shm
  # transport's. A new such test must be added here.
  select=(-E '^(install_consumers|test_schedules|test_allreduce|test_algorithms|test_collectives|test_errors.*|test_tiers_exchange|test_shm_.*)$')
  fast_pass=()
  preload=$build/criterion_tsan_preload.so
  cc -shared -fPIC -O2 -o "$preload" "$supp/criterion_tsan_preload.c" -ldl ||
    { echo "cannot build $preload"; exit 1; }
fi

cd "$build"
: > "$build.ctest.log"
ctest_status=0
if [ "$kind" = thread ]; then
  echo "== build ddl_threads_stress ddl_chaos_driver ddlrun"
  cmake --build "$build" -j "$jobs" --target ddl_threads_stress ddl_chaos_driver ddlrun \
    >> "$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 1; }
  echo "== ddl_threads_stress 4 300"
  tests/fuzz/ddl_threads_stress 4 300 2>&1 | tail -3 | tee -a "$build.ctest.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || ctest_status=1
  echo "== chaos: 5 runs of 4 ranks (one rank SIGKILLed in each)"
  python3 "$root/scripts/chaos/chaos.py" --ddlrun tools/ddlrun/ddlrun \
    --driver tests/fuzz/ddl_chaos_driver --runs 5 --ranks 4 --timeout-ms 20000 --deadline 90 \
    --max-delay 6 2>&1 | tee -a "$build.ctest.log" | sed -n '/== time/,$p'
  [ "${PIPESTATUS[0]}" -eq 0 ] || ctest_status=1
fi
if [ $# -gt 0 ]; then
  # A subset named on the command line: one pass, as asked.
  select=()
  fast_pass=()
fi
if [ ${#fast_pass[@]} -gt 0 ]; then
  echo "== ctest ${fast_pass[*]} (fast unwinder)"
  ASAN_OPTIONS=${ASAN_OPTIONS/:fast_unwind_on_malloc=0/} \
    ctest --output-on-failure -j 1 "${fast_pass[@]}" 2>&1 | tee -a "$build.ctest.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || ctest_status=1
  cp Testing/Temporary/LastTest.log "$build/ctest-fast.log" 2>/dev/null
fi
echo "== ctest ${select[*]} $*"
LD_PRELOAD=${preload:-} ctest --output-on-failure -j 1 "${select[@]}" "$@" 2>&1 |
  tee -a "$build.ctest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || ctest_status=1
cp Testing/Temporary/LastTest.log "$build/ctest-main.log" 2>/dev/null

echo
echo "== sanitizer reports in $logs"
# UBSan (gcc, with ASan) prints its findings to the test's stderr whatever log_path says:
# collect its "runtime error" lines from the full output of every test, passed ones too
# (CTest's LastTest.log keeps it all; --output-on-failure only shows failures).
rm -f "$logs/../ubsan-in-output.txt"
cat "$logs"/../ctest-*.log "$build.ctest.log" 2>/dev/null | grep -hE '^[^ ]+: runtime error: ' |
  sed -E 's/^/UBSan in test output: /' | sort | uniq -c | sort -rn \
  > "$logs/../ubsan-in-output.txt" || true
if [ -s "$logs/../ubsan-in-output.txt" ]; then
  cat "$logs/../ubsan-in-output.txt"
  cp "$logs/../ubsan-in-output.txt" "$logs/ubsan-in-output.txt"
fi
reports=$(find "$logs" -type f | wc -l)
if [ "$reports" -eq 0 ]; then
  echo "none"
else
  # One line per distinct report (its SUMMARY line, or its first error line), with a count.
  for f in "$logs"/san.*; do
    [ -e "$f" ] || continue
    if grep -q -E '^SUMMARY:' "$f"; then
      grep -E '^SUMMARY:' "$f"
    else
      grep -m1 -E 'ERROR|WARNING|runtime error' "$f" || head -1 "$f"
    fi
  done | sed -E 's/0x[0-9a-f]+/0x.../g' | sort | uniq -c | sort -rn
  echo "($reports report files; read them for stacks)"
fi
[ "$ctest_status" -eq 0 ] && [ "$reports" -eq 0 ]
