// Who am I, how many are we, and where is rank 0: read from the variables that launchers set.
//
// Precedence, first match wins:
//   1. DDL_RANK, DDL_WORLD_SIZE, DDL_ROOT (ddlrun, or by hand)                   source "DDL_*"
//   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE      source "mpirun"
//   3. torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE
//                                                                                 source "torchrun"
//   4. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID, SLURM_STEP_ID
//                                                                                 source "slurm"
// torchrun comes before Slurm because it is usually started by srun, one per node: there
// SLURM_PROCID numbers nodes, RANK numbers workers. mpirun inside an allocation likewise sets
// both OMPI_* and SLURM_*, and OMPI_* is the truth.
//
// The root: DDL_ROOT ("host:port") overrides every launcher. Otherwise torchrun's root is
// MASTER_ADDR:(MASTER_PORT + 1), because torchrun's agent (and torch.distributed's own
// TCPStore) already listens on MASTER_PORT itself. mpirun and srun give no address: rank 0
// opens its rendezvous on an ephemeral port and publishes "host:port" itself,
//   - through the launcher's PMIx server when the environment shows one (PMIX_NAMESPACE,
//     PMIX_RANK and a PMIX_SERVER_URI* variable: Open MPI's mpirun, `srun --mpi=pmix`) and
//     DDL_PMIX is not 0: every host is reached, no shared directory needed;
//   - else in the rendezvous file $DDL_RENDEZVOUS_DIR/ddl-<jobid>.root (default dir /tmp, which
//     works when all ranks share a host; point it at a shared file system otherwise). The file
//     is also the fallback of a libddl that cannot load libpmix.
// The address rank 0 publishes: DDL_ROOT_HOST (an address, a host name or an interface name)
// when set, else 127.0.0.1 when the launcher says every rank is on this host, else an address
// of this host that others can reach (see BootstrapOptions::listen_host).
//
// The secret: DDL_JOB_TOKEN, when set, is the token of every path. Otherwise, where rank 0
// publishes its address (PMIx or the file), it makes a fresh random token and publishes it with
// the address, so that the rendezvous is authenticated by default; the file is created 0600.
// Only a root given from outside (DDL_ROOT, torchrun's MASTER_ADDR) without DDL_JOB_TOKEN
// leaves the rendezvous open, and rank 0 warns once that it is.
#pragma once

#include <functional>
#include <string>

#include "lib/common/status.h"

namespace ddl {

struct LaunchInfo {
  int rank = -1, nranks = -1;
  std::string root_addr;        // "host:port" of rank 0's rendezvous, or "" when unknown
  std::string rendezvous_file;  // when root_addr is unknown: where rank 0 publishes its address
  std::string job_token;        // DDL_JOB_TOKEN or "" (then made by rank 0 where it publishes)
  // root_addr is unknown and the launcher runs a PMIx server: rank 0's address and token go
  // through PMIx (rendezvous_file is then the fallback where libpmix cannot be loaded).
  bool pmix = false;
  std::string root_host;  // DDL_ROOT_HOST, or "": where rank 0 listens when it publishes
  std::string source;     // "DDL_*", "mpirun", "slurm", "torchrun"
  int local_rank = -1, local_size = -1;  // when the launcher says
};

// Reads the process environment (see above). Errors are DDL_ERR_INVALID_ARGUMENT and name the
// variables that are missing or malformed.
Status launch_info_from_env(LaunchInfo *info);
// Same, from an explicit getenv-like function (nullptr for unset), so that tests do not touch
// the process environment. An empty value counts as unset.
Status launch_info_from(const std::function<const char *(const char *)> &getenv_fn,
                        LaunchInfo *info);

}  // namespace ddl
