// The collective backend of a stand-in, as the real plug-ins have theirs: a c10d::Backend.
//
// torch_npu registers "hccl" with Backend.register_backend(..., extended_api=True, devices=["npu"]) and its
// creator returns ProcessGroupHCCL, a C++ c10d::Backend (torch_npu/_init/registry/distributed.py). torch then
// builds the group itself: a plain c10d::ProcessGroup with that backend registered for the npu device and
// as its default backend, so every collective goes through c10d's dispatcher ops (Ops.cpp) to the backend,
// and torch's per-group machinery (TORCH_DISTRIBUTED_DEBUG's wrapper, torch 2.15's FlightRecorderHook and
// HealthCheckHook) sees the group it expects.
//
// Before torch 2.15 the C++ Backend has no Python trampoline, so a Python-only stand-in could only return a
// ProcessGroup subclass, which torch uses as the group wholesale (no default backend: torch 2.15's flight
// recorder then fails in init_process_group). `SimBackend` is the C++ Backend; every collective it is asked
// for is answered by the Python object it holds (_sim_accel/_distributed.py, which runs them on gloo), under
// the GIL. Works that are Python objects (a Python subclass of Work) are kept alive with their Python half.

#include "sim_accel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;

namespace sim_accel {
namespace {

// A Work that is (partly) a Python object: holding the C++ half alone would let Python free the other half.
class HeldWork : public Work {
 public:
  HeldWork(WorkPtr work, py::object owner) : work_(std::move(work)), owner_(std::move(owner)) {}

  ~HeldWork() override {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      owner_ = py::object();
    } else {
      owner_.release();  // the interpreter is gone: nothing left to free it with
    }
  }

  bool isCompleted() override { return work_->isCompleted(); }
  bool isSuccess() const override { return work_->isSuccess(); }
  int sourceRank() const override { return work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return work_->result(); }
  bool wait(std::chrono::milliseconds timeout) override { return work_->wait(timeout); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return work_->getFuture(); }

 private:
  WorkPtr work_;
  py::object owner_;
};

WorkPtr as_work(const py::object& result) {
  WorkPtr work = result.cast<WorkPtr>();
  // An instance of a Python subclass has a __dict__; torch's own Work classes (gloo's, the future-wrapping
  // one) are C++ objects whose Python wrapper may go away.
  if (py::hasattr(result, "__dict__")) {
    return c10::make_intrusive<HeldWork>(work, result);
  }
  return work;
}

class SimBackend : public c10d::Backend {
 public:
  SimBackend(int rank, int size, std::string name, py::object impl)
      : c10d::Backend(rank, size), name_(std::move(name)), impl_(std::move(impl)) {}

  ~SimBackend() override {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      impl_ = py::object();
    } else {
      impl_.release();
    }
  }

  const std::string getBackendName() const override { return name_; }

  py::object impl() const { return impl_; }

  // Each collective: the Python object's method of the same (C++) name, with the same arguments.
  template <typename... Args>
  WorkPtr call(const char* method, Args&&... args) {
    py::gil_scoped_acquire gil;
    return as_work(impl_.attr(method)(std::forward<Args>(args)...));
  }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    return call("broadcast", tensors, opts);
  }
  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    return call("allreduce", tensors, opts);
  }
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return call("allreduce_coalesced", tensors, opts);
  }
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return call("reduce", tensors, opts);
  }
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return call("allgather", outputs, inputs, opts);
  }
  // The names below are the ones every torch from 2.1 has (torch 2.15 forwards its new names to them).
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return call("_allgather_base", output, input, opts);
  }
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return call("allgather_coalesced", outputs, inputs, opts);
  }
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) {  // virtual where torch has it
    return call("allgather_into_tensor_coalesced", outputs, inputs, opts);
  }
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    return call("gather", outputs, inputs, opts);
  }
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    return call("scatter", outputs, inputs, opts);
  }
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return call("reduce_scatter", outputs, inputs, opts);
  }
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    return call("_reduce_scatter_base", output, input, opts);
  }
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) {  // virtual where torch has it
    return call("reduce_scatter_tensor_coalesced", outputs, inputs, opts);
  }
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
                        std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) override {
    return call("alltoall_base", output, input, output_split_sizes, input_split_sizes, opts);
  }
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    return call("alltoall", outputs, inputs, opts);
  }
  WorkPtr send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override {
    return call("send", tensors, dst_rank, tag);
  }
  WorkPtr recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override {
    return call("recv", tensors, src_rank, tag);
  }
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return call("recvAnysource", tensors, tag);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return call("barrier", opts); }

  void abort() {  // virtual where torch has it
    py::gil_scoped_acquire gil;
    impl_.attr("abort")();
  }
  void shutdown() {  // virtual where torch has it
    py::gil_scoped_acquire gil;
    impl_.attr("shutdown")();
  }

 private:
  std::string name_;
  py::object impl_;
};

// torch 2.1 has no autograd fallback for PrivateUse1 (torch 2.13's VariableFallbackKernel.cpp registers one), so
// c10d's ops, which have no autograd kernel, could not dispatch a device tensor to the backend: "Could not run
// 'c10d::allreduce_' with arguments from the 'Autogradnpu' backend". torch_npu 2.1 registers its own fallback
// there (torch_npu/csrc/aten/VariableFallbackKernel.cpp: redispatch, warning if a backward reaches it); the
// stand-ins register a fallthrough, only where torch has none.
struct AutogradFallback {
  AutogradFallback() {
    if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(c10::DispatchKey::AutogradPrivateUse1)) {
      library = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::AutogradPrivateUse1,
                                                 __FILE__, __LINE__);
      library->fallback(torch::CppFunction::makeFallthrough());
    }
  }
  std::unique_ptr<torch::Library> library;
};

// Wait, with the GIL released, until the caller's Python object is the only holder of `work` (at most
// `timeout_s`; False when it was not). gloo's worker thread marks a work complete, so wait() returns, and only
// then drops its own references to it (ProcessGroupGloo::runLoop). Whoever drops the last one frees the tensors
// the work holds, and freeing a tensor that has a Python object takes the GIL (torch >= 2.13 even while Python
// still holds it: the TensorImpl keeps its Python object alive while C++ shares it). A worker that has not run
// yet when the script ends takes the GIL in a finalizing interpreter: pthread_exit through a noexcept destructor,
// "terminate called without an active exception" (gdb: runLoop -> ~AsyncAllreduceWork -> decref_pyobject ->
// take_gil). Once this returns True, the work (and its tensors) is freed by the thread that drops the Python object.
bool wait_released(const py::object& obj, double timeout_s) {
  Work* work = obj.cast<Work*>();  // no reference of its own: the Python object's holder is one
  py::gil_scoped_release nogil;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (c10::raw::intrusive_ptr::use_count(work) > 1) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace

void bind_backend(py::module& m) {
  m.def("wait_released", &wait_released, py::arg("work"), py::arg("timeout_s"),
        "wait (GIL released) until only the given Python object holds the c10d Work; False after timeout_s");
  static AutogradFallback autograd_fallback;  // once the extension loads, torch's own fallbacks are registered
  // As torch_npu binds ProcessGroupHCCL (torch_npu/csrc/distributed/Init.cpp): a subclass of torch's Backend.
  py::object base = py::module::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<SimBackend, c10::intrusive_ptr<SimBackend>>(m, "SimBackend", base)
      .def(py::init<int, int, std::string, py::object>(), py::arg("rank"), py::arg("size"), py::arg("name"),
           py::arg("impl"))
      .def_property_readonly("impl", &SimBackend::impl, "the Python object that runs the collectives");
}

}  // namespace sim_accel
