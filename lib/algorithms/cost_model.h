// The constants of the alpha-beta-gamma cost models, in one place. Every allreduce has its
// cost function beside its builder (ring.h, recursive_doubling.h, rhd.h, tree.h); the
// registry compares them per call with these constants, and the tree builder picks its
// radix with them, so changing a number here changes every choice consistently.
//
//   alpha     seconds per message on the critical path: post, delivery, completion
//   overhead  seconds for each further message one rank handles in the same round (a tree
//             parent hearing from k-1 children): the CPU cost of a message without its
//             latency, which is what lets several messages of one round overlap
//   beta      seconds per byte moved from one rank to another
//   gamma     seconds per byte reduced (bytes of one operand)
//
// Only ratios matter for the choice. Measured on the 2-core development machine over ddl's
// shared-memory transport (2026-11-22, `ddlrun -n 2 ddl_perf -a NAME -b 8 -e 4M -f 4`,
// machine loaded, so +-30%): an 8 B two-rank rd allreduce (one message each way) takes
// 0.6-0.7 us; rd and ring cross near 32-128 KB (7.1 vs 7.3 us at 32 KB, 22.6 vs 22.4 us
// at 128 KB); a 2 MB ring allreduce takes ~520 us, i.e. ~4 GB/s for moving and reducing
// together; the reduction kernels run at ~10 GB/s out of cache (reduce_bench).
//
// How to re-measure them (one host, ranks <= cores, nothing else running; ucx_perftest
// comes with ucx-utils, reduce_bench with the bench/ targets):
//   alpha     ucx_perftest -t tag_lat -s 8 (server, then client with the server's host):
//             the typical one-way latency; or, within ddl, the 8 B time of
//             `ddlrun -n 4 ddl_perf -b 8 -e 8 -a rd` minus that of `-n 2` (one more round
//             of recursive doubling; the per-call constant cancels)
//   overhead  ucx_perftest -t tag_bw -s 8: 1 / message rate
//   beta      ucx_perftest -t tag_bw -s 4M: 1 / bandwidth (bytes/s), or the 64 MB time of
//             `ddlrun -n 2 ddl_perf -a rhd` minus the gamma term, over 64 MB
//   gamma     reduce_bench --sizes 64M --dtype float32 --op sum: 1 / (GB/s / 3) (its GB/s
//             counts three buffers)
// Then check the crossovers the models predict against `ddl_perf -a NAME` for each
// algorithm at 2, 4 and 8 ranks (tests/unit/test_schedules.cc pins the expected ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddl {

constexpr double kAlpha = 0.7e-6;
constexpr double kOverhead = 0.2e-6;
constexpr double kBeta = 1.0 / 4.0e9;
constexpr double kGamma = 1.0 / 10.0e9;

struct CostConstants {
  double alpha;
  double overhead;
  double beta;
  double gamma;
};

constexpr CostConstants kCostConstants{kAlpha, kOverhead, kBeta, kGamma};

// Between hosts (UCX over TCP or verbs): a message costs ~15 us (measured here: 8 B across
// two network namespaces, UCC 14.5-16 us, Open MPI 17-20 us) and a byte that of a 10 Gbit/s
// link, a middle of the 1-100 Gbit/s links jobs run on. Every algorithm over ranks on several
// hosts is priced with these, except hier's tiers inside a host.
constexpr CostConstants kNetCostConstants{15e-6, 2e-6, 1.0 / 1.25e9, kGamma};

// The constants one round of an algorithm over ranks on several hosts pays: those inside a
// host when rank 0 and its farthest partner of the round share a host (launchers place a
// host's ranks in one block, so rank 0 speaks for every rank, and every rank prices alike),
// the network's otherwise. Recursive doubling's rounds at distances 1, 2, 4 and a tree's
// lowest levels stay inside a DGX host of 8: priced at the network's latency, they made the
// models choose flat rd over hier at 4-16 KB among 16 such hosts, 1.4x slower in ddl_sim.
struct RoundCosts {
  CostConstants across;
  CostConstants inside = across;
  const std::vector<int> *host_of = nullptr;  // rank -> host; none: every round is across

  const CostConstants &round(int64_t farthest) const {
    const bool same = host_of && farthest < static_cast<int64_t>(host_of->size()) &&
                      (*host_of)[static_cast<size_t>(farthest)] == host_of->front();
    return same ? inside : across;
  }
};

}  // namespace ddl
