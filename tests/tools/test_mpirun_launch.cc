// mpirun without DDL_ROOT: rank 0's rendezvous address and a fresh job token travel through
// Open MPI's PMIx server (or, with DDL_PMIX=0, through a 0600 rendezvous file), and the
// rendezvous refuses connections without that token. On one host, and across emulated hosts
// whose rendezvous directory is unusable, so that only PMIx can have carried the address.
// Skips with a message without mpirun (or without root and namespaces for the emulated hosts).
// Every command runs under a deadline; emulated hosts are removed in .fini whatever happened.
#include <criterion/criterion.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "spawn.h"
#include "tests/loopback.h"

using ddltest::run_command;
using ddltest::RunResult;

namespace {

const std::string kMpirun = MPIRUN_PATH;  // "...-NOTFOUND" without Open MPI
const std::string kProbe = LAUNCH_PROBE_PATH;
const std::string kDdlPerf = DDL_PERF_PATH;
const std::string kEmuhosts = EMUHOSTS_PATH;

std::string g_name;  // this test's emulated hosts, if any
std::string g_dir;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string &text, const std::string &part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

void setup() {
  g_name = "ddlmpi" + std::to_string(getpid());
  g_dir = ddltest::make_temp_dir();
}

void teardown() {
  ddltest::kill_all_spawned();
  if (geteuid() == 0) run_command({kEmuhosts, "down", "--name", g_name}, 30);
  ddltest::remove_dir(g_dir);
}

void need_mpirun() {
  if (access(kMpirun.c_str(), X_OK) != 0) cr_skip_test("mpirun is not installed");
}

// mpirun -np N on this host, with DDL_ROOT and DDL_JOB_TOKEN removed from the environment and
// the variables in `vars` passed to every rank.
RunResult mpirun_here(int n, const std::vector<std::string> &vars,
                      const std::vector<std::string> &prog) {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "-u",
                                   "DDL_ROOT",
                                   "-u",
                                   "DDL_JOB_TOKEN",
                                   kMpirun,
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "--bind-to",
                                   "none",
                                   "-np",
                                   std::to_string(n)};
  for (const std::string &v : vars) {
    argv.push_back("-x");
    argv.push_back(v);
  }
  argv.insert(argv.end(), prog.begin(), prog.end());
  return run_command(argv, 120);
}

}  // namespace

TestSuite(mpirun_launch, .init = setup, .fini = teardown, .timeout = 240);

Test(mpirun_launch, address_and_token_through_pmix) {
  need_mpirun();
  // A rendezvous directory that does not exist: the file path cannot have been used.
  RunResult r = mpirun_here(
      3,
      {"DDL_LOG_LEVEL=info", "DDL_TIMEOUT_MS=30000", "DDL_RENDEZVOUS_DIR=" + g_dir + "/not-there"},
      {kProbe});
  const std::string all = "stdout:\n" + r.out + "\nstderr:\n" + r.err;
  cr_assert(r.finished, "mpirun did not finish; %s", all.c_str());
  cr_assert_eq(r.exit_status, 0, "%s", all.c_str());
  cr_assert(contains(r.err, "rank 0: serving at 127.0.0.1:") &&
                contains(r.err, "(published through PMIx, with a fresh job token)"),
            "%s", all.c_str());
  cr_assert_eq(count(r.err, "came through PMIx, with a fresh job token"), 2u, "%s", all.c_str());
  cr_assert(contains(r.out, "probe: rank 1: strangers (no token, wrong token): refused, refused"),
            "%s", all.c_str());
  cr_assert(contains(r.err, "dropped connection from"), "rank 0 did not log the strangers: %s",
            all.c_str());
  for (int rank = 0; rank < 3; ++rank)
    cr_assert(contains(r.out, "probe: rank " + std::to_string(rank) + " of 3: bootstrap ok"), "%s",
              all.c_str());
  cr_assert(!contains(r.err, "is open"), "an open rendezvous: %s", all.c_str());
}

Test(mpirun_launch, ddl_perf_through_pmix) {
  need_mpirun();
  RunResult r = mpirun_here(
      3,
      {"DDL_LOG_LEVEL=info", "DDL_TIMEOUT_MS=60000", "DDL_RENDEZVOUS_DIR=" + g_dir + "/not-there"},
      {kDdlPerf, "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-c", "1"});
  const std::string all = "stdout:\n" + r.out + "\nstderr:\n" + r.err;
  cr_assert_eq(r.exit_status, 0, "%s", all.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", all.c_str());
  cr_assert_eq(count(r.out + r.err, "came through PMIx, with a fresh job token"), 2u, "%s",
               all.c_str());
}

Test(mpirun_launch, rendezvous_file_with_a_token_without_pmix) {
  need_mpirun();
  RunResult r = mpirun_here(
      3,
      {"DDL_LOG_LEVEL=info", "DDL_TIMEOUT_MS=30000", "DDL_PMIX=0", "DDL_RENDEZVOUS_DIR=" + g_dir},
      {kProbe});
  const std::string all = "stdout:\n" + r.out + "\nstderr:\n" + r.err;
  cr_assert_eq(r.exit_status, 0, "%s", all.c_str());
  cr_assert(contains(r.err, "(published in " + g_dir + "/ddl-") &&
                contains(r.err, ".root, with a fresh job token)"),
            "%s", all.c_str());
  cr_assert(!contains(r.out + r.err, "through PMIx"), "%s", all.c_str());
  cr_assert(contains(r.out, "probe: rank 1: file " + g_dir + "/ddl-"), "%s", all.c_str());
  cr_assert(contains(r.out, ".root mode 600 token yes"), "%s", all.c_str());
  cr_assert(contains(r.out, "probe: rank 1: strangers (no token, wrong token): refused, refused"),
            "%s", all.c_str());
  for (int rank = 0; rank < 3; ++rank)
    cr_assert(contains(r.out, "probe: rank " + std::to_string(rank) + " of 3: bootstrap ok"), "%s",
              all.c_str());
}

Test(mpirun_launch, a_given_root_without_a_token_warns) {
  need_mpirun();
  // No strangers here: one without a token would be let in as a rank of the job.
  RunResult r = run_command({"/usr/bin/env", "-u", "DDL_JOB_TOKEN", kMpirun, "--allow-run-as-root",
                             "--oversubscribe", "--bind-to", "none", "-np", "2", "-x",
                             "DDL_ROOT=127.0.0.1:" + std::to_string(ddltest::free_port()), "-x",
                             "DDL_TIMEOUT_MS=30000", "-x", "PROBE_STRANGERS=0", kProbe},
                            120);
  const std::string all = "stdout:\n" + r.out + "\nstderr:\n" + r.err;
  cr_assert_eq(r.exit_status, 0, "%s", all.c_str());
  cr_assert_eq(count(r.err, "is open"), 1u, "one warning, from rank 0: %s", all.c_str());
  cr_assert(contains(r.err, "Set DDL_JOB_TOKEN"), "%s", all.c_str());
}

// Across emulated hosts: mpirun on h0 starts h1's ranks through the emuhosts agent; the
// rendezvous directory does not exist, so PMIx alone can tell h1 where rank 0 listens, and
// rank 0 must publish an address h1 can reach (not loopback).
Test(mpirun_launch, across_emulated_hosts_without_ddl_root) {
  need_mpirun();
  if (geteuid() != 0) cr_skip_test("emulated hosts need root (network namespaces)");
  RunResult up = run_command({kEmuhosts, "up", "--name", g_name, "--hosts", "2"}, 60);
  if (up.exit_status != 0) cr_skip_test("cannot make emulated hosts here: %s", up.err.c_str());
  const std::string agent = "/run/emuhosts/" + g_name + "/agent";
  RunResult r = run_command({kEmuhosts,
                             "exec",
                             "--name",
                             g_name,
                             "h0",
                             "--",
                             "env",
                             "-u",
                             "DDL_ROOT",
                             "-u",
                             "DDL_JOB_TOKEN",
                             kMpirun,
                             "--allow-run-as-root",
                             "--mca",
                             "plm_rsh_agent",
                             agent,
                             "--bind-to",
                             "none",
                             "-H",
                             "h0:2,h1:2",
                             "-np",
                             "4",
                             "-x",
                             "DDL_LOG_LEVEL=info",
                             "-x",
                             "DDL_TIMEOUT_MS=60000",
                             "-x",
                             "DDL_RENDEZVOUS_DIR=" + g_dir + "/not-there",
                             kDdlPerf,
                             "-b",
                             "8",
                             "-e",
                             "1M",
                             "-f",
                             "64",
                             "-n",
                             "2",
                             "-w",
                             "1",
                             "-c",
                             "1"},
                            150);
  const std::string all = "stdout:\n" + r.out + "\nstderr:\n" + r.err;
  cr_assert(r.finished, "mpirun across hosts did not finish: %s", all.c_str());
  cr_assert_eq(r.exit_status, 0, "%s", all.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", all.c_str());
  cr_assert(contains(r.out + r.err, "rank 0: serving at 10.100.0.1:"),
            "rank 0 did not publish h0's address: %s", all.c_str());
  cr_assert_eq(count(r.out + r.err, "came through PMIx, with a fresh job token"), 3u, "%s",
               all.c_str());
}
