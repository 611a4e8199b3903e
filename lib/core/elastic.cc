#include "lib/core/elastic.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"

namespace ddl {
namespace {

std::string rank_list(const std::vector<int> &ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text.empty() ? "none" : text;
}

// A shrink goes on only on the side of a split job that holds a majority of the ranks that
// were not excluded on purpose (half of them when it holds the lowest): the two halves of a
// network partition each find the other failed, and both going on would make two jobs.
// DDL_SHRINK_QUORUM=none lets any survivors go on (when the launcher makes sure that lost
// ranks are dead, e.g. Slurm ending the step's tasks on a lost node).
Status check_quorum(const ddl_comm *comm, const Decision &decision,
                    const std::vector<int> &exclude) {
  const std::string mode = env_string("DDL_SHRINK_QUORUM");
  if (mode == "none") return Status::Ok();
  if (!mode.empty() && mode != "majority")
    DDL_WARN("ignoring DDL_SHRINK_QUORUM=%s: expected majority or none", mode.c_str());
  int eligible = 0, members = 0, lowest = -1;
  for (int r = 0; r < comm->nranks; ++r) {
    if (std::find(exclude.begin(), exclude.end(), r) != exclude.end()) continue;
    if (lowest < 0) lowest = r;
    ++eligible;
    if (!decision.excludes(r)) ++members;
  }
  if (2 * members > eligible || (2 * members == eligible && !decision.excludes(lowest)))
    return Status::Ok();
  return remote_error(
      "only %d of the %d ranks are left (failed: %s): a minority%s, which may be one side of a "
      "network partition whose other side goes on; no new communicator (DDL_SHRINK_QUORUM=none "
      "allows it)",
      members, eligible, rank_list(decision.failed).c_str(),
      2 * members == eligible ? " (half, without the lowest rank)" : "");
}

// The members of the shrunk communicator watch each other through the old one's transport
// while they build it: its rank 0 watches every member, the others watch rank 0 (the only
// one they wait for). A death is then an error at once, and the shrink agrees again.
std::function<Status()> watch_members(ddl_comm *comm, std::vector<int> members, int leader) {
  return [comm, members = std::move(members), leader]() -> Status {
    comm->transport->progress();
    answer_agreements(comm);  // a rank still in the agreement may need this one's decision
    for (int m : members) {
      if (m == comm->rank || (comm->rank != leader && m != leader)) continue;
      Status s = peer_failure(comm, m);
      if (!s.ok()) return s.prefix(strprintf("rank %d (a member of the new communicator): ", m));
    }
    return Status::Ok();
  };
}

// The shrunk communicator took over comm's connections: comm lets go of them before the
// shrink returns, for the new one may drive them from another thread from then on.
void give_connections(ddl_comm *comm, const ddl_comm *shrunk) {
  detach_requests(comm);
  const std::string why =
      strprintf("went to the communicator shrunk from it (rank %d of %d there): use that one",
                shrunk->rank, shrunk->nranks);
  comm->transport->retire(why);
  if (shrunk->kept_parent_rail) comm->rail->retire(why);
  comm->gave_connections = true;
}

Status check_connections(const ddl_comm *comm) {
  if (!comm->gave_connections) return Status::Ok();
  return invalid_usage(
      "this communicator was shrunk, and the shrunk communicator took over its connections: "
      "agree or shrink on that one, and destroy this one");
}

}  // namespace

void revoke_comm(ddl_comm *comm) {
  if (!comm->failure.ok()) return;
  comm->failure = remote_error("rank %d revoked the communicator", comm->rank);
  // One notice per rank and communicator: its buffer and requests are the communicator's.
  if (comm->nranks > 1 && comm->notice_sends.empty()) send_failure_notice(comm, comm->failure);
}

Status agree_comm(ddl_comm *comm, AgreeOp op, uint64_t *value) {
  DDL_RETURN_IF_ERROR(check_connections(comm));
  AgreeRequest request;
  request.value = *value;
  request.op = op;
  Decision decision;
  int listen_fd = -1;
  DDL_RETURN_IF_ERROR(agree(comm, request, &decision, &listen_fd));
  *value = decision.value;
  comm->agreed_failed = decision.failed;
  // Calls on comm would wait for the failed ranks: they fail at once instead.
  if (!decision.failed.empty() && comm->failure.ok())
    comm->failure =
        remote_error("rank%s %s failed (agreed by ddl_comm_agree)",
                     decision.failed.size() == 1 ? "" : "s", rank_list(decision.failed).c_str());
  return Status::Ok();
}

Status shrink_comm(ddl_comm *comm, const std::vector<int> &exclude, ddl_comm **out) {
  *out = nullptr;
  DDL_RETURN_IF_ERROR(check_connections(comm));
  revoke_comm(comm);  // peers still inside a call on comm fail now and come to the shrink
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    AgreeRequest request;
    request.exclude = exclude;
    request.open_rendezvous = true;
    Decision decision;
    int listen_fd = -1;
    DDL_RETURN_IF_ERROR(agree(comm, request, &decision, &listen_fd));
    comm->agreed_failed = decision.failed;
    Status s = check_quorum(comm, decision, exclude);
    if (!s.ok()) {
      if (listen_fd >= 0) ::close(listen_fd);
      return s;
    }
    std::vector<int> members;
    for (int r = 0; r < comm->nranks; ++r)
      if (!decision.excludes(r)) members.push_back(r);
    BootstrapOptions options;
    options.rank =
        static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
    options.nranks = static_cast<int>(members.size());
    options.timeout_ms = comm->config.timeout_ms;
    CommConfig config = comm->config;
    if (members.size() > 1) {
      const size_t space = decision.rendezvous.find(' ');
      if (space == std::string::npos) {
        if (listen_fd >= 0) ::close(listen_fd);
        return remote_error("rank %d's decision names no rendezvous for the new communicator",
                            decision.proposer);
      }
      options.root_addr = decision.rendezvous.substr(0, space);
      options.job_token = decision.rendezvous.substr(space + 1);
      options.listen_fd = listen_fd;
      options.root_listening = true;
      options.watch = watch_members(comm, members, decision.proposer);
      config.job_token = options.job_token;
    }
    TransportSource source;
    source.parent = comm;
    source.members = members;
    s = create_comm(options, config, out, source);
    if (s.ok()) {
      if ((*out)->kept_parent_connections) give_connections(comm, *out);
      DDL_INFO("shrink: rank %d of %d in the new communicator of %zu (failed: %s; %s), %.3f s",
               options.rank, options.nranks, members.size(), rank_list(decision.failed).c_str(),
               (*out)->kept_parent_rail          ? "connections and rail kept"
               : (*out)->kept_parent_connections ? "connections kept"
                                                 : "new connections",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return Status::Ok();
    }
    const bool retry = s.code() == DDL_ERR_REMOTE || s.code() == DDL_ERR_TIMEOUT;
    if (!retry || attempt >= comm->nranks)
      return s.prefix(
          strprintf("building the communicator of the %zu live ranks: ", members.size()));
    DDL_WARN("shrink: building the communicator of %zu ranks failed (%s); agreeing again",
             members.size(), s.message().c_str());
  }
}

Status grow_comm(ddl_comm *comm, int new_size, const std::string &root_addr, ddl_comm **out) {
  *out = nullptr;
  if (!comm->failure.ok())
    return Status(comm->failure.code(),
                  "the communicator failed earlier: shrink it first (ddl_comm_shrink), then grow "
                  "the shrunk one: " +
                      comm->failure.message());
  if (new_size < comm->nranks)
    return invalid_argument("new size %d is below the communicator's %d ranks", new_size,
                            comm->nranks);
  BootstrapOptions options;
  options.rank = comm->rank;
  options.nranks = new_size;
  options.root_addr = root_addr;
  options.job_token = comm->config.join_token;
  options.timeout_ms = comm->config.timeout_ms;
  CommConfig config = comm->config;
  config.job_token = config.join_token;
  Status s = create_comm(options, config, out);
  if (!s.ok())
    return s.prefix(strprintf("growing from %d to %d ranks at %s: ", comm->nranks, new_size,
                              root_addr.c_str()));
  DDL_INFO("grow: rank %d of %d in the grown communicator (was %d)", comm->rank, new_size,
           comm->nranks);
  return Status::Ok();
}

}  // namespace ddl
