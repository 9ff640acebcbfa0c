// torch_npu's strictness for the npu stand-in (tests/vendors/README.md, "How strict the npu stand-in is").
//
// Off until torch_npu's stand-in configures it (torch.ops.sim_accel_strict.configure, from
// torch_npu/_strict.py, with the data of torch_npu/_data/); SIM_ACCEL_PERMISSIVE=1 leaves it off.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace sim_accel {
namespace strict {

// Called first by every PrivateUse1 kernel that stands for a torch_npu kernel (kernels.cpp's boxed
// fallback). For an operator torch_npu does not register: throws (TORCH_NPU_FALLBACK_CPU_DISABLE=1) or
// warns once as torch_npu's CPU fallback does, and returns false (the caller then runs the CPU kernel,
// as torch_npu's fallback does). For one it registers: throws the aclnn refusals (dtype outside the
// aclnn API's list, more than 8 dimensions) and returns true. Cheap: one cached lookup per operator.
bool check(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace strict
}  // namespace sim_accel
