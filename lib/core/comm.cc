#include "lib/core/comm.h"

#include <mutex>
#include <set>

#include "lib/common/log.h"

namespace ddl {
namespace {

std::mutex g_registry_mutex;
std::set<ddl_comm *> &registry() {
  static std::set<ddl_comm *> live;
  return live;
}

// How long destroy waits for UCX to flush what this rank sent.
constexpr int kCloseTimeoutMs = 5000;

// Every rank says where it runs; every rank then builds the same tiers from the same list.
// A machine that hwloc cannot describe still gets a placement (its host identity).
Status exchange_placements(ddl_comm *comm) {
  topo::Topology topology;
  Status s = topo::discover(topo::discover_options_from_env(), &topology);
  if (!s.ok()) DDL_WARN("topology discovery failed, placing this rank by host only: %s",
                        s.message().c_str());
  const topo::Placement mine = topo::local_placement(topology, -1);
  std::vector<std::string> all;
  s = comm->bootstrap->allgather(topo::serialize(mine), &all);
  if (!s.ok()) return s.prefix("exchanging placements: ");
  std::vector<topo::Placement> by_rank(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    s = topo::parse_placement(all[r], &by_rank[r]);
    if (!s.ok()) return s.prefix(strprintf("rank %zu's placement: ", r));
  }
  comm->tiers = topo::build_tiers(by_rank);
  DDL_INFO("%s", topo::describe_tiers(comm->tiers).c_str());
  return Status::Ok();
}

}  // namespace

void register_comm(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().insert(comm);
}

bool unregister_comm(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  return registry().erase(comm) > 0;
}

bool comm_is_live(ddl_comm *comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  return registry().count(comm) > 0;
}

Status create_comm(const BootstrapOptions &options, const CommConfig &config, ddl_comm **out) {
  std::unique_ptr<ddl_comm> comm(new ddl_comm());
  comm->rank = options.rank;
  comm->nranks = options.nranks;
  comm->config = config;
  set_log_rank(options.rank);

  DDL_RETURN_IF_ERROR(Bootstrap::create(options, &comm->bootstrap));
  Status s = UcxTransport::create(options.rank, options.nranks, &comm->transport);
  if (!s.ok()) return s.prefix("creating the UCX transport: ");
  std::vector<std::string> addresses;
  s = comm->bootstrap->allgather(comm->transport->worker_address(), &addresses);
  if (!s.ok()) return s.prefix("exchanging UCX addresses: ");
  DDL_RETURN_IF_ERROR(comm->transport->connect(addresses));
  DDL_RETURN_IF_ERROR(exchange_placements(comm.get()));
  DDL_INFO("communicator ready: rank %d of %d, transport %s, timeout %d ms, chunk %zu B",
           comm->rank, comm->nranks, comm->transport->name(), config.timeout_ms,
           config.chunk_bytes);
  *out = comm.release();
  register_comm(*out);
  return Status::Ok();
}

void destroy_comm(ddl_comm *comm) {
  if (comm->transport) comm->transport->close(kCloseTimeoutMs);
  comm->transport.reset();
  comm->bootstrap.reset();
  delete comm;
}

}  // namespace ddl
