#include "lib/transports/network_transport.h"

#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/transports/ucx/ucx_transport.h"

namespace ddl {
namespace {

// A peer on another host silent for this long is unreachable (DDL_PEER_TIMEOUT_MS; 0: never).
// 5 s: detection within 10 s with room for a notice; long enough that a busy link (beats
// queue behind data) or a loaded machine never delays five beats in a row.
constexpr int kDefaultPeerTimeoutMs = 5000;

using Maker = Status (*)(int rank, int nranks, const NetworkOptions &options,
                         std::unique_ptr<NetworkTransport> *out);

struct Kind {
  const char *name;
  Maker make;
};

Status make_ucx(int rank, int nranks, const NetworkOptions &options,
                std::unique_ptr<NetworkTransport> *out) {
  std::unique_ptr<UcxTransport> made;
  DDL_RETURN_IF_ERROR(UcxTransport::create(rank, nranks, &made, options));
  *out = std::move(made);
  return Status::Ok();
}

// Every kind of network transport, by the name make_network_transport takes.
const Kind kKinds[] = {{"ucx", make_ucx}};

}  // namespace

int peer_timeout_ms() {
  const std::string text = env_string("DDL_PEER_TIMEOUT_MS");
  int64_t value = kDefaultPeerTimeoutMs;
  if (!text.empty() && !parse_int(text, 0, INT32_MAX, &value)) {
    DDL_WARN("ignoring DDL_PEER_TIMEOUT_MS=%s: expected milliseconds (0: no heartbeats)",
             text.c_str());
    value = kDefaultPeerTimeoutMs;
  }
  return static_cast<int>(value);
}

Status make_network_transport(const std::string &kind, int rank, int nranks,
                              const NetworkOptions &options,
                              std::unique_ptr<NetworkTransport> *out) {
  std::string known;
  for (const Kind &k : kKinds) {
    if (kind == k.name) return k.make(rank, nranks, options, out);
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  return invalid_argument("no network transport of kind '%s' (known: %s)", kind.c_str(),
                          known.c_str());
}

}  // namespace ddl
