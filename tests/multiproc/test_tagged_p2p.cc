// ddl_send_tag / ddl_recv_tag across real processes: each tag its own order, a receive never
// takes another tag's message, receives from any source racing several senders (each
// sender's messages still in order, the reported source right), any-source beside receives
// from a named rank, in groups and in MPI's order; bad tags and sizes with clear errors. Run over
// shared memory and, by ctest's second entry, over UCX (DDL_SHM=0).
#include <criterion/criterion.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace ddltest;

namespace {

// Byte i of message k with tag t from rank `from`: distinct per sender, tag, message, place.
std::vector<unsigned char> message(int from, int tag, int k, size_t bytes) {
  std::vector<unsigned char> m(bytes);
  for (size_t i = 0; i < bytes; ++i)
    m[i] = static_cast<unsigned char>(from * 31 + tag * 17 + k * 7 + i * 13);
  return m;
}

bool contains(const std::string &text, const char *words) {
  return text.find(words) != std::string::npos;
}

// Sizes that take each path: inline in a cell, a few cells, many (pipelined), UCX's eager and
// rendezvous protocols.
size_t size_of(int k) {
  const size_t sizes[] = {0, 24, 4096, 100003, 1 << 21};
  return sizes[k % 5];
}

// Rank 0 sends tag 5, then tag 3, then tag 5 again; rank 1 receives tag 3 first: each tag
// keeps its own order, and a receive of tag 3 does not take the first tag-5 message.
int check_tags_are_separate_orders(ddl_comm_t comm, int rank) {
  if (rank > 1) return 0;
  const size_t bytes = 100003;
  if (rank == 0) {
    std::vector<std::vector<unsigned char>> out = {message(0, 5, 0, bytes), message(0, 3, 0, bytes),
                                                   message(0, 5, 1, bytes)};
    std::vector<ddl_request_t> requests(3);
    RANK_OK(ddl_isend_tag(out[0].data(), bytes, DDL_UINT8, 1, 5, comm, &requests[0]));
    RANK_OK(ddl_isend_tag(out[1].data(), bytes, DDL_UINT8, 1, 3, comm, &requests[1]));
    RANK_OK(ddl_isend_tag(out[2].data(), bytes, DDL_UINT8, 1, 5, comm, &requests[2]));
    for (ddl_request_t r : requests) {
      RANK_OK(ddl_wait(r));
      RANK_OK(ddl_request_free(r));
    }
    return 0;
  }
  std::vector<unsigned char> in(bytes);
  int source = -7;
  RANK_OK(ddl_recv_tag(in.data(), bytes, DDL_UINT8, 0, 3, comm, &source));
  RANK_CHECK(in == message(0, 3, 0, bytes) && source == 0, "tag 3 (source %d)", source);
  RANK_OK(ddl_recv_tag(in.data(), bytes, DDL_UINT8, 0, 5, comm, nullptr));
  RANK_CHECK(in == message(0, 5, 0, bytes), "first tag 5");
  RANK_OK(ddl_recv_tag(in.data(), bytes, DDL_UINT8, 0, 5, comm, nullptr));
  RANK_CHECK(in == message(0, 5, 1, bytes), "second tag 5");
  return 0;
}

// A receive of tag 2 posted before a message of tag 1 arrives stays pending until a tag-2
// message comes: the tag-1 message goes to the tag-1 receive posted after it.
int check_mismatched_tag_waits(ddl_comm_t comm, int rank) {
  if (rank > 1) return 0;
  int value = -1, other = -1, token = 0;
  if (rank == 0) {
    int one = 101, two = 202;
    RANK_OK(ddl_send_tag(&one, 1, DDL_INT32, 1, 1, comm));
    RANK_OK(ddl_recv_tag(&token, 1, DDL_INT32, 1, 9, comm, nullptr));  // rank 1 looked
    RANK_OK(ddl_send_tag(&two, 1, DDL_INT32, 1, 2, comm));
    return 0;
  }
  ddl_request_t two = nullptr;
  RANK_OK(ddl_irecv_tag(&value, 1, DDL_INT32, 0, 2, comm, nullptr, &two));
  RANK_OK(ddl_recv_tag(&other, 1, DDL_INT32, 0, 1, comm, nullptr));
  int done = 1;
  RANK_OK(ddl_test(two, &done));
  RANK_CHECK(other == 101 && done == 0 && value == -1,
             "tag 1 got %d; the tag-2 receive done %d with %d", other, done, value);
  RANK_OK(ddl_send_tag(&token, 1, DDL_INT32, 0, 9, comm));
  RANK_OK(ddl_wait(two));
  RANK_OK(ddl_request_free(two));
  RANK_CHECK(value == 202, "tag 2 got %d", value);
  return 0;
}

// In each of kPerSender rounds every other rank sends rank 0 one message of tag 7 (one size
// per round, so that rank 0 knows the size before the source); rank 0 takes them with
// receives from any source, blocking and nonblocking alike: each reported source matches the
// message, each sender's messages come in order, and each sender once per round.
constexpr int kPerSender = 6;
int check_any_source_races_senders(ddl_comm_t comm, int rank, int n) {
  if (n < 2) return 0;
  const int tag = 7;
  if (rank != 0) {
    for (int k = 0; k < kPerSender; ++k) {
      const std::vector<unsigned char> out = message(rank, tag, k, size_of(k));
      RANK_OK(ddl_send_tag(out.data(), out.size(), DDL_UINT8, 0, tag, comm));
      RANK_OK(ddl_barrier(comm));
    }
    return 0;
  }
  std::vector<int> next(n, 0);  // by sender: the message expected next
  for (int k = 0; k < kPerSender; ++k) {
    const size_t bytes = size_of(k);
    std::vector<std::vector<unsigned char>> in(n - 1, std::vector<unsigned char>(bytes));
    std::vector<int> sources(n - 1, -7);
    std::vector<ddl_request_t> requests(n - 1, nullptr);
    for (int i = 0; i < n - 1; ++i) {
      if (i % 2 == 0)
        RANK_OK(ddl_irecv_tag(in[i].data(), bytes, DDL_UINT8, DDL_ANY_SOURCE, tag, comm,
                              &sources[i], &requests[i]));
      else
        RANK_OK(
            ddl_recv_tag(in[i].data(), bytes, DDL_UINT8, DDL_ANY_SOURCE, tag, comm, &sources[i]));
    }
    for (ddl_request_t r : requests) {
      if (!r) continue;
      RANK_OK(ddl_wait(r));
      RANK_OK(ddl_request_free(r));
    }
    std::vector<int> seen(n, 0);
    for (int i = 0; i < n - 1; ++i) {
      const int s = sources[i];
      RANK_CHECK(s > 0 && s < n, "round %d: receive %d reported source %d", k, i, s);
      RANK_CHECK(in[i] == message(s, tag, next[s], bytes),
                 "round %d: receive %d from rank %d is not its message %d", k, i, s, next[s]);
      ++next[s];
      ++seen[s];
    }
    for (int s = 1; s < n; ++s)
      RANK_CHECK(seen[s] == 1, "round %d: rank %d seen %d times", k, s, seen[s]);
    RANK_OK(ddl_barrier(comm));  // the next round's size differs: no sender runs ahead
  }
  return 0;
}

// A receive from rank 1 beside receives from any source, in one group: the named receive
// takes rank 1's first message, the others whatever remains, each with its source.
int check_any_source_beside_named(ddl_comm_t comm, int rank, int n) {
  if (n < 3) return 0;
  const int tag = 11;
  if (rank == 1 || rank == 2) {
    for (int k = 0; k < 2; ++k) {
      const int value = rank * 100 + k;
      RANK_OK(ddl_send_tag(&value, 1, DDL_INT32, 0, tag, comm));
    }
    return 0;
  }
  if (rank != 0) return 0;
  int named = -1, any[3] = {-1, -1, -1}, sources[3] = {-1, -1, -1};
  RANK_OK(ddl_group_start());
  RANK_OK(ddl_recv_tag(&named, 1, DDL_INT32, 1, tag, comm, nullptr));
  for (int i = 0; i < 3; ++i)
    RANK_OK(ddl_recv_tag(&any[i], 1, DDL_INT32, DDL_ANY_SOURCE, tag, comm, &sources[i]));
  RANK_OK(ddl_group_end());
  RANK_CHECK(named == 100, "the receive from rank 1 got %d", named);
  int from_one = 0, from_two = 0;
  for (int i = 0; i < 3; ++i) {
    RANK_CHECK(any[i] / 100 == sources[i], "got %d reported from rank %d", any[i], sources[i]);
    from_one += sources[i] == 1, from_two += sources[i] == 2;
  }
  RANK_CHECK(from_one == 1 && from_two == 2, "rank 1 %d times, rank 2 %d times", from_one,
             from_two);
  return 0;
}

// MPI's order: a receive from any source posted before a receive from rank 1 of the same
// tag takes rank 1's first message, the named receive its second, though both are pending
// when the messages come.
int check_earlier_any_source_goes_first(ddl_comm_t comm, int rank) {
  if (rank > 1) return 0;
  const int tag = 5;
  int token = 0;
  if (rank == 1) {
    RANK_OK(ddl_recv_tag(&token, 1, DDL_INT32, 0, 9, comm, nullptr));  // both are posted
    for (int value : {1, 2}) RANK_OK(ddl_send_tag(&value, 1, DDL_INT32, 0, tag, comm));
    return 0;
  }
  int first = -1, second = -1, source = -1;
  ddl_request_t any = nullptr, named = nullptr;
  RANK_OK(ddl_irecv_tag(&first, 1, DDL_INT32, DDL_ANY_SOURCE, tag, comm, &source, &any));
  RANK_OK(ddl_irecv_tag(&second, 1, DDL_INT32, 1, tag, comm, nullptr, &named));
  RANK_OK(ddl_send_tag(&token, 1, DDL_INT32, 1, 9, comm));
  for (ddl_request_t r : {any, named}) {
    RANK_OK(ddl_wait(r));
    RANK_OK(ddl_request_free(r));
  }
  RANK_CHECK(first == 1 && source == 1 && second == 2,
             "the receive from any source got %d (from %d), the named one %d", first, source,
             second);
  return 0;
}

void expect_all_pass(int n) {
  std::string failures = run_ranks(n, [](ddl_comm_t comm, int rank, int nranks) {
    if (int rc = check_tags_are_separate_orders(comm, rank)) return rc;
    if (int rc = check_mismatched_tag_waits(comm, rank)) return rc;
    RANK_OK(ddl_barrier(comm));
    if (int rc = check_any_source_races_senders(comm, rank, nranks)) return rc;
    if (int rc = check_any_source_beside_named(comm, rank, nranks)) return rc;
    if (int rc = check_earlier_any_source_goes_first(comm, rank)) return rc;
    // Tag 0 is ddl_send/ddl_recv's: the two forms meet.
    if (rank < 2) {
      int value = rank + 40, got = -1;
      RANK_OK(ddl_group_start());
      RANK_OK(ddl_send(&value, 1, DDL_INT32, 1 - rank, comm));
      RANK_OK(ddl_recv_tag(&got, 1, DDL_INT32, 1 - rank, 0, comm, nullptr));
      RANK_OK(ddl_group_end());
      RANK_CHECK(got == 41 - rank, "tag 0 against ddl_send: got %d", got);
    }
    return 0;
  });
  cr_assert(failures.empty(), "%d ranks:\n%s", n, failures.c_str());
}

}  // namespace

Test(tagged_p2p, two_ranks) {
  expect_all_pass(2);
}
Test(tagged_p2p, four_ranks) {
  expect_all_pass(4);
}

Test(tagged_p2p, bad_tags_and_sources_are_local) {
  std::string failures = run_ranks(2, [](ddl_comm_t comm, int rank, int) {
    int value = rank;
    ddl_result_t r = ddl_send_tag(&value, 1, DDL_INT32, 1 - rank, -1, comm);
    RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "tag -1"), "%s",
               ddl_comm_last_error(comm));
    r = ddl_recv_tag(&value, 1, DDL_INT32, 1 - rank, DDL_TAG_UB + 1, comm, nullptr);
    RANK_CHECK(
        r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "not a message tag"),
        "%s", ddl_comm_last_error(comm));
    r = ddl_send_tag(&value, 1, DDL_INT32, DDL_ANY_SOURCE, 0, comm);
    RANK_CHECK(r == DDL_ERR_INVALID_ARGUMENT && contains(ddl_comm_last_error(comm), "peer -1"),
               "%s", ddl_comm_last_error(comm));
    // Still working, with the largest tag.
    int other = -1;
    RANK_OK(ddl_group_start());
    RANK_OK(ddl_send_tag(&value, 1, DDL_INT32, 1 - rank, DDL_TAG_UB, comm));
    RANK_OK(ddl_recv_tag(&other, 1, DDL_INT32, DDL_ANY_SOURCE, DDL_TAG_UB, comm, nullptr));
    RANK_OK(ddl_group_end());
    RANK_CHECK(other == 1 - rank, "exchange after the errors: %d", other);
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A receive from any source smaller than the message fails naming the sender and both
// sizes, as a receive from a named rank does.
Test(tagged_p2p, any_source_smaller_than_the_message) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        std::vector<float> buf(16, 1.0f);
        if (rank == 1) {
          RANK_OK(ddl_send_tag(buf.data(), 16, DDL_FLOAT32, 0, 4, comm));
          const ddl_result_t r = ddl_barrier(comm);
          RANK_CHECK(r != DDL_SUCCESS, "the sender's next call succeeded");
          return 0;
        }
        int source = -7;
        const ddl_result_t r =
            ddl_recv_tag(buf.data(), 8, DDL_FLOAT32, DDL_ANY_SOURCE, 4, comm, &source);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "%s", ddl_result_string(r));
        // Shared memory knows the message's size, UCX only that it is longer.
        const std::string error = ddl_comm_last_error(comm);
        RANK_CHECK(contains(error, "rank 1 sent 64 B but this receive expects 32 B") ||
                       contains(error, "rank 1 sent more than the 32 B this receive expects"),
                   "%s", error.c_str());
        RANK_CHECK(source == -7, "a failed receive reported source %d", source);
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// Nothing sent with the tag: a receive from any source ends at the deadline, saying so.
Test(tagged_p2p, any_source_with_nothing_sent_times_out) {
  RunOptions options;
  options.comm_timeout_ms = 1500;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        if (rank == 1) {  // sends nothing, and stays until rank 0's deadline has passed
          usleep(3000 * 1000);
          return 0;
        }
        int value = 0;
        const ddl_result_t r = ddl_recv_tag(&value, 1, DDL_INT32, DDL_ANY_SOURCE, 3, comm, nullptr);
        RANK_CHECK(r == DDL_ERR_TIMEOUT, "%s", ddl_result_string(r));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "recv from any rank (tag 3"), "%s",
                   ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}
