// The shared-memory transport in one process: two "ranks" map one segment (the second one
// through /proc/self/fd, the path other processes use) and exchange messages while the test
// drives both sides' progress. Covers matching out of order, messages larger than a
// channel, messages that arrive before their receive, reduction on receive, size
// mismatches and the liveness check.
#include <criterion/criterion.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "lib/transports/shm/shm_transport.h"

using namespace ddl;

namespace {

struct Pair {
  std::unique_ptr<ShmTransport> a, b;  // ranks 0 and 1
};

Pair make_pair(int cells = 4, uint32_t cell_bytes = 4096, pid_t peer_pid = 0) {
  ShmLayout layout;
  layout.nlocal = 2;
  layout.cells = static_cast<uint32_t>(cells);
  layout.cell_bytes = cell_bytes;
  std::unique_ptr<ShmSegment> first, second;
  Status s = ShmSegment::create(layout.segment_bytes(), &first);
  cr_assert(s.ok(), "%s", s.message().c_str());
  ShmTransport::init_segment(first.get(), layout);
  s = ShmSegment::open(getpid(), first->fd(), &second);
  cr_assert(s.ok(), "%s", s.message().c_str());
  first->close_fd();
  const std::vector<pid_t> pids = {getpid(), peer_pid ? peer_pid : getpid()};
  Pair pair;
  s = ShmTransport::create(0, 2, {0, 1}, pids, std::move(first), &pair.a);
  cr_assert(s.ok(), "%s", s.message().c_str());
  s = ShmTransport::create(1, 2, {0, 1}, pids, std::move(second), &pair.b);
  cr_assert(s.ok(), "%s", s.message().c_str());
  return pair;
}

// Drives both sides until every request is done (or a generous number of rounds passed).
void pump(Pair &pair, std::vector<TransferRequest *> requests) {
  for (int round = 0; round < 1000000; ++round) {
    bool all = true;
    for (TransferRequest *r : requests) all = all && r->done;
    if (all) return;
    pair.a->progress();
    pair.b->progress();
  }
  cr_assert_fail("requests did not complete");
}

std::vector<char> pattern(size_t bytes, int seed) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>((i * 31 + seed * 7) & 0xff);
  return v;
}

}  // namespace

Test(shm_transport, small_messages_match_by_tag_out_of_order) {
  Pair pair = make_pair();
  const std::vector<char> one = pattern(8, 1), two = pattern(100, 2);
  std::vector<char> got_one(8), got_two(100);
  TransferRequest r1, r2, s1, s2;
  cr_assert(pair.b->post_recv(0, 7, 2, got_two.data(), got_two.size(), &r2).ok());
  cr_assert(pair.b->post_recv(0, 7, 1, got_one.data(), got_one.size(), &r1).ok());
  cr_assert(pair.a->post_send(1, 7, 1, one.data(), one.size(), &s1).ok());
  cr_assert(pair.a->post_send(1, 7, 2, two.data(), two.size(), &s2).ok());
  cr_assert(s1.done && s2.done, "small sends complete when copied into cells");
  pump(pair, {&r1, &r2});
  cr_assert_eq(r1.received, 8);
  cr_assert_eq(r2.received, 100);
  cr_assert(got_one == one && got_two == two);
}

Test(shm_transport, large_message_streams_through_a_small_channel) {
  Pair pair = make_pair(4, 4096);  // 16 KB of cells for a 1 MB message
  const std::vector<char> message = pattern(1 << 20, 3);
  std::vector<char> got(1 << 20);
  TransferRequest send, recv;
  cr_assert(pair.b->post_recv(0, 1, 5, got.data(), got.size(), &recv).ok());
  cr_assert(pair.a->post_send(1, 1, 5, message.data(), message.size(), &send).ok());
  cr_assert(!send.done, "a message larger than the channel waits for the receiver");
  pump(pair, {&send, &recv});
  cr_assert_eq(recv.received, message.size());
  cr_assert(got == message);
}

Test(shm_transport, messages_sent_before_their_receive) {
  Pair pair = make_pair(4, 4096);
  std::vector<std::vector<char>> messages = {pattern(10000, 1), pattern(20, 2), pattern(30000, 3)};
  std::vector<std::vector<char>> got = {std::vector<char>(10000), std::vector<char>(20),
                                        std::vector<char>(30000)};
  TransferRequest sends[3], recvs[3];
  for (int i = 0; i < 3; ++i)
    cr_assert(pair.a
                  ->post_send(1, 2, static_cast<uint32_t>(i), messages[i].data(),
                              messages[i].size(), &sends[i])
                  .ok());
  // Only the last one is wanted now: the two ahead of it must be moved aside to reach it.
  cr_assert(pair.b->post_recv(0, 2, 2, got[2].data(), got[2].size(), &recvs[2]).ok());
  pump(pair, {&sends[0], &sends[1], &sends[2], &recvs[2]});
  for (int i = 0; i < 2; ++i)
    cr_assert(
        pair.b->post_recv(0, 2, static_cast<uint32_t>(i), got[i].data(), got[i].size(), &recvs[i])
            .ok());
  pump(pair, {&recvs[0], &recvs[1]});
  for (int i = 0; i < 3; ++i) {
    cr_assert_eq(recvs[i].received, messages[i].size(), "message %d", i);
    cr_assert(got[i] == messages[i], "message %d", i);
  }
}

Test(shm_transport, a_waiting_message_is_read_in_place_when_its_receive_comes) {
  Pair pair = make_pair(4, 4096);
  const std::vector<char> message = pattern(3000, 4);
  std::vector<char> got(3000);
  TransferRequest send, recv;
  cr_assert(pair.a->post_send(1, 3, 0, message.data(), message.size(), &send).ok());
  for (int i = 0; i < 100; ++i) pair.b->progress();  // nothing posted: it stays in its cell
  cr_assert(pair.b->post_recv(0, 3, 0, got.data(), got.size(), &recv).ok());
  cr_assert(recv.done, "the receive finds the message waiting");
  cr_assert(got == message);
}

Test(shm_transport, reduces_on_receive) {
  Pair pair = make_pair(4, 4096);
  const size_t count = 100003;  // odd, and not a multiple of a cell's payload
  std::vector<float> mine(count), theirs(count), out(count, -1.0f);
  std::iota(mine.begin(), mine.end(), 0.0f);
  for (size_t i = 0; i < count; ++i) theirs[i] = static_cast<float>(2 * i + 1);
  TransferRequest send, recv;
  ReduceSpec spec;
  spec.dtype = DDL_FLOAT32;
  spec.op = DDL_SUM;
  cr_assert(pair.b->reduces_on_receive(0));
  cr_assert(
      pair.b->post_recv_reduce(0, 4, 9, out.data(), mine.data(), count * sizeof(float), spec, &recv)
          .ok());
  cr_assert(pair.a->post_send(1, 4, 9, theirs.data(), count * sizeof(float), &send).ok());
  pump(pair, {&send, &recv});
  for (size_t i = 0; i < count; ++i)
    cr_assert_eq(out[i], static_cast<float>(3 * i + 1), "element %zu", i);
}

Test(shm_transport, size_mismatch_is_reported_and_the_channel_survives) {
  Pair pair = make_pair(4, 4096);
  const std::vector<float> theirs(2000, 1.0f), next(5, 2.0f);
  std::vector<float> mine(4000, 1.0f), out(4000), got(5);
  TransferRequest send, recv, send_next, recv_next;
  ReduceSpec spec;
  cr_assert(
      pair.b->post_recv_reduce(0, 5, 1, out.data(), mine.data(), 4000 * sizeof(float), spec, &recv)
          .ok());
  cr_assert(pair.a->post_send(1, 5, 1, theirs.data(), 2000 * sizeof(float), &send).ok());
  pump(pair, {&send, &recv});
  cr_assert_eq(recv.received, 2000 * sizeof(float), "the size that came is reported");
  cr_assert(pair.b->post_recv(0, 5, 2, got.data(), 5 * sizeof(float), &recv_next).ok());
  cr_assert(pair.a->post_send(1, 5, 2, next.data(), 5 * sizeof(float), &send_next).ok());
  pump(pair, {&send_next, &recv_next});
  cr_assert(got == next);
}

Test(shm_transport, empty_messages) {
  Pair pair = make_pair();
  TransferRequest send, recv;
  char sink = 'x';
  cr_assert(pair.b->post_recv(0, 6, 3, &sink, 0, &recv).ok());
  cr_assert(pair.a->post_send(1, 6, 3, nullptr, 0, &send).ok());
  pump(pair, {&send, &recv});
  cr_assert_eq(recv.received, 0);
  cr_assert_eq(sink, 'x');
}

Test(shm_transport, cancelled_receive_is_never_touched) {
  Pair pair = make_pair(4, 4096);
  const std::vector<char> message = pattern(20000, 5);
  std::vector<char> got(20000, 0);
  TransferRequest send, recv;
  cr_assert(pair.b->post_recv(0, 7, 0, got.data(), got.size(), &recv).ok());
  cr_assert(pair.a->post_send(1, 7, 0, message.data(), message.size(), &send).ok());
  pair.b->progress();  // part of it lands
  pair.b->cancel(&recv);
  std::vector<char> before = got;
  pump(pair, {&send});  // the rest is drained and dropped
  cr_assert(!recv.done);
  cr_assert(got == before, "a cancelled receive's buffer is left alone");
}

Test(shm_transport, dead_peer_is_named) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // gone and reaped: its pid now names no process
  Pair pair = make_pair(4, 4096, child);
  Status s = pair.a->peer_status(1);
  cr_assert_eq(s.code(), DDL_ERR_REMOTE, "%s", s.message().c_str());
  cr_assert(s.message().find("rank 1") != std::string::npos, "%s", s.message().c_str());
  cr_assert(pair.b->peer_status(0).ok());
}

Test(shm_transport, the_segment_has_no_name) {
  auto names = [] {
    std::set<std::string> found;
    if (DIR *dir = opendir("/dev/shm")) {
      while (dirent *e = readdir(dir)) found.insert(e->d_name);
      closedir(dir);
    }
    return found;
  };
  const std::set<std::string> before = names();
  {
    Pair pair = make_pair();
    cr_assert(names() == before, "nothing appears in /dev/shm while the segment lives");
  }
  cr_assert(names() == before);
}
