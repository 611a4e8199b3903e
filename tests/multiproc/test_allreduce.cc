// Allreduce across real processes over UCX: every datatype and op, in place and out of
// place, counts from 0 to tens of MB that do not divide evenly by the rank count.
#include <criterion/criterion.h>

#include <stdlib.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "lib/common/datatype.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

// Allreduces `count` elements and checks every one; returns non-zero (after printing) on
// the first mismatch.
int check_allreduce(ddl_comm_t comm, int rank, int nranks, ddl_datatype_t dtype, ddl_op_t op,
                    size_t count, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  std::vector<unsigned char> send(count * elem + 1), recv(count * elem + 1, 0xAB);
  fill_inputs(dtype, op, rank, send.data(), count);
  const std::vector<unsigned char> original = send;
  void *out = in_place ? send.data() : recv.data();
  RANK_OK(ddl_allreduce(send.data(), out, count, dtype, op, comm));
  for (size_t i = 0; i < count; ++i) {
    const double got = load_value(dtype, out, i), want = expected_value(dtype, op, nranks, i);
    RANK_CHECK(value_matches(dtype, op, got, want),
               "rank %d: %s %s count %zu %s: element %zu is %g, expected %g", rank,
               ddl_datatype_name(dtype), ddl_op_name(op), count,
               in_place ? "in place" : "out of place", i, got, want);
  }
  if (!in_place) {
    RANK_CHECK(std::memcmp(send.data(), original.data(), send.size()) == 0,
               "rank %d: the send buffer changed (%s count %zu)", rank, ddl_datatype_name(dtype),
               count);
    RANK_CHECK(recv[count * elem] == 0xAB, "rank %d: wrote past the end of recvbuf", rank);
  }
  return 0;
}

int every_type_and_op(ddl_comm_t comm, int rank, int nranks) {
  const size_t counts[] = {0, 1, 2, 7, 13, 1021};
  for (int d = 0; d < DDL_DATATYPE_COUNT; ++d)
    for (int o = 0; o < DDL_OP_COUNT; ++o)
      for (size_t count : counts)
        for (bool in_place : {false, true})
          if (int rc = check_allreduce(comm, rank, nranks, static_cast<ddl_datatype_t>(d),
                                       static_cast<ddl_op_t>(o), count, in_place))
            return rc;
  return 0;
}

int large_counts(ddl_comm_t comm, int rank, int nranks) {
  // A prime, a count just past a chunk boundary and ~16 MB of float32.
  for (size_t count : {size_t{100003}, size_t{131073}, size_t{4194307}})
    for (bool in_place : {false, true})
      if (int rc = check_allreduce(comm, rank, nranks, DDL_FLOAT32, DDL_SUM, count, in_place))
        return rc;
  if (int rc = check_allreduce(comm, rank, nranks, DDL_BFLOAT16, DDL_AVG, 1000003, false))
    return rc;
  return check_allreduce(comm, rank, nranks, DDL_INT64, DDL_MAX, 500009, true);
}

void expect_all_ranks_pass(int nranks, const RankBody &body, const char *algorithm = nullptr) {
  RunOptions options;
  if (algorithm) options.before_init = [algorithm](int) { setenv("DDL_ALGO", algorithm, 1); };
  std::string failures = run_ranks(nranks, body, options);
  cr_assert(failures.empty(), "%d ranks, algorithm %s:\n%s", nranks, algorithm ? algorithm : "auto",
            failures.c_str());
}

}  // namespace

Test(allreduce, every_type_and_op_1_rank) {
  expect_all_ranks_pass(1, every_type_and_op);
}
Test(allreduce, every_type_and_op_2_ranks) {
  expect_all_ranks_pass(2, every_type_and_op);
}
Test(allreduce, every_type_and_op_3_ranks) {
  expect_all_ranks_pass(3, every_type_and_op);
}
Test(allreduce, every_type_and_op_4_ranks) {
  expect_all_ranks_pass(4, every_type_and_op);
}
Test(allreduce, every_type_and_op_5_ranks) {
  expect_all_ranks_pass(5, every_type_and_op);
}
Test(allreduce, every_type_and_op_8_ranks) {
  expect_all_ranks_pass(8, every_type_and_op);
}

Test(allreduce, large_counts_2_ranks) {
  expect_all_ranks_pass(2, large_counts);
}
Test(allreduce, large_counts_3_ranks) {
  expect_all_ranks_pass(3, large_counts);
}
Test(allreduce, large_counts_8_ranks) {
  expect_all_ranks_pass(8, large_counts);
}

// The cost models pick rd for small counts and the ring for large ones; force each one over
// the whole range too.
Test(allreduce, forced_ring_every_type_and_op_3_ranks) {
  expect_all_ranks_pass(3, every_type_and_op, "ring");
}
Test(allreduce, forced_rd_every_type_and_op_5_ranks) {
  expect_all_ranks_pass(5, every_type_and_op, "rd");
}
Test(allreduce, forced_rd_large_counts_3_ranks) {
  expect_all_ranks_pass(3, large_counts, "rd");
}
Test(allreduce, forced_ring_every_type_and_op_4_ranks) {
  expect_all_ranks_pass(4, every_type_and_op, "ring");
}

Test(allreduce, unknown_algorithm_is_refused) {
  setenv("DDL_ALGO", "bogus", 1);
  ddl_comm_t comm = nullptr;
  cr_assert_eq(ddl_comm_init(&comm, 1, 0, nullptr, nullptr), DDL_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(ddl_comm_last_error(nullptr), "ring, rd") != nullptr, "%s",
            ddl_comm_last_error(nullptr));
  unsetenv("DDL_ALGO");
}
