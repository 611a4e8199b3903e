#include "lib/bootstrap/launch_env.h"

#include <cstdlib>
#include <vector>

#include "lib/bootstrap/slurm_root.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/params.h"

namespace ddl {
namespace {

using GetEnv = std::function<const char *(const char *)>;
using bootstrap::join_host_port;
using bootstrap::parse_host_port;
namespace wire = bootstrap::wire;

// Reads variables through getenv_fn; an empty value counts as unset (a launcher that exports
// "RANK=" has not told us a rank).
class Env {
 public:
  explicit Env(const GetEnv &fn) : fn_(fn) {}
  bool has(const char *name) const {
    const char *v = fn_(name);
    return v && *v;
  }
  std::string get(const char *name) const {
    const char *v = fn_(name);
    return v ? std::string(v) : std::string();
  }

 private:
  const GetEnv &fn_;
};

// "missing A, B" for the names in `names` that are unset; "" when all are set.
std::string missing_of(const Env &env, std::initializer_list<const char *> names) {
  std::string out;
  for (const char *name : names) {
    if (env.has(name)) continue;
    out += out.empty() ? "missing " : ", ";
    out += name;
  }
  return out;
}

Status parse_var(const Env &env, const char *name, int64_t min, int64_t max, int *value) {
  std::string text = env.get(name);
  int64_t v = 0;
  if (!parse_int(text, min, max, &v)) {
    if (text.size() > 64) text = text.substr(0, 64) + "...";
    return invalid_argument("%s='%s' is not an integer in %lld..%lld", name, text.c_str(),
                            static_cast<long long>(min), static_cast<long long>(max));
  }
  *value = static_cast<int>(v);
  return Status::Ok();
}

// The optional "local" pair: garbage is an error, absence is not.
Status parse_local(const Env &env, const char *rank_var, const char *size_var, LaunchInfo *info) {
  if (rank_var && env.has(rank_var))
    DDL_RETURN_IF_ERROR(parse_var(env, rank_var, 0, wire::kMaxRanks - 1, &info->local_rank));
  if (size_var && env.has(size_var))
    DDL_RETURN_IF_ERROR(parse_var(env, size_var, 1, wire::kMaxRanks, &info->local_size));
  return Status::Ok();
}

// Slurm states tasks per node as "2(x3),1": 2 tasks on each of 3 nodes, then 1. Returns the
// count on node `node`, or -1 when the text is not in that form (it is only a hint).
int slurm_tasks_on_node(const std::string &text, int node) {
  size_t pos = 0;
  int first_node = 0;
  while (pos < text.size() && text.size() < 4096) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    std::string count = item, repeat = "1";
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') return -1;
      count = item.substr(0, paren);
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    int64_t c = 0, r = 0;
    if (!parse_int(count, 1, wire::kMaxRanks, &c) || !parse_int(repeat, 1, wire::kMaxRanks, &r))
      return -1;
    if (node < first_node + r) return static_cast<int>(c);
    first_node += static_cast<int>(r);
    pos = end + 1;
  }
  return -1;
}

// A job id turned into a safe file-name piece ("prterun-vm-123@1" -> "prterun-vm-123_1").
Status rendezvous_file_for(const Env &env, const char *what, const std::string &jobid,
                           std::string *file) {
  if (jobid.size() > 200)
    return invalid_argument("%s job id of %zu characters", what, jobid.size());
  std::string safe = jobid;
  for (char &c : safe) {
    bool okc = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '-' || c == '_';
    if (!okc) c = '_';
  }
  std::string dir = env.has("DDL_RENDEZVOUS_DIR") ? env.get("DDL_RENDEZVOUS_DIR") : "/tmp";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.size() > 3000) return invalid_argument("DDL_RENDEZVOUS_DIR is too long");
  *file = (dir == "/" ? "" : dir) + "/ddl-" + safe + ".root";
  return Status::Ok();
}

Status parse_root(const char *var, const std::string &text, std::string *root_addr) {
  std::string host;
  int port = 0;
  Status st = parse_host_port(text, &host, &port);
  if (!st.ok()) return invalid_argument("%s: %s", var, st.message().c_str());
  if (port == 0)
    return invalid_argument("%s='%s': port 0 is not a rendezvous port", var, text.c_str());
  *root_addr = join_host_port(host, port);
  return Status::Ok();
}

// Whether the launcher runs a PMIx server for this process: its namespace and rank, and the
// server's address in one of the variables PMIx 2..5 servers export (mpirun sets all of them).
// DDL_PMIX=0 turns the PMIx path off (the rendezvous file then); 1, the default, leaves it on.
Status pmix_server(const Env &env, bool *found) {
  *found = false;
  if (env.has("DDL_PMIX")) {
    const std::string v = env.get("DDL_PMIX");
    if (v != "0" && v != "1")
      return invalid_argument(
          "DDL_PMIX='%s': expected 0 (no PMIx) or 1 (PMIx where there is a server)",
          v.substr(0, 64).c_str());
    if (v == "0") return Status::Ok();
  }
  if (!env.has("PMIX_NAMESPACE") || !env.has("PMIX_RANK")) return Status::Ok();
  for (const char *uri : {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                          "PMIX_SERVER_URI21", "PMIX_SERVER_URI2", "PMIX_SERVER_URI"})
    if (env.has(uri)) *found = true;
  return Status::Ok();
}

Status from_ddl(const Env &env, LaunchInfo *info) {
  info->source = "DDL_*";
  std::string missing = missing_of(env, {"DDL_RANK", "DDL_WORLD_SIZE"});
  if (!missing.empty()) return invalid_argument("%s", missing.c_str());
  DDL_RETURN_IF_ERROR(parse_var(env, "DDL_WORLD_SIZE", 1, wire::kMaxRanks, &info->nranks));
  DDL_RETURN_IF_ERROR(parse_var(env, "DDL_RANK", 0, wire::kMaxRanks - 1, &info->rank));
  // DDL_ROOT itself is read (and required) by the caller.
  return Status::Ok();
}

Status from_mpirun(const Env &env, LaunchInfo *info) {
  info->source = "mpirun";
  std::string missing = missing_of(env, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"});
  if (!missing.empty()) return invalid_argument("%s", missing.c_str());
  DDL_RETURN_IF_ERROR(parse_var(env, "OMPI_COMM_WORLD_SIZE", 1, wire::kMaxRanks, &info->nranks));
  DDL_RETURN_IF_ERROR(parse_var(env, "OMPI_COMM_WORLD_RANK", 0, wire::kMaxRanks - 1, &info->rank));
  DDL_RETURN_IF_ERROR(
      parse_local(env, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", info));
  if (env.has("DDL_ROOT")) return Status::Ok();
  DDL_RETURN_IF_ERROR(pmix_server(env, &info->pmix));
  // Open MPI 4 exports its job id as an MCA parameter; Open MPI 5 (PRRTE) only the PMIx namespace.
  const char *var = env.has("OMPI_MCA_ess_base_jobid") ? "OMPI_MCA_ess_base_jobid"
                    : env.has("PMIX_NAMESPACE")        ? "PMIX_NAMESPACE"
                                                       : nullptr;
  if (!var)
    return invalid_argument(
        "no root address: set DDL_ROOT=host:port, or run under an mpirun that exports "
        "OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE (to name the rendezvous file); both are "
        "missing");
  return rendezvous_file_for(env, "mpirun", env.get(var), &info->rendezvous_file);
}

// Plain srun across nodes: no shared file, so rank 0's address and the token come from what
// Slurm tells every task (lib/bootstrap/slurm_root.h).
Status slurm_root_from_node_list(const Env &env, LaunchInfo *info) {
  const char *list_var =
      env.has("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const std::string host = slurm_first_host(env.get(list_var));
  int64_t job = 0, step = 0;
  if (host.empty() || !parse_int(env.get("SLURM_JOB_ID"), 0, INT64_MAX, &job) ||
      !parse_int(env.get("SLURM_STEP_ID"), 0, INT64_MAX, &step))
    return invalid_argument(
        "a step on several nodes without PMIx needs %s, SLURM_JOB_ID and SLURM_STEP_ID to find "
        "rank 0 ('%s', '%s', '%s'); or set DDL_ROOT=host:port, or run srun --mpi=pmix",
        list_var, env.get(list_var).substr(0, 64).c_str(), env.get("SLURM_JOB_ID").c_str(),
        env.get("SLURM_STEP_ID").c_str());
  const std::string here = env.get("SLURMD_NODENAME");
  if (info->rank == 0 && !here.empty() && here != host)
    return invalid_argument(
        "rank 0 runs on node %s, not on %s, the first node of the step (%s='%s'), where the "
        "other tasks look for it (a distribution other than block?): set DDL_ROOT=%s:PORT, or "
        "run srun --mpi=pmix",
        here.c_str(), host.c_str(), list_var, env.get(list_var).substr(0, 64).c_str(),
        here.c_str());
  info->root_addr = join_host_port(
      host, slurm_root_port(static_cast<uint64_t>(job), static_cast<uint64_t>(step)));
  info->source = "slurm, rank 0 on the step's first node";
  if (env.has("DDL_JOB_TOKEN")) return Status::Ok();
  const std::string home = env.get("HOME");
  if (home.empty())
    return invalid_argument(
        "a step on several nodes without PMIx derives its job token from ~/.ddl/slurm-secret, "
        "and HOME is not set: set HOME, or export DDL_JOB_TOKEN before srun");
  Status s = slurm_job_token(home + "/.ddl/slurm-secret",
                             std::to_string(job) + "." + std::to_string(step), &info->job_token);
  if (!s.ok())
    return s.prefix(
        "the job token from ~/.ddl/slurm-secret (or export DDL_JOB_TOKEN before "
        "srun): ");
  return Status::Ok();
}

Status from_slurm(const Env &env, LaunchInfo *info) {
  info->source = "slurm";
  const char *size_var = env.has("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  std::string missing = missing_of(env, {"SLURM_PROCID"});
  if (!env.has(size_var)) missing += missing.empty() ? "missing SLURM_NTASKS" : ", SLURM_NTASKS";
  if (!missing.empty()) return invalid_argument("%s (start the ranks with srun)", missing.c_str());
  DDL_RETURN_IF_ERROR(parse_var(env, size_var, 1, wire::kMaxRanks, &info->nranks));
  DDL_RETURN_IF_ERROR(parse_var(env, "SLURM_PROCID", 0, wire::kMaxRanks - 1, &info->rank));
  DDL_RETURN_IF_ERROR(parse_local(env, "SLURM_LOCALID", nullptr, info));
  // Tasks on this node: a hint only, so a form we do not know leaves it unknown.
  int node = -1;
  int64_t v = 0;
  if (parse_int(env.get("SLURM_NODEID"), 0, wire::kMaxRanks, &v)) node = static_cast<int>(v);
  std::string per_node = env.has("SLURM_STEP_TASKS_PER_NODE") ? env.get("SLURM_STEP_TASKS_PER_NODE")
                                                              : env.get("SLURM_TASKS_PER_NODE");
  if (node >= 0 && !per_node.empty()) info->local_size = slurm_tasks_on_node(per_node, node);
  if (env.has("DDL_ROOT")) return Status::Ok();
  DDL_RETURN_IF_ERROR(pmix_server(env, &info->pmix));
  const char *nodes_var = env.has("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  int64_t nodes = 1;
  if (!info->pmix && !env.has("DDL_RENDEZVOUS_DIR") &&
      parse_int(env.get(nodes_var), 1, wire::kMaxRanks, &nodes) && nodes > 1)
    return slurm_root_from_node_list(env, info);
  // The file's name: the job and step, or (srun --mpi=pmix without them) the PMIx namespace.
  std::string jobid;
  if (env.has("SLURM_JOB_ID")) {
    jobid = env.get("SLURM_JOB_ID");
    if (env.has("SLURM_STEP_ID")) jobid += "." + env.get("SLURM_STEP_ID");
  } else if (info->pmix) {
    jobid = env.get("PMIX_NAMESPACE");
  } else {
    return invalid_argument(
        "no root address: set DDL_ROOT=host:port, or export SLURM_JOB_ID (to name the "
        "rendezvous file); it is missing");
  }
  return rendezvous_file_for(env, "slurm", jobid, &info->rendezvous_file);
}

Status from_torchrun(const Env &env, LaunchInfo *info) {
  info->source = "torchrun";
  bool root = env.has("DDL_ROOT");
  std::string missing = root
                            ? missing_of(env, {"RANK", "WORLD_SIZE"})
                            : missing_of(env, {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"});
  if (!missing.empty()) return invalid_argument("%s", missing.c_str());
  DDL_RETURN_IF_ERROR(parse_var(env, "WORLD_SIZE", 1, wire::kMaxRanks, &info->nranks));
  DDL_RETURN_IF_ERROR(parse_var(env, "RANK", 0, wire::kMaxRanks - 1, &info->rank));
  DDL_RETURN_IF_ERROR(parse_local(env, "LOCAL_RANK", "LOCAL_WORLD_SIZE", info));
  if (root) return Status::Ok();
  int port = 0;
  // MASTER_PORT itself is taken by torchrun's store: ours is the next one.
  DDL_RETURN_IF_ERROR(parse_var(env, "MASTER_PORT", 1, 65534, &port));
  std::string text = join_host_port(env.get("MASTER_ADDR"), port + 1);
  Status st = parse_root("MASTER_ADDR/MASTER_PORT", text, &info->root_addr);
  return st;
}

Status finish(const Env &env, LaunchInfo *info) {
  if (info->rank >= info->nranks)
    return invalid_argument("rank %d is not below the world size %d", info->rank, info->nranks);
  DDL_RETURN_IF_ERROR(parse_local(env, "DDL_LOCAL_RANK", "DDL_LOCAL_SIZE", info));
  if (info->local_size > info->nranks)
    return invalid_argument("local size %d exceeds the world size %d", info->local_size,
                            info->nranks);
  if (info->local_rank >= 0 && info->local_size > 0 && info->local_rank >= info->local_size)
    return invalid_argument("local rank %d is not below the local size %d", info->local_rank,
                            info->local_size);
  if (env.has("DDL_ROOT")) {
    DDL_RETURN_IF_ERROR(parse_root("DDL_ROOT", env.get("DDL_ROOT"), &info->root_addr));
    info->rendezvous_file.clear();
    info->pmix = false;
  }
  if (env.has("DDL_ROOT_HOST")) {
    // A name, an address or an interface; checked here as a host of host:port would be.
    std::string host, text = env.get("DDL_ROOT_HOST");
    int port = 0;
    Status st = parse_host_port(join_host_port(text, 1), &host, &port);
    if (!st.ok() || text.size() > 255)
      return invalid_argument("DDL_ROOT_HOST='%s' is not a host name, address or interface",
                              text.substr(0, 64).c_str());
    info->root_host = text;
  }
  // One rank needs no rendezvous.
  if (info->root_addr.empty() && info->rendezvous_file.empty() && info->nranks > 1)
    return invalid_argument("missing DDL_ROOT (host:port of rank 0's rendezvous)");
  if (env.has("DDL_JOB_TOKEN")) info->job_token = env.get("DDL_JOB_TOKEN");
  if (info->job_token.size() > wire::kMaxToken)
    return invalid_argument("DDL_JOB_TOKEN has %zu bytes; at most %zu", info->job_token.size(),
                            wire::kMaxToken);
  return Status::Ok();
}

}  // namespace

Status launch_info_from(const GetEnv &getenv_fn, LaunchInfo *info) {
  if (!info || !getenv_fn) return invalid_argument("launch_info_from: null argument");
  Env env(getenv_fn);
  LaunchInfo out;
  Status st;
  if (env.has("DDL_RANK") || env.has("DDL_WORLD_SIZE")) {
    st = from_ddl(env, &out);
  } else if (env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE")) {
    st = from_mpirun(env, &out);
  } else if (env.has("RANK") && env.has("WORLD_SIZE")) {
    st = from_torchrun(env, &out);
  } else if (env.has("SLURM_PROCID")) {
    st = from_slurm(env, &out);
  } else if (env.has("RANK") || env.has("WORLD_SIZE") || env.has("MASTER_ADDR") ||
             env.has("MASTER_PORT")) {
    st = from_torchrun(env, &out);  // a partial torchrun set: say what is missing
  } else {
    return invalid_argument(
        "launch environment: no launcher found: set DDL_RANK, DDL_WORLD_SIZE and DDL_ROOT, or "
        "start the ranks with mpirun, srun or torchrun");
  }
  if (st.ok()) st = finish(env, &out);
  if (!st.ok()) return st.prefix("launch environment (" + out.source + "): ");
  *info = out;
  return Status::Ok();
}

Status launch_info_from_env(LaunchInfo *info) {
  return launch_info_from([](const char *name) -> const char * { return std::getenv(name); }, info);
}

}  // namespace ddl
