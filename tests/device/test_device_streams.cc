// Stream-ordered calls through the stand-in CUDA driver: the collective runs after a "kernel"
// queued before it (which writes the input late) and before one queued after it (which reads
// the output). Host-synchronous (the default inside a host): the call returns once the
// collective has ended. Asynchronous (DDL_CUDA_STREAM_ASYNC=1, most tests here, and the
// default across hosts): the call returns before either kernel ran; a collective that times
// out or is aborted still releases the stream, and the next call reports it; the progress
// thread makes no driver call while a stream waits for it (the stand-in driver models the
// lock that made such calls hang on a GPU); an allreduce among the ranks of one host runs on
// the device alone (CUDA IPC, barriers on the device), and a call of a one-rank communicator
// is a copy on the stream. Also: a rank killed during device
// allreduces is named by every survivor, and without a driver every buffer is host memory.
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fake_device.h"
#include "harness.h"
#include "typed_values.h"

using namespace ddltest;
using Clock = std::chrono::steady_clock;

namespace {

bool contains(const char *text, const char *needle) {
  return std::strstr(text, needle) != nullptr;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// async: DDL_CUDA_STREAM_ASYNC=1; else the default mode (asynchronous across hosts only).
// ordered_on_the_stream expects the asynchronous mode where expect_async.
RunOptions with_fake(const char *stage_bytes = "256", bool async = true, bool expect_async = true) {
  RunOptions options;
  options.before_init = [stage_bytes, async, expect_async](int) {
    setenv("DDL_CUDA_LIBRARY", FAKE_CUDA, 1);
    if (async) setenv("DDL_CUDA_STREAM_ASYNC", "1", 1);
    setenv("DDL_TEST_EXPECT_ASYNC", async || expect_async ? "1" : "0", 1);
    setenv("DDL_CUDA_STAGE_BYTES", stage_bytes, 1);
    setenv("FAKE_CUDA_DELAY_US", "100", 1);
  };
  return options;
}

// A "kernel" that writes rank's inputs into memory after a while (late on purpose: a call
// that did not wait for it would reduce stale data).
struct Writer {
  unsigned char *memory;
  ddl_datatype_t dtype;
  int rank;
  size_t count;
  int delay_ms;
  std::atomic<bool> ran{false};
};
void write_kernel(void *arg) {
  auto *w = static_cast<Writer *>(arg);
  std::this_thread::sleep_for(std::chrono::milliseconds(w->delay_ms));
  fill_inputs(w->dtype, DDL_SUM, w->rank, w->memory, w->count);
  w->ran.store(true);
}

// A "kernel" that copies memory out as it is when it runs.
struct Reader {
  const unsigned char *memory;
  size_t bytes;
  std::vector<unsigned char> seen;
};
void read_kernel(void *arg) {
  auto *r = static_cast<Reader *>(arg);
  r->seen.assign(r->memory, r->memory + r->bytes);
}

int ordered_on_the_stream(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda &cu = FakeCuda::get();
  void *stream = nullptr;
  RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
  const size_t n = 301, N = n * static_cast<size_t>(nranks);
  DeviceBuffer ar_in(n * 4), ar_out(n * 4), bc(n * 8), ag_in(n * 4), ag_out(N * 4), rs_in(N * 4),
      rs_out(n * 4);
  for (DeviceBuffer *b : {&ar_out, &bc, &ag_out, &rs_out}) memset(b->shadow(), 0xee, b->bytes());
  Writer w_ar{ar_in.shadow(), DDL_FLOAT32, rank, n, 300};
  const int root = nranks > 1 ? 1 : 0;
  Writer w_bc{bc.shadow(), DDL_FLOAT64, rank, rank == root ? n : 0, 50};
  Writer w_ag{ag_in.shadow(), DDL_INT32, rank, n, 50};
  Writer w_rs{rs_in.shadow(), DDL_FLOAT32, rank, N, 50};
  Reader r_ar{ar_out.shadow(), n * 4, {}}, r_bc{bc.shadow(), n * 8, {}},
      r_ag{ag_out.shadow(), N * 4, {}}, r_rs{rs_out.shadow(), n * 4, {}};

  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_ar) == 0, "launch");
  const Clock::time_point start = Clock::now();
  RANK_OK(
      ddl_allreduce_stream(ar_in.device(), ar_out.device(), n, DDL_FLOAT32, DDL_SUM, comm, stream));
  const char *async = getenv("DDL_TEST_EXPECT_ASYNC");
  if (async && strcmp(async, "1") == 0)
    RANK_CHECK(!w_ar.ran.load(), "ddl_allreduce_stream waited for the stream's work (%.3f s)",
               seconds_since(start));
  else
    RANK_CHECK(w_ar.ran.load(),
               "host-synchronous ddl_allreduce_stream returned before the "
               "stream's earlier work ran (%.3f s)",
               seconds_since(start));
  RANK_CHECK(cu.launch_host_func(stream, read_kernel, &r_ar) == 0, "launch");
  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_bc) == 0, "launch");
  RANK_OK(ddl_broadcast_stream(bc.device(), n, DDL_FLOAT64, root, comm, stream));
  RANK_CHECK(cu.launch_host_func(stream, read_kernel, &r_bc) == 0, "launch");
  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_ag) == 0, "launch");
  RANK_OK(ddl_allgather_stream(ag_in.device(), ag_out.device(), n, DDL_INT32, comm, stream));
  RANK_CHECK(cu.launch_host_func(stream, read_kernel, &r_ag) == 0, "launch");
  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_rs) == 0, "launch");
  RANK_OK(ddl_reduce_scatter_stream(rs_in.device(), rs_out.device(), n, DDL_FLOAT32, DDL_SUM, comm,
                                    stream));
  RANK_CHECK(cu.launch_host_func(stream, read_kernel, &r_rs) == 0, "launch");

  // Host buffers on the stream too: a "kernel" writes them, the collective follows it.
  std::vector<float> host(n, -1.0f);
  Writer w_host{reinterpret_cast<unsigned char *>(host.data()), DDL_FLOAT32, rank, n, 100};
  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_host) == 0, "launch");
  RANK_OK(ddl_allreduce_stream(host.data(), host.data(), n, DDL_FLOAT32, DDL_SUM, comm, stream));
  RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");

  for (size_t i = 0; i < n; ++i) {
    RANK_CHECK(load_value(DDL_FLOAT32, r_ar.seen.data(), i) ==
                   expected_value(DDL_FLOAT32, DDL_SUM, nranks, i),
               "allreduce_stream [%zu]: %g", i, load_value(DDL_FLOAT32, r_ar.seen.data(), i));
    RANK_CHECK(
        load_value(DDL_FLOAT64, r_bc.seen.data(), i) == input_value(DDL_FLOAT64, DDL_SUM, root, i),
        "broadcast_stream [%zu]", i);
    for (int q = 0; q < nranks; ++q)
      RANK_CHECK(load_value(DDL_INT32, r_ag.seen.data(), q * n + i) ==
                     input_value(DDL_INT32, DDL_SUM, q, i),
                 "allgather_stream block %d [%zu]", q, i);
    RANK_CHECK(load_value(DDL_FLOAT32, r_rs.seen.data(), i) ==
                   expected_value(DDL_FLOAT32, DDL_SUM, nranks, rank * n + i),
               "reduce_scatter_stream [%zu]", i);
    RANK_CHECK(host[i] == expected_value(DDL_FLOAT32, DDL_SUM, nranks, i), "host on stream [%zu]",
               i);
  }
  // A blocking call after stream calls waits for them (one order for every kind of call).
  std::vector<double> after(5, rank);
  RANK_OK(ddl_allreduce(after.data(), after.data(), 5, DDL_FLOAT64, DDL_SUM, comm));
  RANK_CHECK(after[0] == nranks * (nranks - 1) / 2.0, "blocking after stream calls: %g", after[0]);
  RANK_CHECK(cu.stream_destroy(stream) == 0, "cuStreamDestroy");
  return 0;
}

// Alltoall, alltoallv, reduce, gather and scatter on the stream: host-synchronous in every
// mode, so each returns after the "kernel" queued before it has written its input, and the
// one queued after it reads its result.
int rooted_calls_follow_the_stream(ddl_comm_t comm, int rank, int nranks) {
  FakeCuda &cu = FakeCuda::get();
  void *stream = nullptr;
  RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
  const size_t n = 37, N = n * static_cast<size_t>(nranks);
  const int root = nranks - 1;
  // alltoallv: rank src sends (src + 2 dst) % 4 + 1 elements to rank dst, blocks end to end.
  auto vcount = [](int src, int dst) { return static_cast<size_t>((src + 2 * dst) % 4 + 1); };
  auto vdispl = [&](int src, int dst) {
    size_t at = 0;
    for (int q = 0; q < dst; ++q) at += vcount(src, q);
    return at;
  };
  std::vector<size_t> scounts(nranks), sdispls(nranks), rcounts(nranks), rdispls(nranks);
  size_t send_total = 0, recv_total = 0;
  for (int q = 0; q < nranks; ++q) {
    scounts[q] = vcount(rank, q), sdispls[q] = send_total, send_total += scounts[q];
    rcounts[q] = vcount(q, rank), rdispls[q] = recv_total, recv_total += rcounts[q];
  }
  DeviceBuffer a_in(N * 4), a_out(N * 4), v_in(send_total * 4), v_out(recv_total * 4), r_in(n * 8),
      r_out(n * 8), g_in(n * 4), g_out(N * 4), s_in(N * 4), s_out(n * 4);
  Writer w_a{a_in.shadow(), DDL_FLOAT32, rank, N, 80},
      w_v{v_in.shadow(), DDL_INT32, rank, send_total, 40},
      w_r{r_in.shadow(), DDL_FLOAT64, rank, n, 40}, w_g{g_in.shadow(), DDL_INT32, rank, n, 40},
      w_s{s_in.shadow(), DDL_FLOAT32, rank, rank == root ? N : 0, 40};
  Reader r_a{a_out.shadow(), N * 4, {}}, r_v{v_out.shadow(), recv_total * 4, {}},
      r_r{r_out.shadow(), n * 8, {}}, r_g{g_out.shadow(), N * 4, {}},
      r_s{s_out.shadow(), n * 4, {}};
  struct Step {
    Writer *writer;
    Reader *reader;
    std::function<ddl_result_t()> call;
    const char *name;
  };
  const std::vector<Step> steps = {
      {&w_a, &r_a,
       [&] {
         return ddl_alltoall_stream(a_in.device(), a_out.device(), n, DDL_FLOAT32, comm, stream);
       },
       "alltoall"},
      {&w_v, &r_v,
       [&] {
         return ddl_alltoallv_stream(v_in.device(), scounts.data(), sdispls.data(), v_out.device(),
                                     rcounts.data(), rdispls.data(), DDL_INT32, comm, stream);
       },
       "alltoallv"},
      {&w_r, &r_r,
       [&] {
         return ddl_reduce_stream(r_in.device(), r_out.device(), n, DDL_FLOAT64, DDL_SUM, root,
                                  comm, stream);
       },
       "reduce"},
      {&w_g, &r_g,
       [&] {
         return ddl_gather_stream(g_in.device(), g_out.device(), n, DDL_INT32, root, comm, stream);
       },
       "gather"},
      {&w_s, &r_s,
       [&] {
         return ddl_scatter_stream(s_in.device(), s_out.device(), n, DDL_FLOAT32, root, comm,
                                   stream);
       },
       "scatter"}};
  // First an allreduce, queued to the progress thread in the asynchronous mode: the calls
  // after it wait for it through the stream.
  DeviceBuffer ar(n * 4);
  Writer w_ar{ar.shadow(), DDL_FLOAT32, rank, n, 60};
  Reader r_ar{ar.shadow(), n * 4, {}};
  RANK_CHECK(cu.launch_host_func(stream, write_kernel, &w_ar) == 0, "launch");
  RANK_OK(ddl_allreduce_stream(ar.device(), ar.device(), n, DDL_FLOAT32, DDL_SUM, comm, stream));
  RANK_CHECK(cu.launch_host_func(stream, read_kernel, &r_ar) == 0, "launch");
  for (const Step &step : steps) {
    RANK_CHECK(cu.launch_host_func(stream, write_kernel, step.writer) == 0, "launch");
    RANK_CHECK(step.call() == DDL_SUCCESS, "%s_stream: %s", step.name, ddl_comm_last_error(comm));
    RANK_CHECK(step.writer->ran.load(), "%s_stream returned before the stream's earlier work ran",
               step.name);
    RANK_CHECK(cu.launch_host_func(stream, read_kernel, step.reader) == 0, "launch");
  }
  RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
  const unsigned char *alltoall = r_a.seen.data(), *v = r_v.seen.data(), *reduced = r_r.seen.data(),
                      *g = r_g.seen.data(), *scattered = r_s.seen.data();
  for (int q = 0; q < nranks; ++q) {
    for (size_t i = 0; i < n; ++i) {
      RANK_CHECK(load_value(DDL_FLOAT32, alltoall, q * n + i) ==
                     input_value(DDL_FLOAT32, DDL_SUM, q, rank * n + i),
                 "alltoall_stream block %d [%zu]", q, i);
      if (rank == root)
        RANK_CHECK(load_value(DDL_INT32, g, q * n + i) == input_value(DDL_INT32, DDL_SUM, q, i),
                   "gather_stream block %d [%zu]", q, i);
    }
    for (size_t i = 0; i < rcounts[q]; ++i)
      RANK_CHECK(load_value(DDL_INT32, v, rdispls[q] + i) ==
                     input_value(DDL_INT32, DDL_SUM, q, vdispl(q, rank) + i),
                 "alltoallv_stream block %d [%zu]", q, i);
  }
  for (size_t i = 0; i < n; ++i) {
    RANK_CHECK(load_value(DDL_FLOAT32, r_ar.seen.data(), i) ==
                   expected_value(DDL_FLOAT32, DDL_SUM, nranks, i),
               "allreduce_stream before them [%zu]", i);
    if (rank == root)
      RANK_CHECK(
          load_value(DDL_FLOAT64, reduced, i) == expected_value(DDL_FLOAT64, DDL_SUM, nranks, i),
          "reduce_stream [%zu]", i);
    RANK_CHECK(load_value(DDL_FLOAT32, scattered, i) ==
                   input_value(DDL_FLOAT32, DDL_SUM, root, rank * n + i),
               "scatter_stream [%zu]", i);
  }
  RANK_CHECK(cu.stream_destroy(stream) == 0, "cuStreamDestroy");
  return 0;
}

}  // namespace

Test(device_streams, collectives_are_ordered_on_the_stream_2_ranks) {
  const std::string failures = run_ranks(2, ordered_on_the_stream, with_fake());
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A communicator of one rank queues its calls on device buffers on the stream alone (a device
// copy, or nothing): the call returns before the stream's earlier work ran, in the default
// (host-synchronous) mode too, and its result still follows that work.
Test(device_streams, one_rank_calls_are_queued_on_the_stream_alone) {
  const std::string failures =
      run_ranks(1, ordered_on_the_stream, with_fake("256", /*async=*/false, /*expect_async=*/true));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(device_streams, collectives_are_ordered_on_the_stream_host_synchronous_3_ranks) {
  const std::string failures = run_ranks(3, ordered_on_the_stream, with_fake("1K", false, false));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// On 1-3 ranks, host-synchronous and asynchronous (where the allreduce family is queued):
// these wait for the stream either way.
Test(device_streams, rooted_and_alltoall_calls_follow_the_stream) {
  for (int nranks : {1, 2, 3})
    for (bool async : {false, true}) {
      const std::string failures =
          run_ranks(nranks, rooted_calls_follow_the_stream, with_fake("256", async, async));
      cr_assert(failures.empty(), "%d ranks%s: %s", nranks, async ? ", asynchronous" : "",
                failures.c_str());
    }
}

// Across hosts the default is asynchronous (each rank its own DDL_HOST_ID: UCX between them);
// DDL_CUDA_STREAM_ASYNC=0 makes it host-synchronous there too.
Test(device_streams, across_hosts_stream_calls_are_asynchronous_by_default) {
  for (const char *forced : {"", "0"}) {
    RunOptions options = with_fake("1K", false, forced[0] == '\0');
    auto before = options.before_init;
    options.before_init = [before, forced](int rank) {
      before(rank);
      setenv("DDL_HOST_ID", ("emulated" + std::to_string(rank)).c_str(), 1);
      if (forced[0]) setenv("DDL_CUDA_STREAM_ASYNC", forced, 1);
    };
    const std::string failures = run_ranks(2, ordered_on_the_stream, options);
    cr_assert(failures.empty(), "DDL_CUDA_STREAM_ASYNC=%s: %s", forced, failures.c_str());
  }
}

Test(device_streams, collectives_are_ordered_on_the_stream_4_ranks) {
  const std::string failures = run_ranks(4, ordered_on_the_stream, with_fake("1M"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// The stream held by a stream memory wait (cuStreamWaitValue32) instead of ddl's wait kernel:
// the fallback where the kernels do not load, and DDL_CUDA_STREAM_WAIT=value; and the stream's
// writes made by host functions where the device refuses stream memory writes.
Test(device_streams, collectives_are_ordered_by_the_fallback_waits_and_writes_2_ranks) {
  for (const char *fallback : {"DDL_CUDA_STREAM_WAIT", "FAKE_CUDA_NO_STREAM_WRITES"}) {
    RunOptions options = with_fake();
    auto before = options.before_init;
    options.before_init = [before, fallback](int rank) {
      before(rank);
      setenv(fallback, std::string(fallback) == "DDL_CUDA_STREAM_WAIT" ? "value" : "1", 1);
    };
    const std::string failures = run_ranks(2, ordered_on_the_stream, options);
    cr_assert(failures.empty(), "%s: %s", fallback, failures.c_str());
  }
}

// What deadlocked on an H200 (bench/gpu.md, 2026-11-28): while the default stream waits for
// ddl, the application allocates and frees device memory (which waits for the device) and
// copies the result back synchronously (which waits for the default stream), each holding the
// driver meanwhile. The progress thread must release the stream without a driver call of its
// own; then both return, and the copy sees the collective's result.
Test(device_streams, application_calls_that_wait_for_the_device_do_not_deadlock) {
  RunOptions options = with_fake("1K");
  auto before = options.before_init;
  options.before_init = [before](int rank) {
    before(rank);
    setenv("FAKE_CUDA_SYNC_WAIT_MS", "5000", 1);
  };
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda &cu = FakeCuda::get();
        const size_t n = 3000;
        DeviceBuffer buf(n * 4);
        std::vector<float> host(n);
        for (int call = 0; call < 3; ++call) {
          Writer w{buf.shadow(), DDL_FLOAT32, rank + call, n, 100};
          RANK_CHECK(cu.launch_host_func(nullptr, write_kernel, &w) == 0, "launch");
          RANK_OK(ddl_allreduce_stream(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_SUM, comm,
                                       nullptr));
          RANK_OK(ddl_allreduce_stream(host.data(), host.data(), n, DDL_FLOAT32, DDL_MAX, comm,
                                       nullptr));
          { DeviceBuffer scratch(64); }  // cuMemAlloc + cuMemFree, as torch's allocator may
          std::vector<float> out(n);
          RANK_CHECK(cu.dtoh(out.data(), reinterpret_cast<CUdeviceptr>(buf.device()), n * 4) == 0,
                     "the synchronous copy failed");
          for (size_t i = 0; i < n; ++i) {
            double sum = 0;
            for (int q = 0; q < nranks; ++q) sum += input_value(DDL_FLOAT32, DDL_SUM, q + call, i);
            RANK_CHECK(out[i] == sum, "call %d [%zu]: %g, expected %g", call, i, out[i], sum);
          }
        }
        RANK_CHECK(cu.sync_hangs() == 0,
                   "%d driver call(s) waited for a stream that waited for ddl", cu.sync_hangs());
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A training loop's stream calls, one after another: they reuse the same record and its
// slots, with no pinned allocation (milliseconds, and it waits for the device) after the first.
Test(device_streams, stream_calls_one_after_another_reuse_their_pinned_slots) {
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int nranks) {
        FakeCuda &cu = FakeCuda::get();
        void *stream = nullptr;
        RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
        const size_t n = 2000;
        DeviceBuffer buf(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, buf.shadow(), n);
        RANK_OK(ddl_allreduce_stream(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_MAX, comm,
                                     stream));
        RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
        const int allocations = cu.host_allocs();
        for (int i = 0; i < 40; ++i) {
          RANK_OK(ddl_allreduce_stream(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_MAX, comm,
                                       stream));
          if (i % 8 == 7) RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
        }
        RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
        for (size_t i = 0; i < n; ++i)
          RANK_CHECK(load_value(DDL_FLOAT32, buf.shadow(), i) ==
                         input_value(DDL_FLOAT32, DDL_SUM, nranks - 1, i),
                     "[%zu]: %g", i, load_value(DDL_FLOAT32, buf.shadow(), i));
        // Up to 8 calls in flight at once: at most 7 more records' slots.
        RANK_CHECK(cu.host_allocs() - allocations <= 7, "%d pinned allocations in 40 calls",
                   cu.host_allocs() - allocations);
        RANK_CHECK(cu.stream_destroy(stream) == 0, "cuStreamDestroy");
        return 0;
      },
      with_fake("1K"));
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// The asynchronous mode's allreduce over CUDA IPC on the device (lib/device/stream_ipc.h):
// chunks of a small scratch (DDL_CUDA_IPC_SCRATCH=4K), several datatypes and ops, in place and
// not, calls alternating between two streams (the communicator's stream keeps them in call
// order); then with one rank unable to export its scratch (FAKE_CUDA_IPC_REFUSE), and with
// one whose scratch differs in size (its chunks, and so its barriers, would not match): every
// rank refuses the path at its set-up and stages, with the same results.
Test(device_streams, stream_allreduces_over_cuda_ipc_on_the_device) {
  enum Setup { kOverIpc, kRankRefuses, kScratchDiffers };
  for (Setup setup : {kOverIpc, kRankRefuses, kScratchDiffers}) {
    RunOptions options = with_fake("1K");
    auto before = options.before_init;
    options.before_init = [before, setup](int rank) {
      before(rank);
      setenv("DDL_CUDA_IPC_SCRATCH", setup == kScratchDiffers && rank == 2 ? "8K" : "4K", 1);
      if (setup == kRankRefuses && rank == 1) setenv("FAKE_CUDA_IPC_REFUSE", "1", 1);
    };
    const std::string failures = run_ranks(
        3,
        [](ddl_comm_t comm, int rank, int nranks) {
          FakeCuda &cu = FakeCuda::get();
          void *streams[2] = {nullptr, nullptr};
          for (void *&s : streams) RANK_CHECK(cu.stream_create(&s, 0) == 0, "cuStreamCreate");
          struct Case {
            ddl_datatype_t dtype;
            ddl_op_t op;
            size_t count;
            bool in_place;
          };
          const Case cases[] = {{DDL_FLOAT32, DDL_SUM, 5000, false},
                                {DDL_FLOAT32, DDL_AVG, 3001, true},
                                {DDL_INT32, DDL_MAX, 2, false},
                                {DDL_FLOAT64, DDL_SUM, 1200, true},
                                {DDL_BFLOAT16, DDL_SUM, 7777, false}};
          int k = 0;
          for (const Case &c : cases) {
            const size_t elem = ddl_datatype_size(c.dtype);
            DeviceBuffer in(c.count * elem), out(c.count * elem);
            fill_inputs(c.dtype, c.op, rank, in.shadow(), c.count);
            void *stream = streams[k++ % 2];
            void *recv = c.in_place ? in.device() : out.device();
            RANK_OK(ddl_allreduce_stream(in.device(), recv, c.count, c.dtype, c.op, comm, stream));
            RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
            const unsigned char *got = c.in_place ? in.shadow() : out.shadow();
            for (size_t i = 0; i < c.count; ++i) {
              const double want = expected_value(c.dtype, c.op, nranks, i);
              RANK_CHECK(value_matches(c.dtype, c.op, load_value(c.dtype, got, i), want),
                         "%s %s count %zu [%zu]: %g, expected %g", ddl_datatype_name(c.dtype),
                         ddl_op_name(c.op), c.count, i, load_value(c.dtype, got, i), want);
            }
          }
          RANK_CHECK(cu.sync_hangs() == 0, "%d hang(s)", cu.sync_hangs());
          for (void *s : streams) RANK_CHECK(cu.stream_destroy(s) == 0, "cuStreamDestroy");
          return 0;
        },
        options);
    cr_assert(failures.empty(), "set-up %d: %s", static_cast<int>(setup), failures.c_str());
  }
}

// A rank killed between allreduces over CUDA IPC on the device: the survivors' streams go on
// within a fraction of a second (the watcher ends the device's waits; DDL_TIMEOUT_MS is 20 s
// here), and their next call names the dead rank.
Test(device_streams, a_rank_killed_during_allreduces_on_the_device_is_named) {
  RunOptions options = with_fake("1K");
  options.comm_timeout_ms = 20000;
  const std::string failures = run_ranks(
      3,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda &cu = FakeCuda::get();
        void *stream = nullptr;
        RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
        const size_t n = 4096;
        DeviceBuffer buf(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_MAX, rank, buf.shadow(), n);
        const Clock::time_point start = Clock::now();
        for (int i = 0; i < 40; ++i) {
          if (rank == 1 && i == 5) raise(SIGKILL);
          const ddl_result_t r = ddl_allreduce_stream(buf.device(), buf.device(), n, DDL_FLOAT32,
                                                      DDL_MAX, comm, stream);
          if (r != DDL_SUCCESS) {
            RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 1 (pid") &&
                           contains(ddl_comm_last_error(comm), "has died"),
                       "%s", ddl_comm_last_error(comm));
            return 0;
          }
          RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
          RANK_CHECK(seconds_since(start) < 10, "the stream was held %.1f s", seconds_since(start));
        }
        RANK_CHECK(false, "40 calls after rank 1 died succeeded");
        return 0;
      },
      options);
  for (int survivor : {0, 2})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos, "%s",
              failures.c_str());
}

// After a first call together, rank 1 stops joining: rank 0's next stream call passes its
// deadline, the stream goes on, and the next call on the communicator says what happened. An
// allreduce (over CUDA IPC on the device: its barrier's deadline) and a broadcast (staged:
// the progress thread's).
Test(device_streams, a_failed_stream_call_releases_the_stream) {
  for (bool allreduce : {true, false}) {
    RunOptions options = with_fake();
    options.comm_timeout_ms = 1500;
    const std::string failures = run_ranks(
        2,
        [allreduce](ddl_comm_t comm, int rank, int) {
          FakeCuda &cu = FakeCuda::get();
          void *stream = nullptr;
          RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
          DeviceBuffer buf(1000 * 4);
          auto call = [&] {
            return allreduce
                       ? ddl_allreduce_stream(buf.device(), buf.device(), 1000, DDL_FLOAT32,
                                              DDL_SUM, comm, stream)
                       : ddl_broadcast_stream(buf.device(), 1000, DDL_FLOAT32, 1, comm, stream);
          };
          RANK_OK(call());
          RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
          if (rank == 1) {
            std::this_thread::sleep_for(std::chrono::seconds(4));
            return 0;
          }
          Reader after{buf.shadow(), 4, {}};
          RANK_OK(call());
          RANK_CHECK(cu.launch_host_func(stream, read_kernel, &after) == 0, "launch");
          const Clock::time_point start = Clock::now();
          RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
          RANK_CHECK(seconds_since(start) < 3.5, "the stream was held %.2f s",
                     seconds_since(start));
          RANK_CHECK(after.seen.size() == 4, "the work after the call did not run");
          float x = 1;
          const ddl_result_t r = ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm);
          RANK_CHECK(r != DDL_SUCCESS, "the next call succeeded");
          const char *error = ddl_comm_last_error(comm);
          RANK_CHECK(contains(error, "failed earlier") &&
                         contains(error, allreduce ? "rank 1 did not reach barrier" : "broadcast"),
                     "%s", error);
          return 0;
        },
        options);
    cr_assert(failures.find("rank 0") == std::string::npos, "%s: %s",
              allreduce ? "allreduce" : "broadcast", failures.c_str());
  }
}

// Aborted while the stream's earlier work still runs: the collective never starts, the stream
// is released, and the next call says the communicator was aborted.
Test(device_streams, an_aborted_stream_call_releases_the_stream) {
  const std::string failures = run_ranks(
      2,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda &cu = FakeCuda::get();
        void *stream = nullptr;
        RANK_CHECK(cu.stream_create(&stream, 0) == 0, "cuStreamCreate");
        DeviceBuffer buf(64 * 4);
        Writer slow{buf.shadow(), DDL_FLOAT32, rank, 64, 1000};
        Reader after{buf.shadow(), 4, {}};
        RANK_CHECK(cu.launch_host_func(stream, write_kernel, &slow) == 0, "launch");
        RANK_OK(ddl_allreduce_stream(buf.device(), buf.device(), 64, DDL_FLOAT32, DDL_SUM, comm,
                                     stream));
        RANK_CHECK(cu.launch_host_func(stream, read_kernel, &after) == 0, "launch");
        RANK_OK(ddl_comm_abort(comm));
        RANK_CHECK(cu.stream_synchronize(stream) == 0, "cuStreamSynchronize");
        RANK_CHECK(after.seen.size() == 4, "the work after the call did not run");
        float x = 1;
        const ddl_result_t r = ddl_allreduce(&x, &x, 1, DDL_FLOAT32, DDL_SUM, comm);
        RANK_CHECK(r == DDL_ERR_INVALID_USAGE && contains(ddl_comm_last_error(comm), "abort"),
                   "%s: %s", ddl_result_string(r), ddl_comm_last_error(comm));
        return 0;
      },
      with_fake());
  cr_assert(failures.empty(), "%s", failures.c_str());
}

// A rank dies between device allreduces: every survivor fails with an error naming it.
Test(device_streams, every_survivor_names_a_rank_killed_during_device_allreduces) {
  RunOptions options = with_fake("16K");
  options.comm_timeout_ms = 20000;
  const std::string failures = run_ranks(
      4,
      [](ddl_comm_t comm, int rank, int) {
        FakeCuda::get();
        const size_t n = 1 << 16;
        DeviceBuffer buf(n * 4);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, buf.shadow(), n);
        for (int i = 0;; ++i) {
          if (rank == 2 && i == 5) raise(SIGKILL);
          const Clock::time_point start = Clock::now();
          const ddl_result_t r =
              ddl_allreduce(buf.device(), buf.device(), n, DDL_FLOAT32, DDL_MAX, comm);
          if (r == DDL_SUCCESS) continue;
          RANK_CHECK(r == DDL_ERR_REMOTE, "rank %d got %s: %s", rank, ddl_result_string(r),
                     ddl_comm_last_error(comm));
          RANK_CHECK(contains(ddl_comm_last_error(comm), "rank 2"), "rank %d: %s", rank,
                     ddl_comm_last_error(comm));
          RANK_CHECK(seconds_since(start) < 5.0, "rank %d took %.2f s", rank, seconds_since(start));
          return 0;
        }
      },
      options);
  for (int survivor : {0, 1, 3})
    cr_assert(failures.find("rank " + std::to_string(survivor) + " ") == std::string::npos, "%s",
              failures.c_str());
}

// No driver (none found, or DDL_CUDA=0): collectives take every buffer as host memory, and
// stream-ordered calls say why they cannot run.
static void expect_host_only(const char *variable, const char *value, const char *reason) {
  RunOptions options;
  options.before_init = [variable, value](int) { setenv(variable, value, 1); };
  const std::string failures = run_ranks(
      2,
      [reason](ddl_comm_t comm, int rank, int nranks) {
        std::vector<float> v(1001);
        fill_inputs(DDL_FLOAT32, DDL_SUM, rank, v.data(), v.size());
        RANK_OK(ddl_allreduce(v.data(), v.data(), v.size(), DDL_FLOAT32, DDL_SUM, comm));
        for (size_t i = 0; i < v.size(); ++i)
          RANK_CHECK(v[i] == expected_value(DDL_FLOAT32, DDL_SUM, nranks, i), "[%zu]", i);
        const ddl_result_t r =
            ddl_allreduce_stream(v.data(), v.data(), v.size(), DDL_FLOAT32, DDL_SUM, comm, nullptr);
        RANK_CHECK(r == DDL_ERR_UNSUPPORTED && contains(ddl_comm_last_error(comm), reason),
                   "%s: %s", ddl_result_string(r), ddl_comm_last_error(comm));
        RANK_OK(ddl_allreduce(v.data(), v.data(), 1, DDL_FLOAT32, DDL_SUM, comm));
        return 0;
      },
      options);
  cr_assert(failures.empty(), "%s", failures.c_str());
}

Test(device_streams, without_a_driver_every_buffer_is_host_memory) {
  expect_host_only("DDL_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", "cannot load");
}

Test(device_streams, ddl_cuda_0_turns_device_buffers_off) {
  expect_host_only("DDL_CUDA", "0", "DDL_CUDA=0");
}
