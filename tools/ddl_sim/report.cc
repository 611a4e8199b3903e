#include "tools/ddl_sim/report.h"

#include <algorithm>

namespace ddl_sim {
namespace {

double algbw_gbs(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

// Busy share of the call's time of the busiest resource of a tier, in percent.
double busy_percent(const SimResult &r, Tier tier) {
  return r.seconds > 0 ? 100 * r.tiers[static_cast<int>(tier)].busiest_seconds / r.seconds : 0;
}

}  // namespace

double tier_bound_seconds(const Cluster &c, ddl::Collective collective, double bytes) {
  const double h = c.hosts, l = c.ranks_per_host;
  double host_out = 0, rank_local = 0;  // bytes through a host's NICs, a rank's port
  switch (collective) {
    case ddl::Collective::kAllreduce:
      host_out = 2 * (h - 1) / h * bytes;
      rank_local = 2 * (l - 1) / l * bytes;
      break;
    case ddl::Collective::kAllgather:
    case ddl::Collective::kReduceScatter:
      host_out = (h - 1) / h * bytes;
      rank_local = (l - 1) / l * bytes;
      break;
    case ddl::Collective::kBroadcast:
      host_out = h > 1 ? bytes : 0;
      rank_local = l > 1 ? bytes : 0;
      break;
    case ddl::Collective::kAlltoall:  // bytes: what each rank sends, spread evenly
      host_out = l * bytes * (h - 1) / h;
      rank_local = bytes * (l - 1) / (h * l);
      break;
    default:
      return 0;
  }
  const double net = host_out / (c.nics * c.nic_rate);
  double local = rank_local / c.local_rate;
  if (c.local_bus_rate > 0) local = std::max(local, l * rank_local / c.local_bus_rate);
  return std::max(net, local);
}

void Report::header(FILE *out) const {
  const Cluster &c = cluster_;
  std::fprintf(out, "# ddl_sim: %s on %s (%s): %d hosts x %d ranks, %d NIC(s) of %g Gbit/s, %s\n",
               ddl::collective_name(options_.collective), c.name.c_str(),
               c.source.empty() ? "built in" : c.source.c_str(), c.hosts, c.ranks_per_host, c.nics,
               c.nic_rate * 8 / 1e9,
               c.fat_tree ? ddl::strprintf("fat tree, %d hosts per leaf, %g:1", c.hosts_per_leaf,
                                           c.oversubscription)
                                .c_str()
                          : "one switch");
  std::fprintf(out,
               "# busy: share of the call's time the busiest NIC / fabric uplink / local port "
               "/ rank compute was busy; bound: the slowest tier's bandwidth bound\n");
  std::fprintf(out, "%12s %12s %8s %-12s %11s %8s %8s %11s %7s  %5s %5s %5s %5s\n", "size", "count",
               "type", "algo", "time(us)", "algbw", "busbw", "bound(us)", "of bnd", "nic", "fabr",
               "local", "comp");
}

void Report::row(FILE *out, size_t bytes, size_t count, const SimResult &r) {
  const double bound =
      tier_bound_seconds(cluster_, options_.collective, static_cast<double>(bytes));
  rows_.push_back(Row{bytes, count, r, bound});
  const double algbw = algbw_gbs(bytes, r.seconds);
  std::fprintf(
      out,
      "%12zu %12zu %8s %-12s %11.2f %8.2f %8.2f %11.2f %6.1f%%  %4.0f%% %4.0f%% %4.0f%% %4.0f%%\n",
      bytes, count, options_.dtype.c_str(), r.algorithm.c_str(), r.seconds * 1e6, algbw,
      algbw * bus_factor(options_.collective, cluster_.nranks()), bound * 1e6,
      r.seconds > 0 ? 100 * bound / r.seconds : 0, busy_percent(r, Tier::kNic),
      busy_percent(r, Tier::kFabric), busy_percent(r, Tier::kLocal),
      busy_percent(r, Tier::kCompute));
}

bool Report::write_json(const std::string &path) const {
  FILE *out = std::fopen(path.c_str(), "w");
  if (!out) return false;
  const int n = cluster_.nranks();
  const double factor = bus_factor(options_.collective, n);
  std::fprintf(out, "{\n  \"tool\": \"ddl_sim\",\n  \"library\": \"ddl_sim %s\",\n",
               cluster_.name.c_str());
  std::fprintf(out, "  \"collective\": \"%s\",\n  \"nranks\": %d,\n  \"bus_factor\": %.6f,\n",
               ddl::collective_name(options_.collective), n, factor);
  std::fprintf(out, "  \"hosts\": %d,\n  \"ranks_per_host\": %d,\n", cluster_.hosts,
               cluster_.ranks_per_host);
  std::fprintf(out,
               "  \"iters\": 0,\n  \"warmup_iters\": 0,\n  \"check\": false,\n  \"results\": [");
  double busbw_sum = 0;
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row &row = rows_[i];
    const double algbw = algbw_gbs(row.bytes, row.result.seconds);
    busbw_sum += algbw * factor;
    std::fprintf(out,
                 "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"algorithm\": \"%s\", "
                 "\"out_of_place\": {\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
                 "\"wrong\": null}, \"in_place\": null, \"bound_time_us\": %.3f, \"busy\": {",
                 i ? "," : "", row.bytes, row.count, options_.dtype.c_str(),
                 row.result.algorithm.c_str(), row.result.seconds * 1e6, algbw, algbw * factor,
                 row.bound * 1e6);
    for (int t = 0; t < kTiers; ++t)
      std::fprintf(
          out, "%s\"%s\": %.4f", t ? ", " : "", tier_name(static_cast<Tier>(t)),
          row.result.seconds > 0 ? row.result.tiers[t].busiest_seconds / row.result.seconds : 0.0);
    std::fprintf(out, "}}");
  }
  std::fprintf(out, "\n  ],\n  \"out_of_bounds\": 0,\n  \"avg_busbw_gbs\": %.6f\n}\n",
               rows_.empty() ? 0.0 : busbw_sum / static_cast<double>(rows_.size()));
  return std::fclose(out) == 0;
}

}  // namespace ddl_sim
