#include "lib/core/rails.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"
#include "lib/topology/nic_pairing.h"

namespace ddl {
namespace {

bool is_bridge(const std::string &name) {
  struct stat st;
  return stat(("/sys/class/net/" + name + "/bridge").c_str(), &st) == 0;
}

int64_t link_speed_mbps(const std::string &name) {
  std::ifstream in("/sys/class/net/" + name + "/speed");
  int64_t speed = 0;
  if (!(in >> speed) || speed <= 0) return 0;  // veth and down links say -1, or nothing
  return speed;
}

std::string network_text(uint32_t network, int prefix) {
  return strprintf("%u.%u.%u.%u/%d", network >> 24, (network >> 16) & 255, (network >> 8) & 255,
                   network & 255, prefix);
}

std::vector<std::string> split_words(const std::string &text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<std::string> split_list(const std::string &text) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text + ",") {
    if (c != ',') {
      part += c;
    } else if (!part.empty()) {
      parts.push_back(part);
      part.clear();
    }
  }
  return parts;
}

// Rails by name: every rank drives its own list's entries; R = the shortest list.
RailPlan plan_by_name(const std::vector<std::vector<std::string>> &names,
                      const std::vector<RailOffer> &offers) {
  RailPlan plan;
  size_t rails = SIZE_MAX;
  for (const auto &list : names) rails = std::min(rails, list.size());
  for (size_t r = 0; r < names.size(); ++r) {
    plan.nics.emplace_back(names[r].begin(), names[r].begin() + rails);
    plan.left_out.emplace_back();
    for (size_t k = rails; k < names[r].size(); ++k)
      plan.left_out[r].push_back(names[r][k] + ": another host has only " + std::to_string(rails) +
                                 " NIC(s)");
  }
  for (size_t r = 0; r < offers.size(); ++r) {
    topo::GpuRail gpu;
    gpu.names = offers[r].gpu_nic;
    plan.preferred.push_back(topo::rail_index(plan.nics[r], gpu));
  }
  return plan;
}

// Rails by network: rail k is the k-th network (in address order) that every rank's host has
// an interface on, among the fastest such networks.
RailPlan plan_by_network(const std::vector<RailOffer> &offers) {
  const size_t n = offers.size();
  // network -> how many ranks have it, and the slowest known speed on it.
  std::map<std::pair<uint32_t, int>, size_t> seen;
  std::map<std::pair<uint32_t, int>, int64_t> speed;
  for (const RailOffer &o : offers) {
    std::set<std::pair<uint32_t, int>> mine;
    for (const NetInterface &i : o.interfaces) {
      const auto key = std::make_pair(i.network, i.prefix);
      if (!mine.insert(key).second) continue;
      ++seen[key];
      auto it = speed.find(key);
      if (it == speed.end() || (i.speed_mbps > 0 && (it->second == 0 || i.speed_mbps < it->second)))
        speed[key] = i.speed_mbps;
    }
  }
  std::vector<std::pair<uint32_t, int>> common;
  int64_t fastest = 0;
  for (const auto &entry : seen) {
    if (entry.second != n) continue;
    common.push_back(entry.first);
    fastest = std::max(fastest, speed[entry.first]);
  }
  std::vector<std::pair<uint32_t, int>> rails;
  for (const auto &net : common)
    if (speed[net] == 0 || fastest == 0 || speed[net] == fastest) rails.push_back(net);
  RailPlan plan;
  for (size_t r = 0; r < n; ++r) {
    plan.nics.emplace_back();
    plan.left_out.emplace_back();
    for (const auto &net : rails) {
      for (const NetInterface &i : offers[r].interfaces)
        if (i.network == net.first && i.prefix == net.second) {
          plan.nics[r].push_back(i.name);
          break;
        }
    }
    for (const NetInterface &i : offers[r].interfaces) {
      const auto key = std::make_pair(i.network, i.prefix);
      const std::string what = i.name + " (" + network_text(i.network, i.prefix) + ")";
      if (seen[key] != n) {
        plan.left_out[r].push_back(what + ": not every host has an interface on this network");
      } else if (std::find(rails.begin(), rails.end(), key) == rails.end()) {
        plan.left_out[r].push_back(strprintf(
            "%s: %lld Mbit/s, slower than the fastest common "
            "network's %lld",
            what.c_str(), static_cast<long long>(speed[key]), static_cast<long long>(fastest)));
      } else if (std::find(plan.nics[r].begin(), plan.nics[r].end(), i.name) ==
                 plan.nics[r].end()) {
        plan.left_out[r].push_back(what + ": another interface of this host is on its network");
      }
    }
    topo::GpuRail gpu;
    gpu.names = offers[r].gpu_nic;
    plan.preferred.push_back(topo::rail_index(plan.nics[r], gpu));
  }
  return plan;
}

}  // namespace

std::vector<NetInterface> kernel_interfaces() {
  std::vector<NetInterface> found;
  struct ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (struct ifaddrs *a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !a->ifa_netmask) continue;
    if (!(a->ifa_flags & IFF_UP) || !(a->ifa_flags & IFF_RUNNING) || (a->ifa_flags & IFF_LOOPBACK))
      continue;
    const std::string name = a->ifa_name;
    if (is_bridge(name)) continue;
    const uint32_t address = ntohl(reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr.s_addr);
    const uint32_t mask = ntohl(reinterpret_cast<sockaddr_in *>(a->ifa_netmask)->sin_addr.s_addr);
    NetInterface i;
    i.name = name;
    i.network = address & mask;
    i.prefix = __builtin_popcount(mask);
    i.speed_mbps = link_speed_mbps(name);
    found.push_back(i);
  }
  freeifaddrs(list);
  std::sort(found.begin(), found.end(),
            [](const NetInterface &a, const NetInterface &b) { return a.name < b.name; });
  return found;
}

std::string serialize_offer(const RailOffer &offer) {
  std::string text = "R";
  for (const std::string &name : offer.rdma) text += " " + name;
  text += "\nI";
  for (const NetInterface &i : offer.interfaces)
    text += strprintf(" %s %u %d %lld", i.name.c_str(), i.network, i.prefix,
                      static_cast<long long>(i.speed_mbps));
  text += "\nG";
  for (const std::string &name : offer.gpu_nic) text += " " + name;
  return text;
}

Status parse_offer(const std::string &text, RailOffer *offer) {
  *offer = RailOffer();
  std::istringstream in(text);
  std::string rdma, interfaces, gpu;
  if (!std::getline(in, rdma) || !std::getline(in, interfaces) || !std::getline(in, gpu) ||
      rdma.compare(0, 1, "R") != 0 || interfaces.compare(0, 1, "I") != 0 ||
      gpu.compare(0, 1, "G") != 0)
    return internal_error("a malformed rail offer '%s'", text.c_str());
  offer->rdma = split_words(rdma.substr(1));
  offer->gpu_nic = split_words(gpu.substr(1));
  const std::vector<std::string> words = split_words(interfaces.substr(1));
  if (words.size() % 4 != 0) return internal_error("a malformed rail offer '%s'", text.c_str());
  for (size_t w = 0; w < words.size(); w += 4) {
    NetInterface i;
    int64_t network = 0, prefix = 0, speed = 0;
    if (!parse_int(words[w + 1], 0, UINT32_MAX, &network) ||
        !parse_int(words[w + 2], 0, 32, &prefix) || !parse_int(words[w + 3], 0, INT64_MAX, &speed))
      return internal_error("a malformed rail offer '%s'", text.c_str());
    i.name = words[w];
    i.network = static_cast<uint32_t>(network);
    i.prefix = static_cast<int>(prefix);
    i.speed_mbps = speed;
    offer->interfaces.push_back(i);
  }
  return Status::Ok();
}

RailPlan plan_rails(const std::vector<RailOffer> &offers, const std::vector<std::string> &listed) {
  if (!listed.empty())
    return plan_by_name(std::vector<std::vector<std::string>>(offers.size(), listed), offers);
  const bool all_rdma =
      std::all_of(offers.begin(), offers.end(), [](const RailOffer &o) { return !o.rdma.empty(); });
  if (all_rdma && !offers.empty()) {
    std::vector<std::vector<std::string>> names;
    for (const RailOffer &o : offers) names.push_back(o.rdma);
    return plan_by_name(names, offers);
  }
  return plan_by_network(offers);
}

// A shrink keeps the parent's rail when every rank drives the NIC it drove there (the rails
// follow the GPUs, or each rank's place on its host, which a shrink may change) and its rail
// transport can serve the new communicator's members. Every rank takes the same branch.
Status keep_parent_rail(ddl_comm *comm, const TransportSource &source, const std::string &nic,
                        const std::vector<int> &rail_of, const std::vector<bool> &via_rail,
                        bool *kept) {
  *kept = false;
  const ddl_comm *parent = source.parent;
  // Only with the main transport's connections (the same on every rank): the parent gives up
  // both at once (lib/core/elastic.cc).
  bool mine = comm->kept_parent_connections && parent->rail && parent->rail_nic == nic &&
              parent->rail->can_subset(source.members);
  for (int r = 0; mine && r < comm->nranks; ++r)
    mine = parent->rail_of[source.members[r]] == rail_of[r];
  bool all = false;
  Status s = comm->bootstrap->all_true(mine, &all);
  if (!s.ok()) return s.prefix("agreeing on keeping the rails: ");
  if (!all) return Status::Ok();
  DDL_RETURN_IF_ERROR(parent->rail->subset(comm->rank, source.members, &comm->rail));
  comm->rails_in_use = parent->rails_in_use;
  comm->routes->add_rail(comm->rail.get(), via_rail);
  *kept = true;
  return Status::Ok();
}

Status connect_rails(ddl_comm *comm, const TransportSource &source) {
  const std::string setting = env_string("DDL_RAILS");
  if (setting == "none") return Status::Ok();
  const topo::Tier &hosts = comm->tiers.at(topo::TierLevel::kHost);
  const bool several_hosts =
      std::any_of(hosts.group_of.begin(), hosts.group_of.end(),
                  [&](int group) { return group != hosts.group_of[comm->rank]; });
  if (!several_hosts) return Status::Ok();  // the same on every rank
  const bool every_nic = setting.empty() || setting == "auto";
  const std::string named =
      setting.empty() ? "DDL_RAILS unset (every NIC in common)" : "DDL_RAILS=" + setting;
  // Every rank offers its NICs; every rank then plans the same rails from all offers.
  RailOffer mine;
  if (every_nic) {
    mine.rdma = comm->rdma_rails;
    mine.interfaces = kernel_interfaces();
  }
  mine.gpu_nic = comm->gpu_rail.names;
  std::vector<std::string> texts;
  Status s = comm->bootstrap->allgather(serialize_offer(mine), &texts);
  if (!s.ok()) return s.prefix("agreeing on the rails: ");
  std::vector<RailOffer> offers(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) {
    s = parse_offer(texts[r], &offers[r]);
    if (!s.ok()) return s.prefix(strprintf("rank %d's rail offer: ", r));
  }
  const RailPlan plan =
      plan_rails(offers, every_nic ? std::vector<std::string>() : split_list(setting));
  for (const std::string &why : plan.left_out[comm->rank])
    DDL_INFO("%s: %s: left out", named.c_str(), why.c_str());
  const size_t rails = plan.rails();
  if (rails < 2) {
    std::string here;
    for (const std::string &nic : plan.nics[comm->rank]) here += (here.empty() ? "" : ",") + nic;
    DDL_INFO("%s: %zu NIC(s) usable as rails on every host (here: %s); no rails", named.c_str(),
             rails, here.empty() ? "none" : here.c_str());
    return Status::Ok();
  }
  std::vector<int> rail_of(comm->nranks, 0);
  for (int r = 0; r < comm->nranks; ++r) {
    const bool by_gpu = plan.preferred[r] >= 0;
    rail_of[r] = by_gpu ? plan.preferred[r] : comm->host_index[r] % static_cast<int>(rails);
  }
  const std::string &nic = plan.nics[comm->rank][rail_of[comm->rank]];
  const std::string why =
      rail_of[comm->rank] == plan.preferred[comm->rank]
          ? strprintf("closest to this rank's GPU %s, path %s", comm->gpu_rail.gpu.c_str(),
                      topo::path_type_name(comm->gpu_rail.path.type))
          : strprintf("local index %d of its host", comm->host_index[comm->rank]);
  comm->rail_nic = nic;
  comm->rail_of = rail_of;
  if (source.parent) {
    // Every rank of the parent had a rail on this plan, or keeping fails on some rank.
    std::vector<bool> via_rail(comm->nranks, false);
    for (int r = 0; r < comm->nranks; ++r)
      via_rail[r] =
          rail_of[r] == rail_of[comm->rank] && hosts.group_of[r] != hosts.group_of[comm->rank];
    DDL_RETURN_IF_ERROR(
        keep_parent_rail(comm, source, nic, rail_of, via_rail, &comm->kept_parent_rail));
    if (comm->kept_parent_rail) {
      DDL_INFO("rail %d of %zu: NIC %s kept from the communicator shrunk from", rail_of[comm->rank],
               rails, nic.c_str());
      return Status::Ok();
    }
  }
  NetworkOptions options;
  options.net_device = nic;
  options.heartbeats = false;  // the main transport watches every peer
  Status made =
      make_network_transport(kNetworkTransport, comm->rank, comm->nranks, options, &comm->rail);
  if (!made.ok()) {
    DDL_WARN("rail %d (NIC %s): %s; this rank's traffic to other hosts stays on UCX's choice",
             rail_of[comm->rank], nic.c_str(), made.message().c_str());
    comm->rail.reset();
  }
  std::vector<std::string> all;
  s = comm->bootstrap->allgather(comm->rail ? comm->rail->worker_address() : "", &all);
  if (!s.ok()) return s.prefix("exchanging rail addresses: ");
  std::vector<PeerAddress> peers(comm->nranks);
  std::vector<bool> via_rail(comm->nranks, false);
  std::string served;
  for (int r = 0; r < comm->nranks; ++r) {
    peers[r].address = all[r];
    peers[r].pid = comm->pids[r];
    via_rail[r] = comm->rail && !all[r].empty() && rail_of[r] == rail_of[comm->rank] &&
                  hosts.group_of[r] != hosts.group_of[comm->rank];
    peers[r].wanted = via_rail[r];
    if (via_rail[r]) served += strprintf("%s%d", served.empty() ? "" : ",", r);
  }
  s = comm->rail ? comm->rail->connect(peers) : Status::Ok();
  if (!s.ok())
    s = s.prefix(strprintf("connecting rail %d (NIC %s): ", rail_of[comm->rank], nic.c_str()));
  if (every_nic) {
    // NICs ddl found rather than the user named: one that cannot connect (a device UCX cannot
    // drive, a fabric that does not reach the other hosts) costs the rails, not the job.
    // Every rank must decide alike, or messages would wait on the wrong transport.
    std::vector<std::string> verdicts;
    Status told = comm->bootstrap->allgather(s.ok() ? "" : s.message(), &verdicts);
    if (!told.ok()) return told.prefix("agreeing on the rails: ");
    for (int r = 0; r < comm->nranks; ++r) {
      if (verdicts[r].empty()) continue;
      DDL_WARN("%s: rank %d: %s; no rails, UCX's choice carries everything", named.c_str(), r,
               verdicts[r].c_str());
      comm->rail.reset();
      return Status::Ok();
    }
  } else if (!s.ok()) {
    return s;
  }
  // The models' rails: only when every rank has its own (every rank sees the same addresses,
  // so every rank decides alike; one without a rail leaves the models with one).
  const bool every_rank_has_one =
      std::all_of(all.begin(), all.end(), [](const std::string &a) { return !a.empty(); });
  comm->rails_in_use = every_rank_has_one ? static_cast<int>(rails) : 1;
  if (!comm->rail) return Status::Ok();
  comm->routes->add_rail(comm->rail.get(), via_rail);
  DDL_INFO("rail %d of %zu: NIC %s (%s) carries this rank's traffic to ranks %s",
           rail_of[comm->rank], rails, nic.c_str(), why.c_str(),
           served.empty() ? "(none)" : served.c_str());
  return Status::Ok();
}

}  // namespace ddl
