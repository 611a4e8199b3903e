// Rank 0's rendezvous address (and secret) through the launcher's PMIx server: Open MPI's
// mpirun and Slurm's `srun --mpi=pmix` run one on every host, so it reaches every rank without
// a shared file system.
//
// libpmix.so.2 is opened with dlopen on first use, as ibverbs and NVML are, so that libddl.so
// loads where there is no PMIx; libpmix-dev's header gives the types at build time only. A
// build without that header (DDL_HAVE_PMIX unset) has no PMIx path: pmix_load says so and the
// caller falls back to the rendezvous file.
#pragma once

#include <string>

#include "lib/bootstrap/socket.h"
#include "lib/common/status.h"

namespace ddl {
namespace bootstrap {

// Whether this build has the PMIx path (libpmix-dev's header was there at build time).
bool pmix_built();

// Opens libpmix.so.2 and finds its functions, once per process. DDL_ERR_UNSUPPORTED with the
// reason where it cannot (built without PMIx, no such library, a symbol missing).
Status pmix_load();

// One exchange through PMIx, collective over every process of this PMIx namespace (the job):
// the process of namespace rank 0 Puts *value under a ddl key and Commits; every process joins
// a Fence that collects data; the others Get rank 0's value into *value. Every process must
// call it the same number of times (the key carries a per-process count, so that a second
// communicator of the same job does not read the first one's value). `rank` is ddl's rank,
// which must equal the PMIx rank. PMIx_Init and PMIx_Finalize bracket each exchange, so a
// process that later calls MPI_Init (whose PMIx client counts its inits) is not disturbed.
//
// Bounded by `deadline` (DDL_ERR_TIMEOUT), also when the PMIx server never answers: the calls
// run on a helper thread that is left behind if it overstays. PMIx errors are DDL_ERR_REMOTE
// naming the rank, the PMIx call and PMIx's status string.
Status pmix_exchange(int rank, const Deadline &deadline, std::string *value);

}  // namespace bootstrap
}  // namespace ddl
