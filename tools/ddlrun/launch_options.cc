#include "launch_options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ddlrun {
namespace {

const char kUsage[] =
    "Usage: ddlrun -n N [options] [--] program [args...]\n"
    "\n"
    "Starts N processes of `program` on this host as one ddl job. Each gets DDL_RANK,\n"
    "DDL_WORLD_SIZE, DDL_LOCAL_RANK, DDL_LOCAL_SIZE, DDL_ROOT=127.0.0.1:<free port> and a\n"
    "random DDL_JOB_TOKEN, so that ddl_comm_init_from_env() finds its peers.\n"
    "\n"
    "Options:\n"
    "  -n, -np, --nranks N   number of processes (required)\n"
    "  -t, --tag-output      prefix every output line with [rank]\n"
    "  --timeout SEC         stop the job after SEC seconds (exit status 124)\n"
    "  --grace-ms MS         when stopping ranks, wait MS ms after SIGTERM before\n"
    "                        SIGKILL (default 3000)\n"
    "  -x VAR=VALUE          set VAR in every rank's environment (repeatable)\n"
    "  -h, --help            this text\n"
    "\n"
    "The first argument that is not an option starts the program's command line.\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to the ranks. If a rank exits non-zero or is\n"
    "killed, the others are stopped and ddlrun exits with that rank's exit code (128+signal\n"
    "if it was killed). Ranks read standard input from /dev/null.\n";

bool parse_int_in_range(const std::string &text, long min, long max, long *value) {
  if (text.empty()) return false;
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *value = v;
  return true;
}

bool valid_env_name(const std::string &name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// Splits "--name=value" into name and value; other arguments come back unchanged.
void split_inline_value(const std::string &arg, std::string *name, std::string *value,
                        bool *has_value) {
  size_t eq = arg.find('=');
  *has_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
  *name = *has_value ? arg.substr(0, eq) : arg;
  *value = *has_value ? arg.substr(eq + 1) : std::string();
}

}  // namespace

const char *launch_usage() {
  return kUsage;
}

ParseOutcome parse_launch_options(int argc, char **argv, LaunchOptions *options,
                                  std::string *error) {
  int i = 1;
  // Fetches the value of option `name`, inline (--name=value) or from the next argument.
  auto take_value = [&](const std::string &name, bool has_inline, const std::string &inline_value,
                        std::string *value) {
    if (has_inline) {
      *value = inline_value;
      return true;
    }
    if (i + 1 >= argc) {
      *error = "option " + name + " needs a value";
      return false;
    }
    *value = argv[++i];
    return true;
  };

  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program starts here

    std::string name, inline_value, value;
    bool has_inline = false;
    split_inline_value(arg, &name, &inline_value, &has_inline);

    if (name == "-h" || name == "--help") return ParseOutcome::kHelp;
    if (name == "-t" || name == "--tag-output") {
      options->tag_output = true;
    } else if (name == "-n" || name == "-np" || name == "--np" || name == "--nranks") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      long n = 0;
      if (!parse_int_in_range(value, 1, 4096, &n)) {
        *error = "-n wants a number of ranks in 1..4096, not '" + value + "'";
        return ParseOutcome::kError;
      }
      options->nranks = static_cast<int>(n);
    } else if (name == "--timeout") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      char *end = nullptr;
      double sec = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(sec > 0) || !std::isfinite(sec)) {
        *error = "--timeout wants a positive number of seconds, not '" + value + "'";
        return ParseOutcome::kError;
      }
      options->timeout_sec = sec;
    } else if (name == "--grace-ms") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      long ms = 0;
      if (!parse_int_in_range(value, 0, 3600 * 1000, &ms)) {
        *error = "--grace-ms wants milliseconds in 0..3600000, not '" + value + "'";
        return ParseOutcome::kError;
      }
      options->grace_ms = static_cast<int>(ms);
    } else if (name == "-x") {
      if (!take_value(name, false, "", &value)) return ParseOutcome::kError;
      size_t eq = value.find('=');
      std::string var = value.substr(0, eq);
      if (eq == std::string::npos || !valid_env_name(var)) {
        *error = "-x wants VAR=VALUE with a valid variable name, not '" + value + "'";
        return ParseOutcome::kError;
      }
      options->extra_env.emplace_back(var, value.substr(eq + 1));
    } else {
      *error = "unknown option '" + arg + "' (put '--' before the program if it starts with '-')";
      return ParseOutcome::kError;
    }
  }

  for (; i < argc; ++i) options->command.emplace_back(argv[i]);
  if (options->nranks == 0) {
    *error = "say how many ranks to start with -n N";
    return ParseOutcome::kError;
  }
  if (options->command.empty()) {
    *error = "no program to run";
    return ParseOutcome::kError;
  }
  return ParseOutcome::kRun;
}

}  // namespace ddlrun
