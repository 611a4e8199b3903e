// The relays (relay.h): their setup, and what a relayed rank does in an exchange beyond what
// a rank of a star does (bootstrap.cc): wait for its parent while listening for rank 0's word,
// and pass the answer on.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"

namespace ddl {

using bootstrap::Deadline;
using bootstrap::IoResult;
using bootstrap::IoStatus;
namespace wire = bootstrap::wire;

Status Bootstrap::connect_relays(const Deadline &deadline) {
  const int me = opts_.rank;
  const bool relays = me != 0 && tree_.child_count(me) > 0;
  // A relay listens before it says where: its children's connections then either find it
  // or find it gone, never a port that is not open yet.
  int listen_fd = -1;
  std::string served;
  Status st;
  if (relays) {
    st = open_group_listener(&listen_fd, &served);
    if (!st.ok())
      st.prefix(strprintf("bootstrap: rank %d: listening for the ranks it relays to: ", me));
  }
  std::vector<std::string> parent_address;
  if (st.ok()) st = exchange(wire::kRelays, served, &parent_address);
  if (st.ok() && me != 0 && tree_.parent(me) != 0)
    st = bootstrap::connect_to_relay(opts_, tree_.parent(me), parent_address.at(0), opts_.job_token,
                                     deadline, &parent_fd_);
  if (st.ok() && relays) {
    std::vector<int> expected, by_rank;
    for (int c = 0; c < tree_.child_count(me); ++c) expected.push_back(tree_.first_child(me) + c);
    st = bootstrap::accept_peers(listen_fd, opts_, deadline, expected, &by_rank, served);
    for (int child : expected)  // the ones that came, on failure too: the destructor closes them
      if (by_rank[child] >= 0) children_.push_back(by_rank[child]);
  }
  bootstrap::close_fd(&listen_fd);
  if (st.ok() && me != 0)
    DDL_DEBUG("bootstrap: rank %d: answers come through rank %d%s", me, tree_.parent(me),
              relays ? strprintf(", and go on to ranks %d-%d", tree_.first_child(me),
                                 tree_.first_child(me) + tree_.child_count(me) - 1)
                           .c_str()
                     : "");
  // Leaving is the word: rank 0 finds this rank gone and tells every rank why (a failed
  // exchange has left already).
  if (!st.ok() && failed_.ok()) {
    failed_ = st;
    if (me != 0) leave();
  }
  return st;
}

void Bootstrap::leave() {
  shutdown(peers_[0], SHUT_RDWR);
  for (int fd : children_) shutdown(fd, SHUT_RDWR);
  if (parent_fd_ >= 0) shutdown(parent_fd_, SHUT_RDWR);
}

Status Bootstrap::wait_for_parent(int fd, uint32_t op, uint32_t seq,
                                  const Deadline &deadline) const {
  // Rank 0 may have closed its end having answered everyone it answers itself: that is no
  // word, and the answer still comes through the parent.
  bool root_open = true;
  for (;;) {
    if (opts_.watch) DDL_RETURN_IF_ERROR(opts_.watch());
    struct pollfd pfds[2] = {{fd, POLLIN, 0}, {peers_[0], POLLIN, 0}};
    const int wait =
        opts_.watch ? std::min(deadline.remaining_ms(), kWatchMs) : deadline.remaining_ms();
    const int n = ::poll(pfds, root_open ? 2 : 1, wait);
    // The answer first: rank 0 may have given up on a later exchange after sending it.
    if (n > 0 && pfds[0].revents != 0) return Status::Ok();
    if (n > 0 && root_open && pfds[1].revents != 0) {
      Status word = root_word(op, seq, 0);
      if (!word.ok()) return word;
      root_open = false;  // closed (or reset): rank 0 left after its part
      continue;
    }
    if (n != 0 || deadline.passed()) return Status::Ok();  // recv_all says what it was
  }
}

Status Bootstrap::root_word(uint32_t op, uint32_t seq, int wait_ms) const {
  struct pollfd pfd = {peers_[0], POLLIN, 0};
  char first;
  if (::poll(&pfd, 1, wait_ms) <= 0 || ::recv(peers_[0], &first, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
    return Status::Ok();  // nothing, or rank 0 closed without a word
  // Rank 0 writes to a relayed rank only to say why it gave up (wire.h), then closes.
  const int me = opts_.rank;
  wire::ReplyDecoder word(op, seq, opts_.nranks, me);
  std::string buf;
  while (word.wants_more()) {
    buf.resize(word.need());
    IoStatus io = bootstrap::recv_all(peers_[0], &buf[0], buf.size(), Deadline(1000));
    if (!io.ok()) {
      if (word.stage() != wire::ReplyDecoder::Stage::kErrorText) break;
      word.text_unreadable();
      continue;
    }
    word.feed(reinterpret_cast<const uint8_t *>(buf.data()));
  }
  if (word.stage() == wire::ReplyDecoder::Stage::kRootFailed ||
      word.stage() == wire::ReplyDecoder::Stage::kBad)
    return word.error();
  return remote_error(
      "bootstrap: rank %d: %s #%u: rank 0 sent this rank what its relay, rank %d, should have "
      "(protocol out of step)",
      me, wire::op_name(op), seq, tree_.parent(me));
}

Status Bootstrap::forward(const std::string &answer, uint32_t op, uint32_t seq,
                          const Deadline &deadline) const {
  const int me = opts_.rank;
  for (size_t i = 0; i < children_.size(); ++i) {
    const int child = tree_.first_child(me) + static_cast<int>(i);
    IoStatus io = bootstrap::send_all(children_[i], answer.data(), answer.size(), deadline);
    if (io.result == IoResult::kTimeout)
      return timeout_error(
          "bootstrap: rank %d: %s #%u timed out after %lld ms passing rank 0's answer on to "
          "rank %d",
          me, wire::op_name(op), seq, static_cast<long long>(deadline.elapsed_ms()), child);
    if (!io.ok())
      return remote_error(
          "bootstrap: rank %d: %s #%u: rank %d (which this rank relays to) "
          "disconnected (%s)",
          me, wire::op_name(op), seq, child, io.describe().c_str());
  }
  return Status::Ok();
}

}  // namespace ddl
