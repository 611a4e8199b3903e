// Rank 0's decoding of a hello (lib/bootstrap/root_side.cc, accept_peers; format in wire.h):
// the fuzzed bytes arrive on a real loopback connection to the real accept loop, followed by
// a genuine rank 1, so that accept_peers returns at once. Checked against the protocol: the
// fuzzed connection gets an ack exactly when it presented magic, version, a token length
// within bounds and the right token, and then with the right code; accept_peers always admits
// the genuine rank.
#include <string>
#include <vector>

#include "fuzz_net.h"
#include "fuzz_util.h"
#include "lib/bootstrap/handshake.h"
#include "lib/bootstrap/wire.h"
#include "lib/common/log.h"

namespace wire = ddl::bootstrap::wire;
using ddl::bootstrap::get_u16;
using ddl::bootstrap::get_u32;

namespace {

const char kToken[] = "fuzz-token";
int g_listen = -1, g_port = 0;

// The ack code the protocol promises for `in` sent by a lone stranger, or -1 for none.
int expected_ack(const std::string &in) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(in.data());
  if (in.size() < wire::kHelloBytes) return -1;
  if (get_u32(p) != wire::kMagic || get_u16(p + 4) != wire::kVersion) return -1;
  size_t token_len = get_u16(p + 6);
  if (token_len > wire::kMaxToken || in.size() < wire::kHelloBytes + token_len) return -1;
  if (in.compare(wire::kHelloBytes, token_len, kToken) != 0) return -1;
  uint32_t rank = get_u32(p + 8), n = get_u32(p + 12);
  if (n != 2) return wire::kWrongNranks;
  if (rank == 0 || rank >= n) return wire::kBadRank;
  return wire::kAccepted;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  ddl::set_log_level(ddl::LogLevel::kError);
  g_listen = ddltest::listen_loopback(0, &g_port);
  if (g_listen < 0) std::abort();
  fcntl(g_listen, F_SETFL, fcntl(g_listen, F_GETFL) | O_NONBLOCK);  // accept_peers expects it
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string input(reinterpret_cast<const char *>(data), size);
  int stranger = ddl_fuzz::connect_loopback(g_port, 1000);
  FUZZ_CHECK(stranger >= 0, "connect");
  if (size) ddl_fuzz::write_all(stranger, data, size);
  shutdown(stranger, SHUT_WR);
  int genuine = ddl_fuzz::connect_loopback(g_port, 1000);
  FUZZ_CHECK(genuine >= 0, "connect");
  std::string hello = wire::encode_hello(kToken, 1, 2);
  ddl_fuzz::write_all(genuine, hello.data(), hello.size());

  ddl::BootstrapOptions opts;
  opts.rank = 0;
  opts.nranks = 2;
  opts.job_token = kToken;
  opts.timeout_ms = 5000;
  std::vector<int> peers;
  ddl::Status st =
      ddl::bootstrap::accept_peers(g_listen, opts, ddl::bootstrap::Deadline(5000), {1}, &peers);
  FUZZ_CHECK(st.ok(), "the genuine rank was not admitted: %s", st.message().c_str());
  FUZZ_CHECK(peers.size() == 2 && peers[0] == -1 && peers[1] >= 0, "peers");

  // What the stranger got back: nothing, or one ack.
  int want = expected_ack(input);
  uint8_t ack[wire::kAckBytes];
  bool got = ddl_fuzz::read_exact(stranger, ack, sizeof ack, want < 0 ? 50 : 2000);
  if (want < 0) {
    FUZZ_CHECK(!got, "an ack (code %u) for a hello the protocol refuses", get_u16(ack + 6));
  } else if (got) {
    FUZZ_CHECK(get_u32(ack) == wire::kMagic && get_u16(ack + 4) == wire::kVersion, "malformed ack");
    FUZZ_CHECK(get_u16(ack + 6) == want, "ack code %u, want %d", get_u16(ack + 6), want);
    FUZZ_CHECK(get_u32(ack + 8) == 2, "ack nranks %u", get_u32(ack + 8));
  } else {
    // The root closes a refused connection at once; with unread bytes left that is a reset,
    // which may discard the ack before we read it. Only a clean hello must see its ack.
    FUZZ_CHECK(size > wire::kHelloBytes + get_u16(data + 6), "no ack for a clean hello (want %d)",
               want);
  }
  ::close(stranger);
  ::close(genuine);
  for (int fd : peers)
    if (fd >= 0) ::close(fd);
  return 0;
}
