// The header-only C++ wrapper: RAII, typed collectives, exceptions carrying the message.
#include <criterion/criterion.h>

#include <string>
#include <vector>

#include "ddl/ddl.hpp"

Test(cxx_wrapper, typed_collectives_on_one_rank) {
  ddl::Communicator comm = ddl::Communicator::create(1, 0, "");
  cr_assert_eq(comm.rank(), 0);
  cr_assert_eq(comm.size(), 1);
  std::vector<double> in = {1.5, 2.5}, out(2, 0.0);
  comm.allreduce(in.data(), out.data(), in.size(), DDL_MAX);
  cr_assert_eq(out[1], 2.5);
  std::vector<int32_t> v = {7, 8};
  comm.allreduce(v.data(), v.size());
  comm.broadcast(v.data(), v.size(), 0);
  cr_assert_eq(v[0], 7);
  comm.barrier();
  ddl::Communicator moved = std::move(comm);
  cr_assert_null(comm.handle());
  cr_assert_not_null(moved.handle());
}

Test(cxx_wrapper, errors_throw_with_code_and_words) {
  ddl::Communicator comm = ddl::Communicator::create(1, 0, "");
  float x = 1;
  try {
    comm.broadcast(&x, 1, 3);
    cr_assert_fail("a bad root did not throw");
  } catch (const ddl::Error &e) {
    cr_assert_eq(e.code(), DDL_ERR_INVALID_ARGUMENT);
    cr_assert(std::string(e.what()).find("root 3") != std::string::npos, "%s", e.what());
  }
  try {
    ddl::Communicator::create(2, 5, "127.0.0.1:1");
    cr_assert_fail("a bad rank did not throw");
  } catch (const ddl::Error &e) {
    cr_assert_eq(e.code(), DDL_ERR_INVALID_ARGUMENT);
  }
}

Test(cxx_wrapper, shared_buffer_owns_ddl_mem_alloc_memory) {
  ddl::Communicator comm = ddl::Communicator::create(1, 0, "");
  ddl::SharedBuffer<float> buffer(1000);
  cr_assert_eq(buffer.size(), 1000u);
  cr_assert_eq(buffer[999], 0.0f, "ddl_mem_alloc memory starts zeroed");
  buffer[3] = 2.5f;
  comm.allreduce(buffer.data(), buffer.size(), DDL_MAX);
  cr_assert_eq(buffer[3], 2.5f);
  ddl::SharedBuffer<float> moved = std::move(buffer);
  cr_assert_null(buffer.data());
  cr_assert_eq(moved[3], 2.5f);
  float *old = moved.data();
  moved = ddl::SharedBuffer<float>(4);
  cr_assert_eq(ddl_mem_free(old), DDL_ERR_INVALID_ARGUMENT, "the old allocation was not freed");
  cr_assert_eq(moved.size(), 4u);
}

Test(cxx_wrapper, requests_and_groups) {
  ddl::Communicator comm = ddl::Communicator::create(1, 0, "");
  std::vector<double> a = {1, 2}, b(2, 0.0), all(2, 0.0);
  ddl::Request r = comm.iallreduce(a.data(), b.data(), a.size(), DDL_SUM);
  ddl::Request g = comm.iallgather(a.data(), all.data(), a.size());
  g.wait();
  r.wait();
  cr_assert(r.test());
  cr_assert_eq(b[1], 2.0);
  cr_assert_eq(all[0], 1.0);
  {
    ddl::Group group;
    comm.allreduce(a.data(), a.size());
    ddl::Request in_group = comm.ibarrier();
    group.end();
    in_group.wait();
  }
  ddl::Request moved = std::move(r);
  cr_assert_null(r.handle());
  try {
    comm.ibroadcast(a.data(), a.size(), 2);
    cr_assert_fail("a bad root did not throw");
  } catch (const ddl::Error &e) {
    cr_assert_eq(e.code(), DDL_ERR_INVALID_ARGUMENT);
  }
}

Test(cxx_wrapper, alltoall_reduce_gather_scatter_scan_on_one_rank) {
  ddl::Communicator comm = ddl::Communicator::create(1, 0, "");
  std::vector<int64_t> a = {4, 5, 6}, b(3, 0);
  comm.alltoall(a.data(), b.data(), 3);
  cr_assert_eq(b[2], 6);
  comm.alltoallv(a.data(), {2}, {1}, b.data(), {2}, {0});
  cr_assert(b[0] == 5 && b[1] == 6);
  comm.reduce(a.data(), b.data(), 3, 0, DDL_MAX);
  cr_assert_eq(b[0], 4);
  comm.gather(a.data(), b.data(), 1, 0);
  comm.gatherv(a.data(), 2, b.data(), {2}, {1}, 0);
  cr_assert(b[1] == 4 && b[2] == 5);
  comm.scatter(a.data(), b.data(), 3, 0);
  comm.scatterv(a.data(), {1}, {2}, b.data(), 1, 0);
  cr_assert_eq(b[0], 6);
  comm.allgatherv(a.data(), 2, b.data(), {2}, {1});
  cr_assert(b[1] == 4 && b[2] == 5);
  comm.reduce_scatterv(a.data(), b.data(), {3});
  cr_assert(b[0] == 4 && b[2] == 6);
  comm.ialltoall(a.data(), b.data(), 1).wait();
  comm.ireduce(a.data(), b.data(), 3, 0).wait();
  // One rank: a scan is its own input; an exscan leaves the output alone.
  std::vector<int64_t> c(3, -1);
  comm.scan(a.data(), c.data(), 3);
  cr_assert(c[0] == 4 && c[2] == 6);
  c.assign(3, -1);
  comm.iexscan(b.data(), c.data(), 3, DDL_MAX).wait();
  cr_assert(c[0] == -1 && c[2] == -1);
  try {
    comm.alltoallv(a.data(), {1, 1}, {0}, b.data(), {1}, {0});
    cr_assert_fail("a vector of the wrong length did not throw");
  } catch (const ddl::Error &e) {
    cr_assert_eq(e.code(), DDL_ERR_INVALID_ARGUMENT);
  }
  try {
    comm.send(a.data(), 1, 0);
    cr_assert_fail("a send to itself did not throw");
  } catch (const ddl::Error &e) {
    cr_assert(std::string(e.what()).find("itself") != std::string::npos, "%s", e.what());
  }
}
