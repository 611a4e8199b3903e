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
    "       ddlrun -H host1:4,host2:4 [options] [--] program [args...]\n"
    "\n"
    "Starts N processes of `program` on this host as one ddl job. Each gets DDL_RANK,\n"
    "DDL_WORLD_SIZE, DDL_LOCAL_RANK, DDL_LOCAL_SIZE, DDL_ROOT=127.0.0.1:<free port> and a\n"
    "random DDL_JOB_TOKEN, so that ddl_comm_init_from_env() finds its peers.\n"
    "Unless OMP_NUM_THREADS is set (in ddlrun's environment or with -x), each rank gets\n"
    "OMP_NUM_THREADS = its host's cores / the job's ranks on that host (at least 1), as\n"
    "torchrun sets it, and ddlrun says so once when ranks share a host.\n"
    "\n"
    "With -H the ranks go host by host (host1 gets ranks 0..3, host2 4..7), each started as\n"
    "`AGENT HOST env VAR=VALUE... program args...` (the words shell-quoted, as ssh wants them),\n"
    "one agent process per rank; DDL_ROOT is host1:PORT.\n"
    "\n"
    "Options:\n"
    "  -n, -np, --nranks N   number of processes (required without -H; with -H, at most the\n"
    "                        sum of the slots, which is the default)\n"
    "  -H, --host LIST       hosts and their slots: host1:4,host2:4 (no :N: one slot)\n"
    "  --launch-agent CMD    how to reach a host, split on blanks like Open MPI's\n"
    "                        plm_rsh_agent (default: ssh); for emulated hosts, the agent that\n"
    "                        `tools/emuhosts/emuhosts up` prints\n"
    "  --port PORT           port of rank 0's rendezvous on host1 with -H (default: random in\n"
    "                        20000..29999)\n"
    "  -t, --tag-output      prefix every output line with [rank]\n"
    "  --timeout SEC         stop the job after SEC seconds (exit status 124)\n"
    "  --keep-going          a rank killed by a signal does not stop the others: for jobs\n"
    "                        that shrink and go on (ddl_comm_shrink); the exit status is\n"
    "                        the others' (a rank's own non-zero exit still stops the job)\n"
    "  --torch-store         host the job's torch.distributed store (a TCPStore) in a\n"
    "                        process of ddlrun's, as torchrun's agent does, not in rank 0:\n"
    "                        any rank may then die and the others shrink and go on. Runs\n"
    "                        `python -m ddl.torch.store` (the job's python, else $DDL_PYTHON,\n"
    "                        else python3; on host1 with -H) and gives the ranks MASTER_ADDR,\n"
    "                        MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE=True\n"
    "  --grace-ms MS         when stopping ranks, wait MS ms after SIGTERM before\n"
    "                        SIGKILL (default 3000)\n"
    "  -x VAR=VALUE          set VAR in every rank's environment (repeatable)\n"
    "  -x VAR                pass on ddlrun's own value of VAR, if it has one (for -H)\n"
    "  -h, --help            this text\n"
    "\n"
    "The first argument that is not an option starts the program's command line.\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to the ranks. If a rank exits non-zero or is\n"
    "killed, the others are stopped and ddlrun exits with that rank's exit code (128+signal\n"
    "if it was killed). Ranks read standard input from /dev/null. With -H, stopping a rank\n"
    "means stopping its agent: the agent must take the remote process with it.\n";

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

// "host1:4,host2,host3:2" -> hosts; false with *error set for an empty host or a bad count.
bool parse_host_list(const std::string &text, std::vector<HostSlots> *hosts, std::string *error) {
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    HostSlots entry;
    entry.host = item;
    size_t colon = item.rfind(':');
    if (colon != std::string::npos) {
      long slots = 0;
      if (!parse_int_in_range(item.substr(colon + 1), 1, 4096, &slots)) {
        *error = "-H wants host:slots with slots in 1..4096, not '" + item + "'";
        return false;
      }
      entry.host = item.substr(0, colon);
      entry.slots = static_cast<int>(slots);
    }
    if (entry.host.empty() || entry.host.find_first_of(" \t'\"\\$") != std::string::npos) {
      *error = "-H wants host names separated by commas, not '" + text + "'";
      return false;
    }
    hosts->push_back(entry);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

std::vector<std::string> split_blanks(const std::string &text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = text.find_first_not_of(" \t", i);
    if (start == std::string::npos) break;
    size_t end = text.find_first_of(" \t", start);
    words.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    i = end == std::string::npos ? text.size() : end;
  }
  return words;
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
    if (name == "--keep-going") {
      options->keep_going = true;
      continue;
    }
    if (name == "--torch-store") {
      options->torch_store = true;
      continue;
    }
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
    } else if (name == "-H" || name == "--host" || name == "--hosts") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      if (!parse_host_list(value, &options->hosts, error)) return ParseOutcome::kError;
    } else if (name == "--launch-agent") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      options->launch_agent = split_blanks(value);
      if (options->launch_agent.empty()) {
        *error = "--launch-agent wants a command";
        return ParseOutcome::kError;
      }
    } else if (name == "--port") {
      if (!take_value(name, has_inline, inline_value, &value)) return ParseOutcome::kError;
      long port = 0;
      if (!parse_int_in_range(value, 1, 65535, &port)) {
        *error = "--port wants a TCP port in 1..65535, not '" + value + "'";
        return ParseOutcome::kError;
      }
      options->port = static_cast<int>(port);
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
      if (!valid_env_name(var)) {
        *error = "-x wants VAR=VALUE or VAR with a valid variable name, not '" + value + "'";
        return ParseOutcome::kError;
      }
      if (eq != std::string::npos) {
        options->extra_env.emplace_back(var, value.substr(eq + 1));
      } else if (const char *own = std::getenv(var.c_str())) {
        options->extra_env.emplace_back(var, own);  // as Open MPI's -x VAR
      }
    } else {
      *error = "unknown option '" + arg + "' (put '--' before the program if it starts with '-')";
      return ParseOutcome::kError;
    }
  }

  for (; i < argc; ++i) options->command.emplace_back(argv[i]);
  int slots = 0;
  for (const HostSlots &entry : options->hosts) slots += entry.slots;
  if (options->hosts.empty() && options->nranks == 0) {
    *error = "say how many ranks to start with -n N, or where with -H host:slots,...";
    return ParseOutcome::kError;
  }
  if (!options->hosts.empty() && options->nranks == 0) options->nranks = slots;
  if (options->nranks > slots && !options->hosts.empty()) {
    *error = "-n " + std::to_string(options->nranks) + " is more ranks than the " +
             std::to_string(slots) + " slots of -H";
    return ParseOutcome::kError;
  }
  if (options->hosts.empty() && (!options->launch_agent.empty() || options->port != 0)) {
    *error = "--launch-agent and --port go with -H";
    return ParseOutcome::kError;
  }
  if (options->launch_agent.empty()) options->launch_agent = {"ssh"};
  if (options->command.empty()) {
    *error = "no program to run";
    return ParseOutcome::kError;
  }
  return ParseOutcome::kRun;
}

}  // namespace ddlrun
