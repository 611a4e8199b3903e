// The verifier over hier_bruck's schedules (Bruck's rounds per rail between hosts): its
// allgather and reduce-scatter, its allreduce (each rail's segment in one pass), and where
// the models take them.
#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "lib/algorithms/cost_model.h"
#include "lib/algorithms/registry.h"
#include "lib/algorithms/verifier.h"
#include "tests/unit/hier_verify.h"

using namespace ddl;

// hier_bruck: every host count from 2 to 9 (powers of two and not), 1-3 ranks per host,
// messages of one block, of some and of every host's (chunk 2, 20, none), with and without
// peer memory; uneven hosts (where it builds hier's forms) and hosts out of rank order.
Test(hier_schedules, bruck_forms) {
  for (Collective c : {Collective::kAllgather, Collective::kReduceScatter})
    for (bool peer_memory : {false, true}) {
      for (int hosts = 2; hosts <= 9; ++hosts)
        for (int local = 1; local <= 3; ++local)
          verify_hier(hosts_of_sizes(std::vector<int>(static_cast<size_t>(hosts), local)),
                      hosts * local, {0, 1, 7, 64}, {0, 2, 20}, c, peer_memory, 0, "hier_bruck");
      verify_hier(hosts_of_sizes({3, 1, 2}), 6, {1, 13}, {0, 2}, c, peer_memory, 0, "hier_bruck");
      verify_hier({{1, 0, 2, 1, 0, 2}}, 6, {5, 37}, {0, 3}, c, peer_memory, 0, "hier_bruck");
    }
}

// hier_bruck's allreduce: every host count from 2 to 9, 1-3 ranks per host, blocks of one
// cell and of several (chunk 2: a position's block cut into cells; 20 and none: runs of
// positions in a message), with and without peer memory, in and out of place; a count that
// does not divide among the ranks, uneven hosts and hosts out of rank order (hier's, built
// instead).
Test(hier_schedules, bruck_allreduce) {
  for (bool peer_memory : {false, true}) {
    for (int hosts = 2; hosts <= 9; ++hosts)
      for (int local = 1; local <= 3; ++local) {
        const int n = hosts * local;
        const size_t ranks = static_cast<size_t>(n);
        verify_hier(hosts_of_sizes(std::vector<int>(static_cast<size_t>(hosts), local)), n,
                    {ranks, 7 * ranks, 64 * ranks, 7 * ranks + 1}, {0, 2, 20},
                    Collective::kAllreduce, peer_memory, 0, "hier_bruck");
      }
    verify_hier(hosts_of_sizes({3, 1, 2}), 6, {12, 13}, {0, 2}, Collective::kAllreduce, peer_memory,
                0, "hier_bruck");
    verify_hier({{1, 0, 2, 1, 0, 2}}, 6, {6, 42}, {0, 3}, Collective::kAllreduce, peer_memory, 0,
                "hier_bruck");
    // In pieces (DDL_HIER_PIECES), and pieces that do not divide the count (one piece).
    for (int pieces : {2, 3})
      verify_hier(hosts_of_sizes({2, 2, 2}), 6, {12, 6 * 64}, {0, 2, 20}, Collective::kAllreduce,
                  peer_memory, pieces, "hier_bruck");
  }
}

// Where the models take hier_bruck: never with the library's own network constants on the
// few hosts of the emulated setups (3-8 hosts x 2-4: a round costs a network latency, ~15 us,
// and saves a few messages of ~2 us), so what was measured there keeps hier; with a GPU
// cluster's constants (3+1 us a message, 1 us of host work, 8 NICs of 400 Gbit/s) among 64
// hosts x 8 at 4 MB (8 KB blocks: host work per message outweighs the wire) but not at 1 GB.
Test(hier_schedules, models_take_hier_bruck_among_many_hosts_only) {
  for (Collective c : {Collective::kAllgather, Collective::kReduceScatter}) {
    for (int hosts = 3; hosts <= 8; ++hosts)
      for (int local = 2; local <= 4; ++local)
        for (size_t count : {size_t{2}, size_t{1} << 10, size_t{1} << 16, size_t{16} << 20}) {
          CollectiveArgs a;
          a.collective = c;
          a.nranks = hosts * local;
          a.count = count;
          a.chunk_elems = 128u << 10;
          a.tiers = hosts_of_sizes(std::vector<int>(static_cast<size_t>(hosts), local));
          a.hosts = hosts;
          std::string why;
          cr_assert_str_neq(choose_algorithm(a, &why).name, "hier_bruck", "%d x %d, %zu: %s", hosts,
                            local, count, why.c_str());
        }
    CollectiveArgs a;
    a.collective = c;
    a.nranks = 64 * 8;
    a.chunk_elems = 128u << 10;
    a.tiers = hosts_of_sizes(std::vector<int>(64, 8));
    a.hosts = 64;
    a.peer_memory = true;
    a.rails = 8;
    a.local = CostConstants{3e-6, 1e-6, 1.0 / 370e9, 1.0 / 1e12};
    a.net = CostConstants{4e-6, 1e-6, 1.0 / 47.5e9, 1.0 / 1e12};
    std::string why;
    a.count = 2048;  // 8 KB a block: 4 MB allgathered
    cr_assert_str_eq(choose_algorithm(a, &why).name, "hier_bruck", "%s", why.c_str());
    a.count = 512u << 10;  // 2 MB a block: 1 GB
    cr_assert_str_eq(choose_algorithm(a, &why).name, "hier", "%s", why.c_str());
  }
}

// hier_bruck's allreduce: the models take it among 16 hosts or more from 4 MB, with a GPU
// cluster's constants (as above) at 16 and 64 hosts x 8 from 16 MB to 1 GB; never below 16
// hosts (the emulated setups, where it measured alike or slower), nor below 4 MB.
Test(hier_schedules, models_take_hier_bruck_allreduce_among_many_hosts) {
  for (int hosts : {2, 4, 8, 15, 16, 64})
    for (size_t mb : {1, 16, 64, 1024}) {
      CollectiveArgs a;
      a.nranks = hosts * 8;
      a.count = mb << 18;
      a.chunk_elems = 128u << 10;
      a.tiers = hosts_of_sizes(std::vector<int>(static_cast<size_t>(hosts), 8));
      a.hosts = hosts;
      a.peer_memory = true;
      a.rails = 8;
      a.local = CostConstants{3e-6, 1e-6, 1.0 / 370e9, 1.0 / 1e12};
      a.net = CostConstants{4e-6, 1e-6, 1.0 / 47.5e9, 1.0 / 1e12};
      std::string why;
      const bool expected = hosts >= 16 && mb >= 4;
      cr_assert_eq(std::string(choose_algorithm(a, &why).name) == "hier_bruck", expected,
                   "%d x 8, %zu MB: %s", hosts, mb, why.c_str());
      // The library's own constants among a few hosts: never.
      if (hosts >= 16) continue;
      a.local = kCostConstants;
      a.net = kNetCostConstants;
      a.rails = 1;
      cr_assert_str_neq(choose_algorithm(a, &why).name, "hier_bruck", "%d x 8, %zu MB: %s", hosts,
                        mb, why.c_str());
    }
}
