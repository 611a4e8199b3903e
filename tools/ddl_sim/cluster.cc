#include "tools/ddl_sim/cluster.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>

#include "lib/common/params.h"

namespace ddl_sim {
namespace {

using ddl::Status;

std::string trim(const std::string &text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

// A number and what follows it ("12.5GB" -> 12.5, "GB"); false when no number starts it.
bool split_number(const std::string &text, double *number, std::string *unit) {
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  *number = std::strtod(begin, &end);
  if (end == begin || errno != 0 || !std::isfinite(*number) || *number < 0) return false;
  *unit = trim(end);
  return true;
}

// Bytes per second from "100Gbit", "400 Gbit/s", "12.5GB", "1.25GB/s", "800Mbit".
bool parse_rate(const std::string &text, double *rate) {
  double number = 0;
  std::string unit;
  if (!split_number(text, &number, &unit)) return false;
  if (unit.size() > 2 && unit.compare(unit.size() - 2, 2, "/s") == 0) unit.resize(unit.size() - 2);
  static const std::map<std::string, double> units = {
      {"bit", 1 / 8.0}, {"Kbit", 1e3 / 8}, {"Mbit", 1e6 / 8}, {"Gbit", 1e9 / 8}, {"Tbit", 1e12 / 8},
      {"B", 1},         {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},       {"TB", 1e12}};
  const auto found = units.find(unit);
  if (found == units.end()) return false;
  *rate = number * found->second;
  return *rate > 0;
}

// Seconds from "15us", "1.5 ms", "200ns", "0".
bool parse_time(const std::string &text, double *seconds) {
  double number = 0;
  std::string unit;
  if (!split_number(text, &number, &unit)) return false;
  static const std::map<std::string, double> units = {
      {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"", 1}};
  const auto found = units.find(unit);
  if (found == units.end() || (unit.empty() && number != 0)) return false;
  *seconds = number * found->second;
  return true;
}

bool parse_count(const std::string &text, int *value) {
  int64_t parsed = 0;
  if (!ddl::parse_int(text, 1, 1 << 20, &parsed)) return false;
  *value = static_cast<int>(parsed);
  return true;
}

bool parse_ratio(const std::string &text, double *value, double min, double max) {
  double number = 0;
  std::string unit;
  if (!split_number(text, &number, &unit) || !unit.empty()) return false;
  *value = number;
  return number >= min && number <= max;
}

bool parse_yes_no(const std::string &text, bool *value) {
  if (text == "yes" || text == "true" || text == "1") return *value = true, true;
  if (text == "no" || text == "false" || text == "0") return *value = false, true;
  return false;
}

struct Key {
  const char *expected;  // for error messages
  std::function<bool(const std::string &, Cluster *)> set;
  std::function<std::string(const Cluster &)> get;
};

std::string rate_text(double rate) {
  return ddl::strprintf("%gGbit", rate * 8 / 1e9);
}
std::string time_text(double seconds) {
  return ddl::strprintf("%gus", seconds * 1e6);
}

#define DDL_SIM_RATE(field)                                                        \
  Key {                                                                            \
    "a rate like 100Gbit or 12.5GB",                                               \
        [](const std::string &v, Cluster *c) { return parse_rate(v, &c->field); }, \
        [](const Cluster &c) { return rate_text(c.field); }                        \
  }
#define DDL_SIM_TIME(field)                                                        \
  Key {                                                                            \
    "a time like 1.5us or 20ms",                                                   \
        [](const std::string &v, Cluster *c) { return parse_time(v, &c->field); }, \
        [](const Cluster &c) { return time_text(c.field); }                        \
  }
// A count where 0 means "the default" (what `zero` says).
#define DDL_SIM_COUNT_OR_ZERO(field, zero)                       \
  Key {                                                          \
    "a whole number, or 0 for " zero,                            \
        [](const std::string &v, Cluster *c) {                   \
          if (v == "0") return c->field = 0, true;               \
          return parse_count(v, &c->field);                      \
        },                                                       \
        [](const Cluster &c) { return std::to_string(c.field); } \
  }
// One of two words, `off` or `on`, setting a flag.
#define DDL_SIM_CHOICE(field, off, on)                                   \
  Key {                                                                  \
    off " or " on,                                                       \
        [](const std::string &v, Cluster *c) {                           \
          if (v != off && v != on) return false;                         \
          c->field = v == on;                                            \
          return true;                                                   \
        },                                                               \
        [](const Cluster &c) { return std::string(c.field ? on : off); } \
  }
#define DDL_SIM_COUNT(field)                                                        \
  Key {                                                                             \
    "a whole number >= 1",                                                          \
        [](const std::string &v, Cluster *c) { return parse_count(v, &c->field); }, \
        [](const Cluster &c) { return std::to_string(c.field); }                    \
  }

const std::map<std::string, Key> &keys() {
  static const std::map<std::string, Key> table = {
      {"name",
       {"a name", [](const std::string &v, Cluster *c) { return c->name = v, !v.empty(); },
        [](const Cluster &c) { return c.name; }}},
      {"hosts", DDL_SIM_COUNT(hosts)},
      {"ranks_per_host", DDL_SIM_COUNT(ranks_per_host)},
      {"local_rate", DDL_SIM_RATE(local_rate)},
      {"local_bus_rate",
       {"a rate like 20GB, or 0 for none",
        [](const std::string &v, Cluster *c) {
          if (v == "0") return c->local_bus_rate = 0, true;
          return parse_rate(v, &c->local_bus_rate);
        },
        [](const Cluster &c) { return c.local_bus_rate > 0 ? rate_text(c.local_bus_rate) : "0"; }}},
      {"local_latency", DDL_SIM_TIME(local_latency)},
      {"single_copy",
       {"yes or no",
        [](const std::string &v, Cluster *c) { return parse_yes_no(v, &c->single_copy); },
        [](const Cluster &c) { return std::string(c.single_copy ? "yes" : "no"); }}},
      {"gpu",
       {"yes or no", [](const std::string &v, Cluster *c) { return parse_yes_no(v, &c->gpu); },
        [](const Cluster &c) { return std::string(c.gpu ? "yes" : "no"); }}},
      {"nics", DDL_SIM_COUNT(nics)},
      {"nic_rate", DDL_SIM_RATE(nic_rate)},
      {"net_latency", DDL_SIM_TIME(net_latency)},
      {"net_efficiency",
       {"a fraction in (0, 1]",
        [](const std::string &v, Cluster *c) {
          return parse_ratio(v, &c->net_efficiency, 1e-3, 1.0);
        },
        [](const Cluster &c) { return ddl::strprintf("%g", c.net_efficiency); }}},
      {"fabric", DDL_SIM_CHOICE(fat_tree, "switch", "fat_tree")},
      {"link_sharing", DDL_SIM_CHOICE(fair_links, "fifo", "fair")},
      {"hosts_per_leaf", DDL_SIM_COUNT(hosts_per_leaf)},
      {"oversubscription",
       {"a ratio >= 1 (2 for 2:1)",
        [](const std::string &v, Cluster *c) {
          return parse_ratio(v, &c->oversubscription, 1.0, 1e3);
        },
        [](const Cluster &c) { return ddl::strprintf("%g", c.oversubscription); }}},
      {"reduce_rate", DDL_SIM_RATE(reduce_rate)},
      {"copy_rate", DDL_SIM_RATE(copy_rate)},
      {"message_overhead", DDL_SIM_TIME(message_overhead)},
      {"step_overhead", DDL_SIM_TIME(step_overhead)},
      {"call_overhead", DDL_SIM_TIME(call_overhead)},
      {"net_cpu_rate",
       {"a rate like 2GB, or 0 for none",
        [](const std::string &v, Cluster *c) {
          if (v == "0") return c->net_cpu_rate = 0, true;
          return parse_rate(v, &c->net_cpu_rate);
        },
        [](const Cluster &c) { return c.net_cpu_rate > 0 ? rate_text(c.net_cpu_rate) : "0"; }}},
      {"machine_cores", DDL_SIM_COUNT_OR_ZERO(machine_cores, "a core per rank")},
      {"chunk_bytes",
       {"a size like 512K",
        [](const std::string &v, Cluster *c) {
          uint64_t bytes = 0;
          if (!ddl::parse_bytes(v, &bytes) || bytes < 4096) return false;
          c->chunk_bytes = bytes;
          return true;
        },
        [](const Cluster &c) { return std::to_string(c.chunk_bytes); }}},
      {"hier_pieces", DDL_SIM_COUNT_OR_ZERO(hier_pieces, "the models' choice")},
  };
  return table;
}

}  // namespace

Status set_cluster_key(const std::string &key, const std::string &value, Cluster *cluster) {
  const auto found = keys().find(key);
  if (found == keys().end()) {
    std::string known;
    for (const auto &entry : keys()) known += (known.empty() ? "" : ", ") + entry.first;
    return ddl::invalid_argument("unknown cluster key '%s' (known: %s)", key.c_str(),
                                 known.c_str());
  }
  if (!found->second.set(value, cluster))
    return ddl::invalid_argument("%s = '%s': expected %s", key.c_str(), value.c_str(),
                                 found->second.expected);
  return Status::Ok();
}

Status load_cluster(const std::string &path, Cluster *cluster) {
  std::ifstream in(path);
  if (!in) return ddl::invalid_argument("cannot read cluster file %s", path.c_str());
  *cluster = Cluster();
  cluster->source = path;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t equals = line.find('=');
    if (equals == std::string::npos)
      return ddl::invalid_argument("%s:%d: expected 'key = value', got '%s'", path.c_str(), number,
                                   line.c_str());
    Status s =
        set_cluster_key(trim(line.substr(0, equals)), trim(line.substr(equals + 1)), cluster);
    if (!s.ok()) return s.prefix(ddl::strprintf("%s:%d: ", path.c_str(), number));
  }
  if (cluster->name.empty()) cluster->name = path;
  return Status::Ok();
}

std::string describe_cluster(const Cluster &cluster) {
  std::string out;
  for (const auto &entry : keys()) out += entry.first + " = " + entry.second.get(cluster) + "\n";
  return out;
}

ddl::CollectiveArgs collective_args(const Cluster &cluster, ddl::Collective collective,
                                    size_t count, size_t elem_size, const std::string &algorithm) {
  ddl::CollectiveArgs args;
  args.collective = collective;
  args.nranks = cluster.nranks();
  args.count = count;
  args.elem_size = elem_size;
  args.chunk_elems = cluster.chunk_bytes / elem_size;
  args.algorithm = algorithm;
  args.hosts = cluster.hosts;
  // The models price this cluster, not the library's defaults: a message's latency and the
  // rank's overhead on it, the links' rates, the reductions' rate, and the NICs per host.
  const double reduce = 1.0 / cluster.reduce_rate;
  args.local = ddl::CostConstants{cluster.local_latency + cluster.message_overhead,
                                  cluster.message_overhead, 1.0 / cluster.local_rate, reduce};
  args.net =
      ddl::CostConstants{cluster.net_latency + cluster.message_overhead, cluster.message_overhead,
                         1.0 / (cluster.nic_rate * cluster.net_efficiency), reduce};
  args.rails = cluster.nics;
  args.pieces = cluster.hier_pieces;
  if (cluster.hosts > 1) {
    std::vector<int> host_of(static_cast<size_t>(args.nranks));
    for (int r = 0; r < args.nranks; ++r) host_of[static_cast<size_t>(r)] = cluster.host_of(r);
    args.tiers.push_back(std::move(host_of));
    args.peer_memory = cluster.single_copy && cluster.ranks_per_host > 1;
  }
  return args;
}

}  // namespace ddl_sim
