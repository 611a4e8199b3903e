// The CUDA-IPC allreduce of device buffers inside a host (lib/device/ipc_allreduce.cc),
// through the stand-in driver, whose "device memory" is shared between the rank processes
// through memfds (fakes/fake_cuda.c says what that checks and what it cannot). Every
// datatype and op against the float64 reference with outputs poisoned first, in place and
// not, odd counts and counts below the rank count, buffers inside larger allocations, 2-4
// ranks and 9 (several kernel passes); repeated calls open nothing new and destroy closes
// what was opened; mismatched calls, a killed rank, an export that fails (staged instead),
// DDL_CUDA_IPC=0, and the dispatch's log of the row it picks.
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "fake_device.h"
#include "harness.h"
#include "typed_values.h"

using namespace ddltest;

namespace {

constexpr double kPoison = -77;

bool contains(const char *text, const char *needle) {
  return std::strstr(text, needle) != nullptr;
}

RunOptions with_fake(const char *ipc = nullptr) {
  RunOptions options;
  options.before_init = [ipc](int) {
    setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
    if (ipc) setenv("DDL_CUDA_IPC", ipc, 1);
  };
  return options;
}

int opened_so_far() {
  int opened = 0, closed = 0, now = 0;
  FakeCuda::get().ipc_stats(&opened, &closed, &now);
  return opened;
}

// One allreduce on sub-ranges of two larger allocations (at odd element offsets: the
// handles are the allocations', the buffers lie inside), checked against the reference.
int check_allreduce(ddl_comm_t comm, int rank, int nranks, DeviceBuffer &a, DeviceBuffer &b,
                    ddl_datatype_t dtype, ddl_op_t op, size_t n, bool in_place) {
  const size_t elem = ddl_datatype_size(dtype);
  const size_t in_at = 3 * elem, out_at = 5 * elem;
  RANK_CHECK(in_at + n * elem <= a.bytes() && out_at + n * elem <= b.bytes(), "buffers too small");
  unsigned char *in = a.shadow() + in_at, *out = in_place ? in : b.shadow() + out_at;
  fill_inputs(dtype, op, rank, in, n);
  if (!in_place)
    for (size_t i = 0; i < n; ++i) store_value(dtype, out, i, kPoison);
  void *send = static_cast<char *>(a.device()) + in_at;
  void *recv = in_place ? send : static_cast<char *>(b.device()) + out_at;
  RANK_OK(ddl_allreduce(send, recv, n, dtype, op, comm));
  for (size_t i = 0; i < n; ++i) {
    const double v = load_value(dtype, out, i), want = expected_value(dtype, op, nranks, i);
    RANK_CHECK(value_matches(dtype, op, v, want), "allreduce %s %s n=%zu%s [%zu]: %g, want %g",
               ddl_datatype_name(dtype), ddl_op_name(op), n, in_place ? " in place" : "", i, v,
               want);
  }
  return 0;
}

int every_dtype_and_op(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda::get();
  const size_t counts[] = {1, 3, 7, 1003};
  DeviceBuffer a(1100 * 8), b(1100 * 8);
  for (int dtype = 0; dtype < DDL_DATATYPE_COUNT; ++dtype)
    for (int op = 0; op < DDL_OP_COUNT; ++op)
      for (size_t n : counts)
        for (bool in_place : {false, true})
          if (check_allreduce(comm, rank, nranks, a, b, static_cast<ddl_datatype_t>(dtype),
                              static_cast<ddl_op_t>(op), n, in_place))
            return 1;
  // Every peer's two allocations opened once: the same buffers never open anything again.
  const int opened = opened_so_far();
  RANK_CHECK(opened == 2 * (nranks - 1), "%d handles opened, want %d", opened, 2 * (nranks - 1));
  return 0;
}

void expect_every_dtype_and_op(int nranks) {
  const std::string failures = run_ranks(nranks, every_dtype_and_op, with_fake());
  cr_assert(failures.empty(), "%d ranks: %s", nranks, failures.c_str());
}

}  // namespace

Test(device_ipc, every_dtype_and_op_2_ranks) {
  expect_every_dtype_and_op(2);
}
Test(device_ipc, every_dtype_and_op_3_ranks) {
  expect_every_dtype_and_op(3);
}
Test(device_ipc, every_dtype_and_op_4_ranks) {
  expect_every_dtype_and_op(4);
}

// More ranks than one kernel takes inputs: several passes, AVG divided once at the end.
Test(device_ipc, nine_ranks_reduce_in_several_passes) {
  const std::string failures = run_ranks(
      9,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        DeviceBuffer a(400 * 8), b(400 * 8);
        for (ddl_datatype_t dtype : {DDL_FLOAT32, DDL_FLOAT16, DDL_INT64})
          for (ddl_op_t op : {DDL_SUM, DDL_AVG, DDL_MIN})
            for (size_t n : {size_t{5}, size_t{301}})
              for (bool in_place : {false, true})
                if (check_allreduce(comm, rank, nranks, a, b, dtype, op, n, in_place)) return 1;
        return 0;
      },
      with_fake());
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// New buffers on every call: each peer allocation is opened once, and the communicator's
// destruction closes all of them (a communicator made by ddl_comm_split, destroyed here).
Test(device_ipc, handles_are_cached_and_closed_at_destroy) {
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        ddl_comm_t sub = nullptr;
        RANK_OK(ddl_comm_split(comm, 0, rank, &sub));
        const int before = opened_so_far();
        {
          DeviceBuffer a(64 * 4), b(64 * 4);
          for (int i = 0; i < 5; ++i)
            if (check_allreduce(sub, rank, nranks, a, b, DDL_FLOAT32, DDL_SUM, 50, i % 2)) return 1;
          RANK_CHECK(opened_so_far() - before == 2 * (nranks - 1), "opened %d",
                     opened_so_far() - before);
          // The peers must not free their buffers while this rank still has them open.
          RANK_OK(ddl_barrier(comm));
        }
        RANK_OK(ddl_comm_destroy(sub));
        int opened = 0, closed = 0, now = 0;
        FakeCuda::get().ipc_stats(&opened, &closed, &now);
        RANK_CHECK(now == 0 && closed == opened, "after destroy: %d open, %d of %d closed", now,
                   closed, opened);
        RANK_OK(ddl_barrier(comm));
        return 0;
      },
      with_fake());
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// Ranks that make different calls fail at the exchange, before anyone reads another's
// memory, with the error of host calls.
Test(device_ipc, mismatched_calls_are_named) {
  RunOptions options = with_fake();
  options.comm_timeout_ms = 5000;
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda::get();
        DeviceBuffer a(100 * 4);
        const ddl_result_t r = ddl_allreduce(a.device(), a.device(), 100, DDL_FLOAT32,
                                             rank == 1 ? DDL_MAX : DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE, "rank %d got %s: %s", rank, ddl_result_string(r),
                   ddl_comm_last_error(comm));
        RANK_CHECK(contains(ddl_comm_last_error(comm), "mismatched collective calls") &&
                       contains(ddl_comm_last_error(comm), "max"),
                   "rank %d: %s", rank, ddl_comm_last_error(comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A rank dies in the middle of IPC allreduces: every survivor fails soon, naming it.
Test(device_ipc, survivors_name_a_rank_killed_during_the_collective) {
  RunOptions options = with_fake();
  options.comm_timeout_ms = 20000;
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda::get();
        const size_t n = 1 << 15;
        DeviceBuffer buf(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, buf.shadow(), n);
        for (int i = 0;; ++i) {
          if (rank == 2 && i == 7) raise(SIGKILL);
          const auto start = std::chrono::steady_clock::now();
          const ddl_result_t r =
              ddl_allreduce(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_MAX, comm);
          if (r == DDL_SUCCESS) continue;
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d got %s: %s", rank, ddl_result_string(r),
                     ddl_comm_last_error(comm));
          RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 2") &&
                         contains(ddl_comm_last_error(comm), "allreduce"),
                     "rank %d: %s", rank, ddl_comm_last_error(comm));
          RANK_CHECK(took < 5.0, "rank %d took %.2f s", rank, took);
          return 0;
        }
      },
      options);
  for (int survivor : {0, 1})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos, "%s",
              failures.c_str());
}

// DDL_CUDA_IPC=0: staged through pinned host memory, nothing opened.
Test(device_ipc, disabled_is_staged) {
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        DeviceBuffer a(300 * 4), b(300 * 4);
        if (check_allreduce(comm, rank, nranks, a, b, DDL_FLOAT32, DDL_AVG, 257, false)) return 1;
        RANK_CHECK(opened_so_far() == 0, "DDL_CUDA_IPC=0 opened %d handles", opened_so_far());
        return 0;
      },
      with_fake("0"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// The dispatch (lib/core/dispatch.h) names the device rows it picks, once per shape: cuda_ipc
// where it applies; staged, with the reason, where it does not (then each chunk is a host call
// of its own row).
Test(device_ipc, the_dispatch_logs_the_device_row_and_why) {
  const std::pair<const char *, std::vector<std::string>> cases[] = {
      {nullptr, {"allreduce of 1028 B of device memory: cuda_ipc (every rank on this host"}},
      {"0",
       {"allreduce of 1028 B of device memory: staged (through pinned host memory: "
        "DDL_CUDA_IPC=0)",
        "allreduce of 1028 B: "}},
  };
  for (const auto &[ipc, expected] : cases) {
    std::vector<std::string> logs;
    const std::string failures = run_ranks_logged(
        2,
        [](ddl_comm_t comm, int rank, int nranks) {
          FakeCuda::get();
          DeviceBuffer a(300 * 4), b(300 * 4);
          for (int i = 0; i < 2; ++i)  // the second call of the shape logs nothing
            if (check_allreduce(comm, rank, nranks, a, b, DDL_FLOAT32, DDL_SUM, 257, false))
              return 1;
          return 0;
        },
        with_fake(ipc), &logs);
    cr_assert(failures.empty(), "%s", failures.c_str());
    for (int r = 0; r < 2; ++r)
      for (const std::string &line : expected) {
        const size_t at = logs[r].find(line);
        cr_assert(at != std::string::npos, "DDL_CUDA_IPC=%s: rank %d's log lacks \"%s\":\n%s",
                  ipc ? ipc : "(unset)", r, line.c_str(), logs[r].c_str());
        cr_assert(logs[r].find(line, at + 1) == std::string::npos,
                  "rank %d logged \"%s\" twice:\n%s", r, line.c_str(), logs[r].c_str());
      }
  }
}

// One rank's buffers cannot be exported (as managed memory or another allocator's cannot;
// FAKE_CUDA_IPC_REFUSE makes the stand-in refuse): the exchange tells every rank, and all of
// them stage that call instead; it is still right.
Test(device_ipc, unexportable_buffers_are_staged_by_every_rank) {
  RunOptions options = with_fake();
  options.before_init = [](int rank) {
    setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
    if (rank == 1) setenv("FAKE_CUDA_IPC_REFUSE", "1", 1);
  };
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda::get();
        DeviceBuffer a(300 * 8), b(300 * 8);
        for (bool in_place : {false, true})
          if (check_allreduce(comm, rank, nranks, a, b, DDL_FLOAT64, DDL_SUM, 257, in_place))
            return 1;
        RANK_CHECK(opened_so_far() == 0, "opened %d handles", opened_so_far());
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A rank dies inside the protocol: at its kernel launch (peers are reducing, then wait at the
// first barrier) or at its copies of the other blocks (peers wait at the last barrier). The
// survivors fail within the deadline, naming it, and never hang.
static void expect_death_reported(const char *die_at) {
  RunOptions options;
  options.comm_timeout_ms = 20000;
  options.before_init = [die_at](int rank) {
    setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
    if (rank == 1) setenv("FAKE_CUDA_DIE_AT", die_at, 1);
  };
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda::get();
        const size_t n = 4099;
        DeviceBuffer buf(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, buf.shadow(), n);
        for (int i = 0; i < 100; ++i) {
          const auto start = std::chrono::steady_clock::now();
          const ddl_result_t r =
              ddl_allreduce(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_SUM, comm);
          if (r == DDL_SUCCESS) continue;
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const char *why = ddl_comm_last_error(comm);
          RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d got %s: %s", rank, ddl_result_string(r), why);
          RANK_CHECK(contains(why, "rank 1") && contains(why, "allreduce #"), "rank %d: %s", rank,
                     why);
          RANK_CHECK(took < 5.0, "rank %d took %.2f s: %s", rank, took, why);
          return 0;
        }
        RANK_CHECK(false, "rank %d: rank 1 never died", rank);
      },
      options);
  for (int survivor : {0, 2})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos,
              "%s: %s", die_at, failures.c_str());
}

Test(device_ipc, survivors_name_a_rank_that_dies_launching_its_kernel) {
  expect_death_reported("launch:3");
}
Test(device_ipc, survivors_name_a_rank_that_dies_copying_the_other_blocks) {
  expect_death_reported("dtod:5");
}
