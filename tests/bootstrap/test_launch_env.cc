// launch_info_from: every launcher's variables, precedence, missing and malformed values. The
// environment is a map handed in as a getenv-like function; the process environment is untouched.
#include <criterion/criterion.h>

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/launch_env.h"
#include "lib/bootstrap/slurm_root.h"
#include "lib/common/sha256.h"

using namespace ddl;

namespace {

using Vars = std::map<std::string, std::string>;

Status parse(const Vars &vars, LaunchInfo *info) {
  return launch_info_from(
      [&vars](const char *name) -> const char * {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      info);
}

LaunchInfo parse_ok(const Vars &vars) {
  LaunchInfo info;
  Status st = parse(vars, &info);
  cr_assert(st.ok(), "unexpected error: %s", st.message().c_str());
  return info;
}

// Asserts an INVALID_ARGUMENT error whose message contains every one of `words`.
void parse_fails(const Vars &vars, std::initializer_list<const char *> words) {
  LaunchInfo info;
  info.rank = 42;
  Status st = parse(vars, &info);
  cr_assert(!st.ok(), "expected an error");
  cr_assert_eq(st.code(), DDL_ERR_INVALID_ARGUMENT, "code %d: %s", st.code(), st.message().c_str());
  for (const char *w : words)
    cr_assert(st.message().find(w) != std::string::npos, "'%s' not in: %s", w,
              st.message().c_str());
  cr_assert_eq(info.rank, 42, "output written on error");
}

void expect_str(const std::string &got, const char *want) {
  cr_assert(got == want, "got '%s', want '%s'", got.c_str(), want);
}

}  // namespace

Test(launch_env, ddl_variables) {
  LaunchInfo i = parse_ok({{"DDL_RANK", "3"},
                           {"DDL_WORLD_SIZE", "8"},
                           {"DDL_ROOT", "10.0.0.1:29500"},
                           {"DDL_JOB_TOKEN", "s3cret"},
                           {"DDL_LOCAL_RANK", "1"},
                           {"DDL_LOCAL_SIZE", "4"}});
  cr_assert_eq(i.rank, 3);
  cr_assert_eq(i.nranks, 8);
  cr_assert_str_eq(i.root_addr.c_str(), "10.0.0.1:29500");
  cr_assert(i.rendezvous_file.empty());
  cr_assert_str_eq(i.job_token.c_str(), "s3cret");
  cr_assert_str_eq(i.source.c_str(), "DDL_*");
  cr_assert_eq(i.local_rank, 1);
  cr_assert_eq(i.local_size, 4);
  i = parse_ok({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "1"}, {"DDL_ROOT", "[fd00::2]:29500"}});
  cr_assert_str_eq(i.root_addr.c_str(), "[fd00::2]:29500");
  cr_assert_eq(i.local_rank, -1);
  cr_assert(i.job_token.empty());
  i = parse_ok({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "1"}});  // one rank: no root needed
  cr_assert(i.root_addr.empty() && i.rendezvous_file.empty());
  i = parse_ok({{"DDL_RANK", "1"}, {"DDL_WORLD_SIZE", "2"}, {"DDL_ROOT", "node-7.cluster:1"}});
  cr_assert_str_eq(i.root_addr.c_str(), "node-7.cluster:1");
}

Test(launch_env, ddl_missing_and_garbage) {
  parse_fails({{"DDL_RANK", "1"}}, {"missing DDL_WORLD_SIZE"});
  parse_fails({{"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}}, {"missing DDL_RANK"});
  parse_fails({{"DDL_RANK", "1"}, {"DDL_WORLD_SIZE", "4"}}, {"DDL_ROOT"});
  parse_fails({{"DDL_RANK", "abc"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}},
              {"DDL_RANK='abc'"});
  parse_fails({{"DDL_RANK", "1x"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}}, {"DDL_RANK"});
  parse_fails({{"DDL_RANK", "-1"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}}, {"DDL_RANK"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "0"}, {"DDL_ROOT", "h:1"}},
              {"DDL_WORLD_SIZE"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "99999999999999999999"}, {"DDL_ROOT", "h:1"}},
              {"DDL_WORLD_SIZE"});
  parse_fails({{"DDL_RANK", "4"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}},
              {"rank 4", "world size 4"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "nohostport"}},
              {"DDL_ROOT", "no port"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:0"}},
              {"DDL_ROOT", "port 0"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:70000"}},
              {"DDL_ROOT", "70000"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "::1:29500"}},
              {"DDL_ROOT", "[addr]:port"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "a b:1"}}, {"DDL_ROOT"});
  parse_fails({{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", ":1"}}, {"empty host"});
  parse_fails({{"DDL_RANK", "0"},
               {"DDL_WORLD_SIZE", "4"},
               {"DDL_ROOT", "h:1"},
               {"DDL_JOB_TOKEN", std::string(300, 'x')}},
              {"DDL_JOB_TOKEN"});
  parse_fails(
      {{"DDL_RANK", "0"}, {"DDL_WORLD_SIZE", "4"}, {"DDL_ROOT", "h:1"}, {"DDL_LOCAL_RANK", "z"}},
      {"DDL_LOCAL_RANK"});
  parse_fails({{"DDL_RANK", "0"},
               {"DDL_WORLD_SIZE", "4"},
               {"DDL_ROOT", "h:1"},
               {"DDL_LOCAL_RANK", "2"},
               {"DDL_LOCAL_SIZE", "2"}},
              {"local rank 2"});
}

Test(launch_env, nothing_set) {
  parse_fails({}, {"no launcher", "DDL_RANK", "mpirun"});
  parse_fails({{"PATH", "/bin"}, {"SLURM_JOB_ID", "5"}}, {"no launcher"});
}

Test(launch_env, mpirun) {
  Vars v = {{"OMPI_COMM_WORLD_RANK", "2"},        {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
            {"OMPI_MCA_ess_base_jobid", "12345"}, {"PMIX_NAMESPACE", "ignored"}};
  LaunchInfo i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "mpirun");
  cr_assert_eq(i.rank, 2);
  cr_assert_eq(i.nranks, 4);
  cr_assert_eq(i.local_rank, 0);
  cr_assert_eq(i.local_size, 2);
  cr_assert(i.root_addr.empty());
  cr_assert_str_eq(i.rendezvous_file.c_str(), "/tmp/ddl-12345.root");

  // Open MPI 5: only the PMIx namespace, made file-name safe; DDL_RENDEZVOUS_DIR moves it.
  v.erase("OMPI_MCA_ess_base_jobid");
  v["PMIX_NAMESPACE"] = "prterun-vm-9@1";
  v["DDL_RENDEZVOUS_DIR"] = "/shared/ddl//";
  i = parse_ok(v);
  cr_assert_str_eq(i.rendezvous_file.c_str(), "/shared/ddl/ddl-prterun-vm-9_1.root");

  // DDL_ROOT overrides: an address, no file.
  v["DDL_ROOT"] = "head:29500";
  v["DDL_JOB_TOKEN"] = "t";
  i = parse_ok(v);
  cr_assert_str_eq(i.root_addr.c_str(), "head:29500");
  cr_assert(i.rendezvous_file.empty());
  cr_assert_str_eq(i.job_token.c_str(), "t");

  parse_fails({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
              {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "DDL_ROOT"});
  parse_fails({{"OMPI_COMM_WORLD_RANK", "0"}}, {"mpirun", "missing OMPI_COMM_WORLD_SIZE"});
  parse_fails({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"DDL_ROOT", "h:1"}},
              {"rank 5"});
  parse_fails({{"OMPI_COMM_WORLD_RANK", "0"},
               {"OMPI_COMM_WORLD_SIZE", "2"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "x"},
               {"DDL_ROOT", "h:1"}},
              {"OMPI_COMM_WORLD_LOCAL_RANK"});
}

Test(launch_env, slurm) {
  Vars v = {{"SLURM_PROCID", "5"},
            {"SLURM_NTASKS", "7"},
            {"SLURM_LOCALID", "1"},
            {"SLURM_NODEID", "2"},
            {"SLURM_JOB_ID", "777"},
            {"SLURM_STEP_ID", "3"},
            {"SLURM_STEP_TASKS_PER_NODE", "2(x2),3"}};
  LaunchInfo i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "slurm");
  cr_assert_eq(i.rank, 5);
  cr_assert_eq(i.nranks, 7);
  cr_assert_eq(i.local_rank, 1);
  cr_assert_eq(i.local_size, 3);
  cr_assert_str_eq(i.rendezvous_file.c_str(), "/tmp/ddl-777.3.root");
  v["SLURM_NODEID"] = "1";
  cr_assert_eq(parse_ok(v).local_size, 2);
  v["SLURM_STEP_TASKS_PER_NODE"] = "garbage(";  // only a hint: unknown, not an error
  cr_assert_eq(parse_ok(v).local_size, -1);
  v.erase("SLURM_STEP_ID");
  expect_str(parse_ok(v).rendezvous_file, "/tmp/ddl-777.root");
  v["DDL_ROOT"] = "10.1.1.1:4000";
  i = parse_ok(v);
  cr_assert_str_eq(i.root_addr.c_str(), "10.1.1.1:4000");
  cr_assert(i.rendezvous_file.empty());

  parse_fails({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, {"SLURM_JOB_ID", "DDL_ROOT"});
  parse_fails({{"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "1"}}, {"slurm", "missing SLURM_NTASKS"});
  parse_fails({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "1"}}, {"rank 2"});
  parse_fails({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}, {"SLURM_JOB_ID", "1"}},
              {"SLURM_NTASKS='two'"});
}

// Plain srun across nodes (no PMIx, no shared DDL_RENDEZVOUS_DIR): rank 0 on the step's first
// node, a port from the job and step, a token from the user's secret (lib/bootstrap/slurm_root.h).
Test(launch_env, slurm_across_nodes_without_pmix) {
  char home[] = "/tmp/ddl-slurm-home.XXXXXX";
  cr_assert(mkdtemp(home));
  Vars v = {{"SLURM_PROCID", "3"},         {"SLURM_NTASKS", "4"},
            {"SLURM_JOB_ID", "777"},       {"SLURM_STEP_ID", "2"},
            {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "node[07-08]"},
            {"SLURMD_NODENAME", "node08"}, {"HOME", home}};
  LaunchInfo i = parse_ok(v);
  expect_str(i.root_addr, ("node07:" + std::to_string(10000 + (777 * 64 + 2) % 20000)).c_str());
  cr_assert(i.rendezvous_file.empty());
  cr_assert_eq(i.job_token.size(), 32u);
  // Every task of the step derives the same token; another step, another one.
  v["SLURM_PROCID"] = "0";
  v["SLURMD_NODENAME"] = "node07";
  cr_assert(parse_ok(v).job_token == i.job_token);
  v["SLURM_STEP_ID"] = "3";
  cr_assert(parse_ok(v).job_token != i.job_token);
  cr_assert(parse_ok(v).root_addr != i.root_addr);
  // DDL_JOB_TOKEN wins; a shared DDL_RENDEZVOUS_DIR keeps the file; one node keeps /tmp's.
  v["DDL_JOB_TOKEN"] = "mine";
  expect_str(parse_ok(v).job_token, "mine");
  v.erase("DDL_JOB_TOKEN");
  Vars shared = v;
  shared["DDL_RENDEZVOUS_DIR"] = "/shared";
  expect_str(parse_ok(shared).rendezvous_file, "/shared/ddl-777.3.root");
  Vars one = v;
  one["SLURM_STEP_NUM_NODES"] = "1";
  expect_str(parse_ok(one).rendezvous_file, "/tmp/ddl-777.3.root");
  // Rank 0 elsewhere than the first node says so and what to do.
  v["SLURMD_NODENAME"] = "node08";
  parse_fails(v, {"rank 0 runs on node node08, not on node07", "DDL_ROOT", "--mpi=pmix"});
  v.erase("SLURM_STEP_NODELIST");
  parse_fails(v, {"SLURM_JOB_NODELIST", "DDL_ROOT"});
  std::string secret = std::string(home) + "/.ddl/slurm-secret";
  struct stat st;
  cr_assert_eq(stat(secret.c_str(), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600u);
  chmod(secret.c_str(), 0644);
  std::string token;
  Status s = slurm_job_token(secret, "1.0", &token);
  cr_assert(!s.ok() && s.message().find("readable by others") != std::string::npos, "%s",
            s.message().c_str());
  unlink(secret.c_str());
  rmdir((std::string(home) + "/.ddl").c_str());
  rmdir(home);
}

Test(launch_env, slurm_node_lists_and_ports) {
  expect_str(slurm_first_host("node[01-04,07],gpu1"), "node01");
  expect_str(slurm_first_host("h[0-1]"), "h0");
  expect_str(slurm_first_host("a,b"), "a");
  expect_str(slurm_first_host("n[1-2]x[3-4]"), "n1x3");
  expect_str(slurm_first_host("rack1-[3,5]"), "rack1-3");
  expect_str(slurm_first_host(""), "");
  expect_str(slurm_first_host("bad[1-2"), "");
  expect_str(slurm_first_host("bad]"), "");
  for (uint64_t job : {0ull, 1ull, 312ull, 99999999999ull})
    for (uint64_t step : {0ull, 63ull, 4294967294ull}) {
      const int port = slurm_root_port(job, step);
      cr_assert(port >= 10000 && port < 30000, "port %d", port);
    }
  cr_assert_neq(slurm_root_port(5, 0), slurm_root_port(5, 1));
  cr_assert_neq(slurm_root_port(5, 0), slurm_root_port(6, 0));
  // SHA-256 itself, on FIPS 180-4's examples.
  expect_str(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expect_str(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_str(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(launch_env, torchrun) {
  Vars v = {{"RANK", "1"},
            {"WORLD_SIZE", "4"},
            {"MASTER_ADDR", "10.0.0.9"},
            {"MASTER_PORT", "29500"},
            {"LOCAL_RANK", "1"},
            {"LOCAL_WORLD_SIZE", "2"}};
  LaunchInfo i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "torchrun");
  cr_assert_eq(i.rank, 1);
  cr_assert_eq(i.nranks, 4);
  cr_assert_eq(i.local_rank, 1);
  cr_assert_eq(i.local_size, 2);
  // MASTER_PORT is torchrun's own store: ours is the next port.
  cr_assert_str_eq(i.root_addr.c_str(), "10.0.0.9:29501");
  v["MASTER_ADDR"] = "fd00::1";
  expect_str(parse_ok(v).root_addr, "[fd00::1]:29501");
  v["DDL_ROOT"] = "10.0.0.9:40000";
  expect_str(parse_ok(v).root_addr, "10.0.0.9:40000");

  parse_fails({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
              {"torchrun", "missing MASTER_PORT"});
  parse_fails({{"RANK", "0"}, {"MASTER_ADDR", "h"}}, {"missing WORLD_SIZE, MASTER_PORT"});
  parse_fails({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}},
              {"MASTER_PORT"});
  parse_fails({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}},
              {"MASTER_PORT='http'"});
  parse_fails({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a/b"}, {"MASTER_PORT", "1"}},
              {"MASTER_ADDR"});
  parse_fails({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              {"rank 3"});
}

Test(launch_env, precedence) {
  Vars slurm = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"}};
  // mpirun inside a Slurm allocation: Open MPI's numbering is the truth.
  Vars v = slurm;
  v["OMPI_COMM_WORLD_RANK"] = "3";
  v["OMPI_COMM_WORLD_SIZE"] = "4";
  v["OMPI_MCA_ess_base_jobid"] = "1";
  LaunchInfo i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "mpirun");
  cr_assert_eq(i.rank, 3);
  // torchrun started by srun (one agent per node): RANK numbers workers.
  v = slurm;
  v["RANK"] = "5";
  v["WORLD_SIZE"] = "8";
  v["MASTER_ADDR"] = "n0";
  v["MASTER_PORT"] = "29500";
  i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "torchrun");
  cr_assert_eq(i.rank, 5);
  // A stray RANK without WORLD_SIZE does not hide Slurm.
  v = slurm;
  v["RANK"] = "7";
  expect_str(parse_ok(v).source, "slurm");
  // DDL_* beats everything.
  v["DDL_RANK"] = "1";
  v["DDL_WORLD_SIZE"] = "3";
  v["DDL_ROOT"] = "h:2";
  i = parse_ok(v);
  cr_assert_str_eq(i.source.c_str(), "DDL_*");
  cr_assert_eq(i.nranks, 3);
  // Empty values count as unset.
  v = {{"DDL_RANK", ""},    {"DDL_WORLD_SIZE", ""}, {"RANK", "0"},
       {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"},   {"MASTER_PORT", "5"}};
  expect_str(parse_ok(v).source, "torchrun");
}

Test(launch_env, to_bootstrap_options) {
  LaunchInfo i = parse_ok({{"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"OMPI_MCA_ess_base_jobid", "42"},
                           {"DDL_JOB_TOKEN", "tok"}});
  BootstrapOptions o = bootstrap_options_from(i, 1234);
  cr_assert_eq(o.rank, 1);
  cr_assert_eq(o.nranks, 2);
  cr_assert(o.all_local, "every rank is on this host");
  cr_assert_str_eq(o.rendezvous_file.c_str(), "/tmp/ddl-42.root");
  cr_assert_str_eq(o.job_token.c_str(), "tok");
  cr_assert(!o.fresh_token, "DDL_JOB_TOKEN is the token");
  cr_assert(!o.pmix, "no PMIx server in this environment");
  cr_assert_eq(o.timeout_ms, 1234);
}

// mpirun and srun without DDL_ROOT: PMIx where the launcher runs a server, the file otherwise;
// a fresh token wherever rank 0 publishes, DDL_JOB_TOKEN above everything.
Test(launch_env, pmix_and_token_precedence) {
  const Vars mpirun = {{"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"OMPI_MCA_ess_base_jobid", "562954241"},
                       {"PMIX_NAMESPACE", "562954241"},
                       {"PMIX_RANK", "1"},
                       {"PMIX_SERVER_URI41", "562954240.0;tcp4://127.0.0.1:54613"}};
  // A PMIx server: address and a fresh token through it, the file as the fallback.
  LaunchInfo i = parse_ok(mpirun);
  cr_assert(i.pmix);
  cr_assert(i.root_addr.empty());
  expect_str(i.rendezvous_file, "/tmp/ddl-562954241.root");
  cr_assert(i.job_token.empty());
  BootstrapOptions o = bootstrap_options_from(i, 1000);
  cr_assert(o.pmix && o.fresh_token, "PMIx with a fresh token");
  cr_assert(!o.all_local);
  cr_assert(o.listen_host.empty());

  // Any of the server URI variables of PMIx 2..5 will do; the namespace and rank are needed.
  Vars v = mpirun;
  v.erase("PMIX_SERVER_URI41");
  v["PMIX_SERVER_URI2"] = "x;tcp4://127.0.0.1:1";
  cr_assert(parse_ok(v).pmix);
  v.erase("PMIX_SERVER_URI2");
  cr_assert(!parse_ok(v).pmix, "no server address: the file");
  v = mpirun;
  v.erase("PMIX_RANK");
  i = parse_ok(v);
  cr_assert(!i.pmix);
  o = bootstrap_options_from(i, 1000);
  cr_assert(!o.pmix && o.fresh_token, "the file carries a fresh token too");

  // DDL_PMIX=0: the file, still with a fresh token; anything but 0 or 1 is an error.
  v = mpirun;
  v["DDL_PMIX"] = "0";
  i = parse_ok(v);
  cr_assert(!i.pmix);
  cr_assert(bootstrap_options_from(i, 1000).fresh_token);
  v["DDL_PMIX"] = "1";
  cr_assert(parse_ok(v).pmix);
  v["DDL_PMIX"] = "yes";
  parse_fails(v, {"DDL_PMIX='yes'"});

  // DDL_JOB_TOKEN wins over the fresh token, on every path.
  v = mpirun;
  v["DDL_JOB_TOKEN"] = "given";
  i = parse_ok(v);
  cr_assert(i.pmix);
  o = bootstrap_options_from(i, 1000);
  cr_assert(o.pmix && !o.fresh_token);
  expect_str(o.job_token, "given");

  // DDL_ROOT wins over PMIx and the file: no publishing, so no fresh token (open without
  // DDL_JOB_TOKEN; Bootstrap warns).
  v = mpirun;
  v["DDL_ROOT"] = "head:29500";
  i = parse_ok(v);
  cr_assert(!i.pmix && i.rendezvous_file.empty());
  o = bootstrap_options_from(i, 1000);
  cr_assert(!o.pmix && !o.fresh_token && o.job_token.empty());

  // DDL_ROOT_HOST: where rank 0 listens and what it publishes (an interface name is fine).
  v = mpirun;
  v["DDL_ROOT_HOST"] = "eth1";
  expect_str(bootstrap_options_from(parse_ok(v), 1000).listen_host, "eth1");
  v["DDL_ROOT_HOST"] = "fd00::1";
  expect_str(parse_ok(v).root_host, "fd00::1");
  v["DDL_ROOT_HOST"] = "a b";
  parse_fails(v, {"DDL_ROOT_HOST='a b'"});

  // srun --mpi=pmix: the same; without SLURM_JOB_ID the namespace names the fallback file.
  Vars srun = {{"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "2"},
               {"PMIX_NAMESPACE", "slurm.pmix.12.0"},
               {"PMIX_RANK", "0"},
               {"PMIX_SERVER_URI2", "slurm.pmix.12.0;tcp4://10.0.0.1:3000"}};
  i = parse_ok(srun);
  cr_assert(i.pmix);
  expect_str(i.source, "slurm");
  expect_str(i.rendezvous_file, "/tmp/ddl-slurm.pmix.12.0.root");
  srun["SLURM_JOB_ID"] = "12";
  expect_str(parse_ok(srun).rendezvous_file, "/tmp/ddl-12.root");
  srun["DDL_PMIX"] = "0";
  cr_assert(!parse_ok(srun).pmix);

  // torchrun and DDL_* name their root: no PMIx, no fresh token.
  i = parse_ok({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}});
  cr_assert(!i.pmix && !bootstrap_options_from(i, 1000).fresh_token);
  i = parse_ok({{"DDL_RANK", "0"},
                {"DDL_WORLD_SIZE", "2"},
                {"DDL_ROOT", "h:1"},
                {"PMIX_NAMESPACE", "n"},
                {"PMIX_RANK", "0"},
                {"PMIX_SERVER_URI2", "u"}});
  cr_assert(!i.pmix && !bootstrap_options_from(i, 1000).fresh_token);
}
