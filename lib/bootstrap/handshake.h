// The connect phase of the bootstrap, internal to lib/bootstrap: rank 0's listener and accept
// loop (root_side.cc) and the other ranks' connect-and-hello loop (peer_side.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/socket.h"

namespace ddl {
namespace bootstrap {

// Rank 0: opens the listening socket described by opts (root_addr's port on every interface,
// or an ephemeral port for the rendezvous file) and says in *served the host:port that the
// other ranks should dial.
Status open_listener(const BootstrapOptions &opts, int *fd, std::string *served);

// What rank 0 publishes (in the rendezvous file, or through PMIx): "host:port", then " token"
// when rank 0 made the job's token. published_text builds it; parse_published reads it back
// (surrounding blanks and a final newline ignored). False with *why when it is not that.
std::string published_text(const std::string &addr, const std::string &token);
bool parse_published(const std::string &text, std::string *addr, std::string *token,
                     bool *has_token, std::string *why);

// Rank 0: writes `text` (published_text) and a newline to file atomically: a temporary file in
// the same directory, created 0600 (it may hold the job's secret) and exclusively (never
// through a link someone left there), then renamed.
Status publish_address(const std::string &file, const std::string &text);
// Removes file if it still holds text (a later job may have reused the name).
void unpublish_address(const std::string &file, const std::string &text);

// When a connect phase that is still waiting says so (warn level, through the library's log):
// first kFirstMs after the deadline was set, then every kEveryMs, so that a person at a
// terminal learns within seconds what is missing and how long is left instead of facing
// minutes of silence, while ranks that start a moment apart (importing torch) stay quiet.
class WaitNotice {
 public:
  static constexpr int64_t kFirstMs = 5000;
  static constexpr int64_t kEveryMs = 30000;
  explicit WaitNotice(const Deadline &deadline) : deadline_(deadline) {}
  // `wait_ms` (a poll timeout) shortened so that the poll wakes when the next notice is due.
  int cap(int wait_ms) const;
  // True when a notice is due now (then the next one is kEveryMs later).
  bool due();
  // "5.0 s so far, 295.0 s left of the 300 s timeout"
  std::string times() const;

 private:
  const Deadline &deadline_;
  int64_t next_ms_ = kFirstMs;
};

// Rank 0 (expected: ranks 1..nranks-1) or a relay (its children): accepts connections until
// every expected rank has presented a valid hello, or the deadline passes. (*peers)[r]
// receives rank r's fd as it arrives, on failure too, so that the caller can tell the ranks
// that did come why the job is off. Strangers, and ranks of the job that are not expected
// here, are turned away and logged. While ranks are missing it says so now and then
// (WaitNotice), naming `served` (the address they should dial) when given.
Status accept_peers(int listen_fd, const BootstrapOptions &opts, const Deadline &deadline,
                    const std::vector<int> &expected, std::vector<int> *peers,
                    const std::string &served = std::string());

// Other ranks: connects to rank 0 (root_addr, or the address in the rendezvous file), presents
// the hello and waits for the ack, retrying until the deadline (and saying so now and then,
// WaitNotice). *root_addr: the address used; *token: the job token presented (a fresh one
// read from where rank 0 published it, else opts.job_token).
Status connect_to_root(const BootstrapOptions &opts, const Deadline &deadline, int *fd,
                       std::string *root_addr, std::string *token);

// A relayed rank (relay.h): connects to its parent's listener at `addr`, presenting `token`
// (the job's, as connect_to_root used it), retrying until the deadline; a refused connection
// ends it at once (the parent listened before its address was handed out).
Status connect_to_relay(const BootstrapOptions &opts, int parent, const std::string &addr,
                        const std::string &token, const Deadline &deadline, int *fd);

// "2, 5-7, 9" for the sorted ranks (at most 32 items, then "and N more").
std::string rank_list(const std::vector<int> &ranks);

}  // namespace bootstrap
}  // namespace ddl
