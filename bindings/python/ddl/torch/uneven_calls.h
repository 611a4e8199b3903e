// DdlBackend's all_gather and reduce_scatter of tensors of different sizes (torch allows them
// in the list forms, and NCCL's backend serves them; gloo refuses them): one ddl_allgatherv or
// ddl_reduce_scatterv each. Included by backend.cpp after the class.
#pragma once

namespace ddl_torch {

// What both need: the C call in this libddl (`have`), and tensors in host memory.
inline void check_uneven(bool have, const at::Tensor& t, const char* what, const char* c_call) {
  TORCH_CHECK(have, "ddl backend: ", what, " of tensors of different sizes needs ", c_call,
              ", which this libddl lacks (rebuild ddl)");
  TORCH_CHECK(!t.is_cuda(), "ddl backend: ", what, " of CUDA tensors of different sizes is not ",
              "supported yet: pad them to one size");
}

// Tensors of different sizes (as NCCL's backend allows; output i holds rank i's tensor): one
// ddl_allgatherv into a flat buffer, then copied out.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::uneven_allgather(
    const c10d::AllgatherOptions& opts, at::Tensor in, std::vector<at::Tensor> outs) {
  check_uneven(api_->allgatherv && api_->iallgatherv, in, "all_gather", "ddl_allgatherv");
  std::vector<size_t> counts(size_), displs(size_);
  size_t total = 0;
  for (int i = 0; i < size_; ++i) {
    counts[i] = static_cast<size_t>(outs[i].numel());
    displs[i] = total;
    total += counts[i];
  }
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
  auto copy_out = [outs, flat, displs]() mutable {
    for (size_t i = 0; i < outs.size(); ++i)
      outs[i].copy_(
          flat.narrow(0, static_cast<int64_t>(displs[i]), outs[i].numel()).view(outs[i].sizes()));
  };
  const void* s = in.data_ptr();
  void* r = flat.data_ptr();
  const size_t n = static_cast<size_t>(in.numel());
  const int type = ddl_type(in);
  return run(
      c10d::OpType::ALLGATHER, opts.asyncOp, outs, {in, flat}, copy_out,
      [&] { return api_->allgatherv(s, n, r, counts.data(), displs.data(), type, comm_); },
      [&](Req* q) {
        return api_->iallgatherv(s, n, r, counts.data(), displs.data(), type, comm_, q);
      });
}

// Blocks of different sizes (input i is rank i's block; as NCCL's backend allows): one
// ddl_reduce_scatterv of the inputs laid end to end, `flat`.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::uneven_reduce_scatter(
    const c10d::ReduceScatterOptions& opts, at::Tensor flat, const std::vector<at::Tensor>& ins,
    at::Tensor& output) {
  check_uneven(api_->reduce_scatterv && api_->ireduce_scatterv, flat, "reduce_scatter",
               "ddl_reduce_scatterv");
  TORCH_CHECK(ins[rank_].numel() == output.numel(), "ddl backend: reduce_scatter's output has ",
              output.numel(), " elements; this rank's input block has ", ins[rank_].numel());
  std::vector<size_t> counts;
  for (auto& t : ins) counts.push_back(static_cast<size_t>(t.numel()));
  flat = premultiplied(opts.reduceOp, flat, true);
  std::vector<std::function<void()>> back;
  at::Tensor out = contiguous_for(output, back, true);
  const void* s = flat.data_ptr();
  void* r = out.data_ptr();
  const int dt = ddl_type(flat), op = ddl_op(opts.reduceOp, flat);
  return run(
      c10d::OpType::REDUCE_SCATTER, opts.asyncOp, {output}, {flat, out}, all_of(std::move(back)),
      [&] { return api_->reduce_scatterv(s, r, counts.data(), dt, op, comm_); },
      [&](Req* q) { return api_->ireduce_scatterv(s, r, counts.data(), dt, op, comm_, q); });
}

}  // namespace ddl_torch
