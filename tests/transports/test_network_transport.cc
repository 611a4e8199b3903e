// make_network_transport (lib/transports/network_transport.h): a kind by its name, and an
// unknown kind refused naming the known ones; two UCX transports made by kind, connected
// through their addresses, carry a message (in one process: both ends driven here).
#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "lib/common/log.h"
#include "lib/transports/network_transport.h"

using namespace ddl;

Test(network_transport, unknown_kind_names_the_known_ones) {
  std::unique_ptr<NetworkTransport> t;
  Status s = make_network_transport("carrier-pigeon", 0, 2, NetworkOptions(), &t);
  cr_assert_eq(s.code(), DDL_ERR_INVALID_ARGUMENT, "%s", s.message().c_str());
  cr_assert(s.message().find("'carrier-pigeon' (known: ucx)") != std::string::npos, "%s",
            s.message().c_str());
  cr_assert_null(t.get());
}

Test(network_transport, ucx_by_kind_carries_a_message, .timeout = 60) {
  NetworkOptions options;
  options.heartbeats = false;
  std::unique_ptr<NetworkTransport> ends[2];
  for (int r = 0; r < 2; ++r) {
    Status s = make_network_transport("ucx", r, 2, options, &ends[r]);
    cr_assert(s.ok(), "rank %d: %s", r, s.message().c_str());
    cr_assert_str_eq(ends[r]->name(), "ucx");
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<PeerAddress> peers(2);
    for (int p = 0; p < 2; ++p) {
      peers[p].address = ends[p]->worker_address();
      peers[p].wanted = p != r;
    }
    Status s = ends[r]->connect(peers);
    cr_assert(s.ok(), "rank %d: %s", r, s.message().c_str());
  }
  const std::string sent = "by kind";
  std::string got(sent.size(), '\0');
  TransferRequest send, recv;
  cr_assert(ends[1]->post_recv(0, 1, 7, &got[0], got.size(), &recv).ok());
  cr_assert(ends[0]->post_send(1, 1, 7, sent.data(), sent.size(), &send).ok());
  for (int spins = 0; !(send.done && recv.done) && spins < 10000000; ++spins) {
    ends[0]->progress();
    ends[1]->progress();
  }
  cr_assert(send.done && recv.done, "the message did not arrive");
  cr_assert(recv.status.ok() && send.status.ok(), "%s", recv.status.message().c_str());
  cr_assert_str_eq(got.c_str(), sent.c_str());
  // Each end would flush to the other, which nobody drives while it closes: no waiting, and
  // no warning that it closed by force.
  set_log_level(LogLevel::kError);
  for (auto &end : ends) end->close(0);
}
