#include "perf_driver.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "lib/common/datatype.h"
#include "perf_check.h"
#include "perf_device.h"
#include "perf_report.h"

namespace ddl_perf {
namespace {

// Frees with the allocator that gave the buffer: free(), or the library's (-R 1).
struct BufferDeleter {
  CollectiveBackend *library = nullptr;
  void operator()(unsigned char *p) const {
    if (library)
      library->library_free(p);
    else
      std::free(p);
  }
};
using Buffer = std::unique_ptr<unsigned char, BufferDeleter>;

// The count argument of one call for a message of `bytes` (at least one element per rank).
size_t call_count(Collective collective, uint64_t bytes, ddl_datatype_t dtype, int nranks) {
  if (collective == Collective::kBarrier) return 0;
  size_t elements = static_cast<size_t>(bytes / ddl::datatype_size(dtype));
  if (count_per_rank(collective)) elements /= static_cast<size_t>(nranks);
  return elements ? elements : 1;
}

class PerfRun {
 public:
  PerfRun(const PerfOptions &options, CollectiveBackend &backend, const char *tool,
          DeviceMemory *device)
      : options_(options),
        backend_(backend),
        rank_(backend.rank()),
        nranks_(backend.nranks()),
        report_(options, tool, backend.library(), nranks_),
        tool_(tool),
        device_(device) {}
  ~PerfRun() {
    if (device_) {
      device_->free(device_send_);
      device_->free(device_recv_);
    }
  }

  int run();

 private:
  bool allocate();
  bool allocate_device(size_t bytes);
  // -G: the GPU address of a place in the host buffers (which mirror the GPU ones).
  unsigned char *on_device(unsigned char *host) const;
  // -G: copies [host, host + bytes) to or from the GPU; a failure ends the process.
  void copy(unsigned char *host, size_t bytes, bool to_device);
  CheckShape shape_of(ddl_datatype_t dtype, ddl_op_t op, uint64_t bytes) const;
  // One call of the collective on host buffers `send` and `recv` (on the GPU with -G); false
  // when the library does not support that form.
  bool call(const CheckShape &shape, unsigned char *send, unsigned char *recv);
  void synchronize();
  void warm_up(ddl_datatype_t dtype, ddl_op_t op);
  void measure_size(ddl_datatype_t dtype, ddl_op_t op, uint64_t bytes, uint64_t *last_bytes);
  ModeResult measure_mode(const CheckShape &shape, uint64_t result_bytes, bool in_place);

  const PerfOptions &options_;
  CollectiveBackend &backend_;
  int rank_;
  int nranks_;
  PerfReport report_;
  const char *tool_;
  Buffer send_;  // host memory; with -G, the host copies of the GPU buffers below
  Buffer recv_;
  DeviceMemory *device_;
  size_t bytes_ = 0;  // of each buffer
  unsigned char *device_send_ = nullptr;
  unsigned char *device_recv_ = nullptr;
  // Per mode (out of place, in place) of the datatype and op being measured: the smallest
  // count the library refused (UINT64_MAX: none). Larger ones are not tried again, so
  // that its error is logged once or twice rather than at every size: a form it refuses
  // (device buffers, MPI's in-place reduce_scatter) it refuses at every size, and a message
  // too large for it stays so as sizes grow.
  uint64_t refused_from_[2] = {UINT64_MAX, UINT64_MAX};
};

int PerfRun::run() {
  if (collective_rooted(options_.collective) && options_.root >= nranks_) {
    if (rank_ == 0) {
      std::fprintf(stderr, "%s: -r %d: there are only %d ranks\n", tool_, options_.root, nranks_);
    }
    return 2;
  }
  // Reductions loop over ops; the others have none (the redop column says "none").
  std::vector<ddl_op_t> ops =
      collective_reduces(options_.collective) ? options_.ops : std::vector<ddl_op_t>{DDL_SUM};
  std::vector<std::string> notes = backend_.notes(options_.collective);
  if (options_.collective == Collective::kBroadcast) {
    notes.push_back("broadcast works in place on one buffer: both columns time the same call");
  }
  std::vector<std::pair<ddl_datatype_t, ddl_op_t>> combos;
  for (ddl_datatype_t dtype : options_.datatypes) {
    for (ddl_op_t op : ops) {
      std::string why = backend_.unsupported(options_.collective, dtype, op);
      if (why.empty()) {
        combos.emplace_back(dtype, op);
      } else {
        notes.push_back("skipped " + std::string(nccl_type_name(dtype)) + " " +
                        (collective_reduces(options_.collective) ? ddl::op_name(op) : "") + ": " +
                        why);
      }
    }
  }
  if (combos.empty()) {
    if (rank_ == 0) {
      std::fprintf(stderr, "%s: nothing to measure: %s\n", tool_,
                   notes.empty() ? "" : notes.back().c_str());
    }
    return 2;
  }
  if (options_.device_memory) {
    if (!device_) {
      if (rank_ == 0) std::fprintf(stderr, "%s: -G: this tool runs on host buffers only\n", tool_);
      return 2;
    }
    notes.push_back("device buffers (-G): rank 0 on " + device_->description() +
                    "; inputs copied in before the checked call, results copied out after it; "
                    "the timed calls move GPU memory only");
    if (options_.stream)
      notes.push_back(
          "stream-ordered calls (-S) on the default stream: each size's -n calls queued, then "
          "the stream synchronized (the time includes that wait)");
  }
  if (!allocate()) return 1;
  if (rank_ == 0) report_.print_header(stdout, notes);
  for (const auto &combo : combos) {
    refused_from_[0] = refused_from_[1] = UINT64_MAX;
    warm_up(combo.first, combo.second);
    uint64_t last_bytes = UINT64_MAX;  // a barrier's one row has 0 bytes
    for (uint64_t bytes : perf_sizes(options_)) {
      measure_size(combo.first, combo.second, bytes, &last_bytes);
    }
  }
  int status = report_.total_wrong() == 0 ? 0 : 1;
  if (rank_ == 0) {
    report_.print_footer(stdout);
    if (!options_.json_path.empty() && !report_.write_json(options_.json_path)) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", tool_, options_.json_path.c_str(),
                   std::strerror(errno));
      status = 1;
    }
  }
  return status;
}

bool PerfRun::allocate() {
  size_t largest = 0;
  for (ddl_datatype_t dtype : options_.datatypes) {
    for (uint64_t bytes : perf_sizes(options_)) {
      size_t count = call_count(options_.collective, bytes, dtype, nranks_);
      size_t per_call = count * ddl::datatype_size(dtype);
      bool whole = count_per_rank(options_.collective);
      largest = std::max(largest, whole ? per_call * static_cast<size_t>(nranks_) : per_call);
    }
  }
  largest = std::max<size_t>(largest, 64);  // a barrier needs none, but allocators want > 0
  void *send = nullptr, *recv = nullptr;
  CollectiveBackend *library = options_.library_memory ? &backend_ : nullptr;
  if (library) {
    send = backend_.library_alloc(largest);
    recv = send ? backend_.library_alloc(largest) : nullptr;
  } else if (posix_memalign(&send, 4096, largest) != 0 ||
             posix_memalign(&recv, 4096, largest) != 0) {
    recv = nullptr;
  }
  send_ = Buffer(static_cast<unsigned char *>(send), BufferDeleter{library});
  recv_ = Buffer(static_cast<unsigned char *>(recv), BufferDeleter{library});
  if (!send || !recv) {
    std::fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes%s\n", tool_, rank_, largest,
                 library ? " with the library's allocator" : "");
    return false;
  }
  // Zeros: touches every page before timing, and keeps repeated sums free of NaN/denormals.
  std::memset(send, 0, largest);
  std::memset(recv, 0, largest);
  bytes_ = largest;
  return device_ ? allocate_device(largest) : true;
}

bool PerfRun::allocate_device(size_t bytes) {
  std::string error;
  void *send = nullptr, *recv = nullptr;
  if (!device_->alloc(bytes, &send, &error) || !device_->alloc(bytes, &recv, &error)) {
    device_->free(send);
    std::fprintf(stderr, "%s: rank %d: -G: %s\n", tool_, rank_, error.c_str());
    return false;
  }
  device_send_ = static_cast<unsigned char *>(send);
  device_recv_ = static_cast<unsigned char *>(recv);
  copy(send_.get(), bytes, true);  // the zeros
  copy(recv_.get(), bytes, true);
  return true;
}

unsigned char *PerfRun::on_device(unsigned char *host) const {
  if (!device_) return host;
  if (host >= send_.get() && host < send_.get() + bytes_)
    return device_send_ + (host - send_.get());
  return device_recv_ + (host - recv_.get());
}

void PerfRun::copy(unsigned char *host, size_t bytes, bool to_device) {
  std::string error;
  const bool ok = to_device ? device_->to_device(on_device(host), host, bytes, &error)
                            : device_->to_host(host, on_device(host), bytes, &error);
  if (ok) return;
  std::fprintf(stderr, "%s: rank %d: -G: %s\n", tool_, rank_, error.c_str());
  std::exit(1);
}

CheckShape PerfRun::shape_of(ddl_datatype_t dtype, ddl_op_t op, uint64_t bytes) const {
  return CheckShape{options_.collective,
                    dtype,
                    op,
                    rank_,
                    nranks_,
                    options_.root,
                    call_count(options_.collective, bytes, dtype, nranks_)};
}

// -S: waits for the calls queued on the stream (a failure ends the process, as a failed
// copy does).
void PerfRun::synchronize() {
  if (!device_ || !options_.stream) return;
  std::string error;
  if (device_->synchronize(&error)) return;
  std::fprintf(stderr, "%s: rank %d: -G -S: %s\n", tool_, rank_, error.c_str());
  std::exit(1);
}

bool PerfRun::call(const CheckShape &shape, unsigned char *send, unsigned char *recv) {
  return backend_.run(shape.collective, on_device(send), on_device(recv), shape.count, shape.dtype,
                      shape.op, shape.root);
}

// nccl-tests' warm-up before the first size of each datatype and op: -w calls at the largest
// size, then at the smallest, out of place. Without it the first row was often a cold start
// even after its own -w calls (issue 28: 8 B 4.40 us against 0.46 us when the size came round
// again). A count the library refuses is remembered, as measure_mode does.
void PerfRun::warm_up(ddl_datatype_t dtype, ddl_op_t op) {
  const std::vector<uint64_t> sizes = perf_sizes(options_);
  for (uint64_t bytes : {sizes.back(), sizes.front()}) {
    const CheckShape shape = shape_of(dtype, op, bytes);
    for (int i = 0; i < options_.warmup_iters; ++i) {
      if (!call(shape, send_.get(), recv_.get())) {
        refused_from_[0] = std::min<uint64_t>(refused_from_[0], shape.count);
        break;
      }
    }
  }
  synchronize();
}

void PerfRun::measure_size(ddl_datatype_t dtype, ddl_op_t op, uint64_t bytes,
                           uint64_t *last_bytes) {
  const CheckShape shape = shape_of(dtype, op, bytes);
  size_t elements = std::max(send_elements(shape), recv_elements(shape));
  uint64_t result_bytes = elements * ddl::datatype_size(dtype);
  if (result_bytes == *last_bytes) return;  // tiny sizes rounded up to the same message
  *last_bytes = result_bytes;

  SizeResult row;
  row.bytes = result_bytes;
  row.count = elements;
  row.dtype = dtype;
  row.op = op;
  row.out_of_place = measure_mode(shape, result_bytes, false);
  row.in_place = measure_mode(shape, result_bytes, true);
  report_.add_row(rank_ == 0 ? stdout : nullptr, row);
}

ModeResult PerfRun::measure_mode(const CheckShape &shape, uint64_t result_bytes, bool in_place) {
  unsigned char *send = send_.get();
  unsigned char *recv = recv_.get();
  size_t block = shape.count * ddl::datatype_size(shape.dtype);
  if (in_place || shape.collective == Collective::kBroadcast) {
    // nccl-tests' in-place layouts (the gather's and scatter's on every rank, as theirs).
    switch (shape.collective) {
      case Collective::kAllgather:
      case Collective::kGather:
        send = recv + static_cast<size_t>(rank_) * block;
        break;
      case Collective::kReduceScatter:
      case Collective::kScatter:
        send = recv_.get();
        recv = send + static_cast<size_t>(rank_) * block;
        break;
      case Collective::kSendRecv:  // a send and a receive in flight together on one buffer
        return ModeResult();       // are a race, not an in-place form: N/A
      default:  // allreduce, alltoall, reduce; broadcast has a single buffer in both modes
        send = recv;
    }
  }
  ModeResult result;  // N/A until measured
  uint64_t &refused_from = refused_from_[in_place ? 1 : 0];
  if (shape.count >= refused_from) return result;
  auto attempt = [&] {
    if (call(shape, send, recv)) return true;
    refused_from = shape.count;  // not supported: N/A
    return false;
  };
  for (int i = 0; i < options_.warmup_iters; ++i) {
    if (!attempt()) return result;
  }
  synchronize();
  backend_.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options_.iters; ++i) {
    if (!attempt()) return result;
  }
  synchronize();  // -S: the calls were queued; they end with the stream
  auto stop = std::chrono::steady_clock::now();
  double local_us =
      std::chrono::duration<double, std::micro>(stop - start).count() / options_.iters;
  result.measured = true;
  result.time_us = backend_.max_across_ranks(local_us);
  result.algbw = static_cast<double>(result_bytes) / 1e3 / result.time_us;  // bytes/us -> GB/s
  result.busbw = result.algbw * bus_factor(shape.collective, nranks_);
  if (options_.check) {
    prepare_check(shape, send, recv);
    const size_t elem = ddl::datatype_size(shape.dtype);
    const size_t send_bytes = send_elements(shape) * elem, recv_bytes = recv_elements(shape) * elem;
    if (device_) {
      // Everything prepare_check wrote: the receive range, then the send range (which may lie
      // inside it, in place: the host copy already holds both in the right order).
      copy(recv, recv_bytes, true);
      copy(send, send_bytes, true);
    }
    call(shape, send, recv);
    synchronize();
    if (device_) copy(recv, recv_bytes, false);
    result.wrong = static_cast<int64_t>(backend_.sum_across_ranks(count_wrong(shape, recv)));
  }
  return result;
}

}  // namespace

int run_perf(const PerfOptions &options, CollectiveBackend &backend, const char *tool,
             DeviceMemory *device) {
  PerfRun run(options, backend, tool, options.device_memory ? device : nullptr);
  return run.run();
}

}  // namespace ddl_perf
