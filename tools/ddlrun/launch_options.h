// Command line of ddlrun: `ddlrun -n N [options] [--] prog args...`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddlrun {

struct LaunchOptions {
  int nranks = 0;
  bool tag_output = false;
  double timeout_sec = 0;  // 0: no deadline
  int grace_ms = 3000;     // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::pair<std::string, std::string>> extra_env;  // -x VAR=VALUE
  std::vector<std::string> command;                            // prog args...
};

enum class ParseOutcome { kRun, kHelp, kError };

// Fills *options from argv. On kError, *error says what is wrong in one line.
ParseOutcome parse_launch_options(int argc, char **argv, LaunchOptions *options,
                                  std::string *error);

// The --help text.
const char *launch_usage();

}  // namespace ddlrun
