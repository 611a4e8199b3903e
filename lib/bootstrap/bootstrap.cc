// The bootstrap's life: validating options, the connect phase (handshake.h), and the two
// collectives, allgather and barrier, relayed through rank 0 (frame format in wire.h).
#include "lib/bootstrap/bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <mutex>

#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/pmix.h"
#include "lib/bootstrap/token.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"
#include "lib/common/params.h"

namespace ddl {

using bootstrap::Deadline;
using bootstrap::IoResult;
using bootstrap::IoStatus;
namespace wire = bootstrap::wire;

static_assert(Bootstrap::kMaxBlobBytes == wire::kMaxBlob, "one bound for blobs");

BootstrapOptions bootstrap_options_from(const LaunchInfo &info, int timeout_ms) {
  BootstrapOptions opts;
  opts.rank = info.rank;
  opts.nranks = info.nranks;
  opts.root_addr = info.root_addr;
  opts.rendezvous_file = info.rendezvous_file;
  opts.pmix = info.pmix;
  opts.job_token = info.job_token;
  // Where rank 0 publishes its address it can publish a secret too: DDL_JOB_TOKEN, when given,
  // still wins.
  opts.fresh_token = info.root_addr.empty() && info.job_token.empty();
  opts.listen_host = info.root_host;
  opts.timeout_ms = timeout_ms;
  opts.all_local = info.local_size > 0 && info.local_size == info.nranks;
  return opts;
}

namespace {

Status validate(const BootstrapOptions &o) {
  if (o.nranks < 1 || o.nranks > wire::kMaxRanks)
    return invalid_argument("bootstrap: nranks %d is not in 1..%d", o.nranks, wire::kMaxRanks);
  if (o.rank < 0 || o.rank >= o.nranks)
    return invalid_argument("bootstrap: rank %d is not in 0..%d", o.rank, o.nranks - 1);
  if (o.timeout_ms <= 0)
    return invalid_argument("bootstrap: rank %d: timeout_ms %d must be positive", o.rank,
                            o.timeout_ms);
  if (o.job_token.size() > wire::kMaxToken)
    return invalid_argument("bootstrap: rank %d: job token of %zu bytes; at most %zu", o.rank,
                            o.job_token.size(), wire::kMaxToken);
  if (o.nranks == 1) return Status::Ok();
  if (!o.root_addr.empty()) {
    std::string host;
    int port = 0;
    Status st = bootstrap::parse_host_port(o.root_addr, &host, &port);
    if (!st.ok()) return st.prefix(strprintf("bootstrap: rank %d: root address: ", o.rank));
    if (port == 0 && o.rendezvous_file.empty())
      return invalid_argument("bootstrap: rank %d: root address %s: port 0 needs a rendezvous file",
                              o.rank, o.root_addr.c_str());
  } else if (o.rendezvous_file.empty() && !o.pmix) {
    return invalid_argument(
        "bootstrap: rank %d: neither a root address nor a rendezvous file nor PMIx", o.rank);
  }
  return Status::Ok();
}

// BootstrapOptions::relay_fanout, resolved.
int relay_fanout(const BootstrapOptions &o) {
  int64_t fanout = o.relay_fanout;
  const std::string text = env_string("DDL_BOOTSTRAP_FANOUT");
  if (fanout <= 0 && !text.empty() && !parse_int(text, 1, wire::kMaxRanks, &fanout)) {
    DDL_WARN("ignoring DDL_BOOTSTRAP_FANOUT=%s: expected a number of ranks from 1", text.c_str());
    fanout = 0;
  }
  if (fanout > 0) return static_cast<int>(fanout);
  return o.nranks <= bootstrap::kStarRanks ? std::max(1, o.nranks - 1) : bootstrap::kRelayFanout;
}

// How rank 0's address reaches the others.
enum class Publish { kNone, kPmix, kFile };

// The same answer on every rank of a job (the same options, the same libddl and libpmix).
Publish publish_mode(const BootstrapOptions &o) {
  std::string host;
  int port = 0;
  // root_addr with a real port is announced by the launcher: nothing to publish.
  if (!o.root_addr.empty() && bootstrap::parse_host_port(o.root_addr, &host, &port).ok() &&
      port != 0)
    return Publish::kNone;
  if (o.pmix && o.root_addr.empty()) {
    Status loaded = bootstrap::pmix_load();
    if (loaded.ok()) return Publish::kPmix;
    if (o.rendezvous_file.empty()) return Publish::kNone;  // validate() let it through: kPmix
    static std::once_flag warned;
    std::call_once(warned, [&] {
      DDL_WARN(
          "bootstrap: the launcher runs a PMIx server, but %s; rank 0 publishes its "
          "address in %s instead (on several hosts that needs a shared directory: "
          "DDL_RENDEZVOUS_DIR, or DDL_ROOT)",
          loaded.message().c_str(), o.rendezvous_file.c_str());
    });
    return Publish::kFile;
  }
  return o.rendezvous_file.empty() ? Publish::kNone : Publish::kFile;
}

// Rank 0 serving without a secret: once per process, say so and how to fix it.
void warn_open_rendezvous(const std::string &addr) {
  static std::once_flag warned;
  std::call_once(warned, [&] {
    DDL_WARN(
        "bootstrap: rank 0: the rendezvous at %s is open: it takes any connection that "
        "names a rank (no job token). Set DDL_JOB_TOKEN to the same secret on every "
        "rank (config.job_token), or, under mpirun or srun, leave DDL_ROOT unset so that "
        "rank 0 makes a token and sends it through PMIx or the rendezvous file.",
        addr.c_str());
  });
}

// Ranks other than 0 under PMIx: rank 0's address (and token) from the exchange.
Status root_from_pmix(BootstrapOptions *o, const Deadline &deadline) {
  std::string text;
  Status st = bootstrap::pmix_exchange(o->rank, deadline, &text);
  if (!st.ok()) return st.prefix("bootstrap: ");
  if (!text.empty() && text[0] == '!')
    return remote_error("bootstrap: rank %d: rank 0 could not open its rendezvous: %s", o->rank,
                        text.c_str() + 1);
  std::string addr, token, why;
  bool has_token = false;
  if (!bootstrap::parse_published(text, &addr, &token, &has_token, &why))
    return remote_error("bootstrap: rank %d: rank 0's rendezvous through PMIx, '%s', %s", o->rank,
                        text.substr(0, 200).c_str(), why.c_str());
  if (o->fresh_token && !has_token)
    return invalid_argument(
        "bootstrap: rank %d: rank 0 published its rendezvous %s through PMIx without a job "
        "token: DDL_JOB_TOKEN is set on rank 0 and not on this rank (set it on every rank, or "
        "on none)",
        o->rank, addr.c_str());
  DDL_INFO("bootstrap: rank %d: rank 0's rendezvous %s came through PMIx%s", o->rank, addr.c_str(),
           o->fresh_token ? ", with a fresh job token" : "");
  o->root_addr = addr;
  if (o->fresh_token) o->job_token = token;
  o->rendezvous_file.clear();
  o->pmix = false;
  return Status::Ok();
}

}  // namespace

Status Bootstrap::create(const BootstrapOptions &opts, std::unique_ptr<Bootstrap> *out) {
  if (!out) return invalid_argument("bootstrap: null output");
  Status valid = validate(opts);
  if (!valid.ok()) {
    if (opts.listen_fd >= 0) ::close(opts.listen_fd);  // ours to close, whatever happens
    return valid;
  }
  std::unique_ptr<Bootstrap> b(new Bootstrap(opts));
  if (opts.nranks == 1) {
    *out = std::move(b);
    return Status::Ok();
  }
  Deadline deadline(opts.timeout_ms);
  const Publish mode = publish_mode(opts);
  if (opts.pmix && opts.root_addr.empty() && mode == Publish::kNone) {
    if (opts.listen_fd >= 0) ::close(opts.listen_fd);
    return bootstrap::pmix_load().prefix(strprintf("bootstrap: rank %d: ", opts.rank));
  }
  if (opts.rank != 0) {
    BootstrapOptions peer = opts;
    if (mode == Publish::kPmix) DDL_RETURN_IF_ERROR(root_from_pmix(&peer, deadline));
    int fd = -1;
    DDL_RETURN_IF_ERROR(
        bootstrap::connect_to_root(peer, deadline, &fd, &b->root_addr_, &b->opts_.job_token));
    b->peers_.assign(1, fd);
    if (!b->tree_.star()) DDL_RETURN_IF_ERROR(b->connect_relays(deadline));
    *out = std::move(b);
    return Status::Ok();
  }
  // Rank 0. Under PMIx it takes part in the exchange whatever happens here, so that the others
  // hear why it failed instead of waiting for their deadline.
  Status opened;
  if (opts.listen_fd >= 0) {
    b->listen_fd_ = opts.listen_fd;
    b->root_addr_ = opts.root_addr;
  } else {
    opened = bootstrap::open_listener(opts, &b->listen_fd_, &b->root_addr_);
  }
  const bool fresh = opts.fresh_token && mode != Publish::kNone;
  if (opened.ok() && fresh) {
    opened = random_token(&b->opts_.job_token);
    if (!opened.ok()) opened.prefix("bootstrap: rank 0: making a job token: ");
  }
  const std::string published =
      bootstrap::published_text(b->root_addr_, fresh ? b->opts_.job_token : std::string());
  const char *secret = fresh ? ", with a fresh job token" : "";
  if (mode == Publish::kPmix) {
    std::string value = opened.ok() ? published : "!" + opened.message();
    Status st = bootstrap::pmix_exchange(0, deadline, &value);
    DDL_RETURN_IF_ERROR(opened);
    if (!st.ok()) return st.prefix("bootstrap: ");
    DDL_INFO("bootstrap: rank 0: serving at %s (published through PMIx%s)", b->root_addr_.c_str(),
             secret);
  }
  DDL_RETURN_IF_ERROR(opened);
  if (mode == Publish::kFile) {
    DDL_RETURN_IF_ERROR(bootstrap::publish_address(opts.rendezvous_file, published));
    b->published_file_ = opts.rendezvous_file;
    b->published_addr_ = published;
    DDL_INFO("bootstrap: rank 0: serving at %s (published in %s%s)", b->root_addr_.c_str(),
             opts.rendezvous_file.c_str(), secret);
  }
  if (b->opts_.job_token.empty()) warn_open_rendezvous(b->root_addr_);
  std::vector<int> everyone;
  for (int r = 1; r < opts.nranks; ++r) everyone.push_back(r);
  Status st = bootstrap::accept_peers(b->listen_fd_, b->opts_, deadline, everyone, &b->peers_,
                                      b->root_addr_);
  // Every rank is in (or the job is off): neither the port nor the published address is
  // needed any more. Removing the file now, not at destruction, leaves no stale file behind
  // if this process dies later.
  bootstrap::close_fd(&b->listen_fd_);
  if (!b->published_file_.empty()) {
    bootstrap::unpublish_address(b->published_file_, b->published_addr_);
    b->published_file_.clear();
  }
  if (!st.ok()) {
    b->abort_peers(st.message());
    return st;  // ~Bootstrap closes the sockets
  }
  if (!b->tree_.star()) DDL_RETURN_IF_ERROR(b->connect_relays(deadline));
  *out = std::move(b);
  return Status::Ok();
}

Bootstrap::Bootstrap(const BootstrapOptions &opts)
    : opts_(opts), tree_(opts.nranks, relay_fanout(opts)) {}

Bootstrap::~Bootstrap() {
  for (int &fd : peers_) bootstrap::close_fd(&fd);
  for (int &fd : children_) bootstrap::close_fd(&fd);
  bootstrap::close_fd(&parent_fd_);
  bootstrap::close_fd(&listen_fd_);
  if (!published_file_.empty()) bootstrap::unpublish_address(published_file_, published_addr_);
}

std::vector<int> Bootstrap::fds() const {
  std::vector<int> out;
  for (int fd : peers_)
    if (fd >= 0) out.push_back(fd);
  return out;
}

Status Bootstrap::open_group_listener(int *fd, std::string *served) const {
  // The local end of a bootstrap connection is an address the peers reach this host by.
  std::string host = "127.0.0.1";
  for (int peer : peers_) {
    if (peer < 0) continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(peer, reinterpret_cast<struct sockaddr *>(&ss), &len) != 0)
      return system_error(errno, "bootstrap: rank %d: getsockname", opts_.rank);
    int port = 0;
    DDL_RETURN_IF_ERROR(bootstrap::parse_host_port(
        bootstrap::sockaddr_string(reinterpret_cast<struct sockaddr *>(&ss), len), &host, &port));
    break;
  }
  BootstrapOptions listen_opts = opts_;
  listen_opts.root_addr = bootstrap::join_host_port(host, 0);
  return bootstrap::open_listener(listen_opts, fd, served);
}

Status Bootstrap::allgather(const std::string &mine, std::vector<std::string> *all) {
  if (!all) return invalid_argument("bootstrap: rank %d: allgather: null output", opts_.rank);
  if (mine.size() > wire::kMaxBlob)
    return invalid_argument("bootstrap: rank %d: allgather of %zu bytes; at most %zu", opts_.rank,
                            mine.size(), wire::kMaxBlob);
  return exchange(wire::kAllgather, mine, all);
}

Status Bootstrap::all_true(bool mine, bool *all) {
  std::vector<std::string> flags;
  DDL_RETURN_IF_ERROR(allgather(mine ? "1" : "0", &flags));
  *all = std::all_of(flags.begin(), flags.end(), [](const std::string &f) { return f == "1"; });
  return Status::Ok();
}

Status Bootstrap::barrier() {
  std::vector<std::string> unused;
  return exchange(wire::kBarrier, std::string(), &unused);
}

Status Bootstrap::exchange(uint32_t op, const std::string &mine, std::vector<std::string> *all) {
  if (!failed_.ok()) return failed_;
  if (opts_.nranks == 1) {
    all->assign(1, mine);
    return Status::Ok();
  }
  // The relays' setup is numbered apart: messages count the caller's exchanges.
  uint32_t seq = op == wire::kRelays ? 0 : ++seq_;
  Status st =
      opts_.rank == 0 ? root_exchange(op, seq, mine, all) : peer_exchange(op, seq, mine, all);
  if (st.ok()) return st;
  failed_ = st;
  if (opts_.rank == 0) {
    abort_peers(st.message());
  } else {
    leave();
  }
  return st;
}

Status Bootstrap::root_exchange(uint32_t op, uint32_t seq, const std::string &mine,
                                std::vector<std::string> *all) {
  const char *what = wire::op_name(op);
  Deadline deadline(opts_.timeout_ms);
  int n = opts_.nranks;
  // Per peer: its frame header as it comes in, then its payload. Read with poll() across all
  // peers so that a dead peer is noticed whatever order the others arrive in.
  struct Incoming {
    uint8_t header[wire::kFrameBytes];
    size_t header_got = 0;
    bool header_done = false, done = false;
    std::string data;
    size_t data_got = 0;
  };
  std::vector<Incoming> in(static_cast<size_t>(n));
  in[0].done = true;
  in[0].data = mine;
  int left = n - 1;
  std::vector<struct pollfd> pfds;
  std::vector<int> who;
  while (left > 0) {
    int wait = deadline.remaining_ms();
    if (wait == 0) {
      std::vector<int> absent;
      for (int r = 1; r < n; ++r)
        if (!in[r].done) absent.push_back(r);
      return timeout_error(
          "bootstrap: rank 0: %s #%u timed out after %lld ms waiting for rank%s %s", what, seq,
          static_cast<long long>(deadline.elapsed_ms()), absent.size() == 1 ? "" : "s",
          bootstrap::rank_list(absent).c_str());
    }
    if (opts_.watch) {
      DDL_RETURN_IF_ERROR(opts_.watch());
      wait = std::min(wait, kWatchMs);
    }
    pfds.clear();
    who.clear();
    for (int r = 1; r < n; ++r) {
      if (in[r].done) continue;
      pfds.push_back(pollfd{peers_[r], POLLIN, 0});
      who.push_back(r);
    }
    int ready = ::poll(pfds.data(), pfds.size(), wait);
    if (ready < 0 && errno != EINTR)
      return system_error(errno, "bootstrap: rank 0: %s: poll", what);
    for (size_t i = 0; ready > 0 && i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      int r = who[i];
      Incoming &c = in[r];
      for (;;) {
        IoStatus io;
        ssize_t got;
        if (!c.header_done) {
          got = bootstrap::recv_some(peers_[r], c.header + c.header_got,
                                     sizeof c.header - c.header_got, &io);
        } else {
          got =
              bootstrap::recv_some(peers_[r], &c.data[c.data_got], c.data.size() - c.data_got, &io);
        }
        if (got < 0)
          return remote_error("bootstrap: rank 0: %s #%u: rank %d disconnected (%s)", what, seq, r,
                              io.describe().c_str());
        if (got == 0) break;
        if (c.header_done) {
          c.data_got += static_cast<size_t>(got);
        } else if ((c.header_got += static_cast<size_t>(got)) == sizeof c.header) {
          uint32_t len = 0;
          DDL_RETURN_IF_ERROR(wire::check_peer_frame(c.header, op, seq, r, &len));
          c.data.assign(len, '\0');
          c.header_done = true;
        }
        if (c.header_done && c.data_got == c.data.size()) {
          c.done = true;
          --left;
          break;
        }
      }
    }
  }
  auto length = [](const std::string &blob) {
    uint8_t len[4];
    bootstrap::put_u32(len, static_cast<uint32_t>(blob.size()));
    return std::string(reinterpret_cast<const char *>(len), 4);
  };
  // One answer for everybody: the header, the blobs' lengths, then the blobs; rank 0 sends it
  // to its children in the relay tree (every rank in a star). The relays' setup answers every
  // rank itself, with its parent's address ("" for rank 0's children).
  std::string reply = wire::encode_frame(op, seq, op == wire::kAllgather ? n : 0);
  if (op == wire::kAllgather) {
    for (const Incoming &c : in) reply += length(c.data);
    for (const Incoming &c : in) reply += c.data;
  }
  const int first = op == wire::kRelays ? 1 : tree_.first_child(0);
  const int last = op == wire::kRelays ? n - 1 : first + tree_.child_count(0) - 1;
  for (int r = first; r <= last; ++r) {
    if (op == wire::kRelays) {
      const int parent = tree_.parent(r);
      const std::string address = parent == 0 ? "" : in[parent].data;
      reply = wire::encode_frame(op, seq, 1) + length(address) + address;
    }
    IoStatus io = bootstrap::send_all(peers_[r], reply.data(), reply.size(), deadline);
    if (io.result == IoResult::kTimeout)
      return timeout_error("bootstrap: rank 0: %s #%u timed out after %lld ms sending to rank %d",
                           what, seq, static_cast<long long>(deadline.elapsed_ms()), r);
    if (!io.ok())
      return remote_error("bootstrap: rank 0: %s #%u: rank %d disconnected (%s)", what, seq, r,
                          io.describe().c_str());
  }
  all->clear();
  if (op == wire::kAllgather) {
    all->reserve(static_cast<size_t>(n));
    for (Incoming &c : in) all->push_back(std::move(c.data));
  }
  return Status::Ok();
}

// How long a relayed rank whose relay left waits for rank 0's word on why.
constexpr int kRelayWordMs = 200;

Status Bootstrap::peer_exchange(uint32_t op, uint32_t seq, const std::string &mine,
                                std::vector<std::string> *all) {
  const char *what = wire::op_name(op);
  const int me = opts_.rank;
  // The answer comes from this rank's parent in the relay tree (rank 0 in a star, and for the
  // relays' setup, which makes the tree).
  const int parent = op == wire::kRelays ? 0 : tree_.parent(me);
  const int fd = parent == 0 ? peers_[0] : parent_fd_;
  const std::string source = parent == 0 ? strprintf("rank 0 (the root, at %s)", root_addr_.c_str())
                                         : strprintf("rank %d (this rank's relay)", parent);
  const bool forwards = op != wire::kRelays && !children_.empty();
  // A little longer than rank 0 waits: rank 0 sees every rank, so when somebody is missing
  // it should be rank 0 that times out first and tells us who, not us guessing "rank 0".
  int grace = std::min(5000, std::max(200, opts_.timeout_ms / 10));
  Deadline deadline(opts_.timeout_ms > INT32_MAX - grace ? INT32_MAX : opts_.timeout_ms + grace);
  std::string frame = wire::encode_frame(op, seq, static_cast<uint32_t>(mine.size())) + mine;
  IoStatus io = bootstrap::send_all(peers_[0], frame.data(), frame.size(), deadline);
  // A send that fails still reads on: rank 0 may have left an error frame saying why it quit.
  Deadline read_deadline = io.ok() ? deadline : Deadline(100);
  IoStatus sent = io;
  auto lost = [&](const IoStatus &e) -> Status {
    if (e.result == IoResult::kTimeout && sent.ok())
      return timeout_error("bootstrap: rank %d: %s #%u timed out after %lld ms waiting for %s", me,
                           what, seq, static_cast<long long>(deadline.elapsed_ms()),
                           source.c_str());
    // A failed send is to rank 0 whoever answers.
    const std::string who =
        sent.ok() ? source : strprintf("rank 0 (the root, at %s)", root_addr_.c_str());
    const IoStatus &cause = sent.ok() ? e : sent;
    return remote_error("bootstrap: rank %d: %s #%u: %s disconnected (%s)", me, what, seq,
                        who.c_str(), cause.describe().c_str());
  };
  // The decoding is wire::ReplyDecoder's; this loop only reads what it asks for.
  wire::ReplyDecoder reply(op, seq, opts_.nranks, me);
  std::string buf, answer;
  while (reply.wants_more()) {
    const bool header = reply.stage() == wire::ReplyDecoder::Stage::kHeader;
    const bool text = reply.stage() == wire::ReplyDecoder::Stage::kErrorText;
    buf.resize(reply.need());
    // A relayed rank waits for the answer to begin while it listens for rank 0's word; a
    // parent that has begun sends it whole, or dies (the read then fails at once).
    if (parent != 0 && header) {
      DDL_RETURN_IF_ERROR(wait_for_parent(fd, op, seq, read_deadline));
    } else if (opts_.watch && !text) {
      DDL_RETURN_IF_ERROR(wait_readable(fd, read_deadline));
    }
    // The error text gets its own short deadline: rank 0 sent it just before closing.
    io = bootstrap::recv_all(fd, &buf[0], buf.size(), text ? Deadline(1000) : read_deadline);
    if (!io.ok()) {
      // A relay that gives up closes its children's connections, often because rank 0 did:
      // then rank 0's reason, on its way to every rank, says more than the relay's leaving.
      if (parent != 0 && !text) {
        DDL_RETURN_IF_ERROR(root_word(op, seq, kRelayWordMs));
        return lost(io);
      }
      if (!text) return lost(io);
      reply.text_unreadable();
      break;
    }
    reply.feed(reinterpret_cast<const uint8_t *>(buf.data()));
    if (forwards) answer += buf;
    // After a failed send only rank 0's own explanation is worth more than the send's error.
    const bool root_spoke = reply.stage() == wire::ReplyDecoder::Stage::kErrorText ||
                            reply.stage() == wire::ReplyDecoder::Stage::kRootFailed;
    if (header && !root_spoke && !sent.ok()) return lost(sent);
  }
  if (reply.stage() != wire::ReplyDecoder::Stage::kDone) return reply.error();
  if (forwards) DDL_RETURN_IF_ERROR(forward(answer, op, seq, deadline));
  *all = std::move(reply.entries());
  return Status::Ok();
}

Status Bootstrap::wait_readable(int fd, const bootstrap::Deadline &deadline) const {
  for (;;) {
    DDL_RETURN_IF_ERROR(opts_.watch());
    struct pollfd pfd = {fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, std::min(deadline.remaining_ms(), kWatchMs));
    if (n != 0 || deadline.passed()) return Status::Ok();  // recv_all says what it was
  }
}

void Bootstrap::abort_peers(const std::string &why) {
  std::string text = why.substr(0, wire::kMaxError);
  std::string frame =
      wire::encode_frame(wire::kError, seq_, static_cast<uint32_t>(text.size())) + text;
  for (int fd : peers_) {
    if (fd < 0) continue;
    // One non-blocking try: a peer that is not reading must not hold up the others.
    bootstrap::send_all(fd, frame.data(), frame.size(), Deadline(0));
    // Half-close: the peer reads the error, then end-of-file, whatever it does next.
    shutdown(fd, SHUT_WR);
    // Drain what it sent, so that closing later sends FIN and not RST (which could make the
    // peer's kernel discard the error before it reads it).
    char scratch[4096];
    IoStatus io;
    for (int i = 0; i < 64 && bootstrap::recv_some(fd, scratch, sizeof scratch, &io) > 0; ++i) {
    }
  }
}

}  // namespace ddl
