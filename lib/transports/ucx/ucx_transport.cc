#include "lib/transports/ucx/ucx_transport.h"

#include <utility>

#include "lib/common/log.h"

namespace ddl {
namespace {

// Tag layout: sender rank (20 bits) | generation (4 bits) | sequence number (16 bits) | step
// tag (24 bits). Receives name the sender, so a message can only match the receive meant for
// it; the generation tells a communicator's messages from those of the communicator it was
// shrunk from, which share its worker (UcxTransport::subset).
constexpr int kRankBits = 20, kGenerationBits = 4, kSeqBits = kTransportSeqBits, kTagBits = 24;
static_assert(kRankBits + kGenerationBits + kSeqBits + kTagBits == 64, "the tag is 64 bits");
static_assert(UcxTransport::kGenerations == 1u << kGenerationBits, "generations fit their bits");
constexpr uint64_t kFullMask = ~0ull;
// What a receive from any rank compares: the generation and the step tag.
constexpr uint64_t kAnySourceMask =
    (((1ull << kGenerationBits) - 1) << (kSeqBits + kTagBits)) | ((1ull << kTagBits) - 1);

ucp_tag_t make_tag(int sender, uint32_t generation, uint32_t seq, uint32_t tag) {
  return (static_cast<uint64_t>(sender) << (kGenerationBits + kSeqBits + kTagBits)) |
         (static_cast<uint64_t>(generation) << (kSeqBits + kTagBits)) |
         (static_cast<uint64_t>(seq & ((1u << kSeqBits) - 1)) << kTagBits) |
         static_cast<uint64_t>(tag & ((1u << kTagBits) - 1));
}

Status ucx_error(ucs_status_t status, const char *what) {
  return Status(DDL_ERR_SYSTEM, strprintf("%s: UCX error: %s", what, ucs_status_string(status)));
}

// Completion of a request that did not complete at once. Frees the UCX request here: the
// executor only looks at its own TransferRequest.
void finish(void *request, ucs_status_t status, size_t received, TransferRequest *owner) {
  UcxRequest *r = static_cast<UcxRequest *>(request);
  if (!r->detached) {
    owner->received = owner->empty_payload ? 0 : received;
    // A message longer than its receive is the caller's mistake, not the transport's: said
    // in the words of a size mismatch (UCX does not tell the message's length then).
    if (status == UCS_ERR_MESSAGE_TRUNCATED)
      owner->status = invalid_usage("the message is longer than the receive");
    else if (status != UCS_OK)
      owner->status = ucx_error(status, "transfer failed");
    owner->handle = nullptr;
    owner->done = true;
  }
  r->detached = false;
  ucp_request_free(request);
}

void on_send_done(void *request, ucs_status_t status, void *user_data) {
  finish(request, status, 0, static_cast<TransferRequest *>(user_data));
}

// Empty messages (barrier signals, empty blocks) travel as one ignored byte, so that every
// message has a payload whose length can be checked.
uint8_t g_empty_payload = 0;

void on_recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                  void *user_data) {
  finish(request, status, status == UCS_OK ? info->length : 0,
         static_cast<TransferRequest *>(user_data));
}

}  // namespace

Status UcxTransport::create(int rank, int nranks, std::unique_ptr<UcxTransport> *out,
                            const NetworkOptions &options) {
  std::unique_ptr<UcxTransport> t(new UcxTransport(rank, nranks));
  DDL_RETURN_IF_ERROR(UcxConnections::create(rank, nranks, options, &t->connections_));
  *out = std::move(t);
  return Status::Ok();
}

UcxTransport::~UcxTransport() = default;  // the last holder of the connections frees them

const std::string &UcxTransport::worker_address() const {
  static const std::string none;
  return connections_ ? connections_->address() : none;
}

Status UcxTransport::connect(const std::vector<PeerAddress> &peers) {
  if (!connections_) return retired_error();
  return connections_->connect(peers);
}

void UcxTransport::close(int timeout_ms) {
  // Shared with a shrunk communicator's transport: that one's end closes them.
  if (connections_ && connections_.use_count() == 1) connections_->close(timeout_ms);
}

bool UcxTransport::can_subset(const std::vector<int> &members) const {
  if (!connections_ || generation_ + 1 >= kGenerations) return false;
  for (int m : members)
    if (m < 0 || m >= nranks_ || !connections_->healthy(index_of(m))) return false;
  return true;
}

Status UcxTransport::subset(int rank, const std::vector<int> &members,
                            std::unique_ptr<NetworkTransport> *out) {
  if (!can_subset(members))
    return unsupported("the connections to the %zu members cannot be kept", members.size());
  const int n = static_cast<int>(members.size());
  std::unique_ptr<UcxTransport> t(new UcxTransport(rank, n));
  t->generation_ = generation_ + 1;
  t->connections_ = connections_;
  t->rank_of_.assign(connections_->count(), -1);
  for (int r = 0; r < n; ++r) {
    const int index = index_of(members[r]);
    t->index_of_.push_back(index);
    t->rank_of_[index] = r;
  }
  *out = std::move(t);
  return Status::Ok();
}

void UcxTransport::retire(const std::string &why) {
  retired_ = why;
  connections_.reset();
}

Status UcxTransport::retired_error() const {
  return invalid_usage("rank %d: this communicator's connections %s", rank_,
                       retired_.empty() ? "are closed" : retired_.c_str());
}

Status UcxTransport::peer_status(int peer) const {
  if (!connections_) return retired_error();
  if (peer < 0 || peer >= nranks_) return Status::Ok();
  return connections_->peer_status(index_of(peer), rank_of_);
}

bool UcxTransport::peer_death_final(int peer) const {
  return connections_ && peer >= 0 && peer < nranks_ && connections_->death_final(index_of(peer));
}

Status UcxTransport::post_send(int peer, uint32_t seq, uint32_t tag, const void *buf, size_t bytes,
                               TransferRequest *req) {
  *req = TransferRequest();
  DDL_RETURN_IF_ERROR(peer_status(peer));
  const int index = index_of(peer);
  ucp_ep_h endpoint = connections_->endpoint(index);
  if (!endpoint)
    return internal_error("rank %d: no UCX endpoint to rank %d on this transport (%s)", rank_, peer,
                          name());
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_done;
  param.user_data = req;
  if (bytes == 0) {
    buf = &g_empty_payload;
    bytes = 1;
  }
  ucs_status_ptr_t p =
      ucp_tag_send_nbx(endpoint, buf, bytes, make_tag(rank_, generation_, seq, tag), &param);
  if (p == nullptr) {
    req->done = true;
  } else if (UCS_PTR_IS_ERR(p)) {
    return connections_->send_failed(index, UCS_PTR_STATUS(p), rank_of_);
  } else if (!req->done) {
    req->handle = p;
  }
  return Status::Ok();
}

Status UcxTransport::post_recv(int peer, uint32_t seq, uint32_t tag, void *buf, size_t bytes,
                               TransferRequest *req) {
  return post_tag_recv(make_tag(peer, generation_, seq, tag), kFullMask, buf, bytes, req,
                       strprintf("rank %d", peer).c_str());
}

Status UcxTransport::post_recv_any(uint32_t tag, void *buf, size_t bytes, TransferRequest *req) {
  return post_tag_recv(make_tag(0, generation_, 0, tag), kAnySourceMask, buf, bytes, req,
                       "any rank");
}

// A probe that leaves the message where it is (remove = 0): the receive posted after it
// finds it among UCX's unexpected messages, eager or rendezvous alike.
bool UcxTransport::probe(int peer, uint32_t seq, uint32_t tag) {
  if (!connections_) return false;
  ucp_tag_recv_info_t info = {};
  return ucp_tag_probe_nb(connections_->worker(), make_tag(peer, generation_, seq, tag), kFullMask,
                          0, &info) != nullptr;
}

Status UcxTransport::post_tag_recv(uint64_t tag, uint64_t mask, void *buf, size_t bytes,
                                   TransferRequest *req, const char *from) {
  *req = TransferRequest();
  if (!connections_) return retired_error();
  // UCX 1.13 completes a receive of a message already there at once without filling
  // recv_info (its length stays at the sentinel), and messages may be shorter than the
  // buffer (a call signature with or without data): so no immediate completion, the
  // callback reports every length. The sentinel stays as a guard: "the whole buffer".
  ucp_tag_recv_info_t info = {};
  info.length = SIZE_MAX;
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = on_recv_done;
  param.user_data = req;
  param.recv_info.tag_info = &info;
  const bool empty = bytes == 0;
  if (empty) {
    buf = connections_->empty_sink();
    bytes = 1;
    req->empty_payload = true;
  }
  ucs_status_ptr_t p = ucp_tag_recv_nbx(connections_->worker(), buf, bytes, tag, mask, &param);
  if (UCS_PTR_IS_ERR(p))
    return ucx_error(UCS_PTR_STATUS(p), strprintf("receiving from %s", from).c_str());
  if (p == nullptr && !req->done) {  // completed at once without the callback
    req->received = empty ? 0 : info.length == SIZE_MAX ? bytes : info.length;
    req->done = true;
  } else if (p != nullptr && !req->done) {
    req->handle = p;
  }
  return Status::Ok();
}

bool UcxTransport::progress() {
  return connections_ && ucp_worker_progress(connections_->worker()) != 0;
}

void UcxTransport::cancel(TransferRequest *req) {
  if (req->done || req->handle == nullptr || !connections_) return;
  static_cast<UcxRequest *>(req->handle)->detached = true;  // the callback will only free it
  ucp_request_cancel(connections_->worker(), req->handle);
  req->handle = nullptr;
}

}  // namespace ddl
