// DdlBackend's alltoall(v), send and receive, reduce, gather and scatter: the calls beyond
// the allreduce family, each a nonblocking ddl call in a Work (or blocking when the caller
// waits at once). CUDA tensors go through libddl's stream-ordered forms of alltoall(v),
// reduce, gather and scatter (device_path.h); those of send and receive are staged through
// pinned host memory. Included by backend.cpp after the class.
#pragma once

namespace ddl_torch {

// all_to_all_single: blocks of `input` to each rank by inputSplitSizes (equal when empty),
// received by outputSplitSizes; equal blocks go to ddl_alltoall, uneven ones (MoE's token
// routing) to ddl_alltoallv.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  return alltoall_flat(output, input, outputSplitSizes, inputSplitSizes, opts, nullptr);
}

inline c10::intrusive_ptr<c10d::Work> DdlBackend::alltoall_flat(
    at::Tensor& output, at::Tensor& input, const std::vector<int64_t>& outputSplitSizes,
    const std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts,
    std::function<void()> then) {
  need(api_->alltoall && api_->ialltoall && api_->ialltoallv, "alltoall");
  check_tensor(input, "all_to_all_single's input");
  check_tensor(output, "all_to_all_single's output");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "ddl backend: all_to_all_single's input and output differ in dtype");
  // Splits are along dim 0: a row holds `row` elements.
  const int64_t row = input.dim() > 0 && input.size(0) > 0 ? input.numel() / input.size(0) : 1;
  auto counts = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* what) {
    std::vector<size_t> c(size_);
    if (splits.empty()) {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % size_ == 0, "ddl backend: all_to_all_single's ", what,
                  " has ", t.dim() > 0 ? t.size(0) : 0, " rows, not a multiple of ", size_,
                  " (give split sizes)");
      for (auto& x : c) x = static_cast<size_t>(t.size(0) / size_ * row);
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == size_, "ddl backend: ", what,
                  " split sizes have ", splits.size(), " entries, not ", size_);
      for (int i = 0; i < size_; ++i) c[i] = static_cast<size_t>(splits[i] * row);
    }
    return c;
  };
  std::vector<size_t> send_counts = counts(inputSplitSizes, input, "input");
  std::vector<size_t> recv_counts = counts(outputSplitSizes, output, "output");
  size_t send_total = 0, recv_total = 0;
  for (int i = 0; i < size_; ++i) send_total += send_counts[i], recv_total += recv_counts[i];
  TORCH_CHECK(send_total <= static_cast<size_t>(input.numel()) &&
                  recv_total <= static_cast<size_t>(output.numel()),
              "ddl backend: all_to_all_single's split sizes reach past its tensors");
  std::vector<std::function<void()>> back;
  at::Tensor in = input.contiguous();
  at::Tensor out = contiguous_for(output, back, true);
  const void* s = in.data_ptr();
  void* r = out.data_ptr();
  const int dt = ddl_type(in);
  bool equal = true;
  for (int i = 0; i < size_; ++i)
    equal = equal && send_counts[i] == send_counts[0] && recv_counts[i] == send_counts[0];
  back.push_back(std::move(then));
  if (equal) {
    const size_t n = send_counts[0];
    return run(
        c10d::OpType::ALLTOALL_BASE, opts.asyncOp, {output}, {in, out}, all_of(std::move(back)),
        [&] { return api_->alltoall(s, r, n, dt, comm_); },
        [&](Req* q) { return api_->ialltoall(s, r, n, dt, comm_, q); },
        stream_call(api_->alltoall_stream,
                    [&](void* st) { return api_->alltoall_stream(s, r, n, dt, comm_, st); }));
  }
  // ddl copies the arrays at the call.
  std::vector<size_t> send_displs(size_), recv_displs(size_);
  for (int i = 1; i < size_; ++i) {
    send_displs[i] = send_displs[i - 1] + send_counts[i - 1];
    recv_displs[i] = recv_displs[i - 1] + recv_counts[i - 1];
  }
  return run(
      c10d::OpType::ALLTOALL_BASE, opts.asyncOp, {output}, {in, out}, all_of(std::move(back)),
      [&] {
        return api_->alltoallv(s, send_counts.data(), send_displs.data(), r, recv_counts.data(),
                               recv_displs.data(), dt, comm_);
      },
      [&](Req* q) {
        return api_->ialltoallv(s, send_counts.data(), send_displs.data(), r, recv_counts.data(),
                                recv_displs.data(), dt, comm_, q);
      },
      stream_call(api_->alltoallv_stream, [&](void* st) {
        return api_->alltoallv_stream(s, send_counts.data(), send_displs.data(), r,
                                      recv_counts.data(), recv_displs.data(), dt, comm_, st);
      }));
}

// The list form: tensor i of inputs to rank i, tensor i of outputs from rank i (any sizes).
inline c10::intrusive_ptr<c10d::Work> DdlBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "ddl backend: all_to_all needs ", size_, " input and output tensors");
  std::vector<int64_t> in_splits, out_splits;
  for (auto& t : inputs) check_tensor(t, "all_to_all's input"), in_splits.push_back(t.numel());
  for (auto& t : outputs) check_tensor(t, "all_to_all's output"), out_splits.push_back(t.numel());
  at::Tensor in = flat_copy(inputs);
  at::Tensor out =
      at::empty({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, in.options());
  // The flat output is contiguous: its blocks are copied into the caller's tensors after the
  // call, on the stream the call ran on for CUDA tensors (run_on_stream).
  return alltoall_flat(out, in, out_splits, in_splits, opts, scatter_back(outputs, out));
}

// ddl matches sends and receives per pair and tag in order, as gloo and MPI do. Tag 0 needs
// nothing newer than ddl_isend/ddl_irecv.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::send(std::vector<at::Tensor>& tensors,
                                                       int dstRank, int tag) {
  if (!tensors.empty() && on_device(tensors[0])) {
    Staging staging;
    staging.stage(tensors, true, false);
    return staged(staging, [&] { return send(tensors, dstRank, tag); });
  }
  need(api_->isend != nullptr, "send");
  TORCH_CHECK(tensors.size() == 1, "ddl backend: send takes one tensor");
  check_tag(tag, "send");
  check_peer(dstRank, "send");
  check_tensor(tensors[0], "send's tensor");
  at::Tensor t = tensors[0].contiguous();
  const void* p = t.data_ptr();
  const size_t n = t.numel();
  const int dt = ddl_type(t);
  return start(c10d::OpType::SEND, {tensors[0]}, {t}, nullptr,
               [this, p, n, dt, dstRank, tag](Req* q) {
                 return tag == 0 ? api_->isend(p, n, dt, dstRank, comm_, q)
                                 : api_->isend_tag(p, n, dt, dstRank, tag, comm_, q);
               });
}

// A receive from srcRank, or from any rank (kAnySource: the Work's sourceRank() says which).
inline c10::intrusive_ptr<c10d::Work> DdlBackend::receive(std::vector<at::Tensor>& tensors,
                                                          int srcRank, int tag) {
  const bool any = srcRank == kAnySource;
  const char* what = any ? "recv from any source" : "recv";
  if (!tensors.empty() && on_device(tensors[0])) {
    Staging staging;
    staging.stage(tensors, false, true);
    return staged(staging, [&] { return receive(tensors, srcRank, tag); });
  }
  need(api_->irecv != nullptr, "recv");
  TORCH_CHECK(tensors.size() == 1, "ddl backend: ", what, " takes one tensor");
  check_tag(tag, what);
  if (any)
    check_any_source();
  else
    check_peer(srcRank, what);
  check_tensor(tensors[0], "recv's tensor");
  std::vector<std::function<void()>> back;
  at::Tensor t = contiguous_for(tensors[0], back, true);
  void* p = t.data_ptr();
  const size_t n = t.numel();
  const int dt = ddl_type(t);
  // Only a receive from any source learns its sender; a named one knows it.
  auto source = any ? std::make_shared<int>(-1) : nullptr;
  auto work = start(c10d::OpType::RECV, {tensors[0]}, {t}, all_of(std::move(back)),
                    [this, p, n, dt, srcRank, tag, any, source](Req* q) {
                      return tag == 0 && !any
                                 ? api_->irecv(p, n, dt, srcRank, comm_, q)
                                 : api_->irecv_tag(p, n, dt, srcRank, tag, comm_, source.get(), q);
                    });
  if (any)
    if (auto* w = dynamic_cast<DdlWork*>(work.get())) w->source = source;
  return work;
}

inline c10::intrusive_ptr<c10d::Work> DdlBackend::recv(std::vector<at::Tensor>& tensors,
                                                       int srcRank, int tag) {
  return receive(tensors, srcRank, tag);
}

inline c10::intrusive_ptr<c10d::Work> DdlBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  return receive(tensors, kAnySource, tag);
}

inline c10::intrusive_ptr<c10d::Work> DdlBackend::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  need(api_->reduce && api_->ireduce, "reduce");
  TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0,
              "ddl backend: reduce takes one tensor per process");
  check_root(opts.rootRank, "reduce");
  at::Tensor& t = tensors[0];
  check_tensor(t, "reduce's tensor");
  std::vector<std::function<void()>> back;
  at::Tensor buf = contiguous_for(t, back, true);
  // torch's reduce leaves the non-roots' tensors unspecified; PREMUL_SUM scales a copy there.
  buf = premultiplied(opts.reduceOp, buf, rank_ == opts.rootRank);
  const int dt = ddl_type(buf), op = ddl_op(opts.reduceOp, buf), root = opts.rootRank;
  void* p = buf.data_ptr();
  const size_t n = buf.numel();
  return run(
      c10d::OpType::REDUCE, opts.asyncOp, tensors, {buf}, all_of(std::move(back)),
      [&] { return api_->reduce(p, p, n, dt, op, root, comm_); },
      [&](Req* q) { return api_->ireduce(p, p, n, dt, op, root, comm_, q); },
      stream_call(api_->reduce_stream,
                  [&](void* st) { return api_->reduce_stream(p, p, n, dt, op, root, comm_, st); }));
}

// outputs[0] (on the root only) gets every rank's inputs[0], in rank order.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  need(api_->gather && api_->igather, "gather");
  TORCH_CHECK(inputs.size() == 1, "ddl backend: gather takes one input tensor per process");
  check_root(opts.rootRank, "gather");
  at::Tensor in = inputs[0].contiguous();
  check_tensor(in, "gather's input");
  const int root = opts.rootRank, dt = ddl_type(in);
  const size_t n = in.numel();
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "ddl backend: gather's root needs ", size_, " output tensors");
    for (auto& o : outputs[0]) {
      check_tensor(o, "gather's output");
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "ddl backend: gather's outputs must match the input's size and dtype");
    }
    outs = outputs[0];
    flat = at::empty({static_cast<int64_t>(n) * size_}, in.options());
  }
  const void* s = in.data_ptr();
  void* r = flat.defined() ? flat.data_ptr() : nullptr;
  return run(
      c10d::OpType::GATHER, opts.asyncOp, outs, {in, flat},
      flat.defined() ? scatter_back(outs, flat) : nullptr,
      [&] { return api_->gather(s, r, n, dt, root, comm_); },
      [&](Req* q) { return api_->igather(s, r, n, dt, root, comm_, q); },
      stream_call(api_->gather_stream,
                  [&](void* st) { return api_->gather_stream(s, r, n, dt, root, comm_, st); }));
}

// outputs[0] of every rank gets the root's inputs[0][rank].
inline c10::intrusive_ptr<c10d::Work> DdlBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  need(api_->scatter && api_->iscatter, "scatter");
  TORCH_CHECK(outputs.size() == 1, "ddl backend: scatter takes one output tensor per process");
  check_root(opts.rootRank, "scatter");
  check_tensor(outputs[0], "scatter's output");
  std::vector<std::function<void()>> back;
  at::Tensor out = contiguous_for(outputs[0], back, true);
  const int root = opts.rootRank, dt = ddl_type(out);
  const size_t n = out.numel();
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "ddl backend: scatter's root needs ", size_, " input tensors");
    for (auto& t : inputs[0]) {
      check_tensor(t, "scatter's input");
      TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                  "ddl backend: scatter's inputs must match the output's size and dtype");
    }
    flat = flat_copy(inputs[0]);
  }
  const void* s = flat.defined() ? flat.data_ptr() : nullptr;
  void* r = out.data_ptr();
  return run(
      c10d::OpType::SCATTER, opts.asyncOp, outputs, {out, flat}, all_of(std::move(back)),
      [&] { return api_->scatter(s, r, n, dt, root, comm_); },
      [&](Req* q) { return api_->iscatter(s, r, n, dt, root, comm_, q); },
      stream_call(api_->scatter_stream,
                  [&](void* st) { return api_->scatter_stream(s, r, n, dt, root, comm_, st); }));
}

}  // namespace ddl_torch
