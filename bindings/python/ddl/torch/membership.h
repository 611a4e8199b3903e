// DdlBackend's members for the group's life beyond its collectives: shutdown at
// destroy_process_group, split (torch's split_group) and shrink (torch's shrink_group), each
// over the ddl.Communicator the backend runs on. Included by backend.cpp after the class.
#pragma once

namespace ddl_torch {

// destroy_process_group: ends the Works in flight, then frees the ddl communicator at once
// rather than when Python lets go of this backend; later calls fail, naming a destroyed
// communicator.
inline void DdlBackend::shutdown() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release nogil;  // a Work's callback may need the GIL to finish
    completer_->stop();
  } else {
    completer_->stop();
  }
  py::gil_scoped_acquire gil;
  owner_.attr("destroy")();
}

// What torch copies for a split's child: the name and torch's default deadline (the child
// keeps ddl's own, inherited through ddl_comm_split, whatever this says).
inline c10::intrusive_ptr<c10d::Backend::Options> DdlBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("ddl");
}

// torch.distributed.split_group (and DeviceMesh's sub-meshes where torch splits): every rank
// of this group calls it, `ranks` being the group ranks of its new group (in new-rank order),
// or of another group when it joins none. One ddl_comm_split (ddl.Communicator.split), no
// store rendezvous: a group's color is its lowest rank, a member's key its position.
inline c10::intrusive_ptr<c10d::Backend> DdlBackend::split(
    const c10::intrusive_ptr<c10d::Store>& /*store*/, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& /*opts*/) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = me != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : -1;
  const int key = member ? static_cast<int>(me - ranks.begin()) : 0;
  py::gil_scoped_acquire gil;
  py::object part;
  try {
    part = owner_.attr("split")(color, key);
  } catch (py::error_already_set& e) {
    C10_THROW_ERROR(DistBackendError, std::string("ddl backend: split: ") + e.what());
  }
  if (part.is_none()) return nullptr;
  return adopt(part);
}

// torch.distributed.shrink_group: a backend of the live ranks less ranks_to_exclude, made by
// ddl.Communicator.shrink (ddl_comm_shrink). It revokes this group first whatever
// shrink_flags says: SHRINK_ABORT's effect is ddl's default. Options are not overridable.
inline c10::intrusive_ptr<c10d::Backend> DdlBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int /*shrink_flags*/,
    const c10::intrusive_ptr<Options>& /*opts*/) {
  py::gil_scoped_acquire gil;
  py::object shrunk;
  try {
    shrunk = owner_.attr("shrink")(ranks_to_exclude);
  } catch (py::error_already_set& e) {
    C10_THROW_ERROR(DistBackendError, std::string("ddl backend: shrink: ") + e.what());
  }
  const int size = shrunk.attr("size").cast<int>();
  const int expected = size_ - static_cast<int>(ranks_to_exclude.size());
  if (size != expected) {
    // torch numbers the new group by the ranks it excluded: more failed meanwhile.
    const std::string failed = py::str(owner_.attr("failed_ranks")());
    shrunk.attr("destroy")();
    C10_THROW_ERROR(DistBackendError,
                    c10::str("ddl backend: shrink: ", size_ - size, " ranks failed (", failed,
                             "), not the ", ranks_to_exclude.size(), " excluded: more ranks ",
                             "died; shrink again excluding them (ddl.torch.shrink_group finds ",
                             "them)"));
  }
  return adopt(shrunk);
}

inline c10::intrusive_ptr<c10d::Backend> DdlBackend::adopt(py::object comm) const {
  const uintptr_t handle = comm.attr("_handle").attr("value").cast<uintptr_t>();
  return c10::make_intrusive<DdlBackend>(comm.attr("rank").cast<int>(),
                                         comm.attr("size").cast<int>(), handle, library_, comm);
}

}  // namespace ddl_torch
