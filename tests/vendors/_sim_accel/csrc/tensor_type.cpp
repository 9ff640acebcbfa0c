// Which tensors may shallow-copy into each other (aten::_has_compatible_shallow_copy_type).
//
// torch keeps the same Parameter objects across Module.to(device) only when
// this op says the old and the new tensor are compatible (Module._apply then
// assigns `param.data = new`, and autograd's set_data checks the op again).
// Built in for CPU/CUDA/XPU/HPU/MTIA/MPS pairs, not for PrivateUse1, so
// without this kernel `model.to('<device>')` would create new Parameters and
// an optimizer built before the move would hold stale ones. The real
// torch_npu registers a PrivateUse1 kernel of this op (libtorch_npu.so,
// at_npu::native::_has_compatible_shallow_copy_type) with the same rule:
// equal key sets, or both dense CPU/PrivateUse1 tensors.
// Dispatch picks PrivateUse1 whenever either tensor is on the device.

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace sim_accel {
namespace {

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto is_dense = [](c10::DispatchKeySet ks) {
    return ks.has(c10::DispatchKey::CPU) || ks.has(c10::DispatchKey::PrivateUse1);
  };
  return self.key_set() == from.key_set() || (is_dense(self.key_set()) && is_dense(from.key_set()));
}

}  // namespace
}  // namespace sim_accel

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", &sim_accel::has_compatible_shallow_copy_type);
}

// torch 2.1 (measured on 2.1.2) dispatches this op through the autograd key first and has no
// fallthrough there for PrivateUse1 ("Could not run ... from the 'Autogradnpu' backend"); the op
// returns a bool, so the same kernel serves the autograd key, on every torch.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", &sim_accel::has_compatible_shallow_copy_type);
}
