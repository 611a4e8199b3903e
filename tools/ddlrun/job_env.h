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

// The environment of one rank: ddlrun's own, with `overrides` replacing or adding variables (the
// last of several overrides of one name wins).
std::vector<std::string> rank_environment(
    char **base, const std::vector<std::pair<std::string, std::string>> &overrides);

}  // namespace ddlrun
