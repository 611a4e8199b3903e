#include "lib/topology/tiers.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "lib/common/log.h"
#include "lib/common/params.h"

namespace ddl {
namespace topo {
namespace {

const char kPlacementMagic[] = "ddl-placement/1";
constexpr size_t kMaxFieldBytes = 128;

// Host names and ids travel as single words: letters, digits and - . _ : only.
bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == ':';
}

std::string to_word(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (out.size() >= kMaxFieldBytes) break;
    if (c == '\n' || c == '\r' || c == ' ') continue;
    out += is_word_char(c) ? c : '_';
  }
  return out;
}

std::string first_line_of(const char *path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// FNV-1a, 64 bits: the same on every rank and build (std::hash promises neither).
uint64_t fnv1a64(const std::string &text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string local_host_id() {
  std::string id = env_string("DDL_HOST_ID");
  if (!id.empty()) {
    // A short word travels as it is. Anything else (longer than the field, or with other
    // characters) travels as a readable prefix and a hash of the whole value: truncating it
    // would make ids that differ only past the limit (or only in a replaced character) name
    // one host, and ranks on different hosts would then try to share memory.
    constexpr size_t kPrefix = 64;
    const std::string word = to_word(id);
    if (word == id && id.size() + 4 <= kMaxFieldBytes) return "env:" + id;
    const std::string hashed = strprintf("env-hash:%s:%016llx", word.substr(0, kPrefix).c_str(),
                                         static_cast<unsigned long long>(fnv1a64(id)));
    DDL_INFO(
        "DDL_HOST_ID of %zu bytes is not a short word (at most %zu of letters, digits, "
        "'-', '.', '_', ':'); using %s",
        id.size(), kMaxFieldBytes - 4, hashed.c_str());
    return hashed;
  }
  id = to_word(first_line_of("/proc/sys/kernel/random/boot_id"));
  if (!id.empty()) return "boot:" + id;
  id = to_word(first_line_of("/etc/machine-id"));
  if (!id.empty()) return "machine:" + id;
  return std::string();  // the caller falls back to the host name
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

bool parse_small_int(const std::string &text, int *value) {
  int64_t v = 0;
  if (!parse_int(text, -1, 1 << 20, &v)) return false;
  *value = static_cast<int>(v);
  return true;
}

}  // namespace

Placement placement_on_cpus(const Topology &topology, int gpu, const std::string &hostname,
                            const std::string &host_id, const std::vector<int> &allowed_pus,
                            int current_pu) {
  Placement placement;
  placement.hostname = to_word(hostname);
  placement.host_id = to_word(host_id.empty() ? "host:" + hostname : host_id);
  const Gpu *g =
      (gpu >= 0 && gpu < static_cast<int>(topology.gpus.size())) ? &topology.gpus[gpu] : nullptr;
  if (g != nullptr) {
    placement.gpu = g->pci.bus_id;
    int sw = outermost_switch(topology, g->pci);
    if (sw >= 0) placement.pci_switch = topology.pci_switches[sw].bus_id;
  }
  // NUMA nodes the allowed CPUs touch.
  std::vector<int> touched;
  int current = -1;
  for (size_t n = 0; n < topology.numa_nodes.size(); ++n) {
    const std::vector<int> &pus = topology.numa_nodes[n].pus;
    for (int pu : allowed_pus) {
      if (std::binary_search(pus.begin(), pus.end(), pu)) {
        touched.push_back(static_cast<int>(n));
        break;
      }
    }
    if (std::binary_search(pus.begin(), pus.end(), current_pu)) current = static_cast<int>(n);
  }
  int numa = touched.size() == 1                  ? touched[0]
             : (g != nullptr && g->pci.numa >= 0) ? g->pci.numa
                                                  : current;
  if (numa >= 0) {
    const NumaNode &node = topology.numa_nodes[numa];
    placement.numa = node.os_index;
    placement.socket = topology.sockets[node.socket].os_index;
  } else if (g != nullptr && g->pci.socket >= 0) {
    placement.socket = topology.sockets[g->pci.socket].os_index;
  }
  return placement;
}

Placement local_placement(const Topology &topology, int gpu) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) std::snprintf(name, sizeof name, "unknown");
  return placement_on_cpus(topology, gpu, name, local_host_id(), allowed_cpus(), sched_getcpu());
}

std::string serialize(const Placement &p) {
  auto or_dash = [](const std::string &s) { return s.empty() ? std::string("-") : to_word(s); };
  return strprintf("%s host=%s id=%s socket=%d numa=%d switch=%s gpu=%s", kPlacementMagic,
                   or_dash(p.hostname).c_str(), or_dash(p.host_id).c_str(), p.socket, p.numa,
                   or_dash(p.pci_switch).c_str(), or_dash(p.gpu).c_str());
}

Status parse_placement(const std::string &raw, Placement *placement) {
  if (raw.size() > kMaxPlacementBytes) {
    return remote_error("placement of %zu bytes (at most %zu)", raw.size(), kMaxPlacementBytes);
  }
  size_t end = raw.find('\0');
  if (end != std::string::npos && raw.find_first_not_of('\0', end) != std::string::npos) {
    return remote_error("placement has bytes after its end");
  }
  std::string text = raw.substr(0, end);
  std::istringstream in(text);
  std::string magic;
  in >> magic;
  if (magic != kPlacementMagic) {
    return remote_error("placement does not start with %s (a peer of another ddl version?)",
                        kPlacementMagic);
  }
  static const char *const kKeys[] = {"host", "id", "socket", "numa", "switch", "gpu"};
  std::string values[6];
  std::string word;
  for (int k = 0; k < 6; ++k) {
    if (!(in >> word)) return remote_error("placement lacks '%s='", kKeys[k]);
    std::string key = std::string(kKeys[k]) + "=";
    if (word.compare(0, key.size(), key) != 0) {
      return remote_error("placement field %d is not '%s=...'", k + 1, kKeys[k]);
    }
    values[k] = word.substr(key.size());
    if (values[k].empty() || values[k].size() > kMaxFieldBytes ||
        !std::all_of(values[k].begin(), values[k].end(), is_word_char)) {
      return remote_error("placement field '%s' is empty, too long or has odd characters",
                          kKeys[k]);
    }
  }
  if (in >> word) return remote_error("placement has extra text after gpu=");
  Placement p;
  p.hostname = values[0] == "-" ? "" : values[0];
  p.host_id = values[1] == "-" ? "" : values[1];
  if (!parse_small_int(values[2], &p.socket) || !parse_small_int(values[3], &p.numa)) {
    return remote_error("placement socket/numa are not small integers");
  }
  for (int k : {4, 5}) {
    std::string bus;
    if (values[k] != "-" && !normalize_pci_bus_id(values[k], &bus)) {
      return remote_error("placement %s=%s is not a PCI bus id", kKeys[k], values[k].c_str());
    }
    (k == 4 ? p.pci_switch : p.gpu) = bus;
  }
  if (p.host_id.empty()) return remote_error("placement has no host id");
  *placement = p;
  return Status::Ok();
}

const char *tier_level_name(TierLevel level) {
  switch (level) {
    case TierLevel::kHost:
      return "host";
    case TierLevel::kSocket:
      return "socket";
    case TierLevel::kNuma:
      return "numa";
    case TierLevel::kPciSwitch:
      return "pci_switch";
  }
  return "?";
}

Tiers build_tiers(const std::vector<Placement> &by_rank) {
  Tiers tiers;
  int n = static_cast<int>(by_rank.size());
  tiers.nranks = n;
  // Each level's key extends the one above, so groups nest by construction.
  std::vector<std::string> keys(n);
  std::vector<int> parent_of_rank(n, -1);
  for (int level = 0; level < kTierLevels; ++level) {
    Tier &tier = tiers.levels[level];
    std::map<std::string, int> group_by_key;
    tier.group_of.assign(n, -1);
    tier.index_in_group.assign(n, -1);
    for (int r = 0; r < n; ++r) {
      const Placement &p = by_rank[r];
      switch (static_cast<TierLevel>(level)) {
        case TierLevel::kHost:
          keys[r] = p.host_id;
          break;
        case TierLevel::kSocket:
          keys[r] += strprintf("|%d", p.socket);
          break;
        case TierLevel::kNuma:
          keys[r] += strprintf("|%d", p.numa);
          break;
        case TierLevel::kPciSwitch:
          keys[r] += "|" + p.pci_switch;
          break;
      }
      auto it = group_by_key.find(keys[r]);
      if (it == group_by_key.end()) {
        it = group_by_key.emplace(keys[r], static_cast<int>(tier.groups.size())).first;
        tier.groups.emplace_back();
        tier.parent_group.push_back(parent_of_rank[r]);
      }
      tier.group_of[r] = it->second;
      tier.index_in_group[r] = static_cast<int>(tier.groups[it->second].size());
      tier.groups[it->second].push_back(r);
    }
    for (int r = 0; r < n; ++r) parent_of_rank[r] = tier.group_of[r];
  }
  return tiers;
}

std::string describe_tiers(const Tiers &tiers) {
  return strprintf(
      "%d ranks: %zu hosts, %zu sockets, %zu NUMA nodes, %zu PCIe switch groups", tiers.nranks,
      tiers.at(TierLevel::kHost).groups.size(), tiers.at(TierLevel::kSocket).groups.size(),
      tiers.at(TierLevel::kNuma).groups.size(), tiers.at(TierLevel::kPciSwitch).groups.size());
}

}  // namespace topo
}  // namespace ddl
