#include "remote_launch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace ddlrun {

std::vector<RankPlacement> place_ranks(const LaunchOptions &options) {
  std::map<std::string, int> host_size;
  std::vector<RankPlacement> placement;
  for (const HostSlots &entry : options.hosts) {
    for (int slot = 0; slot < entry.slots && static_cast<int>(placement.size()) < options.nranks;
         ++slot) {
      RankPlacement rank;
      rank.host = entry.host;
      rank.local_rank = host_size[entry.host]++;
      placement.push_back(rank);
    }
  }
  for (RankPlacement &rank : placement) rank.local_size = host_size[rank.host];
  return placement;
}

std::string shell_quote(const std::string &word) {
  static const char kSafe[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.,:/=+@%";
  if (!word.empty() && word.find_first_not_of(kSafe) == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";  // close, an escaped quote, reopen
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::vector<std::string> agent_command(const std::vector<std::string> &agent,
                                       const std::string &host,
                                       const std::vector<std::pair<std::string, std::string>> &env,
                                       const std::vector<std::string> &command) {
  std::vector<std::string> argv = agent;
  argv.push_back(host);
  // `env` rather than bare assignments: it works whatever the remote login shell is.
  argv.push_back("env");
  for (const auto &kv : env) argv.push_back(shell_quote(kv.first + "=" + kv.second));
  for (const std::string &word : command) argv.push_back(shell_quote(word));
  return argv;
}

std::vector<std::string> with_remote_omp_threads(const std::vector<std::string> &command,
                                                 int local_size) {
  std::string script =
      "if [ -z \"${OMP_NUM_THREADS+set}\" ]; then "
      "n=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); "
      "n=$((n / " +
      std::to_string(local_size > 0 ? local_size : 1) +
      ")); [ \"$n\" -ge 1 ] || n=1; OMP_NUM_THREADS=$n; export OMP_NUM_THREADS; fi; "
      "exec \"$@\"";
  std::vector<std::string> argv = {"sh", "-c", script, "ddlrun-omp"};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

bool pick_remote_port(int *port, std::string *error) {
  unsigned char bytes[2];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, bytes, sizeof(bytes)) == static_cast<ssize_t>(sizeof(bytes));
  if (!ok) *error = std::string("cannot read /dev/urandom: ") + std::strerror(errno);
  if (fd >= 0) close(fd);
  if (ok) *port = 20000 + (bytes[0] << 8 | bytes[1]) % 10000;
  return ok;
}

}  // namespace ddlrun
