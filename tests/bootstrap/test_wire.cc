// The bootstrap's wire decoders on their own (test_bootstrap runs them behind sockets;
// tests/fuzz fuzzes them): a few exact cases that pin the messages and the reading order.
#include <criterion/criterion.h>

#include <cstdint>
#include <string>

#include "lib/bootstrap/wire.h"

using namespace ddl;

namespace {

const uint8_t *bytes(const std::string &s) {
  return reinterpret_cast<const uint8_t *>(s.data());
}

}  // namespace

Test(wire, hello_read_as_it_arrives) {
  const std::string hello = bootstrap::wire::encode_hello("tok", 2, 4);
  // Byte by byte: the decoder asks for the header, then for exactly the announced token.
  size_t have = 0;
  bootstrap::wire::HelloCheck c;
  for (;;) {
    c = bootstrap::wire::check_hello(bytes(hello), have, "tok", 4);
    if (c.verdict != bootstrap::wire::HelloCheck::kMore) break;
    cr_assert_eq(c.need, have < 16 ? 16u : 19u);
    ++have;
  }
  cr_assert_eq(have, hello.size());
  cr_assert_eq(c.verdict, bootstrap::wire::HelloCheck::kAck);
  cr_assert_eq(c.code, bootstrap::wire::kAccepted);
  cr_assert_eq(c.rank, 2u);

  c = bootstrap::wire::check_hello(bytes(hello), hello.size(), "tok", 3);
  cr_assert_eq(c.code, bootstrap::wire::kWrongNranks);
  cr_assert_str_eq(c.why.c_str(), "claims rank 2 of 4 ranks; this job has 3");
  c = bootstrap::wire::check_hello(bytes(hello), hello.size(), "tuk", 4);
  cr_assert_eq(c.verdict, bootstrap::wire::HelloCheck::kDrop);
  cr_assert_str_eq(c.why.c_str(), "wrong job token");
  // Garbage is judged on its first 4 bytes, before a header's worth has arrived.
  c = bootstrap::wire::check_hello(bytes("GET / HTTP/1.0"), 4, "tok", 4);
  cr_assert_eq(c.verdict, bootstrap::wire::HelloCheck::kDrop);
  cr_assert_str_eq(c.why.c_str(), "bad magic 0x47455420 (not a ddl bootstrap client)");
  // A token length over the bound is refused before the token is asked for.
  std::string big = hello;
  big[6] = 1;  // token_len = 259
  c = bootstrap::wire::check_hello(bytes(big), 16, "tok", 4);
  cr_assert_eq(c.verdict, bootstrap::wire::HelloCheck::kDrop);
  cr_assert_str_eq(c.why.c_str(), "token length 259 exceeds 256");
}

Test(wire, peer_frames_and_acks) {
  namespace wire = bootstrap::wire;
  uint32_t len = 0;
  std::string f = wire::encode_frame(wire::kAllgather, 3, 5);
  cr_assert(wire::check_peer_frame(bytes(f), wire::kAllgather, 3, 2, &len).ok());
  cr_assert_eq(len, 5u);
  Status st = wire::check_peer_frame(bytes(f), wire::kBarrier, 3, 2, &len);
  cr_assert_str_eq(st.message().c_str(),
                   "bootstrap: rank 0: barrier #3: rank 2 is in allgather #3 while this rank is "
                   "in barrier #3 (mismatched collectives)");
  f = wire::encode_frame(wire::kAllgather, 1, 65537);
  st = wire::check_peer_frame(bytes(f), wire::kAllgather, 1, 7, &len);
  cr_assert_str_eq(st.message().c_str(),
                   "bootstrap: rank 0: allgather #1: rank 7 announced 65537 bytes; at most 65536");
  const std::string ack = wire::encode_ack(wire::kDuplicateRank, 8);
  wire::AckCheck a = wire::check_ack(bytes(ack), ack.size());
  cr_assert(a.is_ack);
  cr_assert_eq(a.code, wire::kDuplicateRank);
  cr_assert_eq(a.nranks, 8u);
  cr_assert_not(wire::check_ack(bytes(ack), ack.size() - 1).is_ack);
}

Test(wire, reply_decoder) {
  namespace wire = bootstrap::wire;
  using Stage = wire::ReplyDecoder::Stage;
  // An allgather answer of 2 entries, one empty: their lengths, then their bytes.
  std::string s =
      wire::encode_frame(wire::kAllgather, 4, 2) + std::string("\0\0\0\2\0\0\0\0", 8) + "hi";
  wire::ReplyDecoder d(wire::kAllgather, 4, 2, 1);
  size_t pos = 0;
  while (d.wants_more()) {
    const size_t n = d.need();
    cr_assert_leq(pos + n, s.size());
    d.feed(bytes(s) + pos);
    pos += n;
  }
  cr_assert_eq(pos, s.size());
  cr_assert_eq(d.stage(), Stage::kDone);
  cr_assert_eq(d.entries().size(), 2u);
  cr_assert_str_eq(d.entries()[0].c_str(), "hi");
  cr_assert(d.entries()[1].empty());
  // Rank 0's error frame, quoted; then one whose text never came.
  const std::string e = wire::encode_frame(wire::kError, 4, 5) + "boom!";
  wire::ReplyDecoder r(wire::kBarrier, 4, 2, 1);
  r.feed(bytes(e));
  cr_assert_eq(r.stage(), Stage::kErrorText);
  cr_assert_eq(r.need(), 5u);
  r.feed(bytes(e) + 16);
  cr_assert_eq(r.stage(), Stage::kRootFailed);
  cr_assert_str_eq(r.error().message().c_str(),
                   "bootstrap: rank 1: barrier #4 failed at rank 0: boom!");
  wire::ReplyDecoder q(wire::kBarrier, 4, 2, 1);
  q.feed(bytes(e));
  q.text_unreadable();
  cr_assert_str_eq(q.error().message().c_str(),
                   "bootstrap: rank 1: barrier #4 failed at rank 0: ?");
  // A count that is not the job's, and a length over the bound.
  const std::string bad = wire::encode_frame(wire::kAllgather, 4, 3);
  wire::ReplyDecoder b(wire::kAllgather, 4, 2, 1);
  b.feed(bytes(bad));
  cr_assert_eq(b.stage(), Stage::kBad);
  cr_assert_str_eq(b.error().message().c_str(),
                   "bootstrap: rank 1: allgather #4: rank 0 sent 3 entries, expected 2");
  wire::ReplyDecoder l(wire::kAllgather, 4, 2, 1);
  l.feed(bytes(wire::encode_frame(wire::kAllgather, 4, 2)));
  l.feed(bytes(std::string("\0\1\0\1\0\0\0\0", 8)));
  cr_assert_str_eq(l.error().message().c_str(),
                   "bootstrap: rank 1: allgather #4: rank 0 sent 65537 bytes for rank 0; at most "
                   "65536");
}
