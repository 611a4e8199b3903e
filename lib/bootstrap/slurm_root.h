// Rank 0's rendezvous under a plain `srun` across several nodes (no PMIx, no DDL_ROOT, no
// shared DDL_RENDEZVOUS_DIR), from what Slurm tells every task alike:
//   - the host: the first node of the step's node list (SLURM_STEP_NODELIST), where Slurm's
//     block distribution puts task 0 (rank 0 checks it is there, and says what to do if not);
//   - the port: derived from the job and step ids, in 10000..29999 (below Linux's ephemeral
//     range, so no outgoing connection holds it): 10000 + (64 * job + step) mod 20000. Two
//     steps of one job get different ports (up to 64 steps at once), and so do two jobs
//     whose ids are less than 312 apart; jobs further apart could meet only if both still ran
//     with the same first node. A port that is taken anyway fails rank 0's bind, naming it;
//     DDL_ROOT=host:port then chooses another.
//   - the token: SHA-256 of a per-user secret (~/.ddl/slurm-secret, 0600, made on first use;
//     the home directory is shared across a cluster's nodes) and the job and step ids, so that
//     only this user's tasks of this step know it, and the secret itself never crosses the
//     network. DDL_JOB_TOKEN (exported before srun) replaces it where homes are not shared.
#pragma once
#include <cstdint>
#include <string>

#include "lib/common/status.h"

namespace ddl {

// The first host of a Slurm node list: "node[01-04,07],gpu1" -> "node01", "h[0-1]" -> "h0",
// "a,b" -> "a", "n[1-2]x[3-4]" -> "n1x3". "" for an empty or malformed list.
std::string slurm_first_host(const std::string &nodelist);

// The rendezvous port of a job's step (see above).
int slurm_root_port(uint64_t job, uint64_t step);

// The step's token: SHA-256 of the secret in `secret_file` (made, 0600, with its directory
// 0700, if absent) and "job.step", as 32 hex digits.
Status slurm_job_token(const std::string &secret_file, const std::string &job_step,
                       std::string *token);

}  // namespace ddl
