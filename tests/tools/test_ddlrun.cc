// ddlrun end to end: environment, output tagging, failure propagation, signals, timeouts.
// The ranks are small `sh -c` scripts; every test has deadlines and kills what it spawned.
#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "spawn.h"

using ddltest::run_command;
using ddltest::RunResult;

namespace {

const std::string kDdlrun = DDLRUN_PATH;
std::string g_dir;  // per-test scratch directory

void setup() {
  g_dir = ddltest::make_temp_dir();
}
void teardown() {
  ddltest::kill_all_spawned();
  ddltest::remove_dir(g_dir);
}

std::vector<std::string> ddlrun(std::vector<std::string> options, const std::string &script) {
  std::vector<std::string> argv = {kDdlrun};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
  return argv;
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// Waits until DIR/<prefix>.<rank> exists for every rank; returns the pids written in them.
std::vector<pid_t> wait_for_pid_files(const std::string &prefix, int nranks, double seconds) {
  std::vector<pid_t> pids;
  for (int tries = 0; tries < static_cast<int>(seconds * 100); ++tries) {
    pids.clear();
    for (int rank = 0; rank < nranks; ++rank) {
      std::string text = ddltest::read_file(g_dir + "/" + prefix + "." + std::to_string(rank));
      if (!text.empty() && text.back() == '\n') pids.push_back(std::stoi(text));
    }
    if (static_cast<int>(pids.size()) == nranks) return pids;
    usleep(10000);
  }
  return pids;
}

// A fake ssh: it records the host and runs the words with a shell in a clean environment, as
// sshd would.
std::string make_fake_ssh() {
  std::string agent = g_dir + "/fake_ssh";
  std::string script = "#!/bin/sh\nhost=$1; shift\necho \"$host\" >> " + g_dir +
                       "/agent_hosts\nexec env -i PATH=/usr/bin:/bin /bin/sh -c \"$*\"\n";
  FILE *file = std::fopen(agent.c_str(), "w");
  cr_assert(file);
  std::fputs(script.c_str(), file);
  std::fclose(file);
  chmod(agent.c_str(), 0755);
  return agent;
}

// Cores this test may use, as nproc counts them (ddlrun and its ranks inherit the mask).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

int count_of(const std::string &text, const std::string &part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

void assert_all_gone(const std::vector<pid_t> &pids) {
  for (pid_t pid : pids) {
    cr_assert(ddltest::wait_until_gone(pid, 5), "process %d outlived ddlrun",
              static_cast<int>(pid));
  }
}

}  // namespace

TestSuite(ddlrun, .init = setup, .fini = teardown, .timeout = 60);

Test(ddlrun, sets_the_environment_of_each_rank) {
  RunResult r = run_command(
      ddlrun({"-n", "3", "-x", "EXTRA_VAR=some value"},
             "echo \"$DDL_RANK $DDL_WORLD_SIZE $DDL_LOCAL_RANK $DDL_LOCAL_SIZE $DDL_ROOT "
             "$DDL_JOB_TOKEN $EXTRA_VAR\" > " +
                 g_dir + "/env.$DDL_RANK"),
      20);
  cr_assert(r.finished && r.exit_status == 0, "status %d, stderr: %s", r.exit_status,
            r.err.c_str());
  std::set<std::string> roots, tokens;
  for (int rank = 0; rank < 3; ++rank) {
    std::istringstream in(ddltest::read_file(g_dir + "/env." + std::to_string(rank)));
    int r_rank = -1, world = -1, local_rank = -1, local_size = -1;
    std::string root, token, extra1, extra2;
    in >> r_rank >> world >> local_rank >> local_size >> root >> token >> extra1 >> extra2;
    cr_assert_eq(r_rank, rank);
    cr_assert_eq(world, 3);
    cr_assert_eq(local_rank, rank);
    cr_assert_eq(local_size, 3);
    cr_assert(root.rfind("127.0.0.1:", 0) == 0 && root.size() > 10, "DDL_ROOT=%s", root.c_str());
    int port = std::stoi(root.substr(10));
    cr_assert(port > 0 && port < 65536);
    cr_assert_eq(token.size(), 32u, "DDL_JOB_TOKEN=%s", token.c_str());
    cr_assert(token.find_first_not_of("0123456789abcdef") == std::string::npos);
    cr_assert_eq(extra1 + " " + extra2, std::string("some value"));
    roots.insert(root);
    tokens.insert(token);
  }
  cr_assert_eq(roots.size(), 1u, "all ranks must share DDL_ROOT");
  cr_assert_eq(tokens.size(), 1u, "all ranks must share DDL_JOB_TOKEN");

  // Another job gets another token.
  RunResult again = run_command(ddlrun({"-n", "1"}, "echo $DDL_JOB_TOKEN"), 20);
  cr_assert_eq(again.exit_status, 0);
  cr_assert(!contains(again.out, *tokens.begin()), "the job token must be random");
}

Test(ddlrun, tag_output_prefixes_every_line_with_the_rank) {
  RunResult r = run_command(
      ddlrun({"-n", "2", "--tag-output"}, "echo first; echo oops >&2; echo second; printf tail"),
      20);
  cr_assert(r.finished && r.exit_status == 0, "status %d, stderr: %s", r.exit_status,
            r.err.c_str());
  std::vector<std::string> out = lines_of(r.out);
  std::multiset<std::string> got(out.begin(), out.end());
  std::multiset<std::string> want = {"[0] first", "[0] second", "[0] tail",
                                     "[1] first", "[1] second", "[1] tail"};
  cr_assert(got == want, "stdout was:\n%s", r.out.c_str());
  cr_assert(contains(r.err, "[0] oops\n") && contains(r.err, "[1] oops\n"), "stderr: %s",
            r.err.c_str());
  // Each rank's own lines keep their order.
  for (const char *rank : {"[0] ", "[1] "}) {
    std::vector<std::string> mine;
    for (const std::string &line : out)
      if (line.rfind(rank, 0) == 0) mine.push_back(line.substr(4));
    cr_assert(mine == std::vector<std::string>({"first", "second", "tail"}));
  }

  RunResult plain = run_command(ddlrun({"-n", "2"}, "echo untagged"), 20);
  cr_assert_eq(plain.out, std::string("untagged\nuntagged\n"));
}

Test(ddlrun, a_failing_rank_stops_the_others_and_sets_the_exit_code) {
  std::vector<std::string> argv = ddlrun(
      {"-n", "4"}, "echo $$ > " + g_dir + "/pid.$DDL_RANK; " +
                       "if [ \"$DDL_RANK\" = 2 ]; then sleep 0.3; exit 3; fi; exec sleep 60");
  RunResult r = run_command(argv, 20);
  cr_assert(r.finished, "ddlrun did not stop the sleeping ranks");
  cr_assert_eq(r.exit_status, 3, "stderr: %s", r.err.c_str());
  cr_assert(r.seconds < 5, "took %.1f s to stop the sleeping ranks", r.seconds);
  cr_assert(contains(r.err, "rank 2 (pid ") && contains(r.err, "exited with code 3") &&
                contains(r.err, "stopping the other 3 ranks"),
            "stderr: %s", r.err.c_str());
  assert_all_gone(wait_for_pid_files("pid", 4, 1));
}

Test(ddlrun, a_killed_rank_is_named_and_gives_128_plus_signal) {
  RunResult r = run_command(
      ddlrun({"-n", "3"}, "if [ \"$DDL_RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60"), 20);
  cr_assert(r.finished);
  cr_assert_eq(r.exit_status, 137, "stderr: %s", r.err.c_str());
  cr_assert(r.seconds < 5, "took %.1f s", r.seconds);
  cr_assert(contains(r.err, "rank 1 (pid ") && contains(r.err, "killed by signal 9"), "stderr: %s",
            r.err.c_str());
}

Test(ddlrun, sigterm_reaches_every_rank_and_their_children) {
  ddltest::Spawned job(ddlrun({"-n", "3"}, "echo $$ > " + g_dir + "/pid.$DDL_RANK; sleep 60 & " +
                                               "echo $! > " + g_dir + "/child.$DDL_RANK; wait"));
  std::vector<pid_t> ranks = wait_for_pid_files("pid", 3, 10);
  std::vector<pid_t> children = wait_for_pid_files("child", 3, 10);
  cr_assert_eq(ranks.size(), 3u, "the ranks did not start");
  cr_assert_eq(children.size(), 3u, "the ranks' children did not start");
  kill(job.pid(), SIGTERM);
  cr_assert(job.wait(10), "ddlrun did not exit after SIGTERM");
  cr_assert_eq(job.exit_status(), 128 + SIGTERM, "stderr: %s", job.err().c_str());
  cr_assert(contains(job.err(), "passing it on to 3 ranks"), "stderr: %s", job.err().c_str());
  assert_all_gone(ranks);
  assert_all_gone(children);
}

Test(ddlrun, ranks_die_with_a_killed_ddlrun) {
  ddltest::Spawned job(ddlrun({"-n", "2"}, "echo $$ > " + g_dir + "/pid.$DDL_RANK; exec sleep 60"));
  std::vector<pid_t> ranks = wait_for_pid_files("pid", 2, 10);
  cr_assert_eq(ranks.size(), 2u, "the ranks did not start");
  kill(job.pid(), SIGKILL);
  cr_assert(job.wait(10));
  assert_all_gone(ranks);  // PR_SET_PDEATHSIG
}

Test(ddlrun, timeout_stops_the_job) {
  RunResult r = run_command({kDdlrun, "-n", "2", "--timeout", "0.5", "sleep", "60"}, 20);
  cr_assert(r.finished);
  cr_assert_eq(r.exit_status, 124, "stderr: %s", r.err.c_str());
  cr_assert(r.seconds < 5, "took %.1f s", r.seconds);
  cr_assert(contains(r.err, "timeout"), "stderr: %s", r.err.c_str());
}

Test(ddlrun, ranks_ignoring_sigterm_get_sigkill_after_the_grace_period) {
  RunResult r = run_command(
      ddlrun({"-n", "2", "--timeout", "0.3", "--grace-ms", "300"}, "trap '' TERM; exec sleep 60"),
      20);
  cr_assert(r.finished);
  cr_assert_eq(r.exit_status, 124, "stderr: %s", r.err.c_str());
  cr_assert(r.seconds < 5, "took %.1f s", r.seconds);
  cr_assert(contains(r.err, "SIGKILL"), "stderr: %s", r.err.c_str());
}

Test(ddlrun, success_and_exec_failure) {
  setenv("OMP_NUM_THREADS", "1", 1);  // the user's: ddlrun has nothing to say about it
  RunResult ok = run_command(ddlrun({"-n", "3"}, "exit 0"), 20);
  unsetenv("OMP_NUM_THREADS");
  cr_assert_eq(ok.exit_status, 0, "stderr: %s", ok.err.c_str());
  cr_assert_eq(ok.err, std::string(""));

  RunResult missing = run_command({kDdlrun, "-n", "2", "/nonexistent/program"}, 20);
  cr_assert_eq(missing.exit_status, 127);
  cr_assert(contains(missing.err, "cannot run '/nonexistent/program'"), "stderr: %s",
            missing.err.c_str());
}

// -H through a fake ssh (tests/tools/test_emuhosts.cc does it across namespaces).
Test(ddlrun, hosts_go_through_the_launch_agent) {
  std::string agent = make_fake_ssh();

  setenv("DDLRUN_TEST_OWN", "own value", 1);
  RunResult r = run_command(
      {kDdlrun, "-H", "hostA:2,hostB", "--launch-agent", agent, "-x", "DDLRUN_TEST_OWN", "-x",
       "QUOTED=it's $HOME", "-x", "DDLRUN_TEST_UNSET_VAR", "-t", "--", "sh", "-c",
       "echo $DDL_RANK/$DDL_WORLD_SIZE $DDL_LOCAL_RANK/$DDL_LOCAL_SIZE $DDL_ROOT "
       "\"$DDLRUN_TEST_OWN\" \"$QUOTED\" ${DDLRUN_TEST_UNSET_VAR-unset} ${DDL_JOB_TOKEN:+token}"},
      20);
  unsetenv("DDLRUN_TEST_OWN");
  cr_assert_eq(r.exit_status, 0, "stderr: %s", r.err.c_str());
  std::vector<std::string> lines = lines_of(r.out);
  cr_assert_eq(lines.size(), 3u, "%s", r.out.c_str());
  std::string root;
  for (const std::string &line : lines) {
    size_t colon = line.find("hostA:");
    cr_assert(colon != std::string::npos, "DDL_ROOT is not on hostA: %s", line.c_str());
    root = line.substr(colon, line.find(' ', colon) - colon);
  }
  int port = std::stoi(root.substr(6));
  cr_assert(port >= 20000 && port < 30000, "%s", root.c_str());
  std::string tail = " " + root + " own value it's $HOME unset token";
  for (const std::string &want :
       {"[0] 0/3 0/2" + tail, "[1] 1/3 1/2" + tail, "[2] 2/3 0/1" + tail}) {
    cr_assert(contains(r.out, want + "\n"), "no '%s' in:\n%s", want.c_str(), r.out.c_str());
  }
  std::vector<std::string> hosts = lines_of(ddltest::read_file(g_dir + "/agent_hosts"));
  std::multiset<std::string> got(hosts.begin(), hosts.end());
  cr_assert(got == std::multiset<std::string>({"hostA", "hostA", "hostB"}), "one agent per rank");

  // A rank that fails is named with its host; --port sets rank 0's port.
  RunResult failed =
      run_command({kDdlrun, "-H", "hostA,hostB", "--launch-agent", agent, "--port", "29555", "--",
                   "sh", "-c", "test $DDL_ROOT = hostA:29555 || exit 9; test $DDL_RANK = 0"},
                  20);
  cr_assert_eq(failed.exit_status, 1, "stderr: %s", failed.err.c_str());
  cr_assert(contains(failed.err, "rank 1 on hostB (agent pid "), "stderr: %s", failed.err.c_str());
}

// As torchrun: each rank gets OMP_NUM_THREADS = cores / ranks on its host (at least 1), and
// ddlrun says so once, unless the user set it (in ddlrun's environment or with -x).
Test(ddlrun, sets_omp_num_threads_unless_the_user_did) {
  unsetenv("OMP_NUM_THREADS");
  const int cores = usable_cores();
  const std::string echo = "echo $DDL_RANK ${OMP_NUM_THREADS-unset}";
  for (int n : {1, 2, 3}) {
    RunResult r = run_command(ddlrun({"-n", std::to_string(n)}, echo), 20);
    cr_assert_eq(r.exit_status, 0, "stderr: %s", r.err.c_str());
    const std::string want = std::to_string(std::max(1, cores / n));
    for (int rank = 0; rank < n; ++rank) {
      const std::string line = std::to_string(rank) + " " + want + "\n";
      cr_assert(contains(r.out, line), "-n %d on %d cores: no '%s' in:\n%s", n, cores, line.c_str(),
                r.out.c_str());
    }
    // Said once, and only where ranks share the host (-n 1 gets every core, as without it).
    cr_assert_eq(count_of(r.err, "OMP_NUM_THREADS=" + want + " for each rank"), n > 1 ? 1 : 0,
                 "-n %d, stderr: %s", n, r.err.c_str());
  }

  setenv("OMP_NUM_THREADS", "7", 1);
  RunResult own = run_command(ddlrun({"-n", "2"}, echo), 20);
  unsetenv("OMP_NUM_THREADS");
  cr_assert_eq(own.exit_status, 0, "stderr: %s", own.err.c_str());
  cr_assert(contains(own.out, "0 7\n") && contains(own.out, "1 7\n"), "%s", own.out.c_str());
  cr_assert(!contains(own.err, "OMP_NUM_THREADS"), "stderr: %s", own.err.c_str());

  RunResult given = run_command(ddlrun({"-n", "2", "-x", "OMP_NUM_THREADS=5"}, echo), 20);
  cr_assert_eq(given.exit_status, 0, "stderr: %s", given.err.c_str());
  cr_assert(contains(given.out, "0 5\n") && contains(given.out, "1 5\n"), "%s", given.out.c_str());
  cr_assert(!contains(given.err, "OMP_NUM_THREADS"), "stderr: %s", given.err.c_str());
}

// With -H the division happens on each host (its nproc, its ranks); a user's value goes along.
Test(ddlrun, sets_omp_num_threads_on_each_host) {
  unsetenv("OMP_NUM_THREADS");
  std::string agent = make_fake_ssh();
  const int cores = usable_cores();
  const std::vector<std::string> hosts = {"-H", "hostA:2,hostB", "--launch-agent", agent, "-t"};
  const std::string echo = "echo ${OMP_NUM_THREADS-unset}";
  RunResult r = run_command(ddlrun(hosts, echo), 20);
  cr_assert_eq(r.exit_status, 0, "stderr: %s", r.err.c_str());
  const std::string shared = std::to_string(std::max(1, cores / 2));
  for (const std::string &want : {"[0] " + shared, "[1] " + shared, "[2] " + std::to_string(cores)})
    cr_assert(contains(r.out, want + "\n"), "%d cores: no '%s' in:\n%s", cores, want.c_str(),
              r.out.c_str());
  cr_assert_eq(count_of(r.err, "setting OMP_NUM_THREADS"), 1, "stderr: %s", r.err.c_str());

  setenv("OMP_NUM_THREADS", "7", 1);
  RunResult own = run_command(ddlrun(hosts, echo), 20);
  unsetenv("OMP_NUM_THREADS");
  cr_assert_eq(own.exit_status, 0, "stderr: %s", own.err.c_str());
  cr_assert_eq(count_of(own.out, " 7\n"), 3, "%s", own.out.c_str());
  cr_assert(!contains(own.err, "OMP_NUM_THREADS"), "stderr: %s", own.err.c_str());

  std::vector<std::string> with_x = hosts;
  with_x.insert(with_x.end(), {"-x", "OMP_NUM_THREADS=5"});
  RunResult given = run_command(ddlrun(with_x, echo), 20);
  cr_assert_eq(given.exit_status, 0, "stderr: %s", given.err.c_str());
  cr_assert_eq(count_of(given.out, " 5\n"), 3, "%s", given.out.c_str());
}

Test(ddlrun, usage_errors_are_clear) {
  struct Case {
    std::vector<std::string> args;
    const char *message;
  };
  const Case cases[] = {
      {{"sleep", "1"}, "-n N"},
      {{"-n", "0", "true"}, "-n wants a number of ranks"},
      {{"-n", "2"}, "no program to run"},
      {{"-n", "2", "-x", "1BAD=x", "true"}, "-x wants VAR=VALUE"},
      {{"-H", "a:2,:1", "true"}, "-H wants host names"},
      {{"-H", "a:0", "true"}, "-H wants host:slots"},
      {{"-H", "a:2,b", "-n", "4", "true"}, "more ranks than the 3 slots"},
      {{"-n", "2", "--launch-agent", "ssh", "true"}, "go with -H"},
      {{"-H", "a", "--port", "70000", "true"}, "--port wants"},
      {{"-n", "2", "--timeout", "soon", "true"}, "--timeout wants"},
      {{"-n", "2", "--frobnicate", "true"}, "unknown option '--frobnicate'"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> argv = {kDdlrun};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = run_command(argv, 10);
    cr_assert_eq(r.exit_status, 2, "for '%s'", c.message);
    cr_assert(contains(r.err, c.message), "want '%s' in: %s", c.message, r.err.c_str());
  }
  RunResult help = run_command({kDdlrun, "--help"}, 10);
  cr_assert_eq(help.exit_status, 0);
  cr_assert(contains(help.out, "Usage: ddlrun -n N"));
}

// --torch-store: a stand-in for `python -m ddl.torch.store` ($DDL_PYTHON, since the ranks'
// program is not python) says it is ready and records its pid and arguments; the ranks get
// MASTER_ADDR, MASTER_PORT (its port) and TORCHELASTIC_USE_AGENT_STORE=True, and the store is
// gone when ddlrun is. A store that fails to start fails the job before any rank starts.
Test(ddlrun, torch_store_is_hosted_by_ddlrun) {
  const std::string store = g_dir + "/fake_python";
  const std::string script = "#!/bin/sh\necho $$ > " + g_dir + "/store_pid\necho \"$*\" > " +
                             g_dir + "/store_args\necho 'ddl.torch.store: ready on here'\n" +
                             "exec sleep 60\n";
  FILE *file = std::fopen(store.c_str(), "w");
  cr_assert(file);
  std::fputs(script.c_str(), file);
  std::fclose(file);
  chmod(store.c_str(), 0755);
  setenv("DDL_PYTHON", store.c_str(), 1);
  RunResult run =
      run_command(ddlrun({"--torch-store", "-n", "2"},
                         "echo \"$MASTER_ADDR $MASTER_PORT $TORCHELASTIC_USE_AGENT_STORE\""),
                  30);
  cr_assert_eq(run.exit_status, 0, "stderr: %s", run.err.c_str());
  std::string args = ddltest::read_file(g_dir + "/store_args");
  args.erase(args.find_last_not_of('\n') + 1);
  cr_assert(contains(args, "-m ddl.torch.store --port "), "store arguments: %s", args.c_str());
  const std::string port = args.substr(args.rfind(' ') + 1);
  cr_assert_eq(count_of(run.out, "127.0.0.1 " + port + " True"), 2, "ranks saw: %s (port %s)",
               run.out.c_str(), port.c_str());
  const pid_t store_pid = std::stoi(ddltest::read_file(g_dir + "/store_pid"));
  cr_assert(ddltest::wait_until_gone(store_pid, 5), "the store outlived ddlrun");

  setenv("DDL_PYTHON", "/bin/false", 1);
  RunResult failed =
      run_command(ddlrun({"--torch-store", "-n", "2"}, "touch " + g_dir + "/rank_ran"), 30);
  unsetenv("DDL_PYTHON");
  cr_assert_eq(failed.exit_status, 1, "stderr: %s", failed.err.c_str());
  cr_assert(contains(failed.err, "--torch-store: the torch store exited before it was ready"),
            "stderr: %s", failed.err.c_str());
  cr_assert(access((g_dir + "/rank_ran").c_str(), F_OK) != 0, "a rank started anyway");
}

namespace {

// A stand-in for the store's interpreter ($DDL_PYTHON) running `body` as /bin/sh.
void use_fake_store(const std::string &body) {
  const std::string path = g_dir + "/fake_store";
  FILE *file = std::fopen(path.c_str(), "w");
  cr_assert(file);
  std::fputs(("#!/bin/sh\necho $$ > " + g_dir + "/store_pid\n" + body).c_str(), file);
  std::fclose(file);
  chmod(path.c_str(), 0755);
  setenv("DDL_PYTHON", path.c_str(), 1);
}

}  // namespace

// The store's ready line may arrive in two writes (Python unbuffered writes a line's text and
// its newline apart): ddlrun reads the whole line before it closes the pipe, so the store does
// not die of a broken pipe (it did, under PYTHONUNBUFFERED=1, and the job hung). And a store
// that ends while the ranks run stops the job at once, naming it, instead of leaving the ranks
// to wait on it.
Test(ddlrun, torch_store_lives_through_the_job_or_stops_it) {
  use_fake_store("printf 'ddl.torch.store: ready on here'\nsleep 0.3\necho\nexec sleep 60\n");
  RunResult split = run_command(
      ddlrun({"--torch-store", "-n", "2"}, "sleep 1; kill -0 $(cat " + g_dir + "/store_pid)"), 30);
  cr_assert_eq(split.exit_status, 0, "the store died before the ranks ended: %s",
               split.err.c_str());

  use_fake_store("echo 'ddl.torch.store: ready on here'\nsleep 0.5\nexit 3\n");
  // The ranks would sleep past run_command's deadline: only the store's end stops them.
  RunResult ended = run_command(ddlrun({"--torch-store", "-n", "2"}, "sleep 120"), 30);
  unsetenv("DDL_PYTHON");
  cr_assert_eq(ended.exit_status, 1, "stderr: %s", ended.err.c_str());
  cr_assert(contains(ended.err,
                     "the torch store exited with code 3 while the job ran; "
                     "stopping the 2 ranks"),
            "stderr: %s", ended.err.c_str());
}
