// view_as_real / view_as_complex for the device: ATen's own kernels, which only re-describe the storage, as
// torch_npu registers them for PrivateUse1 (`view_as_real`, `view_as_complex` in the 2.14.0 wheel's
// npu_native_functions_by_codegen.yaml). Without them these views reached the boxed CPU fallback, which cannot
// alias a device tensor and returned a copy ("View operators don't support falling back to run on the CPU"):
// torch.distributed's all_reduce of a complex tensor (it reduces torch.view_as_real(tensor)) then reduced the
// copy and left the tensor as it was.

#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}
