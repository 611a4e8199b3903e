// At init the ranks exchange their placements and all build the same tiers. DDL_HOST_ID
// makes ranks of this machine look like separate hosts (as emulated hosts would).
#include <criterion/criterion.h>
#include <stdlib.h>

#include <string>

#include "harness.h"
#include "lib/core/comm.h"

using namespace ddltest;
using ddl::topo::TierLevel;

Test(tiers_exchange, four_ranks_on_two_emulated_hosts) {
  RunOptions options;
  options.before_init = [](int rank) { setenv("DDL_HOST_ID", rank < 2 ? "host-a" : "host-b", 1); };
  std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int) {
        const ddl::topo::Tier &hosts = comm->tiers.at(TierLevel::kHost);
        RANK_CHECK(hosts.groups.size() == 2, "rank %d sees %zu hosts", rank, hosts.groups.size());
        RANK_CHECK(hosts.group_of[rank] == (rank < 2 ? 0 : 1), "rank %d in host group %d", rank,
                   hosts.group_of[rank]);
        RANK_CHECK(hosts.index_in_group[rank] == rank % 2, "rank %d index %d", rank,
                   hosts.index_in_group[rank]);
        RANK_CHECK(hosts.leader(1) == 2, "leader of host b is %d", hosts.leader(1));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(tiers_exchange, one_host_by_default) {
  std::string failures = run_ranks(3, [](ddl_comm_t comm, int rank, int) {
    RANK_CHECK(comm->tiers.nranks == 3, "nranks %d", comm->tiers.nranks);
    RANK_CHECK(comm->tiers.at(TierLevel::kHost).groups.size() == 1, "rank %d sees %zu hosts", rank,
               comm->tiers.at(TierLevel::kHost).groups.size());
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}
