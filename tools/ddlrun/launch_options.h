// Command line of ddlrun: `ddlrun -n N [options] [--] prog args...`, or `-H host:slots,...` for
// ranks on several hosts.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddlrun {

// One entry of -H: a host and how many ranks it takes.
struct HostSlots {
  std::string host;
  int slots = 1;
};

struct LaunchOptions {
  int nranks = 0;                         // with -H: at most the sum of the slots (0: that sum)
  std::vector<HostSlots> hosts;           // -H; empty: every rank on this host, started directly
  std::vector<std::string> launch_agent;  // --launch-agent, split on blanks (with -H)
  int port = 0;                           // --port of rank 0's rendezvous (with -H; 0: random)
  bool tag_output = false;
  bool keep_going = false;   // a rank killed by a signal does not stop the others
  bool torch_store = false;  // host the job's torch store in a helper (torch_store.h)
  double timeout_sec = 0;    // 0: no deadline
  int grace_ms = 3000;       // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::pair<std::string, std::string>> extra_env;  // -x VAR=VALUE, -x VAR
  std::vector<std::string> command;                            // prog args...
};

enum class ParseOutcome { kRun, kHelp, kError };

// Fills *options from argv. On kError, *error says what is wrong in one line.
ParseOutcome parse_launch_options(int argc, char **argv, LaunchOptions *options,
                                  std::string *error);

// The --help text.
const char *launch_usage();

}  // namespace ddlrun
