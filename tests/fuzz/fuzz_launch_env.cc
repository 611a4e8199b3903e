// launch_info_from (lib/bootstrap/launch_env.h) with a fuzzed getenv: whatever mpirun, srun,
// torchrun or a user exported. The input is a list of records, each one selector byte (which
// variable) and its value up to a NUL; unset variables read as NULL. Checked: the call never
// asks for a variable twice with different answers (our getenv is a pure function), the result
// is the same twice, and an accepted LaunchInfo is coherent (ranks in range, a usable root
// address or a rendezvous file of the expected form, PMIx only where there is no root and with
// the file as its fallback, token within bounds).
//
// Speed: launch_info_from asks for a few dozen variables per call. The first version of this
// harness kept the environment in a std::map<std::string, std::string>, so that every lookup
// built a std::string key (a heap allocation for names over 15 characters) and compared keys
// with memcmp, which libFuzzer intercepts and records: ~70 us per input, 12k exec/s. Now the
// values point into one copy of the input, and a lookup is a comparison loop compiled without
// coverage instrumentation (it is the harness, not the code under test): ~6x faster, the same
// calls to the parser.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lib/bootstrap/launch_env.h"
#include "lib/bootstrap/socket.h"
#include "lib/bootstrap/wire.h"

namespace {

// Every variable launch_env.cc reads (and a few it does not, to check that it ignores them).
// New ones are appended, so that the seeds' selector bytes keep their meaning.
const char *const kVars[] = {"DDL_RANK",
                             "DDL_WORLD_SIZE",
                             "DDL_ROOT",
                             "DDL_JOB_TOKEN",
                             "DDL_LOCAL_RANK",
                             "DDL_LOCAL_SIZE",
                             "DDL_RENDEZVOUS_DIR",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "OMPI_MCA_ess_base_jobid",
                             "PMIX_NAMESPACE",
                             "RANK",
                             "WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_NPROCS",
                             "SLURM_LOCALID",
                             "SLURM_NODEID",
                             "SLURM_STEP_TASKS_PER_NODE",
                             "SLURM_TASKS_PER_NODE",
                             "SLURM_JOB_ID",
                             "SLURM_STEP_ID",
                             "HOME",
                             "PMI_RANK",
                             "PMIX_RANK",
                             "PMIX_SERVER_URI2",
                             "PMIX_SERVER_URI41",
                             "DDL_PMIX",
                             "DDL_ROOT_HOST"};
constexpr size_t kNumVars = sizeof kVars / sizeof kVars[0];

// Which of kVars `name` is, or kNumVars. Not instrumented: harness plumbing.
__attribute__((no_sanitize("coverage"))) size_t var_index(const char *name) {
  for (size_t i = 0; i < kNumVars; ++i) {
    const char *a = name, *b = kVars[i];
    while (*a && *a == *b) ++a, ++b;
    if (*a == *b) return i;
  }
  return kNumVars;
}

bool safe_jobid_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // One NUL-terminated copy of the input; each value points into it and ends at the NUL that
  // ends its record (or at the terminator). A later record for a variable replaces an earlier.
  std::vector<char> text(data, data + size);
  text.push_back('\0');
  const char *values[kNumVars] = {};
  for (size_t pos = 0; pos < size;) {
    const size_t var = static_cast<uint8_t>(text[pos]) % kNumVars;
    values[var] = &text[pos + 1];
    pos += 1 + std::strlen(&text[pos + 1]) + 1;
  }
  auto getenv_fn = [&values](const char *name) -> const char * {
    const size_t i = var_index(name);
    return i < kNumVars ? values[i] : nullptr;
  };

  ddl::LaunchInfo info, info2;
  info.source = "untouched";
  ddl::Status st = ddl::launch_info_from(getenv_fn, &info);
  ddl::Status st2 = ddl::launch_info_from(getenv_fn, &info2);
  FUZZ_CHECK(st.code() == st2.code() && st.message() == st2.message(), "not deterministic");
  if (!st.ok()) {
    FUZZ_CHECK(st.code() == DDL_ERR_INVALID_ARGUMENT, "code %d: %s", st.code(),
               st.message().c_str());
    FUZZ_CHECK(st.message().rfind("launch environment", 0) == 0, "message '%s'",
               st.message().c_str());
    FUZZ_CHECK(info.source == "untouched", "output written on failure");
    return 0;
  }
  namespace wire = ddl::bootstrap::wire;
  FUZZ_CHECK(info.nranks >= 1 && info.nranks <= wire::kMaxRanks, "nranks %d", info.nranks);
  FUZZ_CHECK(info.rank >= 0 && info.rank < info.nranks, "rank %d of %d", info.rank, info.nranks);
  FUZZ_CHECK(info.local_size == -1 || (info.local_size >= 1 && info.local_size <= info.nranks),
             "local_size %d of %d (%s)", info.local_size, info.nranks, info.source.c_str());
  FUZZ_CHECK(info.local_rank >= -1 && info.local_rank < wire::kMaxRanks, "local rank %d",
             info.local_rank);
  if (info.local_rank >= 0 && info.local_size > 0)
    FUZZ_CHECK(info.local_rank < info.local_size, "local rank %d of %d", info.local_rank,
               info.local_size);
  FUZZ_CHECK(info.job_token.size() <= wire::kMaxToken, "token of %zu bytes", info.job_token.size());
  FUZZ_CHECK(info.source == "DDL_*" || info.source == "mpirun" || info.source == "slurm" ||
                 info.source == "torchrun",
             "source '%s'", info.source.c_str());
  if (!info.root_addr.empty()) {
    std::string host;
    int port = -1;
    ddl::Status pst = ddl::bootstrap::parse_host_port(info.root_addr, &host, &port);
    FUZZ_CHECK(pst.ok() && port > 0, "root '%s' does not parse: %s", info.root_addr.c_str(),
               pst.message().c_str());
    FUZZ_CHECK(info.rendezvous_file.empty(), "both a root and a rendezvous file");
  } else if (info.nranks > 1) {
    FUZZ_CHECK(!info.rendezvous_file.empty(), "neither a root nor a rendezvous file");
  }
  // PMIx carries rank 0's address only where nobody gave one, and the file stays its fallback.
  if (info.pmix)
    FUZZ_CHECK(info.root_addr.empty() && !info.rendezvous_file.empty() &&
                   (info.source == "mpirun" || info.source == "slurm"),
               "PMIx with root '%s', file '%s', source %s", info.root_addr.c_str(),
               info.rendezvous_file.c_str(), info.source.c_str());
  if (!info.root_host.empty()) {
    std::string host;
    int port = -1;
    FUZZ_CHECK(info.root_host.size() <= 255 &&
                   ddl::bootstrap::parse_host_port(
                       ddl::bootstrap::join_host_port(info.root_host, 1), &host, &port)
                       .ok(),
               "root host '%s'", info.root_host.c_str());
  }
  if (!info.rendezvous_file.empty()) {
    const std::string &f = info.rendezvous_file;
    size_t slash = f.rfind("/ddl-");
    FUZZ_CHECK(
        slash != std::string::npos && f.size() > 5 && f.compare(f.size() - 5, 5, ".root") == 0,
        "rendezvous file '%s'", f.c_str());
    for (size_t i = slash + 5; i + 5 < f.size(); ++i)
      FUZZ_CHECK(safe_jobid_char(f[i]), "unsafe job id character in '%s'", f.c_str());
    FUZZ_CHECK(f.size() < 4096, "rendezvous path of %zu bytes", f.size());
  }
  return 0;
}
