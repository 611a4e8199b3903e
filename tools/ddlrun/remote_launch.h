// Ranks on several hosts (-H): where each rank goes, and the agent command line that starts it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launch_options.h"

namespace ddlrun {

struct RankPlacement {
  std::string host;
  int local_rank = 0;  // among the ranks of this host
  int local_size = 0;
};

// Ranks host by host: the first host's slots take ranks 0.., then the next host's. A host named
// twice in -H counts as one host for the local ranks.
std::vector<RankPlacement> place_ranks(const LaunchOptions &options);

// The word as one word of a POSIX shell command line (single-quoted unless it is plainly safe).
std::string shell_quote(const std::string &word);

// `AGENT... HOST env VAR=VALUE... prog args...`: what ssh-like agents expect. They join the words
// after HOST with spaces for the remote shell, so those words are quoted here.
std::vector<std::string> agent_command(const std::vector<std::string> &agent,
                                       const std::string &host,
                                       const std::vector<std::pair<std::string, std::string>> &env,
                                       const std::vector<std::string> &command);

// `sh -c SCRIPT ddlrun-omp command...`: on the host, SCRIPT sets OMP_NUM_THREADS to that host's
// cores (nproc) divided by `local_size` (at least 1) unless the environment there already has
// it, then execs the command (no extra process stays). ddlrun cannot count a remote host's
// cores itself, and hosts may differ.
std::vector<std::string> with_remote_omp_threads(const std::vector<std::string> &command,
                                                 int local_size);

// A port for rank 0's rendezvous on a host ddlrun cannot probe: random in 20000..29999, below
// Linux's ephemeral range (32768..) so outgoing connections do not take it first.
bool pick_remote_port(int *port, std::string *error);

}  // namespace ddlrun
