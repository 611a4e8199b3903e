#include "lib/core/split.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "lib/bootstrap/token.h"
#include "lib/common/log.h"
#include "lib/common/params.h"
#include "lib/core/comm.h"

namespace ddl {
namespace {

struct Member {
  int color = 0, key = 0, rank = 0;
};

Status parse_member(const std::string &text, int rank, Member *member) {
  const size_t space = text.find(' ');
  int64_t color = 0, key = 0;
  if (space == std::string::npos ||
      !parse_int(text.substr(0, space), INT32_MIN, INT32_MAX, &color) ||
      !parse_int(text.substr(space + 1), INT32_MIN, INT32_MAX, &key))
    return remote_error("rank %d sent a malformed split request \"%s\"", rank, text.c_str());
  *member = Member{static_cast<int>(color), static_cast<int>(key), rank};
  return Status::Ok();
}

}  // namespace

Status split_comm(ddl_comm *parent, int color, int key, ddl_comm **out) {
  *out = nullptr;
  if (!parent->failure.ok())
    return Status(
        parent->failure.code(),
        "the communicator failed earlier and must be destroyed: " + parent->failure.message());
  if (parent->aborted.load()) return invalid_usage("the communicator was aborted; destroy it");

  // Who goes where: every rank learns every rank's (color, key).
  std::vector<std::string> requests;
  Status s = parent->bootstrap->allgather(strprintf("%d %d", color, key), &requests);
  if (!s.ok()) return s.prefix("exchanging colors and keys: ");
  // A bad color goes through the exchange like any other, so that every rank fails on it
  // (naming the culprit) instead of the others waiting for a rank that gave up.
  std::vector<Member> group;
  for (int r = 0; r < parent->nranks; ++r) {
    Member member;
    DDL_RETURN_IF_ERROR(parse_member(requests[r], r, &member));
    if (member.color < 0 && member.color != DDL_SPLIT_NOCOLOR)
      return invalid_argument("rank %d passed color %d: colors are >= 0 or DDL_SPLIT_NOCOLOR", r,
                              member.color);
    if (color != DDL_SPLIT_NOCOLOR && member.color == color) group.push_back(member);
  }
  std::stable_sort(group.begin(), group.end(),
                   [](const Member &a, const Member &b) { return a.key < b.key; });
  int new_rank = -1;
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i].rank == parent->rank) new_rank = static_cast<int>(i);
  const int new_size = static_cast<int>(group.size());

  // Each group's rank 0 opens its rendezvous before anyone dials it, and announces it with a
  // fresh secret over the parent's (authenticated) bootstrap.
  int listen_fd = -1;
  std::string offer;
  if (new_rank == 0 && new_size > 1) {
    std::string served, token;
    Status opened = random_token(&token);
    if (opened.ok()) opened = parent->bootstrap->open_group_listener(&listen_fd, &served);
    // A failure still takes part in the exchange, so that the group's others hear of it.
    offer = opened.ok() ? served + " " + token : "!" + opened.message();
  }
  std::vector<std::string> offers;
  s = parent->bootstrap->allgather(offer, &offers);
  if (!s.ok()) {
    if (listen_fd >= 0) ::close(listen_fd);
    return s.prefix("exchanging the new groups' rendezvous: ");
  }
  if (new_rank < 0) return Status::Ok();  // DDL_SPLIT_NOCOLOR

  BootstrapOptions options;
  options.rank = new_rank;
  options.nranks = new_size;
  options.timeout_ms = parent->config.timeout_ms;
  if (new_size > 1) {
    const int leader = group.front().rank;
    const std::string &text = offers[leader];
    const size_t space = text.find(' ');
    if (text.empty() || text[0] == '!' || space == std::string::npos) {
      if (listen_fd >= 0) ::close(listen_fd);
      return remote_error("rank %d, the new group's rank 0, could not serve its rendezvous: %s",
                          leader, text.empty() ? "(nothing sent)" : text.c_str() + 1);
    }
    options.root_addr = text.substr(0, space);
    options.job_token = text.substr(space + 1);
    options.listen_fd = listen_fd;
  }
  CommConfig config = parent->config;
  config.job_token = options.job_token;
  s = create_comm(options, config, out);
  if (!s.ok())
    return s.prefix(
        strprintf("creating the group of color %d (rank %d of %d): ", color, new_rank, new_size));
  DDL_INFO("split: color %d key %d: rank %d of %d in the new communicator", color, key, new_rank,
           new_size);
  return Status::Ok();
}

}  // namespace ddl
