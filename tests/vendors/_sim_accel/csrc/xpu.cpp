// torch's own xpu device, simulated: what a torch built for Intel GPUs has at the C++ level, registered for
// DeviceType::XPU in a torch built without it (the xpu stand-in, tests/vendors/sim_xpu; runtime.cpp's _init with
// xpu=True calls install_xpu before any tensor exists). The device is the same simulated device as the vendor
// stand-ins' (allocator, guard, generators), under the XPU type and dispatch key:
//
//   * the device guard (a second SimGuardImpl, for XPU) and the allocator for XPU;
//   * XPU hooks (ATen's XPUHooksRegistry, under the name getXPUHooks() creates: "XPUHooks"): hasXPU, the
//     accelerator's isBuilt (only where torch is not a CUDA build: torch refuses two built accelerators),
//     devices, generators, pinned memory;
//   * the XPU dispatch key's kernels: every operator (c10d's collectives too) redispatches to the PrivateUse1 kernels
//     and boxed CPU fallback (kernels.cpp, rnn.cpp: written for the device type chosen at _init), and copy_,
//     whose CompositeExplicitAutograd kernel would call copy_stub for XPU (absent in this torch), goes through
//     _copy_from as a PrivateUse1 device's does. torch's own AutocastXPU kernels (in every build) cast.
//
// The hooks need torch >= 2.8 (xccl in torch: the stand-in's minimum); before it nothing is registered.

#include "sim_accel.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_copy_from.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#if !SIM_TORCH_BEFORE(2, 8)
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/XPUHooksInterface.h>
#endif

#include <memory>

namespace sim_accel {

c10::impl::DeviceGuardImplInterface* new_guard(c10::DeviceType type);  // runtime.cpp

namespace {

#if !SIM_TORCH_BEFORE(2, 8)  // XPU's hooks and the group's per-device backends: torch >= 2.8 (xccl in torch)
// c10d's kernels for a device type ask the process group for that type's backend (torch/csrc/distributed/c10d/
// Ops.cpp; a torch built with XPU has them for XPU): redispatched to the PrivateUse1 kernels, the group answers
// PrivateUse1 with its XPU backend (xccl). Only the backend lookup is given the entry, not the group's device types.
struct GroupBackends : c10d::ProcessGroup {
  static auto by_device() {
    return &GroupBackends::deviceTypeToBackend_;
  }
};

void answer_for_xpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t begin = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].type()->str().find("c10d.ProcessGroup") == std::string::npos) {
      continue;
    }
    auto group = (*stack)[begin + i].toCustomClass<c10d::ProcessGroup>();
    auto& backends = (*group).*GroupBackends::by_device();
    if (backends.find(c10::DeviceType::PrivateUse1) == backends.end() &&
        group->hasBackendForDeviceType(c10::DeviceType::XPU)) {
      backends[c10::DeviceType::PrivateUse1] = group->getBackend(c10::DeviceType::XPU);
    }
  }
}

void to_device_kernels(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (op.schema().name().rfind("c10d::", 0) == 0) {
    answer_for_xpu(op, stack);
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  at::_copy_from(src, self, non_blocking);
  return self;
}

// Methods an older torch's interface may lack or spell otherwise are plain members (no `override`).
struct SimXPUHooks final : public at::XPUHooksInterface {
  void init() const override {
    (void)default_generator(0);
  }
  bool hasXPU() const override {
    return device_count() > 0;
  }
  bool isBuilt() const {
    return !at::detail::getCUDAHooks().isBuilt();
  }
  bool isAvailable() const {
    return device_count() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < device_count();
  }
  c10::DeviceIndex deviceCount() const {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  c10::DeviceIndex getNumGPUs() const {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  c10::DeviceIndex current_device() const {
    return static_cast<c10::DeviceIndex>(sim_accel::current_device());
  }
  c10::DeviceIndex getCurrentDevice() const {
    return static_cast<c10::DeviceIndex>(sim_accel::current_device());
  }
  void setCurrentDevice(c10::DeviceIndex device) const {
    set_current_device(device);
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const {
    return static_cast<c10::DeviceIndex>(exchange_device(device));
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const {
    if (device < 0 || device >= device_count()) {
      return static_cast<c10::DeviceIndex>(sim_accel::current_device());
    }
    return static_cast<c10::DeviceIndex>(exchange_device(device));
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index = -1) const {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const {
    return new_generator(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return device_of_pointer(data);
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_pointer(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }
  void deviceSynchronize(c10::DeviceIndex) const {}
};
#endif

}  // namespace

void install_xpu() {
#if SIM_TORCH_BEFORE(2, 8)
  TORCH_CHECK(false, "the simulated xpu device needs torch >= 2.8 (xccl in torch)");
#else
  static c10::impl::DeviceGuardImplRegistrar guard(c10::DeviceType::XPU, new_guard(c10::DeviceType::XPU));
  c10::SetAllocator(c10::DeviceType::XPU, device_allocator());
  at::XPUHooksRegistry()->Register(
      "XPUHooks", [](auto&&...) { return std::unique_ptr<at::XPUHooksInterface>(new SimXPUHooks()); });
  static torch::Library fallback(torch::Library::IMPL, "_", c10::DispatchKey::XPU, __FILE__, __LINE__);
  fallback.fallback(torch::CppFunction::makeFromBoxedFunction<&to_device_kernels>());
  static torch::Library kernels(torch::Library::IMPL, "aten", c10::DispatchKey::XPU, __FILE__, __LINE__);
  kernels.impl("copy_", TORCH_FN(copy_));
  // The device's own kernels win over a CompositeExplicitAutograd default (convolution_overrideable's raises),
  // which a backend fallback would not: each gets the redirect for XPU by name.
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getRegistrationsForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    if (name.name.rfind("aten::", 0) != 0 || name.name == "aten::copy_" ||
        name.name == "aten::_has_compatible_shallow_copy_type") {
      continue;  // copy_: above; the shallow-copy rule is torch's own for XPU
    }
    const std::string op = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    kernels.impl(op.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&to_device_kernels>());
  }
#endif
}

}  // namespace sim_accel
