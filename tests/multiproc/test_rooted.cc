// Alltoall(v), reduce, gather(v), scatter(v), reduce_scatterv, scan and exscan across real
// processes: every datatype, odd and uneven counts (zeros included), every root, in place and
// not, blocking, nonblocking and grouped; and their bad arguments.
#include <criterion/criterion.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

const size_t kCounts[] = {0, 1, 7, 1021, 40007};

using Bytes = std::vector<unsigned char>;

// Rank `rank`'s send buffer of `count` elements, distinct per rank and element (what its
// peers recompute to check what they received).
Bytes data_of(ddl_datatype_t dtype, int rank, size_t count) {
  Bytes buf(count * ddl_datatype_size(dtype) + 1, 0xEE);
  fill_inputs(dtype, DDL_SUM, rank, buf.data(), count, static_cast<size_t>(rank) * 7919);
  return buf;
}

bool same(const unsigned char *a, const unsigned char *b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

int check_alltoall(ddl_comm_t comm, int rank, int n) {
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d)
    for (size_t count : kCounts)
      for (bool in_place : {false, true}) {
        const ddl_datatype_t dtype = static_cast<ddl_datatype_t>(d);
        if (count > 2000 && dtype != DDL_UINT8 && dtype != DDL_FLOAT64) continue;
        const size_t block = count * ddl_datatype_size(dtype);
        Bytes send = data_of(dtype, rank, count * n);
        Bytes recv(block * n + 1, 0xEE);
        if (in_place) std::memcpy(recv.data(), send.data(), block * n);
        RANK_OK(
            ddl_alltoall(in_place ? recv.data() : send.data(), recv.data(), count, dtype, comm));
        for (int from = 0; from < n; ++from) {
          Bytes theirs = data_of(dtype, from, count * n);
          RANK_CHECK(same(recv.data() + from * block, theirs.data() + rank * block, block),
                     "rank %d: alltoall %s count %zu in_place %d: block from rank %d wrong", rank,
                     ddl_datatype_name(dtype), count, in_place, from);
        }
        RANK_CHECK(recv.back() == 0xEE, "rank %d: alltoall wrote past the end", rank);
      }
  return 0;
}

// What rank `from` sends rank `to` in round `round`: uneven, often zero (MoE's routing).
size_t v_count(int from, int to, int round) {
  return static_cast<size_t>((from * 5 + to * 3 + round) % 4) * (round % 2 ? 1 : 977);
}

int check_alltoallv(ddl_comm_t comm, int rank, int n) {
  const ddl_datatype_t dtype = DDL_FLOAT32;
  const size_t elem = ddl_datatype_size(dtype);
  for (int round = 0; round < 4; ++round) {
    // Blocks with a gap of 3 elements before each, placed in reverse rank order.
    std::vector<size_t> scounts(n), sdispls(n), rcounts(n), rdispls(n);
    size_t sat = 0, rat = 0;
    for (int j = n - 1; j >= 0; --j) {
      scounts[j] = v_count(rank, j, round);
      sdispls[j] = sat + 3;
      sat += scounts[j] + 3;
      rcounts[j] = v_count(j, rank, round);
      rdispls[j] = rat + 3;
      rat += rcounts[j] + 3;
    }
    Bytes send = data_of(dtype, rank, sat);
    Bytes recv((rat + 1) * elem, 0xEE);
    ddl_request_t request = nullptr;
    if (round == 3) {  // nonblocking, the arrays freed before it completes
      std::vector<size_t> sc = scounts, sd = sdispls, rc = rcounts, rd = rdispls;
      RANK_OK(ddl_ialltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                             dtype, comm, &request));
      sc.assign(n, 12345), rc.assign(n, 54321);
      RANK_OK(ddl_wait(request));
      RANK_OK(ddl_request_free(request));
    } else {
      RANK_OK(ddl_alltoallv(send.data(), scounts.data(), sdispls.data(), recv.data(),
                            rcounts.data(), rdispls.data(), dtype, comm));
    }
    for (int from = 0; from < n; ++from) {
      // Recompute rank `from`'s layout for this rank.
      size_t at = 0, theirs_at = 0;
      for (int j = n - 1; j >= 0; --j) {
        if (j == rank) theirs_at = at + 3;
        at += v_count(from, j, round) + 3;
      }
      Bytes theirs = data_of(dtype, from, at);
      RANK_CHECK(same(recv.data() + rdispls[from] * elem, theirs.data() + theirs_at * elem,
                      rcounts[from] * elem),
                 "rank %d: alltoallv round %d: block from rank %d wrong", rank, round, from);
    }
    for (int j = 0; j < n; ++j)  // the gaps are left alone
      RANK_CHECK(recv[(rdispls[j] - 1) * elem] == 0xEE, "rank %d: alltoallv wrote a gap", rank);
  }
  return 0;
}

int check_reduce(ddl_comm_t comm, int rank, int n) {
  for (int root = 0; root < n; ++root)
    for (size_t count : kCounts)
      for (ddl_op_t op : {DDL_SUM, DDL_PROD, DDL_MIN, DDL_MAX, DDL_AVG})
        for (ddl_datatype_t dtype : {DDL_INT32, DDL_FLOAT32, DDL_BFLOAT16, DDL_FLOAT64}) {
          if (count > 2000 && op != DDL_SUM) continue;
          const bool in_place = (count + root) % 2 == 1;
          const size_t elem = ddl_datatype_size(dtype);
          Bytes send(count * elem + 1), recv(count * elem + 1, 0xEE);
          fill_inputs(dtype, op, rank, send.data(), count);
          void *out = rank == root ? (in_place ? send.data() : recv.data()) : nullptr;
          RANK_OK(ddl_reduce(send.data(), out, count, dtype, op, root, comm));
          if (rank != root) continue;
          for (size_t i = 0; i < count; ++i) {
            const double got = load_value(dtype, out, i);
            const double want = expected_value(dtype, op, n, i);
            RANK_CHECK(value_matches(dtype, op, got, want),
                       "rank %d: reduce root %d %s %s count %zu: element %zu is %g, expected %g",
                       rank, root, ddl_datatype_name(dtype), ddl_op_name(op), count, i, got, want);
          }
          RANK_CHECK(recv.back() == 0xEE, "rank %d: reduce wrote past the end", rank);
        }
  return 0;
}

// Reduce_scatterv: block j (counts[j] elements, packed) of every rank's input reduced into
// rank j's output: every op and a few types, in place or not, blocking or not, empty blocks.
int check_reduce_scatterv(ddl_comm_t comm, int rank, int n) {
  std::vector<size_t> counts(n);
  size_t total = 0, mine_at = 0;
  for (int j = 0; j < n; ++j) {
    counts[j] = j % 3 == 1 ? 0 : 4 * j + 3;
    if (j == rank) mine_at = total;
    total += counts[j];
  }
  int way = 0;
  for (ddl_op_t op : {DDL_SUM, DDL_PROD, DDL_MIN, DDL_MAX, DDL_AVG})
    for (ddl_datatype_t dtype : {DDL_INT32, DDL_FLOAT32, DDL_BFLOAT16, DDL_FLOAT64}) {
      const bool in_place = way % 3 == 1, nonblocking = way % 3 == 2;
      ++way;
      const size_t elem = ddl_datatype_size(dtype);
      Bytes send(total * elem + 1), recv(counts[rank] * elem + 1, 0xEE);
      fill_inputs(dtype, op, rank, send.data(), total);
      void *out = in_place ? send.data() + mine_at * elem : recv.data();
      if (nonblocking) {
        ddl_request_t request = nullptr;
        RANK_OK(ddl_ireduce_scatterv(send.data(), out, counts.data(), dtype, op, comm, &request));
        RANK_OK(ddl_wait(request));
        RANK_OK(ddl_request_free(request));
      } else {
        RANK_OK(ddl_reduce_scatterv(send.data(), out, counts.data(), dtype, op, comm));
      }
      for (size_t i = 0; i < counts[rank]; ++i) {
        const double got = load_value(dtype, out, i);
        const double want = expected_value(dtype, op, n, mine_at + i);
        RANK_CHECK(value_matches(dtype, op, got, want),
                   "rank %d: reduce_scatterv %s %s%s: element %zu is %g, expected %g", rank,
                   ddl_datatype_name(dtype), ddl_op_name(op), in_place ? " in place" : "", i, got,
                   want);
      }
      RANK_CHECK(recv.back() == 0xEE, "rank %d: reduce_scatterv wrote past the end", rank);
    }
  return 0;
}

// Scan and exscan: rank r gets the reduction of ranks 0..r (0..r-1); an exscan leaves rank 0's
// output as it was. Every op they take, a few types, in place or not, blocking or not.
int check_scans(ddl_comm_t comm, int rank, int n) {
  int way = 0;
  for (bool exclusive : {false, true})
    for (size_t count : kCounts)
      for (ddl_op_t op : {DDL_SUM, DDL_PROD, DDL_MIN, DDL_MAX})
        for (ddl_datatype_t dtype : {DDL_INT32, DDL_FLOAT32, DDL_BFLOAT16, DDL_FLOAT64}) {
          if (count > 2000 && op != DDL_SUM) continue;
          const bool in_place = way % 3 == 1, nonblocking = way % 3 == 2;
          ++way;
          const size_t elem = ddl_datatype_size(dtype);
          Bytes send(count * elem + 1, 0xEE), recv(count * elem + 1, 0xEE);
          fill_inputs(dtype, op, rank, send.data(), count);
          const Bytes before = in_place ? send : recv;
          void *out = in_place ? send.data() : recv.data();
          const char *name = exclusive ? "exscan" : "scan";
          if (nonblocking) {
            ddl_request_t request = nullptr;
            RANK_OK((exclusive ? ddl_iexscan : ddl_iscan)(send.data(), out, count, dtype, op, comm,
                                                          &request));
            RANK_OK(ddl_wait(request));
            RANK_OK(ddl_request_free(request));
          } else {
            RANK_OK((exclusive ? ddl_exscan : ddl_scan)(send.data(), out, count, dtype, op, comm));
          }
          if (exclusive && rank == 0) {
            RANK_CHECK(same(static_cast<unsigned char *>(out), before.data(), count * elem),
                       "rank 0: exscan %s %s%s changed its output", ddl_datatype_name(dtype),
                       ddl_op_name(op), in_place ? " in place" : "");
            continue;
          }
          const int ranks = exclusive ? rank : rank + 1;
          for (size_t i = 0; i < count; ++i) {
            const double got = load_value(dtype, out, i);
            const double want = expected_value(dtype, op, ranks, i);
            RANK_CHECK(value_matches(dtype, op, got, want),
                       "rank %d: %s %s %s%s count %zu: element %zu is %g, expected %g", rank, name,
                       ddl_datatype_name(dtype), ddl_op_name(op), in_place ? " in place" : "",
                       count, i, got, want);
          }
          RANK_CHECK((in_place ? send : recv).back() == 0xEE, "rank %d: %s wrote past the end",
                     rank, name);
        }
  return 0;
}

int check_gather_scatter(ddl_comm_t comm, int rank, int n) {
  const ddl_datatype_t dtype = DDL_FLOAT16;
  const size_t elem = ddl_datatype_size(dtype);
  for (int root = 0; root < n; ++root)
    for (size_t count : kCounts)
      for (bool in_place : {false, true}) {
        const size_t block = count * elem;
        // Gather: the root's recvbuf gets every rank's block in rank order.
        Bytes mine = data_of(dtype, rank, count);
        Bytes all(block * n + 1, 0xEE);
        const bool here = in_place && rank == root;
        if (here) std::memcpy(all.data() + root * block, mine.data(), block);
        RANK_OK(ddl_gather(here ? all.data() + root * block : mine.data(),
                           rank == root ? all.data() : nullptr, count, dtype, root, comm));
        for (int from = 0; rank == root && from < n; ++from)
          RANK_CHECK(same(all.data() + from * block, data_of(dtype, from, count).data(), block),
                     "rank %d: gather root %d count %zu: block of rank %d wrong", rank, root, count,
                     from);
        RANK_CHECK(all.back() == 0xEE, "rank %d: gather wrote past the end", rank);
        // Scatter: block i of the root's data to rank i.
        Bytes source = data_of(dtype, root, count * n);
        Bytes got(block + 1, 0xEE);
        void *out = here ? source.data() + root * block : got.data();
        RANK_OK(ddl_scatter(rank == root ? source.data() : nullptr, out, count, dtype, root, comm));
        RANK_CHECK(same(static_cast<unsigned char *>(out),
                        data_of(dtype, root, count * n).data() + rank * block, block),
                   "rank %d: scatter root %d count %zu wrong", rank, root, count);
        RANK_CHECK(got.back() == 0xEE, "rank %d: scatter wrote past the end", rank);
      }
  return 0;
}

int check_gatherv_scatterv(ddl_comm_t comm, int rank, int n) {
  const ddl_datatype_t dtype = DDL_INT64;
  const size_t elem = ddl_datatype_size(dtype);
  auto count_of = [](int r) { return static_cast<size_t>(r % 3 == 1 ? 0 : 5 * r + 3); };
  for (int root = 0; root < n; ++root) {
    std::vector<size_t> counts(n), displs(n);
    size_t at = 0;
    for (int j = n - 1; j >= 0; --j) {  // reverse order, one element apart
      counts[j] = count_of(j);
      displs[j] = at + 1;
      at += counts[j] + 1;
    }
    Bytes mine = data_of(dtype, rank, count_of(rank));
    Bytes all((at + 1) * elem, 0xEE);
    RANK_OK(ddl_gatherv(mine.data(), count_of(rank), rank == root ? all.data() : nullptr,
                        rank == root ? counts.data() : nullptr,
                        rank == root ? displs.data() : nullptr, dtype, root, comm));
    for (int from = 0; rank == root && from < n; ++from)
      RANK_CHECK(same(all.data() + displs[from] * elem, data_of(dtype, from, counts[from]).data(),
                      counts[from] * elem),
                 "rank %d: gatherv root %d: block of rank %d wrong", rank, root, from);
    Bytes source = data_of(dtype, root, at);
    Bytes got(count_of(rank) * elem + 1, 0xEE);
    ddl_request_t request = nullptr;
    RANK_OK(ddl_iscatterv(rank == root ? source.data() : nullptr,
                          rank == root ? counts.data() : nullptr,
                          rank == root ? displs.data() : nullptr, got.data(), count_of(rank), dtype,
                          root, comm, &request));
    RANK_OK(ddl_wait(request));
    RANK_OK(ddl_request_free(request));
    RANK_CHECK(same(got.data(), source.data() + displs[rank] * elem, count_of(rank) * elem),
               "rank %d: scatterv root %d wrong", rank, root);
    RANK_CHECK(got.back() == 0xEE, "rank %d: scatterv wrote past the end", rank);
  }
  // Allgatherv, the same layout on every rank, in place or not (and nonblocking).
  std::vector<size_t> counts(n), displs(n);
  size_t at = 0;
  for (int j = n - 1; j >= 0; --j) {
    counts[j] = count_of(j);
    displs[j] = at + 1;
    at += counts[j] + 1;
  }
  for (int way = 0; way < 3; ++way) {
    const bool in_place = way == 1;
    Bytes all((at + 1) * elem, 0xEE);
    Bytes mine = data_of(dtype, rank, count_of(rank));
    if (in_place) std::memcpy(all.data() + displs[rank] * elem, mine.data(), mine.size());
    const void *send = in_place ? all.data() + displs[rank] * elem : mine.data();
    if (way == 2) {
      ddl_request_t request = nullptr;
      RANK_OK(ddl_iallgatherv(send, count_of(rank), all.data(), counts.data(), displs.data(), dtype,
                              comm, &request));
      RANK_OK(ddl_wait(request));
      RANK_OK(ddl_request_free(request));
    } else {
      RANK_OK(ddl_allgatherv(send, count_of(rank), all.data(), counts.data(), displs.data(), dtype,
                             comm));
    }
    for (int from = 0; from < n; ++from)
      RANK_CHECK(same(all.data() + displs[from] * elem, data_of(dtype, from, counts[from]).data(),
                      counts[from] * elem),
                 "rank %d: allgatherv%s: block of rank %d wrong", rank, in_place ? " in place" : "",
                 from);
    RANK_CHECK(all[0] == 0xEE && all.back() == 0xEE, "rank %d: allgatherv wrote outside the blocks",
               rank);
  }
  return 0;
}

// Many in flight, and a group mixing the new collectives with an allreduce.
int check_nonblocking_and_grouped(ddl_comm_t comm, int rank, int n) {
  const size_t count = 333;
  std::vector<Bytes> sends, recvs;
  std::vector<ddl_request_t> requests(8);
  for (int k = 0; k < 8; ++k) {
    sends.push_back(data_of(DDL_INT32, rank + k, count * n));
    recvs.push_back(Bytes(count * n * 4 + 1, 0xEE));
  }
  for (int k = 0; k < 8; ++k)
    RANK_OK(ddl_ialltoall(sends[k].data(), recvs[k].data(), count, DDL_INT32, comm, &requests[k]));
  for (int k = 7; k >= 0; --k) {
    RANK_OK(ddl_wait(requests[k]));
    RANK_OK(ddl_request_free(requests[k]));
    for (int from = 0; from < n; ++from)
      RANK_CHECK(same(recvs[k].data() + from * count * 4,
                      data_of(DDL_INT32, from + k, count * n).data() + rank * count * 4, count * 4),
                 "rank %d: ialltoall %d: block from %d wrong", rank, k, from);
  }
  Bytes a2a_send = data_of(DDL_INT32, rank, count * n), a2a_recv(count * n * 4);
  Bytes red_send(count * 4), red_recv(count * 4);
  fill_inputs(DDL_INT32, DDL_SUM, rank, red_send.data(), count);
  std::vector<float> grad(100, static_cast<float>(rank + 1));
  RANK_OK(ddl_group_start());
  RANK_OK(ddl_alltoall(a2a_send.data(), a2a_recv.data(), count, DDL_INT32, comm));
  RANK_OK(ddl_allreduce(grad.data(), grad.data(), grad.size(), DDL_FLOAT32, DDL_SUM, comm));
  RANK_OK(ddl_reduce(red_send.data(), red_recv.data(), count, DDL_INT32, DDL_SUM, n - 1, comm));
  RANK_OK(ddl_group_end());
  RANK_CHECK(grad[99] == static_cast<float>(n * (n + 1) / 2), "rank %d: grouped allreduce", rank);
  for (size_t i = 0; rank == n - 1 && i < count; ++i)
    RANK_CHECK(
        load_value(DDL_INT32, red_recv.data(), i) == expected_value(DDL_INT32, DDL_SUM, n, i),
        "rank %d: grouped reduce element %zu", rank, i);
  for (int from = 0; from < n; ++from)
    RANK_CHECK(same(a2a_recv.data() + from * count * 4,
                    data_of(DDL_INT32, from, count * n).data() + rank * count * 4, count * 4),
               "rank %d: grouped alltoall: block from %d wrong", rank, from);
  return 0;
}

void expect_all_pass(int n) {
  std::string failures = run_ranks(n, [](ddl_comm_t comm, int rank, int nranks) {
    if (int rc = check_alltoall(comm, rank, nranks)) return rc;
    if (int rc = check_alltoallv(comm, rank, nranks)) return rc;
    if (int rc = check_reduce(comm, rank, nranks)) return rc;
    if (int rc = check_gather_scatter(comm, rank, nranks)) return rc;
    if (int rc = check_gatherv_scatterv(comm, rank, nranks)) return rc;
    if (int rc = check_reduce_scatterv(comm, rank, nranks)) return rc;
    if (int rc = check_scans(comm, rank, nranks)) return rc;
    return check_nonblocking_and_grouped(comm, rank, nranks);
  });
  cr_assert(failures.empty(), "%d ranks:\n%s", n, failures.c_str());
}

}  // namespace

// hier's alltoall for real: 4 ranks in two groups (DDL_TIERS), forced.
Test(rooted, hier_alltoall_in_two_groups) {
  RunOptions options;
  options.before_init = [](int) {
    setenv("DDL_TIERS", "2x2", 1);
    setenv("DDL_ALGO", "hier", 1);
  };
  std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int nranks) {
        if (int rc = check_alltoall(comm, rank, nranks)) return rc;
        return check_nonblocking_and_grouped(comm, rank, nranks);
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(rooted, one_rank) {
  expect_all_pass(1);
}
Test(rooted, two_ranks) {
  expect_all_pass(2);
}
Test(rooted, three_ranks) {
  expect_all_pass(3);
}
Test(rooted, five_ranks, .timeout = 300) {
  expect_all_pass(5);
}

// Bad arguments fail on the rank that passed them, name the argument, and leave the
// communicator working (nothing was sent).
Test(rooted, bad_arguments_are_local) {
  std::string failures = run_ranks(3, [](ddl_comm_t comm, int rank, int n) {
    std::vector<int> send(3 * n, rank), recv(3 * n);
    auto refused = [&](ddl_result_t r, const char *words) {
      const std::string error = ddl_comm_last_error(comm);
      if (r != DDL_ERR_INVALID_ARGUMENT || error.find(words) == std::string::npos) {
        fprintf(stderr, "rank %d: expected an error with '%s', got %s: %s\n", rank, words,
                ddl_result_string(r), error.c_str());
        return false;
      }
      return true;
    };
    RANK_CHECK(refused(ddl_reduce(send.data(), recv.data(), 3, DDL_INT32, DDL_SUM, n, comm),
                       "root 3 is not a rank"),
               "reduce root");
    RANK_CHECK(refused(ddl_gather(send.data(), recv.data(), 3, DDL_INT32, -1, comm), "root -1"),
               "gather root");
    RANK_CHECK(refused(ddl_alltoallv(send.data(), nullptr, nullptr, recv.data(), nullptr, nullptr,
                                     DDL_INT32, comm),
                       "is NULL"),
               "alltoallv arrays");
    std::vector<size_t> counts(n, 1), displs(n, 0);
    counts[rank] = 2;
    std::vector<size_t> ones(n, 1);
    RANK_CHECK(refused(ddl_alltoallv(send.data(), ones.data(), displs.data(), recv.data(),
                                     counts.data(), displs.data(), DDL_INT32, comm),
                       "to itself"),
               "alltoallv own block");
    RANK_CHECK(refused(ddl_alltoall(send.data(), send.data() + 1, 3, DDL_INT32, comm), "overlap"),
               "alltoall overlap");
    RANK_CHECK(
        refused(ddl_scatter(nullptr, recv.data(), 3, DDL_INT32, rank, comm), "sendbuf is NULL"),
        "scatter root's NULL sendbuf");
    RANK_CHECK(refused(ddl_scan(send.data(), recv.data(), 3, DDL_INT32, DDL_AVG, comm),
                       "DDL_AVG is not an op of scan"),
               "scan's AVG");
    // Still working.
    RANK_OK(ddl_alltoall(send.data(), recv.data(), 3, DDL_INT32, comm));
    for (int j = 0; j < n; ++j) RANK_CHECK(recv[3 * j] == j, "alltoall after the errors");
    return 0;
  });
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// Allgatherv on one host: blocks of 3,000 and 5,000 elements go by single copy (each rank
// reads its peers' blocks straight out of their buffers, lib/core/direct_copy.h), of 3 and 5
// through the shared slots (lib/core/flat_collectives.h); 2 ranks, as with more ranks than the
// 2 cores here the single copy keeps away. In place and not; then counts that disagree (rank
// 0 expects 4 (4,000) elements from rank 1, which sends 5 (5,000)): rank 0 names rank 1 and
// both sizes, rank 1 hears of it, nobody waits for a deadline.
void expect_allgatherv_on_one_host(size_t scale, const char *path) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::vector<std::string> logs;
  std::string failures = run_ranks_logged(
      2,
      [scale](ddl_comm_t comm, int rank, int n) {
        std::vector<size_t> counts = {3 * scale, 5 * scale}, displs = {5 * scale + 1, 0};
        const size_t extent = 8 * scale + 2;
        for (bool in_place : {false, true}) {
          std::vector<int64_t> all(extent, -1), mine(counts[rank]);
          for (size_t i = 0; i < mine.size(); ++i) mine[i] = 100000 * rank + i;
          if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + displs[rank]);
          RANK_OK(ddl_allgatherv(in_place ? all.data() + displs[rank] : mine.data(), counts[rank],
                                 all.data(), counts.data(), displs.data(), DDL_INT64, comm));
          for (int j = 0; j < n; ++j)
            for (size_t i = 0; i < counts[j]; ++i)
              RANK_CHECK(all[displs[j] + i] == static_cast<int64_t>(100000 * j + i),
                         "rank %d: block of rank %d element %zu wrong%s", rank, j, i,
                         in_place ? " (in place)" : "");
          RANK_CHECK(all[5 * scale] == -1 && all[extent - 1] == -1,
                     "rank %d: wrote outside the blocks", rank);
        }
        std::vector<int64_t> all(extent), mine(5 * scale);
        std::vector<size_t> wrong = counts;
        if (rank == 0) wrong[1] = 4 * scale;
        const ddl_result_t r = ddl_allgatherv(mine.data(), counts[rank], all.data(), wrong.data(),
                                              displs.data(), DDL_INT64, comm);
        const ddl_result_t next = r == DDL_SUCCESS ? ddl_barrier(comm) : r;
        const std::string error = ddl_comm_last_error(comm);
        RANK_CHECK(next != DDL_SUCCESS, "rank %d: a mismatch went through", rank);
        const std::string sizes = std::to_string(40 * scale) + " B but this rank expects " +
                                  std::to_string(32 * scale) + " B";
        RANK_CHECK(error.find(rank == 0 ? "rank 1 sends " + sizes : sizes) != std::string::npos,
                   "rank %d's error: %s", rank, error.c_str());
        return 0;
      },
      options, &logs);
  cr_assert(failures.empty(), "%s", failures.c_str());
  for (const std::string &log : logs)
    cr_assert(log.find(std::string("allgatherv of ") + std::to_string(24 * scale) +
                       " B: " + path) != std::string::npos ||
                  log.find(std::string("allgatherv of ") + std::to_string(40 * scale) +
                           " B: " + path) != std::string::npos,
              "not %s: %s", path, log.c_str());
}

Test(rooted, allgatherv_by_single_copy) {
  expect_allgatherv_on_one_host(1000, "direct (single copy");
}

Test(rooted, allgatherv_through_the_slots) {
  expect_allgatherv_on_one_host(1, "flat (shared slots");
}

// Counts that disagree between ranks (the root of a gatherv expects 4 elements from rank 1,
// which sends 3): the root names rank 1 and both sizes, and rank 1 hears of it at its next
// call; nobody waits for a deadline.
Test(rooted, counts_that_disagree_fail_on_every_rank) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int n) {
        std::vector<int> send(4, rank), recv(8);
        std::vector<size_t> counts = {4, 4}, displs = {0, 4};
        const ddl_result_t r = ddl_gatherv(send.data(), rank == 0 ? 4 : 3, recv.data(),
                                           counts.data(), displs.data(), DDL_INT32, 0, comm);
        const std::string error = ddl_comm_last_error(comm);
        if (rank == 0) {
          RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "root: %s", ddl_result_string(r));
          // Through the single copy "rank 1 sends 12 B but this rank expects 16 B", through a
          // schedule "rank 1 sent 12 B instead of 16 B".
          RANK_CHECK(error.find("rank 1 sen") != std::string::npos &&
                         error.find("12 B") != std::string::npos &&
                         error.find("16 B") != std::string::npos,
                     "root's error: %s", error.c_str());
          return 0;
        }
        const ddl_result_t next = r == DDL_SUCCESS ? ddl_barrier(comm) : r;
        RANK_CHECK(next != DDL_SUCCESS, "rank 1 never heard of the mismatch");
        const std::string words = ddl_comm_last_error(comm);
        RANK_CHECK(words.find("rank 0 reports") != std::string::npos &&
                       words.find("12 B") != std::string::npos &&
                       words.find("16 B") != std::string::npos,
                   "rank 1's error: %s", words.c_str());
        (void)n;
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}
