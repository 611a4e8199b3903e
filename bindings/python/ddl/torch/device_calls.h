// DdlBackend's calls on CUDA tensors (device_path.h says how): the stream-ordered one and the
// staged one. Included by backend.cpp after the class.
#pragma once

namespace ddl_torch {

// A collective on CUDA tensors, stream-ordered (device_path.h). Blocking (asyncOp false):
// on the caller's current stream, and no Work is returned, as run's blocking form.
inline c10::intrusive_ptr<c10d::Work> DdlBackend::run_on_stream(
    c10d::OpType type, bool async, const c10::Device& device, std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> keep, std::function<void()> after,
    const std::function<int(void*)>& call) {
  std::string refused;
  for (const auto* list : {&keep, &outputs})
    for (const auto& t : *list)
      if (refused.empty() && t.defined() && t.device() != device)
        refused = c10::str(" mixes tensors on ", device, " and on ", t.device(),
                           ": pass every tensor of one call on one device");
  if (refused.empty() && (!call || !api_->stream_calls()))
    refused = c10::str(" on ", device, " tensors needs a libddl with its stream-ordered form "
                       "(ddl_*_stream); rebuild ddl from a current checkout");
  if (refused.empty() && group_open_)
    refused = c10::str(" on ", device, " tensors after host calls (CPU tensors, or CUDA ones "
                       "staged: send, recv) in one coalesced batch: ddl cannot group "
                       "stream-ordered calls; issue them in a batch of their own");
  if (!refused.empty()) {
    if (coalescing_) abandon_batch();
    TORCH_CHECK(false, "ddl backend: ", c10d::opTypeToString(type), refused);
  }
  if (!async && !coalescing_) {
    const int rc = run_on_caller_stream(device, after, call);
    if (rc) throw_failure(rc, type);
    return {};
  }
  c10::intrusive_ptr<DeviceWork> w;
  const int rc =
      run_on_side_stream(streams_, rank_, type, device, outputs, keep, after, call, &w);
  if (rc) throw_failure(rc, type);
  if (coalescing_) coalesced_on_stream_ = w;
  return w;
}

// A call libddl has no device path for, on CUDA tensors: `host_call` (this backend's own
// call again, on the pinned host copies that `staging` swapped in) runs as for CPU tensors;
// the results are copied back when it ends.
template <class HostCall>
c10::intrusive_ptr<c10d::Work> DdlBackend::staged(Staging& staging, HostCall host_call) {
  c10::intrusive_ptr<c10d::Work> w = host_call();  // ~Staging puts the tensors back if it throws
  staging.restore();
  auto* d = dynamic_cast<DdlWork*>(w.get());
  if (!d || d->finished()) {
    if (auto back = staging.copy_back()) back();
    return w;
  }
  d->after = all_of({std::move(d->after), staging.copy_back()});
  d->set_outputs(staging.originals());
  return w;
}

}  // namespace ddl_torch
