// ddl's collectives as TensorFlow ops on CPU (ddl.tensorflow): DdlAllreduce, DdlAllgather,
// DdlReduceScatter, DdlBroadcast and DdlAlltoall. Each is an asynchronous kernel, as
// Horovod's are: TensorFlow's executor hands it its input and output, the kernel queues the
// call, and one thread of this library makes libddl's blocking C calls one after the other, in
// the order the kernels were started, then signals TensorFlow. No executor thread blocks on a
// peer, and the calls of one rank keep the order its program gave them (the ops are stateful:
// tf.function runs stateful ops in program order).
//
// libddl's calls, and the numbers by which a traced function names its communicator:
// ../framework_abi.h.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "framework_abi.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf = tensorflow;
using namespace ddl_framework;  // api(), Attached, Comm, the DdlType values

namespace {

int ddl_type(tf::DataType t) {
  switch (t) {
    case tf::DT_INT8:
      return I8;
    case tf::DT_UINT8:
      return U8;
    case tf::DT_INT32:
      return I32;
    case tf::DT_UINT32:
      return U32;
    case tf::DT_INT64:
      return I64;
    case tf::DT_UINT64:
      return U64;
    case tf::DT_HALF:
      return F16;
    case tf::DT_BFLOAT16:
      return BF16;
    case tf::DT_FLOAT:
      return F32;
    case tf::DT_DOUBLE:
      return F64;
    default:
      return -1;
  }
}

// The one thread that makes this process's ddl calls, in the order they were queued.
class Caller {
 public:
  static Caller &get() {
    static Caller *caller = new Caller();  // never destroyed: kernels may run at exit
    return *caller;
  }

  void queue(std::function<void()> call) {
    {
      std::lock_guard<std::mutex> hold(lock_);
      calls_.push_back(std::move(call));
    }
    wake_.notify_one();
  }

 private:
  Caller() : thread_([this] { run(); }) { thread_.detach(); }

  void run() {
    for (;;) {
      std::function<void()> call;
      {
        std::unique_lock<std::mutex> hold(lock_);
        wake_.wait(hold, [this] { return !calls_.empty(); });
        call = std::move(calls_.front());
        calls_.pop_front();
      }
      call();
    }
  }

  std::mutex lock_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> calls_;
  std::thread thread_;
};

// What the five kernels share: the attributes, the checks, the queueing and the errors.
class DdlKernel : public tf::AsyncOpKernel {
 public:
  // in_place: the result may take the input's buffer (when nothing else holds it, as a value
  // computed in the same step: a gradient), which ddl's call then updates in place.
  DdlKernel(tf::OpKernelConstruction *c, const char *collective, bool in_place = false)
      : AsyncOpKernel(c), collective_(collective), in_place_(in_place) {
    OP_REQUIRES_OK(c, c->GetAttr("comm", &comm_id_));
  }

  void ComputeAsync(tf::OpKernelContext *c, DoneCallback done) override {
    const tf::Tensor &x = c->input(0);
    const Attached at = Communicators::get().find(comm_id_);
    if (!api().loaded()) return fail(c, at, done, "libddl is not loaded (import ddl.tensorflow)");
    if (!at.comm) return fail(c, at, done, destroyed(comm_id_));
    const int type = ddl_type(x.dtype());
    if (type < 0)
      return fail(c, at, done,
                  "ddl has no type for " + tf::DataTypeString(x.dtype()) + " (" + kDdlTypes + ")");
    tf::Tensor *y = nullptr;
    tf::TensorShape shape;
    if (!output_shape(c, at, x.shape(), &shape)) return done();  // the reason is set
    OP_REQUIRES_OK_ASYNC(c,
                         in_place_ ? c->forward_input_or_allocate_output({0}, 0, shape, &y)
                                   : c->allocate_output(0, shape, &y),
                         done);
    Caller::get().queue([this, c, done, x, y, type, at] {
      const int rc = call(x, y, type, at);
      if (rc)
        fail(c, at, done, api().failure(rc, at.comm));
      else
        done();
    });
  }

 protected:
  // The result's shape, or false with the reason set on c.
  virtual bool output_shape(tf::OpKernelContext *c, const Attached &at, const tf::TensorShape &in,
                            tf::TensorShape *out) {
    *out = in;
    return true;
  }
  // The ddl call; its return code.
  virtual int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) = 0;

  // Axis 0 cut into one block per rank, or false with the reason set.
  bool blocks(tf::OpKernelContext *c, const Attached &at, const tf::TensorShape &in) const {
    if (in.dims() == 0 || in.dim_size(0) % at.size != 0) {
      c->SetStatus(error(at, "axis 0 of a tensor of shape " + in.DebugString() +
                                 " does not split into " + std::to_string(at.size) +
                                 " equal blocks (one per rank)"));
      return false;
    }
    return true;
  }

  tf::Status error(const Attached &at, const std::string &why) const {
    const std::string where = at.rank >= 0 ? " on rank " + std::to_string(at.rank) : "";
    return tf::errors::Internal("ddl.tensorflow ", collective_, where, ": ", why);
  }

  void fail(tf::OpKernelContext *c, const Attached &at, const DoneCallback &done,
            const std::string &why) const {
    c->SetStatus(error(at, why));
    done();
  }

  const char *collective_;
  const bool in_place_;
  int64_t comm_id_ = 0;
};

class Allreduce : public DdlKernel {
 public:
  explicit Allreduce(tf::OpKernelConstruction *c) : DdlKernel(c, "allreduce", true) {
    OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
  }
  int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) override {
    return api().allreduce(x.tensor_data().data(), const_cast<char *>(y->tensor_data().data()),
                           x.NumElements(), type, op_, at.comm);
  }

 private:
  int op_ = 0;
};

class Broadcast : public DdlKernel {
 public:
  explicit Broadcast(tf::OpKernelConstruction *c) : DdlKernel(c, "broadcast", true) {
    OP_REQUIRES_OK(c, c->GetAttr("root", &root_));
  }
  int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) override {
    char *out = const_cast<char *>(y->tensor_data().data());
    if (out != x.tensor_data().data())
      std::memcpy(out, x.tensor_data().data(), x.tensor_data().size());
    return api().broadcast(out, x.NumElements(), type, root_, at.comm);
  }

 private:
  int root_ = 0;
};

class Allgather : public DdlKernel {
 public:
  explicit Allgather(tf::OpKernelConstruction *c) : DdlKernel(c, "allgather") {}
  bool output_shape(tf::OpKernelContext *c, const Attached &at, const tf::TensorShape &in,
                    tf::TensorShape *out) override {
    if (in.dims() == 0) {
      c->SetStatus(error(at, "a scalar has no axis 0 to gather along (reshape it to [1])"));
      return false;
    }
    *out = in;
    out->set_dim(0, in.dim_size(0) * at.size);
    return true;
  }
  int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) override {
    return api().allgather(x.tensor_data().data(), const_cast<char *>(y->tensor_data().data()),
                           x.NumElements(), type, at.comm);
  }
};

class ReduceScatter : public DdlKernel {
 public:
  explicit ReduceScatter(tf::OpKernelConstruction *c) : DdlKernel(c, "reduce_scatter") {
    OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
  }
  bool output_shape(tf::OpKernelContext *c, const Attached &at, const tf::TensorShape &in,
                    tf::TensorShape *out) override {
    if (!blocks(c, at, in)) return false;
    *out = in;
    out->set_dim(0, in.dim_size(0) / at.size);
    return true;
  }
  int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) override {
    return api().reduce_scatter(x.tensor_data().data(), const_cast<char *>(y->tensor_data().data()),
                                y->NumElements(), type, op_, at.comm);
  }

 private:
  int op_ = 0;
};

class Alltoall : public DdlKernel {
 public:
  explicit Alltoall(tf::OpKernelConstruction *c) : DdlKernel(c, "alltoall") {}
  bool output_shape(tf::OpKernelContext *c, const Attached &at, const tf::TensorShape &in,
                    tf::TensorShape *out) override {
    if (!api().alltoall) {
      c->SetStatus(error(at, "this libddl has no ddl_alltoall"));
      return false;
    }
    *out = in;
    return blocks(c, at, in);
  }
  int call(const tf::Tensor &x, tf::Tensor *y, int type, const Attached &at) override {
    return api().alltoall(x.tensor_data().data(), const_cast<char *>(y->tensor_data().data()),
                          x.NumElements() / at.size, type, at.comm);
  }
};

// Shapes for graphs: as the input, or axis 0 times / divided by the ranks (attr `size`).
tf::Status same_shape(tf::shape_inference::InferenceContext *c) {
  c->set_output(0, c->input(0));
  return tf::Status();
}

tf::Status axis0_scaled(tf::shape_inference::InferenceContext *c, bool gather) {
  int64_t size = 1;
  TF_RETURN_IF_ERROR(c->GetAttr("size", &size));
  tf::shape_inference::ShapeHandle in = c->input(0);
  if (!c->RankKnown(in) || c->Rank(in) == 0) {
    c->set_output(0, c->UnknownShape());
    return tf::Status();
  }
  tf::shape_inference::DimensionHandle d0 = c->Dim(in, 0), scaled;
  if (gather)
    TF_RETURN_IF_ERROR(c->Multiply(d0, size, &scaled));
  else
    TF_RETURN_IF_ERROR(c->Divide(d0, size, true, &scaled));
  tf::shape_inference::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(in, 0, scaled, &out));
  c->set_output(0, out);
  return tf::Status();
}

}  // namespace

#define DDL_TYPES "T: {int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double}"

REGISTER_OP("DdlAllreduce")
    .Input("x: T")
    .Output("y: T")
    .Attr(DDL_TYPES)
    .Attr("comm: int")
    .Attr("op: int")
    .SetIsStateful()
    .SetShapeFn(same_shape);
REGISTER_OP("DdlBroadcast")
    .Input("x: T")
    .Output("y: T")
    .Attr(DDL_TYPES)
    .Attr("comm: int")
    .Attr("root: int")
    .SetIsStateful()
    .SetShapeFn(same_shape);
REGISTER_OP("DdlAllgather")
    .Input("x: T")
    .Output("y: T")
    .Attr(DDL_TYPES)
    .Attr("comm: int")
    .Attr("size: int")
    .SetIsStateful()
    .SetShapeFn([](tf::shape_inference::InferenceContext *c) { return axis0_scaled(c, true); });
REGISTER_OP("DdlReduceScatter")
    .Input("x: T")
    .Output("y: T")
    .Attr(DDL_TYPES)
    .Attr("comm: int")
    .Attr("op: int")
    .Attr("size: int")
    .SetIsStateful()
    .SetShapeFn([](tf::shape_inference::InferenceContext *c) { return axis0_scaled(c, false); });
REGISTER_OP("DdlAlltoall")
    .Input("x: T")
    .Output("y: T")
    .Attr(DDL_TYPES)
    .Attr("comm: int")
    .SetIsStateful()
    .SetShapeFn(same_shape);

REGISTER_KERNEL_BUILDER(Name("DdlAllreduce").Device(tf::DEVICE_CPU), Allreduce);
REGISTER_KERNEL_BUILDER(Name("DdlBroadcast").Device(tf::DEVICE_CPU), Broadcast);
REGISTER_KERNEL_BUILDER(Name("DdlAllgather").Device(tf::DEVICE_CPU), Allgather);
REGISTER_KERNEL_BUILDER(Name("DdlReduceScatter").Device(tf::DEVICE_CPU), ReduceScatter);
REGISTER_KERNEL_BUILDER(Name("DdlAlltoall").Device(tf::DEVICE_CPU), Alltoall);

DDL_FRAMEWORK_EXPORTS(ddl_tf)
