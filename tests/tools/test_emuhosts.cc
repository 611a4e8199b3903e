// Emulated hosts (tools/emuhosts) and `ddlrun -H` across them: network namespaces with their own
// hostnames, a ddl job on 2 hosts x 2 ranks through the emuhosts launch agent, a failing rank on
// one host stopping the job, torch's store in ddlrun (--torch-store) outliving rank 0, and
// nothing left behind. Needs root and network namespaces; skips
// with a message otherwise. Each test's setup is named after its process (Criterion runs each
// test in a process of its own) and removed in .fini, whatever the test did.
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "spawn.h"

using ddltest::run_command;
using ddltest::RunResult;

namespace {

const std::string kEmuhosts = EMUHOSTS_PATH;
const std::string kDdlrun = DDLRUN_PATH;
const std::string kDdlPerf = DDL_PERF_PATH;

std::string g_name;  // this test's setup
std::string g_dir;   // scratch directory (the emulated hosts share the file system)

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

bool exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void setup() {
  g_name = "ddltest" + std::to_string(getpid());
  g_dir = ddltest::make_temp_dir();
}

void teardown() {
  ddltest::kill_all_spawned();
  run_command({kEmuhosts, "down", "--name", g_name}, 30);
  ddltest::remove_dir(g_dir);
}

// The namespaces, /etc/netns entries and state of this test's setup that exist now.
std::vector<std::string> leftovers() {
  std::vector<std::string> found;
  RunResult list = run_command({"ip", "netns", "list"}, 10);
  if (contains(list.out, g_name + "-")) found.push_back("namespaces:\n" + list.out);
  RunResult links = run_command({"ip", "-o", "link"}, 10);
  if (contains(links.out, g_name)) found.push_back("links:\n" + links.out);
  for (const std::string &path : {"/etc/netns/" + g_name + "-h0", "/run/emuhosts/" + g_name}) {
    if (exists(path)) found.push_back(path);
  }
  return found;
}

std::string describe(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items) text += item + "\n";
  return text;
}

// Creates the setup, or skips the test where this machine cannot (not root, no namespaces).
void up_or_skip(const std::vector<std::string> &args) {
  if (geteuid() != 0) cr_skip_test("emulated hosts need root (network namespaces)");
  std::vector<std::string> argv = {kEmuhosts, "up", "--name", g_name};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult up = run_command(argv, 60);
  if (up.exit_status != 0) {
    cr_skip_test("cannot make emulated hosts here: %s", up.err.c_str());
  }
  cr_assert(contains(up.out, "EMUHOSTS_NAME=" + g_name), "up printed:\n%s", up.out.c_str());
}

std::string agent() {
  return "/run/emuhosts/" + g_name + "/agent";
}

// ddl_perf on this test's hosts through ddlrun -H `hosts` and the agent, with each of `env`
// passed by -x; the run gets 90 s, the command `limit_s`.
RunResult ddl_perf_on(const std::string &hosts, const std::vector<std::string> &env,
                      const std::vector<std::string> &perf_args, int limit_s = 110) {
  std::vector<std::string> cmd = {kDdlrun, "-H",        hosts, "--launch-agent",
                                  agent(), "--timeout", "90"};
  for (const std::string &var : env) {
    cmd.push_back("-x");
    cmd.push_back(var);
  }
  cmd.push_back("--");
  cmd.push_back(kDdlPerf);
  cmd.insert(cmd.end(), perf_args.begin(), perf_args.end());
  return run_command(cmd, limit_s);
}

// Runs a shell command on an emulated host and returns its output.
RunResult on_host(const std::string &host, const std::string &script) {
  return run_command({kEmuhosts, "exec", "--name", g_name, host, "--", "sh", "-c", script}, 20);
}

}  // namespace

TestSuite(emuhosts, .init = setup, .fini = teardown, .timeout = 120);

Test(emuhosts, hosts_have_their_names_and_down_leaves_nothing_behind) {
  up_or_skip({"--hosts", "2", "--rails", "2", "--rate", "100mbit"});
  RunResult who = on_host("h1", "echo $(hostname) $DDL_HOST_ID; ip -o -4 addr show | wc -l");
  cr_assert_eq(who.exit_status, 0, "%s", who.err.c_str());
  cr_assert_eq(who.out, std::string("h1 h1\n3\n"), "lo, eth0 and eth1 on h1; got:\n%s",
               who.out.c_str());
  RunResult hosts = on_host("h0", "getent hosts h1 h1-r1");
  cr_assert(contains(hosts.out, "10.100.0.2") && contains(hosts.out, "10.101.0.2"), "%s",
            hosts.out.c_str());
  RunResult shaped = on_host("h0", "tc qdisc show dev eth1");
  cr_assert(contains(shaped.out, "tbf") && contains(shaped.out, "100Mbit"), "%s",
            shaped.out.c_str());

  // The agent form: ssh options skipped, the words joined and run by a shell, exit status kept.
  RunResult via_agent = run_command(
      {agent(), "-x", "-o", "BatchMode=yes", "h1", "echo", "$(hostname)", "'a  b';", "exit", "7"},
      20);
  cr_assert_eq(via_agent.exit_status, 7, "%s", via_agent.err.c_str());
  cr_assert_eq(via_agent.out, std::string("h1 a  b\n"));

  // A cable pulled and put back.
  cr_assert_eq(run_command({kEmuhosts, "link", "--name", g_name, "h1", "down"}, 10).exit_status, 0);
  cr_assert_eq(on_host("h1", "cat /sys/class/net/eth0/carrier").out, std::string("0\n"));
  cr_assert_eq(run_command({kEmuhosts, "link", "--name", g_name, "h1", "up"}, 10).exit_status, 0);
  cr_assert_eq(on_host("h1", "cat /sys/class/net/eth0/carrier").out, std::string("1\n"));

  cr_assert(leftovers().size() >= 2, "the setup is not there: %s", describe(leftovers()).c_str());
  RunResult down = run_command({kEmuhosts, "down", "--name", g_name}, 30);
  cr_assert_eq(down.exit_status, 0, "%s", down.err.c_str());
  cr_assert(leftovers().empty(), "left behind:\n%s", describe(leftovers()).c_str());
  RunResult again = run_command({kEmuhosts, "down", "--name", g_name}, 30);
  cr_assert_eq(again.exit_status, 0, "down is not idempotent: %s", again.err.c_str());
}

Test(emuhosts, run_cleans_up_when_terminated) {
  up_or_skip({"--hosts", "1", "--rate", "none"});  // probes, and proves the name is refused twice
  RunResult twice = run_command({kEmuhosts, "up", "--name", g_name, "--hosts", "1"}, 30);
  cr_assert_eq(twice.exit_status, 2);
  cr_assert(contains(twice.err, "exists already"), "%s", twice.err.c_str());
  run_command({kEmuhosts, "down", "--name", g_name}, 30);

  ddltest::Spawned run({kEmuhosts, "run", "--name", g_name, "--hosts", "2", "--", "sh", "-c",
                        "\"$EMUHOSTS_AGENT\" h1 sleep 60"});
  for (int i = 0; i < 200 && !exists("/run/emuhosts/" + g_name + "/agent"); ++i) usleep(50000);
  usleep(300000);  // let the command start on h1
  kill(run.pid(), SIGTERM);
  cr_assert(run.wait(20), "emuhosts run did not exit after SIGTERM");
  cr_assert_eq(run.exit_status(), 143, "stderr: %s", run.err().c_str());
  cr_assert(leftovers().empty(), "left behind:\n%s", describe(leftovers()).c_str());

  RunResult status = run_command({kEmuhosts, "run", "--name", g_name, "--hosts", "1", "--", "sh",
                                  "-c", "test \"$EMUHOSTS_HOSTS\" = h0 && exit 3"},
                                 60);
  cr_assert_eq(status.exit_status, 3, "the command's status; stderr: %s", status.err.c_str());
  cr_assert(leftovers().empty(), "left behind:\n%s", describe(leftovers()).c_str());
}

Test(emuhosts, ddlrun_places_ranks_host_by_host) {
  up_or_skip({"--hosts", "2"});
  RunResult r = run_command(
      {kDdlrun, "-H", "h0:2,h1:2", "--launch-agent", agent(), "--port", "29123", "-t", "-x",
       "QUOTED=it's  here", "--timeout", "30", "--", "sh", "-c",
       "echo $DDL_RANK $(hostname) $DDL_HOST_ID $DDL_LOCAL_RANK $DDL_LOCAL_SIZE $DDL_WORLD_SIZE "
       "$DDL_ROOT \"$QUOTED\""},
      40);
  cr_assert_eq(r.exit_status, 0, "stderr: %s", r.err.c_str());
  for (const char *line :
       {"[0] 0 h0 h0 0 2 4 h0:29123 it's  here\n", "[1] 1 h0 h0 1 2 4 h0:29123 it's  here\n",
        "[2] 2 h1 h1 0 2 4 h0:29123 it's  here\n", "[3] 3 h1 h1 1 2 4 h0:29123 it's  here\n"}) {
    cr_assert(contains(r.out, line), "no '%s' in:\n%s", line, r.out.c_str());
  }
}

Test(emuhosts, ddl_perf_across_two_hosts) {
  up_or_skip({"--hosts", "2"});
  RunResult r = ddl_perf_on("h0:2,h1:2", {},
                            {"-b", "8", "-e", "1M", "-f", "128", "-n", "2", "-w", "1", "-c", "1"});
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
}

Test(emuhosts, hier_over_uneven_hosts_every_type_and_op) {
  // 2 + 1 + 2 ranks on 3 hosts: shards of different sizes per host, every datatype and op,
  // in place and not, checked by ddl_perf against its reference; allreduce, allgather,
  // reduce-scatter and broadcast, each through hier.
  up_or_skip({"--hosts", "3"});
  for (const char *collective : {"allreduce", "allgather", "reduce_scatter", "broadcast"}) {
    RunResult r = ddl_perf_on("h0:2,h1:1,h2:2", {},
                              {"-C", collective, "-a", "hier", "-b", "4", "-e", "300K", "-f", "77",
                               "-d", "all",      "-o", "all",  "-n", "1", "-w", "0",    "-c", "1"});
    cr_assert_eq(r.exit_status, 0, "%s: stdout:\n%s\nstderr:\n%s", collective, r.out.c_str(),
                 r.err.c_str());
    cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s: %s", collective,
              r.out.c_str());
  }
}

// Alltoall (pairwise, and hier's agents), reduce, gather, scatter and grouped send/recv
// across uneven hosts, every result checked by ddl_perf.
Test(emuhosts, alltoall_p2p_and_rooted_calls_across_hosts) {
  up_or_skip({"--hosts", "3"});
  const std::vector<std::vector<std::string>> runs = {
      {"-C", "alltoall", "-a", "pairwise", "-d", "all"},
      {"-C", "alltoall", "-a", "hier", "-d", "all"},
      {"-C", "sendrecv", "-d", "int8"},
      {"-C", "reduce", "-r", "2", "-o", "all"},
      {"-C", "gather", "-r", "4"},
      {"-C", "scatter", "-r", "1"},
  };
  for (std::vector<std::string> args : runs) {
    for (const char *more : {"-b", "4", "-e", "300K", "-f", "77", "-n", "1", "-w", "0", "-c", "1"})
      args.push_back(more);
    RunResult r = ddl_perf_on("h0:2,h1:1,h2:2", {}, args);
    cr_assert_eq(r.exit_status, 0, "%s %s: stdout:\n%s\nstderr:\n%s", args[1].c_str(),
                 args[3].c_str(), r.out.c_str(), r.err.c_str());
    cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s: %s", args[1].c_str(),
              r.out.c_str());
  }
}

Test(emuhosts, a_failing_rank_on_one_host_stops_the_job) {
  up_or_skip({"--hosts", "2"});
  RunResult r = run_command(
      {kDdlrun, "-H", "h0:2,h1:2", "--launch-agent", agent(), "--timeout", "30", "--", "sh", "-c",
       "echo $$ > " + g_dir + "/pid.$DDL_RANK; " +
           "if [ $DDL_RANK = 3 ]; then sleep 0.3; exit 5; fi; exec sleep 60"},
      40);
  cr_assert(r.finished);
  cr_assert_eq(r.exit_status, 5, "stderr: %s", r.err.c_str());
  cr_assert(r.seconds < 10, "took %.1f s to stop the job", r.seconds);
  cr_assert(contains(r.err, "rank 3 on h1 (agent pid ") && contains(r.err, "exited with code 5") &&
                contains(r.err, "stopping the other 3 ranks"),
            "stderr: %s", r.err.c_str());
  // Stopping an agent stopped its rank: nothing runs on the hosts any more.
  for (int rank = 0; rank < 4; ++rank) {
    std::string text = ddltest::read_file(g_dir + "/pid." + std::to_string(rank));
    cr_assert(!text.empty(), "rank %d never started", rank);
    pid_t pid = std::stoi(text);
    cr_assert(ddltest::wait_until_gone(pid, 5), "rank %d (pid %d) outlived ddlrun", rank,
              static_cast<int>(pid));
  }
}

namespace {

// Bytes sent so far by each NIC of an emulated host ({"eth0", n}, ...), from /proc/net/dev.
std::vector<std::pair<std::string, long long>> nic_tx_bytes(const std::string &host) {
  RunResult r = on_host(host, "cat /proc/net/dev");
  std::vector<std::pair<std::string, long long>> nics;
  size_t at = 0;
  while (at < r.out.size()) {
    size_t end = r.out.find('\n', at);
    if (end == std::string::npos) end = r.out.size();
    const std::string line = r.out.substr(at, end - at);
    at = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name.rfind("eth", 0) != 0) continue;
    long long fields[9] = {};
    if (sscanf(line.c_str() + colon + 1, "%lld %lld %lld %lld %lld %lld %lld %lld %lld", &fields[0],
               &fields[1], &fields[2], &fields[3], &fields[4], &fields[5], &fields[6], &fields[7],
               &fields[8]) == 9)
      nics.emplace_back(name, fields[8]);  // the 9th number: bytes transmitted
  }
  return nics;
}

}  // namespace

// Rails by default: with no setting, each local rank drives its own NIC of the two every host
// has (lib/core/rails.h), so hier's cross-host traffic leaves every host over both about
// equally (with DDL_RAILS=none, UCX sends everything over one NIC).
Test(emuhosts, rails_drive_every_nic_of_a_host) {
  up_or_skip({"--hosts", "2", "--rails", "2"});
  std::vector<std::vector<std::pair<std::string, long long>>> before;
  for (const char *host : {"h0", "h1"}) before.push_back(nic_tx_bytes(host));
  RunResult r =
      ddl_perf_on("h0:2,h1:2", {"DDL_LOG_LEVEL=info"},
                  {"-a", "hier", "-b", "16M", "-e", "16M", "-n", "2", "-w", "0", "-c", "1"});
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  cr_assert(contains(r.out + r.err,
                     "rail 1 of 2: NIC eth1 (local index 1 of its host) carries this rank's "
                     "traffic to ranks 3"),
            "rank 1's log does not name its rail:\n%s", r.err.c_str());
  int host = 0;
  for (const char *name : {"h0", "h1"}) {
    const auto after = nic_tx_bytes(name);
    cr_assert_eq(after.size(), 2u, "%s has %zu NICs", name, after.size());
    for (size_t nic = 0; nic < after.size(); ++nic) {
      const long long sent = after[nic].second - before[host][nic].second;
      // Each host sends 16 MB per allreduce, half over each rail; at least 4 allreduces ran.
      cr_assert(sent > 16ll << 20, "%s %s sent only %lld B", name, after[nic].first.c_str(), sent);
    }
    ++host;
  }
}

// Runs ddl_perf -C `collective` of 16 MB on 2 hosts x 2 ranks with 2 rails, checks that
// every result is right and that the models sent it over the rails, and returns what each
// NIC of h0 sent meanwhile (in bytes, by NIC).
std::vector<std::pair<std::string, long long>> sent_by_h0_over_the_rails(const char *collective) {
  up_or_skip({"--hosts", "2", "--rails", "2"});
  auto sent = nic_tx_bytes("h0");
  RunResult r =
      ddl_perf_on("h0:2,h1:2", {"DDL_LOG_LEVEL=info"},
                  {"-C", collective, "-b", "16M", "-e", "16M", "-n", "2", "-w", "0", "-c", "1"});
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  cr_assert(contains(r.out + r.err, std::string(collective) + " of ") &&
                contains(r.out + r.err, ": rails (models:"),
            "no rank says the %s went over the rails:\n%s", collective, r.err.c_str());
  const auto after = nic_tx_bytes("h0");
  cr_assert_eq(after.size(), 2u, "h0 has %zu NICs", after.size());
  for (size_t nic = 0; nic < after.size(); ++nic)
    sent[nic].second = after[nic].second - sent[nic].second;
  return sent;
}

// The models are told the rails every rank drives: a large broadcast goes over every rail
// (lib/algorithms/rail_broadcast.h), half of it over each of the root's host's NICs, where
// the chain sent it all through one.
Test(emuhosts, the_models_send_a_broadcast_over_every_rail) {
  for (const auto &[nic, sent] : sent_by_h0_over_the_rails("broadcast")) {
    // Root 0 on h0: each NIC carries half of every broadcast (8 MB); at least 2 ran.
    cr_assert(sent > 12ll << 20, "h0 %s sent only %lld B", nic.c_str(), sent);
  }
}

// A large alltoall goes over every rail too (lib/algorithms/rail_alltoall.h): each block
// crosses on its receiver's rail. Each rank sends 4 MB to each of the 2 ranks of h1: 16 MB a
// call leave h0, 8 MB over each NIC, where the pairwise exchange sent 12 MB through one (the
// main transport's) and 4 MB through the other.
Test(emuhosts, the_models_send_a_large_alltoall_over_every_rail) {
  const auto sent = sent_by_h0_over_the_rails("alltoall");
  const long long all = sent[0].second + sent[1].second;
  for (const auto &[nic, bytes] : sent)
    cr_assert(bytes > 0.4 * static_cast<double>(all), "h0 %s sent %lld B of %lld", nic.c_str(),
              bytes, all);
}

// DDL_RAILS=auto takes the NICs the topology finds. Here the topology is a file describing 8
// InfiniBand NICs these emulated hosts do not have: the rails cannot connect, and the job
// must go on without them on every rank, saying why, rather than fail.
Test(emuhosts, auto_rails_that_cannot_connect_fall_back_on_every_rank) {
  up_or_skip({"--hosts", "2", "--rails", "2"});
  const std::string topology = std::string(TOPOLOGY_DATA_DIR) + "/dgx-a100-like.xml";
  RunResult r = ddl_perf_on("h0:2,h1:2", {"DDL_RAILS=auto", "DDL_TOPO_FILE=" + topology},
                            {"-b", "1M", "-e", "1M", "-n", "2", "-w", "0", "-c", "1"});
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  for (int rank = 0; rank < 4; ++rank)
    cr_assert(
        contains(r.out + r.err, "ddl[" + std::to_string(rank) + "] warn: DDL_RAILS=auto: rank"),
        "rank %d does not say the rails fell back:\n%s", rank, r.err.c_str());
  cr_assert(contains(r.out + r.err, "NIC mlx5_"), "the warning does not name the NIC:\n%s",
            r.err.c_str());
}

// A rank that uses a GPU drives the NIC closest to it (as NCCL pairs them), not the rail of its
// local index. The topology file crosses them: GPU 0 (bus 04) shares a PCIe switch with eth1,
// GPU 1 (bus 84) with eth0. Each rank opens GPU <local rank> of the stand-in CUDA driver
// (ddl_perf -G) before it creates its communicator, and the allreduce runs on its "device"
// buffers, staged through host memory across the hosts.
Test(emuhosts, gpu_ranks_drive_the_nic_closest_to_their_gpu) {
#ifndef FAKE_CUDA
  cr_skip_test("built without the stand-in CUDA driver (tests/device)");
#else
  up_or_skip({"--hosts", "2", "--rails", "2"});
  const std::string topology = std::string(TOPOLOGY_DATA_DIR) + "/two-gpu-crossed-eth.xml";
  RunResult r =
      ddl_perf_on("h0:2,h1:2",
                  {"DDL_RAILS=auto", "DDL_TOPO_FILE=" + topology, "DDL_LOG_LEVEL=info",
                   std::string("DDL_CUDA_LIBRARY=") + FAKE_CUDA, "FAKE_CUDA_DEVICES=2",
                   "FAKE_CUDA_BUS_IDS=0000:04:00.0,0000:84:00.0"},
                  {"-G", "-a", "hier", "-b", "1M", "-e", "1M", "-n", "2", "-w", "0", "-c", "1"});
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  cr_assert(contains(r.out, "# Out of bounds values : 0 OK"), "%s", r.out.c_str());
  const std::string log = r.out + r.err;
  // Ranks 0 and 2 are local rank 0 of their hosts (GPU 0, eth1); ranks 1 and 3 local rank 1.
  const struct {
    int rank, rail, peer;
    const char *nic, *gpu;
  } expected[] = {{0, 1, 2, "eth1", "0000:04:00.0"},
                  {1, 0, 3, "eth0", "0000:84:00.0"},
                  {2, 1, 0, "eth1", "0000:04:00.0"},
                  {3, 0, 1, "eth0", "0000:84:00.0"}};
  for (const auto &e : expected) {
    const std::string line = "ddl[" + std::to_string(e.rank) + "] info: rail " +
                             std::to_string(e.rail) + " of 2: NIC " + e.nic +
                             " (closest to this rank's GPU " + e.gpu;
    cr_assert(contains(log, line), "no \"%s\" in:\n%s", line.c_str(), log.c_str());
    const std::string peers = "carries this rank's traffic to ranks " + std::to_string(e.peer);
    cr_assert(contains(log.substr(log.find(line)), peers), "rank %d: no \"%s\" in:\n%s", e.rank,
              peers.c_str(), log.c_str());
  }
#endif
}

// ddlrun --torch-store across hosts: torch's store runs on the first host through the launch
// agent, in a process of its own, so examples/elastic_train.py loses rank 0 (on h0) and the
// 3 others shrink and end with equal parameters. Skipped without a Python that has torch
// ($DDL_PYTHON, as scripts/test.sh sets it).
Test(emuhosts, torch_store_lets_rank_0_die_across_hosts, .timeout = 240) {
  const char *python = std::getenv("DDL_PYTHON");
  if (!python || run_command({python, "-c", "import torch, ddl.torch"}, 120).exit_status != 0)
    cr_skip_test("no DDL_PYTHON with torch and the ddl package");
  up_or_skip({"--hosts", "2", "--rate", "none"});
  setenv("DDL_BUILD_DIR", BUILD_DIR, 1);
  RunResult r = run_command({kDdlrun,         "--torch-store",
                             "--keep-going",  "-H",
                             "h0:2,h1:2",     "--launch-agent",
                             agent(),         "--timeout",
                             "180",           "-x",
                             "DDL_BUILD_DIR", "--",
                             python,          SOURCE_DIR "/examples/elastic_train.py",
                             "--steps",       "6",
                             "--at-step",     "3",
                             "--kill-rank",   "0"},
                            200);
  cr_assert_eq(r.exit_status, 0, "stdout:\n%s\nstderr:\n%s", r.out.c_str(), r.err.c_str());
  // The number only: lines of different ranks may run together in the captured output.
  std::vector<std::string> sums;
  const std::string label = "param checksum ";
  for (size_t at = r.out.find(label); at != std::string::npos; at = r.out.find(label, at + 1)) {
    const size_t from = at + label.size();
    sums.push_back(r.out.substr(from, r.out.find_first_not_of("+-0123456789.eE", from) - from));
  }
  cr_assert_eq(sums.size(), 3u, "survivors' lines:\n%s", r.out.c_str());
  cr_assert(sums[0] == sums[1] && sums[1] == sums[2], "survivors disagree:\n%s", r.out.c_str());
  cr_assert(contains(r.out, "rank 0: killing myself"), "%s", r.out.c_str());
}
