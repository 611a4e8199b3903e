#include "lib/transports/ucx/ucx_heartbeat.h"

#include <algorithm>

#include "lib/common/log.h"
#include "lib/transports/ucx/ucx_connections.h"

namespace ddl {
namespace {

constexpr uint32_t kBeat = 1, kGoodbye = 2;
constexpr ucp_tag_t kBeatTag = 0x6862;  // the worker carries nothing else
// How often the thread looks at its worker and the clock: the detection's granularity.
constexpr auto kPoll = std::chrono::milliseconds(20);
// How long the goodbye and the closing may take at destroy.
constexpr auto kCloseBudget = std::chrono::milliseconds(1000);

// Five beats per limit: one lost or late beat (a retransmission behind a full link) is
// never enough to declare a peer lost. At most one a second: O(peers) small messages.
std::chrono::milliseconds interval_for(int timeout_ms) {
  return std::chrono::milliseconds(std::clamp(timeout_ms / 5, 50, 1000));
}

Status ucx_failure(ucs_status_t status, const char *what) {
  return Status(DDL_ERR_SYSTEM, strprintf("%s: UCX error: %s", what, ucs_status_string(status)));
}

bool wait_request(ucp_worker_h worker, void *request,
                  std::chrono::steady_clock::time_point deadline) {
  while (ucp_request_check_status(request) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(worker);
  return ucp_request_check_status(request) != UCS_INPROGRESS;
}

}  // namespace

std::vector<void *> close_endpoints_of(std::vector<ucp_ep_h> *endpoints,
                                       const std::vector<bool> &flushed) {
  std::vector<void *> closing;
  for (size_t p = 0; p < endpoints->size(); ++p) {
    if (!(*endpoints)[p]) continue;
    ucp_request_param_t param = {};
    if (!flushed[p]) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t r = ucp_ep_close_nbx((*endpoints)[p], &param);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
    (*endpoints)[p] = nullptr;
  }
  return closing;
}

UcxHeartbeat::UcxHeartbeat(int rank, int nranks, int timeout_ms)
    : rank_(rank), nranks_(nranks), timeout_ms_(timeout_ms), interval_(interval_for(timeout_ms)) {}

Status UcxHeartbeat::create(ucp_context_h context, int rank, int nranks, int timeout_ms,
                            std::unique_ptr<UcxHeartbeat> *out) {
  std::unique_ptr<UcxHeartbeat> h(new UcxHeartbeat(rank, nranks, timeout_ms));
  ucp_worker_params_t params = {};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;  // only its thread drives it (after start)
  ucs_status_t st = ucp_worker_create(context, &params, &h->worker_);
  if (st != UCS_OK) return ucx_failure(st, "creating the heartbeat worker");
  ucp_address_t *address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(h->worker_, &address, &length);
  if (st != UCS_OK) return ucx_failure(st, "ucp_worker_get_address (heartbeat)");
  h->address_.assign(reinterpret_cast<const char *>(address), length);
  ucp_worker_release_address(h->worker_, address);
  h->lost_.reset(new std::atomic<int>[nranks]);
  for (int p = 0; p < nranks; ++p) h->lost_[p].store(0);
  *out = std::move(h);
  return Status::Ok();
}

Status UcxHeartbeat::start(const std::vector<std::string> &addresses,
                           const std::vector<std::string> &hosts) {
  hosts_ = hosts;
  endpoints_.assign(nranks_, nullptr);
  said_goodbye_.assign(nranks_, false);
  endpoint_errors_.assign(nranks_, UCS_OK);
  last_heard_.assign(nranks_, std::chrono::steady_clock::now());
  error_contexts_.clear();
  error_contexts_.reserve(nranks_);
  for (int p = 0; p < nranks_; ++p) error_contexts_.push_back(ErrorContext{this, p});
  beat_ = Beat{static_cast<uint32_t>(rank_), kBeat};
  goodbye_ = Beat{static_cast<uint32_t>(rank_), kGoodbye};
  bool any = false;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || addresses[p].empty()) continue;
    ucp_ep_params_t ep = {};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t *>(addresses[p].data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // a broken connection is news, not an abort
    ep.err_handler.cb = on_error;
    ep.err_handler.arg = &error_contexts_[p];
    ucs_status_t st = ucp_ep_create(worker_, &ep, &endpoints_[p]);
    if (st != UCS_OK) {
      endpoints_[p] = nullptr;
      return ucx_failure(st, strprintf("creating the heartbeat endpoint to rank %d", p).c_str());
    }
    any = true;
  }
  if (!any) return Status::Ok();
  DDL_INFO("heartbeats to the ranks on other hosts every %lld ms; silence for %d ms is a failure",
           static_cast<long long>(interval_.count()), timeout_ms_);
  thread_ = std::thread([this] { run(); });
  return Status::Ok();
}

void UcxHeartbeat::on_receive(void * /*request*/, ucs_status_t status,
                              const ucp_tag_recv_info_t * /*info*/, void *user_data) {
  auto *self = static_cast<UcxHeartbeat *>(user_data);
  self->receive_done_ = true;
  self->receive_status_ = status;
}

void UcxHeartbeat::on_error(void *arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto *ctx = static_cast<ErrorContext *>(arg);
  UcxHeartbeat *self = ctx->self;
  if (self->endpoint_errors_[ctx->peer] != UCS_OK) return;
  self->endpoint_errors_[ctx->peer] = status;
  // A peer that said goodbye destroyed its communicator: its connection closing is expected.
  // Otherwise its process died (the kernel reset the connection) or the network broke.
  if (!self->said_goodbye_[ctx->peer] && self->lost_[ctx->peer].load() == 0) {
    DDL_INFO("heartbeat connection to rank %d broke: %s", ctx->peer, ucs_status_string(status));
    self->lost_[ctx->peer].store(-1);
  }
}

void UcxHeartbeat::post_receive() {
  // Loops while beats are already waiting: such a receive completes at once.
  for (;;) {
    receive_done_ = false;
    ucp_tag_recv_info_t info = {};
    ucp_request_param_t param = {};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
    param.cb.recv = on_receive;
    param.user_data = this;
    param.recv_info.tag_info = &info;
    ucs_status_ptr_t p = ucp_tag_recv_nbx(worker_, &in_, sizeof in_, kBeatTag, 0, &param);
    if (UCS_PTR_IS_ERR(p)) {
      DDL_WARN("heartbeats: posting a receive failed: %s", ucs_status_string(UCS_PTR_STATUS(p)));
      receive_ = nullptr;
      return;
    }
    if (p != nullptr) {
      receive_ = p;
      return;
    }
    received(UCS_OK);
  }
}

void UcxHeartbeat::received(ucs_status_t status) {
  if (status != UCS_OK) return;
  if (in_.rank >= static_cast<uint32_t>(nranks_)) return;
  const int from = static_cast<int>(in_.rank);
  if (in_.kind == kGoodbye) said_goodbye_[from] = true;
  last_heard_[from] = std::chrono::steady_clock::now();
}

void UcxHeartbeat::send_all(uint32_t kind) {
  ucp_request_param_t param = {};  // no callback: freed at once below, UCX finishes it
  for (int p = 0; p < nranks_; ++p) {
    if (!endpoints_[p] || endpoint_errors_[p] != UCS_OK) continue;
    ucs_status_ptr_t r = ucp_tag_send_nbx(endpoints_[p], kind == kBeat ? &beat_ : &goodbye_,
                                          sizeof(Beat), kBeatTag, &param);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  }
}

void UcxHeartbeat::check_silence(std::chrono::steady_clock::time_point now) {
  const auto limit = std::chrono::milliseconds(timeout_ms_);
  bool declared = false;
  for (int p = 0; p < nranks_; ++p) {
    if (!endpoints_[p] || said_goodbye_[p] || lost_[p].load() != 0) continue;
    if (now - last_heard_[p] >= limit) declared = true;
  }
  if (!declared) return;
  // Peers that went silent together (one host's ranks behind one link) are named together,
  // so that every survivor names the same ranks: whoever is silent for half the limit (many
  // missed beats) is declared with the one that crossed it.
  for (int p = 0; p < nranks_; ++p) {
    if (!endpoints_[p] || said_goodbye_[p] || lost_[p].load() != 0) continue;
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[p]);
    if (silent >= limit / 2) {
      DDL_INFO("rank %d (host %s): nothing heard for %lld ms", p, hosts_[p].c_str(),
               static_cast<long long>(silent.count()));
      lost_[p].store(static_cast<int>(std::max<long long>(1, silent.count())));
    }
  }
}

void UcxHeartbeat::run() {
  post_receive();
  auto next_beat = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    auto now = std::chrono::steady_clock::now();
    if (now >= next_beat) {
      send_all(kBeat);
      next_beat = now + interval_;
    }
    for (;;) {
      const unsigned events = ucp_worker_progress(worker_);
      if (receive_done_ && receive_) {
        ucp_request_free(receive_);
        receive_ = nullptr;
        received(receive_status_);
        post_receive();
        continue;
      }
      if (events == 0) break;
    }
    check_silence(std::chrono::steady_clock::now());
    lock.lock();
    wake_.wait_for(lock, kPoll, [this] { return stop_; });
  }
}

void UcxHeartbeat::close_endpoints() {
  if (endpoints_.empty()) return;  // start() never ran (init failed before it)
  const auto deadline = std::chrono::steady_clock::now() + kCloseBudget;
  // Flush first (the goodbye included) with a deadline; then close, forcing the endpoints
  // that did not flush: a flush towards an unreachable host never ends, and a flushing
  // close cannot be cancelled (UCX 1.13 asserts in ucp_worker_destroy if one is left).
  std::vector<void *> flushes(nranks_, nullptr);
  std::vector<bool> flushed(nranks_, false);
  for (int p = 0; p < nranks_; ++p) {
    if (!endpoints_[p] || endpoint_errors_[p] != UCS_OK || lost_[p].load() != 0) continue;
    ucp_request_param_t param = {};
    ucs_status_ptr_t r = ucp_ep_flush_nbx(endpoints_[p], &param);
    if (r == nullptr)
      flushed[p] = true;
    else if (!UCS_PTR_IS_ERR(r))
      flushes[p] = r;
  }
  for (int p = 0; p < nranks_; ++p) {
    if (!flushes[p]) continue;
    flushed[p] = wait_request(worker_, flushes[p], deadline) &&
                 ucp_request_check_status(flushes[p]) == UCS_OK;
  }
  const std::vector<void *> closing = close_endpoints_of(&endpoints_, flushed);
  // A forced close completes the unfinished flushes (UCS_ERR_CANCELED).
  for (void *r : closing) {
    wait_request(worker_, r, std::max(deadline, std::chrono::steady_clock::now() + kPoll));
    ucp_request_free(r);
  }
  for (void *r : flushes)
    if (r) ucp_request_free(r);
}

void UcxHeartbeat::drain_unexpected() {
  // Beats and goodbyes that arrived after the standing receive was cancelled: received into
  // a sink, or UCX warns "unexpected tag-receive descriptor was not matched" for each one
  // when the worker is destroyed.
  Beat sink;
  for (int left = 4 * nranks_ + 16; left > 0; --left) {
    ucp_worker_progress(worker_);
    ucp_tag_recv_info_t info = {};
    ucp_tag_message_h message = ucp_tag_probe_nb(worker_, kBeatTag, 0, 1, &info);
    if (!message) break;
    ucp_request_param_t param = {};
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, &sink, sizeof sink, message, &param);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) continue;
    wait_request(worker_, r, std::chrono::steady_clock::now() + kPoll);
    ucp_request_free(r);
  }
}

UcxHeartbeat::~UcxHeartbeat() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    // The thread is gone: this thread drives the worker from here on.
    send_all(kGoodbye);
  }
  if (worker_) {
    if (receive_) {
      ucp_request_cancel(worker_, receive_);
      while (!receive_done_ && ucp_worker_progress(worker_) != 0) {
      }
      ucp_request_free(receive_);
      receive_ = nullptr;
    }
    close_endpoints();
    drain_unexpected();
    ucp_worker_destroy(worker_);
  }
}

std::string UcxHeartbeat::describe(int peer, const std::vector<int> &rank_of) const {
  const int silent = lost_[peer].load();
  const int rank = shown_rank(rank_of, peer);
  const std::string one =
      silent < 0 ? strprintf("rank %d (host %s) unreachable: its heartbeat connection broke", rank,
                             hosts_[peer].c_str())
                 : strprintf("rank %d (host %s) unreachable: nothing heard for %.1f s", rank,
                             hosts_[peer].c_str(), silent / 1000.0);
  return one + others_lost(peer, rank_of) + strprintf(" (DDL_PEER_TIMEOUT_MS=%d)", timeout_ms_);
}

// The others by name too: survivors that noticed different ranks first still name the same
// set. Peers that are not members of the asking communicator are not its concern.
std::string UcxHeartbeat::others_lost(int peer, const std::vector<int> &rank_of) const {
  std::string others;
  for (int p = 0; p < nranks_; ++p)
    if (p != peer && lost(p) && shown_rank(rank_of, p) >= 0)
      others += strprintf("%srank %d (host %s)", others.empty() ? "" : ", ", shown_rank(rank_of, p),
                          hosts_[p].c_str());
  return others.empty() ? "" : "; also unreachable: " + others;
}

}  // namespace ddl
