#include "lib/core/dispatch.h"

#include "lib/common/log.h"
#include "lib/core/call_checks.h"
#include "lib/core/direct_allreduce.h"
#include "lib/core/flat_collectives.h"
#include "lib/core/point_to_point.h"
#include "lib/device/staging.h"

namespace ddl {
namespace {

// send_recv: messages between two ranks, outside the collectives' sequence; device memory
// through a bounce buffer of their own.
bool send_recv_possible(const ddl_comm *, const CollectiveCall &call, const CallPlace &) {
  return is_point_to_point(call.collective);
}
std::string why_send_recv(ddl_comm *, const CollectiveCall &, const CallPlace &place) {
  return place.on_device() ? "send_recv (matched per pair and tag in posting order, through "
                             "host memory: the device buffer copied out or in)"
                           : "send_recv (matched per pair and tag in posting order, straight "
                             "from the caller's buffer: shared memory inside a host, UCX "
                             "across hosts)";
}
Status run_send_recv(ddl_comm *comm, const CollectiveCall &call, const CallPlace &) {
  return run_point_to_point(comm, {call});
}

// cuda_ipc and staged: device buffers (lib/device).
bool cuda_ipc_possible(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  return place.on_device() && device::cuda_ipc_possible(comm, call, nullptr);
}
std::string why_cuda_ipc(ddl_comm *comm, const CollectiveCall &, const CallPlace &) {
  return strprintf(
      "cuda_ipc (every rank on this host, %d ranks reading each other's device memory, "
      "reduction kernels)",
      comm->nranks);
}
Status run_cuda_ipc(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  return device::run_cuda_ipc(comm, call, place.where, place.from_stream);
}

bool staged_possible(const ddl_comm *, const CollectiveCall &call, const CallPlace &place) {
  // locate_buffers refused the calls without a device path; send_recv takes the others.
  return place.on_device() && !is_point_to_point(call.collective);
}
std::string why_staged(ddl_comm *comm, const CollectiveCall &call, const CallPlace &) {
  std::string why_not_ipc;
  device::cuda_ipc_possible(comm, call, &why_not_ipc);
  return "staged (through pinned host memory: " + why_not_ipc + ")";
}
Status run_staged(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  return device::run_staged(comm, call, place.where, place.from_stream);
}

// direct, flat and schedule: the host's ways, each a runner (of its own file) to which
// run_host_collective hands the prepared call (host memory only).
using HostTest = bool (*)(const ddl_comm *, const CollectiveCall &);
using HostWhy = std::string (*)(const ddl_comm *, const CollectiveCall &);

template <HostTest test>
bool on_host(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  return !place.on_device() && test(comm, call);
}
template <HostWhy host_why>
std::string why_of(ddl_comm *comm, const CollectiveCall &call, const CallPlace &) {
  return host_why(comm, call);
}
template <typename Runner>
Status run_on_host(ddl_comm *comm, const CollectiveCall &call, const CallPlace &) {
  static Runner runner;
  return run_host_collective(comm, call, runner);
}

// schedule: every host call but a send or receive.
bool schedule_possible(const ddl_comm *, const CollectiveCall &call, const CallPlace &place) {
  return !place.on_device() && !is_point_to_point(call.collective);
}
std::string why_schedule_way(ddl_comm *comm, const CollectiveCall &call, const CallPlace &) {
  return why_schedule(comm, call);
}

bool forced_by_name(const ddl_comm *comm, const Way &way) {
  return way.forcible && comm->config.algorithm == way.name;
}

// Whether no call of this collective, count and memory went this communicator's way before
// (at most kMaxLoggedShapes remembered: training loops repeat a handful of shapes).
constexpr size_t kMaxLoggedShapes = 256;
bool first_of_its_shape(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  if (comm->logged_shapes.size() >= kMaxLoggedShapes) comm->logged_shapes.clear();
  return comm->logged_shapes.insert({call.collective, call.count, place.on_device()}).second;
}

}  // namespace

const std::vector<Way> &ways() {
  static const std::vector<Way> rows = {
      {"send_recv", false, send_recv_possible, send_recv_possible, why_send_recv, run_send_recv},
      {"cuda_ipc", false, cuda_ipc_possible, cuda_ipc_possible, why_cuda_ipc, run_cuda_ipc},
      {"staged", false, staged_possible, staged_possible, why_staged, run_staged},
      {"direct", true, on_host<direct_collective_possible>, on_host<direct_collective_applies>,
       why_of<why_direct>, run_on_host<DirectRunner>},
      {"flat", true, on_host<flat_collective_possible>, on_host<flat_collective_applies>,
       why_of<why_flat_collective>, run_on_host<FlatRunner>},
      {"schedule", false, schedule_possible, schedule_possible, why_schedule_way,
       run_on_host<ScheduleRunner>},
  };
  return rows;
}

const Way &choose_way(const ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  const std::vector<Way> &rows = ways();
  if (!comm->config.algorithm.empty()) {
    for (const Way &way : rows)
      if (forced_by_name(comm, way) && way.possible(comm, call, place)) return way;
    // A schedule's name: the schedule row, which hands the name to the registry (args_of).
    const Way &schedule = rows.back();
    if (!forced_schedule(comm, call.collective).empty() && schedule.possible(comm, call, place))
      return schedule;
  }
  // send_recv, staged and schedule take every call of their kind and place: the loop ends on
  // one of them.
  for (const Way &way : rows)
    if (way.applies(comm, call, place)) return way;
  return rows.back();
}

Status dispatch(ddl_comm *comm, const CollectiveCall &call, const CallPlace &place) {
  // The rows decide on checked calls and run them unchecked: the check is here alone.
  bool in_place = false;
  Status checked = check_call(comm, call, &in_place);
  if (!checked.ok()) {
    // Built only on failure: the success path stays free of string formatting. A collective's
    // words name its sequence number; a send or receive is outside the sequence.
    const std::string context =
        is_point_to_point(call.collective)
            ? call_words(comm, call)
            : describe_call(comm, call, static_cast<uint32_t>(comm->calls)) + ": ";
    return checked.prefix(context);
  }
  const Way &way = choose_way(comm, call, place);
  // Once per shape; the level first: a training loop at the default level pays no lookup.
  if (log_level() >= LogLevel::kInfo && first_of_its_shape(comm, call, place)) {
    const std::string why = forced_by_name(comm, way)
                                ? std::string(way.name) + " (forced by DDL_ALGO)"
                                : way.why(comm, call, place);
    DDL_INFO("%s of %zu B%s: %s", collective_name(call.collective), call_bytes(call),
             place.on_device() ? " of device memory" : "", why.c_str());
  }
  return way.run(comm, call, place);
}

Status run_collective(ddl_comm *comm, const CollectiveCall &call) {
  if (call.stream) return device::run_stream_call(comm, call);
  CallPlace place;
  if (comm->device_buffers) {
    Status s = locate_buffers(call, &place.where);
    if (!s.ok())
      return s.prefix(describe_call(comm, call, static_cast<uint32_t>(comm->calls)) + ": ");
  }
  return dispatch(comm, call, place);
}

void warn_of_unavailable_way(const ddl_comm *comm) {
  const std::string &forced = comm->config.algorithm;
  if (comm->nranks < 2) return;
  if (forced == "direct" && !(comm->cma && comm->hosts == 1))
    DDL_WARN(
        "DDL_ALGO=direct needs every rank on one host and single-copy transfers between "
        "them; neither here: the calls are chosen as without it");
  if (forced == "flat" && !comm->flat)
    DDL_WARN(
        "DDL_ALGO=flat needs every rank on one host and shared memory between them; not "
        "here: the calls are chosen as without it");
}

}  // namespace ddl
