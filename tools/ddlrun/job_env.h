// What every rank of a local job is told: where the rendezvous is and the job's secret.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddlrun {

// A TCP port on 127.0.0.1 that the kernel handed out and that was free a moment ago. Rank 0
// binds it shortly after; another process could take it in between (unlikely: the kernel
// cycles through the ephemeral range before reusing a port).
bool pick_free_port(int *port, std::string *error);

// 16 bytes from /dev/urandom as 32 hex digits.
bool make_job_token(std::string *token, std::string *error);

// Cores this process may run on (its CPU affinity mask, as nproc counts them); at least 1.
int usable_cores();

// OMP_NUM_THREADS for each of `local_ranks` ranks sharing `cores` cores: the cores per rank, at
// least 1, so that PyTorch's and OpenMP's thread pools (one thread per core by default) do not
// oversubscribe the host, as torchrun does (it sets 1).
int omp_threads_per_rank(int cores, int local_ranks);

// The environment of one rank: ddlrun's own, with `overrides` replacing or adding variables (the
// last of several overrides of one name wins).
std::vector<std::string> rank_environment(
    char **base, const std::vector<std::pair<std::string, std::string>> &overrides);

}  // namespace ddlrun
