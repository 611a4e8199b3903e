// ddl_perf -G (collectives on GPU buffers) under ddlrun, with the stand-in CUDA driver of
// tests/device (DDL_CUDA_LIBRARY, read by both libddl and ddl_perf): every collective
// verified through the copies in and out, the GPU named in the header, one GPU per local rank
// by default and -D to choose, the stream-ordered forms (-S); without a driver a clear failure
// on every rank. The
// stand-in's "GPU" is host memory behind a no-access mapping: this checks ddl_perf's
// handling of device buffers and libddl's staging, not a GPU.
#include <criterion/criterion.h>

#include <sstream>
#include <string>
#include <vector>

#include "perf_rows.h"
#include "spawn.h"

using ddltest::run_command;
using ddltest::RunResult;

namespace {

const std::string kDdlrun = DDLRUN_PATH;
const std::string kDdlPerf = DDL_PERF_PATH;
const std::string kFake = FAKE_CUDA;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

RunResult run_perf(const std::string &cuda_library, int nranks, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "DDL_CUDA_LIBRARY=" + cuda_library,
                                   kDdlrun,
                                   "-n",
                                   std::to_string(nranks),
                                   "--timeout",
                                   "120",
                                   kDdlPerf,
                                   "-G"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, 150);
}

void expect_clean(const RunResult &r, size_t expected_rows) {
  cr_assert(r.finished, "ddl_perf -G did not finish; stderr: %s", r.err.c_str());
  cr_assert_eq(r.exit_status, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_status, r.out.c_str(),
               r.err.c_str());
  cr_assert(contains(r.out,
                     "# device buffers (-G): rank 0 on GPU 0 of 1 (Fake CUDA device "
                     "(tests/device/fakes)) through " +
                         kFake),
            "no device line in:\n%s", r.out.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  const auto rows = ddltest::perf_rows(r.out);
  cr_assert_eq(rows.size(), expected_rows, "%s", r.out.c_str());
  for (const auto &row : rows) {
    cr_assert_eq(row.size(), 13u, "a row without 13 columns in:\n%s", r.out.c_str());
    cr_assert_eq(row[8], std::string("0"), "wrong out-of-place values:\n%s", r.out.c_str());
    cr_assert(row[12] == "0" || row[12] == "N/A", "wrong in-place values:\n%s", r.out.c_str());
  }
}

}  // namespace

TestSuite(ddl_perf_device, .fini = ddltest::kill_all_spawned, .timeout = 600);

Test(ddl_perf_device, every_collective_on_two_ranks_sharing_one_gpu) {
  // 8, 128, 2K, 32K: 4 sizes (1 row of 0 bytes for the barrier).
  const std::vector<std::string> sizes = {"-b", "8", "-e", "32K", "-f", "16", "-n", "3", "-w", "1"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), sizes.begin(), sizes.end());
    return more;
  };
  expect_clean(run_perf(kFake, 2, with({"-d", "float", "-o", "sum"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "half", "-o", "avg", "-C", "reduce_scatter"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "int32", "-C", "allgather"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "bfloat16", "-C", "broadcast", "-r", "1"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "float", "-C", "alltoall"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "int32", "-o", "max", "-C", "reduce", "-r", "1"})),
               4);
  expect_clean(run_perf(kFake, 2, with({"-d", "half", "-C", "gather"})), 4);
  expect_clean(run_perf(kFake, 2, with({"-d", "float", "-C", "scatter", "-r", "1"})), 4);
  // Several datatypes and ops in one run (odd element counts through -i).
  expect_clean(
      run_perf(kFake, 2,
               {"-b", "6", "-e", "30", "-i", "12", "-n", "2", "-w", "0", "-d", "all", "-o", "max"}),
      3 * 10);
}

// -S: the stream-ordered forms, queued -n at a time: on one host (host-synchronous by default,
// asynchronous with DDL_CUDA_STREAM_ASYNC=1) and across two emulated hosts (each rank its own
// DDL_HOST_ID: asynchronous by default).
Test(ddl_perf_device, stream_ordered_calls_in_both_modes) {
  struct Mode {
    const char *name;
    std::vector<std::string> prefix;  // between ddlrun's options and ddl_perf
  };
  const Mode modes[] = {
      {"one host", {}},
      {"one host, asynchronous", {"/usr/bin/env", "DDL_CUDA_STREAM_ASYNC=1"}},
      {"two hosts", {"/bin/sh", "-c", "DDL_HOST_ID=host$DDL_RANK exec \"$0\" \"$@\""}},
  };
  for (const Mode &mode : modes) {
    for (const char *collective : {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                   "alltoall", "reduce", "gather", "scatter"}) {
      std::vector<std::string> argv = {
          "/usr/bin/env", "DDL_CUDA_LIBRARY=" + kFake, kDdlrun, "-n", "2", "--timeout", "120"};
      argv.insert(argv.end(), mode.prefix.begin(), mode.prefix.end());
      argv.insert(argv.end(), {kDdlPerf, "-G", "-S", "-C", collective, "-b", "8", "-e", "2M", "-f",
                               "32", "-n", "4", "-w", "1"});
      const RunResult r = run_command(argv, 150);
      cr_assert(r.finished && r.exit_status == 0, "%s, %s: exit %d\nstdout:\n%s\nstderr:\n%s",
                mode.name, collective, r.exit_status, r.out.c_str(), r.err.c_str());
      cr_assert(contains(r.out, "# stream-ordered calls (-S) on the default stream"), "%s",
                r.out.c_str());
      cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s, %s:\n%s", mode.name,
                collective, r.out.c_str());
      cr_assert_eq(ddltest::perf_rows(r.out).size(), 4u, "%s", r.out.c_str());  // 8 B .. 256 KB
    }
  }
}

// sendrecv (grouped ddl_send/ddl_recv) moves device memory too, checked like the others.
Test(ddl_perf_device, sendrecv_moves_device_memory) {
  expect_clean(run_perf(kFake, 2, {"-C", "sendrecv", "-b", "8", "-e", "1M", "-f", "8"}), 6);
}

Test(ddl_perf_device, a_chosen_gpu_and_a_missing_one) {
  expect_clean(run_perf(kFake, 2, {"-D", "0", "-b", "64", "-e", "64"}), 1);
  const RunResult r = run_perf(kFake, 2, {"-D", "3", "-b", "64", "-e", "64"});
  cr_assert(r.finished);
  cr_assert_neq(r.exit_status, 0, "%s", r.out.c_str());
  cr_assert(contains(r.err, "rank 0: -G: -D 3: there are only 1 GPUs (0..0)"), "%s", r.err.c_str());
  cr_assert(contains(r.err, "rank 1: -G: -D 3: there are only 1 GPUs (0..0)"), "%s", r.err.c_str());
}

Test(ddl_perf_device, no_driver_is_a_clear_failure_on_every_rank) {
  const RunResult r = run_perf("/nonexistent/libcuda.so.1", 2, {"-b", "64", "-e", "64"});
  cr_assert(r.finished, "ddl_perf -G without a driver hung; stderr: %s", r.err.c_str());
  cr_assert_neq(r.exit_status, 0);
  for (const char *rank : {"rank 0", "rank 1"}) {
    const std::string want = std::string("ddl_perf: ") + rank +
                             ": -G: -G needs a CUDA driver, and /nonexistent/libcuda.so.1 cannot "
                             "be loaded";
    cr_assert(contains(r.err, want), "want '%s' in:\n%s", want.c_str(), r.err.c_str());
  }
}

Test(ddl_perf_device, option_errors) {
  struct Case {
    std::vector<std::string> args;
    const char *message;
  };
  const Case cases[] = {
      {{"-G", "-R", "1"},
       "-G (GPU buffers) and -R 1 (the library's host allocator) exclude each other"},
      {{"-D", "1"}, "-D 1 chooses a GPU for -G, which is not given"},
      {{"-G", "-D", "gpu0"}, "-D wants a GPU number (0, 1, ...), not 'gpu0'"},
      {{"-S"}, "-S (stream-ordered calls) runs on GPU buffers: give -G too"},
      {{"-G", "-S", "-C", "scan"},
       "-S: barrier, scan, exscan and sendrecv have no stream-ordered forms (allreduce, "
       "broadcast, allgather, reduce_scatter, alltoall, reduce, gather and scatter do)"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> argv = {kDdlPerf};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const RunResult r = run_command(argv, 30);
    cr_assert_eq(r.exit_status, 2, "'%s': exit %d", c.message, r.exit_status);
    cr_assert(contains(r.err, c.message), "want '%s' in: %s", c.message, r.err.c_str());
  }
}
