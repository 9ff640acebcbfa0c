// Autocast support for the simulated accelerator: the same op lists and
// cast policies ATen registers for CUDA, registered for AutocastPrivateUse1
// (the way vendor backends do it). Without these, torch.autocast with the
// vendor's device_type would be accepted but would not cast anything.

#include <ATen/autocast_mode.h>
#include <torch/library.h>

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// torch < 2.4 has no AT_FORALL_* op lists in its headers: there the device
// accepts autocast but casts nothing (tests/vendors/README.md, "Old torch").
#ifdef AT_FORALL_LOWER_PRECISION_FP
namespace at::autocast {
namespace {

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SIM_KERNEL_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SIM_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SIM_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SIM_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(SIM_KERNEL_LOWER)
  AT_FORALL_FP32(SIM_KERNEL_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(SIM_KERNEL_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(SIM_KERNEL_PROMOTE)
#undef SIM_KERNEL_LOWER
#undef SIM_KERNEL_FP32
#undef SIM_KERNEL_FP32_SET_OPT_DTYPE
#undef SIM_KERNEL_PROMOTE
}

}  // namespace
}  // namespace at::autocast
#endif  // AT_FORALL_LOWER_PRECISION_FP
