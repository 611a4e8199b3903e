// ddl_perf end to end: clear errors for bad options, and real runs under ddlrun (and under
// mpirun where it is installed) that verify every element, for several datatypes, ops,
// collectives and rank counts, printing nccl-tests' columns.
#include <criterion/criterion.h>
#include <unistd.h>

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
const std::string kMpirun = MPIRUN_PATH;  // "...-NOTFOUND" without Open MPI

const char kColumns[] =
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
    "time   algbw   busbw #wrong";

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Runs ddl_perf on `nranks` ranks under ddlrun and checks a clean, verified table.
void expect_clean_run(int nranks, std::vector<std::string> args, size_t expected_rows = 0) {
  std::vector<std::string> argv = {kDdlrun,     "-n",  std::to_string(nranks),
                                   "--timeout", "240", kDdlPerf};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r = run_command(argv, 280);
  cr_assert(r.finished, "ddl_perf did not finish in time; stderr: %s", r.err.c_str());
  cr_assert_eq(r.exit_status, 0, "exit %d\nstdout:\n%s\nstderr:\n%s", r.exit_status, r.out.c_str(),
               r.err.c_str());
  cr_assert(contains(r.out, kColumns), "no nccl-tests header in:\n%s", r.out.c_str());
  cr_assert(contains(r.out, "# legend (as nccl-tests): "), "no legend in:\n%s", r.out.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK (wrong elements"), "%s", r.out.c_str());
  cr_assert(contains(r.out, "# Avg bus bandwidth    : "), "%s", r.out.c_str());
  cr_assert(contains(r.out, " GB/s (mean busbw of every row and mode)"), "%s", r.out.c_str());
  auto rows = ddltest::perf_rows(r.out);
  cr_assert(!rows.empty(), "no rows in:\n%s", r.out.c_str());
  if (expected_rows) cr_assert_eq(rows.size(), expected_rows, "%s", r.out.c_str());
  for (const auto &row : rows) {
    cr_assert_eq(row.size(), 13u, "a row without 13 columns in:\n%s", r.out.c_str());
    cr_assert_eq(row[8], std::string("0"), "wrong out-of-place values:\n%s", r.out.c_str());
    cr_assert(row[12] == "0" || row[12] == "N/A", "wrong in-place values:\n%s", r.out.c_str());
    cr_assert(std::stod(row[5]) > 0, "a zero time:\n%s", r.out.c_str());
  }
}

}  // namespace

TestSuite(ddl_perf, .fini = ddltest::kill_all_spawned, .timeout = 300);

Test(ddl_perf, bad_options_are_reported_clearly) {
  struct Case {
    std::vector<std::string> args;
    const char *message;
  };
  const Case cases[] = {
      {{"-b", "lots"}, "-b wants a size in bytes such as 8, 64K, 256M or 1G, not 'lots'"},
      {{"-b", "1M", "-e", "1K"}, "-b (1048576) is larger than -e (1024)"},
      {{"-d", "float128"}, "unknown datatype 'float128'"},
      {{"-o", "nand"}, "unknown op 'nand'"},
      {{"-c", "yes"}, "-c wants 0 or 1"},
      {{"-q"}, "unknown option -q"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> argv = {kDdlPerf};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = run_command(argv, 30);
    cr_assert_eq(r.exit_status, 2, "'%s': exit %d", c.message, r.exit_status);
    cr_assert(contains(r.err, c.message), "want '%s' in: %s", c.message, r.err.c_str());
  }
  RunResult help = run_command({kDdlPerf, "--help"}, 30);
  cr_assert_eq(help.exit_status, 0);
  cr_assert(contains(help.out, "-b, --minbytes"), "%s", help.out.c_str());
}

Test(ddl_perf, allreduce_float_sum_two_ranks) {
  // 8, 32, ..., 512K: 9 sizes.
  expect_clean_run(2, {"-b", "8", "-e", "1M", "-f", "4", "-c", "1"}, 9);
}

Test(ddl_perf, allreduce_half_max) {
  expect_clean_run(2, {"-b", "8", "-e", "1M", "-f", "4", "-c", "1", "-d", "half", "-o", "max"});
}

Test(ddl_perf, allreduce_bfloat16_sum_three_ranks) {
  expect_clean_run(3, {"-b", "8", "-e", "256K", "-f", "8", "-d", "bfloat16", "-o", "sum"});
}

Test(ddl_perf, allreduce_int8_prod_and_float_avg) {
  expect_clean_run(2, {"-b", "8", "-e", "64K", "-f", "8", "-d", "int8", "-o", "prod"});
  expect_clean_run(3, {"-b", "8", "-e", "64K", "-f", "8", "-d", "float", "-o", "avg"});
}

Test(ddl_perf, allreduce_every_type_and_op_four_ranks) {
  expect_clean_run(
      4, {"-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1", "-d", "all", "-o", "all"});
}

Test(ddl_perf, other_collectives) {
  expect_clean_run(3, {"-C", "broadcast", "-r", "1", "-b", "8", "-e", "256K", "-f", "8"});
  expect_clean_run(3, {"-C", "allgather", "-b", "8", "-e", "256K", "-f", "8", "-d", "half"});
  expect_clean_run(3, {"-C", "reduce_scatter", "-b", "8", "-e", "256K", "-f", "8", "-o", "max"});
  // Past the single copy's threshold on 2 ranks (direct_copy.h), with every size checked.
  expect_clean_run(2, {"-C", "broadcast", "-r", "1", "-b", "16K", "-e", "4M", "-f", "16"});
  expect_clean_run(2, {"-C", "allgather", "-b", "16K", "-e", "4M", "-f", "16", "-d", "double"});
  expect_clean_run(2, {"-C", "barrier", "-n", "50"}, 1);  // one row: 0 bytes
}

// The calls torch.distributed added to ddl: every result checked (-c 1), on 2 and 3 ranks,
// every root of the rooted ones at least once, in place where it exists.
Test(ddl_perf, alltoall_sendrecv_reduce_gather_scatter) {
  for (int n : {2, 3}) {
    expect_clean_run(
        n, {"-C", "alltoall", "-c", "1", "-b", "8", "-e", "1M", "-f", "16", "-d", "bfloat16"});
    expect_clean_run(n, {"-C", "sendrecv", "-c", "1", "-b", "8", "-e", "1M", "-f", "16"});
    expect_clean_run(n, {"-C", "reduce", "-c", "1", "-r", std::to_string(n - 1), "-b", "8", "-e",
                         "1M", "-f", "16", "-o", "all", "-d", "int32"});
    expect_clean_run(n, {"-C", "gather", "-c", "1", "-r", "1", "-b", "8", "-e", "1M", "-f", "16"});
    expect_clean_run(n, {"-C", "scatter", "-c", "1", "-r", "0", "-b", "8", "-e", "1M", "-f", "16",
                         "-d", "int8"});
  }
}

// The prefix reductions: every op they take (avg is reported skipped), two types.
Test(ddl_perf, scan_and_exscan) {
  for (int n : {2, 3})
    for (const char *name : {"scan", "exscan"})
      expect_clean_run(n, {"-C", name, "-c", "1", "-b", "8", "-e", "1M", "-f", "64", "-o", "all",
                           "-d", n == 2 ? "int32" : "bfloat16"});
}

// The JSON of a new collective: its name, its bus factor, and size as nccl-tests counts it
// (what each rank sends in all: 2 floats to each of 3 ranks = 24 B).
Test(ddl_perf, alltoall_json) {
  std::string dir = ddltest::make_temp_dir();
  std::string path = dir + "/alltoall.json";
  expect_clean_run(3, {"-C", "alltoall", "-c", "1", "-b", "24", "-e", "24", "-J", path}, 1);
  std::string json = ddltest::read_file(path);
  ddltest::remove_dir(dir);
  cr_assert(contains(json, "\"collective\": \"alltoall\"") && contains(json, "\"nranks\": 3") &&
                contains(json, "\"bus_factor\": 0.666667") &&
                contains(json, "\"size\": 24, \"count\": 6") &&
                contains(json, "\"out_of_bounds\": 0"),
            "%s", json.c_str());
}

namespace {

size_t occurrences(const std::string &text, const std::string &part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

// A failure is printed once: ddl logs it (level error), and ddl_perf adds what it was doing
// and the result code without repeating ddl's words.
Test(ddl_perf, errors_are_printed_once) {
  RunResult r = run_command({kDdlrun, "-n", "1", "--timeout", "60", kDdlPerf, "-a", "bogus"}, 90);
  cr_assert(r.finished, "stderr: %s", r.err.c_str());
  cr_assert_eq(r.exit_status, 1, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert_eq(occurrences(r.err, "DDL_ALGO=bogus: not an algorithm"), 1u, "%s", r.err.c_str());
  cr_assert(contains(r.err, "ddl_perf: ddl_comm_init_from_env failed (DDL_ERR_INVALID_ARGUMENT"),
            "%s", r.err.c_str());
}

Test(ddl_perf, json_output) {
  std::string dir = ddltest::make_temp_dir();
  std::string path = dir + "/results.json";
  expect_clean_run(2, {"-b", "8", "-e", "64", "-J", path}, 4);
  std::string json = ddltest::read_file(path);
  ddltest::remove_dir(dir);
  cr_assert(contains(json, "\"collective\": \"allreduce\"") && contains(json, "\"nranks\": 2") &&
                contains(json, "\"size\": 64") && contains(json, "\"out_of_bounds\": 0"),
            "%s", json.c_str());
}

Test(ddl_perf, runs_under_mpirun) {
  if (access(kMpirun.c_str(), X_OK) != 0) cr_skip_test("mpirun is not installed");
  RunResult r = run_command({kMpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe",
                             "--bind-to", "none", kDdlPerf, "-b", "8", "-e", "64K", "-f", "8"},
                            240);
  cr_assert(r.finished, "ddl_perf under mpirun did not finish; stderr: %s", r.err.c_str());
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  cr_assert(contains(r.out, ", 2 ranks"), "%s", r.out.c_str());
}
