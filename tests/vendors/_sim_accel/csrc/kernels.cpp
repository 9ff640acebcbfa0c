// ATen kernels of the simulated accelerator (PrivateUse1 dispatch key).
//
// * Storage and view kernels that must keep aliasing (empty, as_strided,
//   view, set_, resize_, copies, _local_scalar_dense) are real PrivateUse1
//   kernels working on the host memory of the device tensor.
// * Convolution (convolution_overrideable and its backward) and the six
//   SyncBatchNorm kernels that ATen only has for CUDA are implemented with
//   CPU ATen math on CPU tensors that alias the device memory.
// * native_dropout draws its mask from the device generator.
// * Every other operator goes through the boxed fallback, after a missing or
//   device generator argument is replaced by the device's generator: the CPU
//   kernel runs on CPU aliases of the device memory (alias_fallback.cpp, no
//   copies); what that cannot keep exact (views, sparse tensors) takes
//   at::native::cpu_fallback (copy to the CPU, run, copy results back).
// * native_group_norm, native_layer_norm and addr are sent to that fallback
//   too: their CompositeExplicitAutograd kernels would win over it on this
//   device and run a different math (math_group_norm's input.view fails on a
//   channels_last or permuted input); torch_npu has kernels of its own for
//   them, and the CPU's are the ones that compute what CUDA computes.

#include "sim_accel.h"
#include "strict.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/ones_like.h>

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace sim_accel {
namespace {

using at::Tensor;

// ------------------------------------------------------------ storage/views

Tensor empty_memory_format(
    c10::IntArrayRef size,
    c10::optional<c10::ScalarType> dtype_opt,
    c10::optional<c10::Layout> layout_opt,
    c10::optional<c10::Device> device_opt,
    c10::optional<bool> pin_memory_opt,
    c10::optional<c10::MemoryFormat> memory_format_opt) {
  const auto device = c10::device_or_default(device_opt);
  TORCH_CHECK(is_sim(device));
  TORCH_CHECK(
      c10::layout_or_default(layout_opt) == c10::Layout::Strided,
      "only strided tensors are supported on this device");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory_opt), "Pin memory can only be on CPU");
  const c10::DeviceGuard guard(device);
  const c10::DispatchKeySet ks(dispatch_key());
  return at::detail::empty_generic(
      size, device_allocator(), ks, c10::dtype_or_default(dtype_opt), memory_format_opt);
}

Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    c10::optional<c10::ScalarType> dtype_opt,
    c10::optional<c10::Layout> layout_opt,
    c10::optional<c10::Device> device_opt,
    c10::optional<bool> pin_memory_opt) {
  const auto device = c10::device_or_default(device_opt);
  TORCH_CHECK(is_sim(device));
  TORCH_CHECK(
      c10::layout_or_default(layout_opt) == c10::Layout::Strided,
      "only strided tensors are supported on this device");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory_opt), "Pin memory can only be on CPU");
  const c10::DeviceGuard guard(device);
  const c10::DispatchKeySet ks(dispatch_key());
  return at::detail::empty_strided_generic(
      size, stride, device_allocator(), ks, c10::dtype_or_default(dtype_opt));
}

Tensor as_strided(
    const Tensor& self,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride,
    c10::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

const Tensor& resize_(
    const Tensor& self,
    c10::SymIntArrayRef size,
    c10::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

Tensor reshape_alias(const Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

Tensor view(const Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

Tensor unfold(const Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

// A CPU alias of `t` (alias_cpu) with t's lazy conjugate and negative bits, which say how its memory is read.
Tensor alias_cpu_with_math_bits(const Tensor& t) {
  Tensor cpu = alias_cpu(t);
  if (!t.defined() || !is_sim(t.device())) {
    return cpu;
  }
  if (t.is_conj()) {
    cpu = cpu.conj();
  }
  if (t.is_neg()) {
    cpu = cpu._neg_view();
  }
  return cpu;
}

// Copies between host memory views; at::native::copy_ on CPU tensors handles
// dtype conversion, broadcasting, arbitrary strides and the conjugate/negative
// bits (the Conjugate and Negative keys pass _copy_from through to here: see
// the registrations at the end).
Tensor copy_from(const Tensor& self, const Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy of an undefined tensor");
  if (dst.numel() == 0) {
    return dst;
  }
  Tensor dst_cpu = alias_cpu_with_math_bits(dst);
  Tensor src_cpu = alias_cpu_with_math_bits(self);
  at::native::copy_(dst_cpu, src_cpu, false);
  return dst;
}

Tensor copy_from_and_resize(const Tensor& self, const Tensor& dst) {
  if (is_sim(dst.device())) {
    const c10::DeviceGuard guard(dst.device());
    at::native::resize_(dst, self.sizes(), c10::nullopt);
  } else {
    at::native::resize_(dst, self.sizes(), c10::nullopt);
  }
  return copy_from(self, dst, false);
}

// Tensor.record_stream: torch_npu implements it for NPU tensors (its caching allocator defers reuse of
// the block until the stream's work is done); FSDP1 calls it on every unshard. The stand-in's work is
// synchronous, so no block can be reused early: the stream is checked to be this device's, nothing else.
void record_stream(Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == self.device().type(), "record_stream: the stream (", stream,
              ") is not on the tensor's device type (", self.device(), ")");
}

at::Scalar local_scalar_dense(const Tensor& self) {
  return at::native::_local_scalar_dense_cpu(alias_cpu(self));
}

Tensor& set_source_tensor(Tensor& self, const Tensor& source) {
  return at::native::set_tensor_(self, source);
}

Tensor& set_source_storage(Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

Tensor& set_source_storage_offset(
    Tensor& self,
    at::Storage storage,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  return at::cpu::set_(self, std::move(storage), storage_offset, size, stride);
}

Tensor& set_empty(Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// ------------------------------------------------------------------ fallback

bool is_generator_type(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::OptionalType::Kind) {
    t = t->expectRef<c10::OptionalType>().getElementType();
  }
  return t->kind() == c10::GeneratorType::Kind;
}

int device_of_arguments(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const auto& args = schema.arguments();
  const size_t begin = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined() && is_sim(t.device())) {
        return t.device().index();
      }
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (t.defined() && is_sim(t.device())) {
          return t.device().index();
        }
      }
    } else if (v.isDevice() && is_sim(v.toDevice())) {
      return v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  return current_device();
}

void substitute_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t begin = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_generator_type(args[i].real_type())) {
      continue;
    }
    c10::IValue& v = (*stack)[begin + i];
    if (v.isNone()) {
      const int dev = device_of_arguments(schema, stack);
      auto inner = cpu_generator_for(default_generator(dev));
      if (inner.has_value()) {
        v = c10::IValue(*inner);
      }
    } else if (v.isGenerator()) {
      auto inner = cpu_generator_for(v.toGenerator());
      if (inner.has_value()) {
        v = c10::IValue(*inner);
      }
    }
  }
}

// torch < 2.3's cpu_fallback leaves Tensor?[] arguments (index, index_put_) on the device
// (pytorch issue 102081, fixed by PR 119273): hand it CPU aliases of them.
void optional_tensor_lists_to_cpu(torch::jit::Stack* stack, size_t num_arguments) {
  const size_t begin = stack->size() - num_arguments;
  for (size_t i = begin; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isOptionalTensorList()) {
      continue;
    }
    auto tensors = v.toOptionalTensorList().vec();
    for (auto& t : tensors) {
      if (t.has_value() && t->defined() && is_sim(t->device())) {
        t = alias_cpu(*t);
      }
    }
    v = c10::IValue(c10::List<c10::optional<at::Tensor>>(tensors));
  }
}

// torch's copying CPU fallback: every device input copied to the CPU, the CPU kernel run, results and
// mutated inputs copied back. For what run_on_cpu_aliases leaves, and for operators torch_npu lacks (it
// runs those through such a copying CPU fallback, with its warning: strict.cpp).
void copying_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
#if SIM_TORCH_BEFORE(2, 3)
  optional_tensor_lists_to_cpu(stack, op.schema().arguments().size());
#endif
  at::native::cpu_fallback(op, stack);
}

// Every aten operator without a kernel of the device's own arrives here (boxed). An operator torch_npu
// registers runs on CPU aliases of the device memory (alias_fallback.cpp: no copies, as on the device);
// one it lacks takes the copying fallback, as it does with torch_npu.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const bool vendor_kernel = strict::check(op, stack);  // torch_npu's strictness (strict.cpp); off for the other vendors
  substitute_generators(op, stack);
  if (!vendor_kernel || !run_on_cpu_aliases(op, stack)) {
    copying_fallback(op, stack);
  }
}

// --------------------------------------------------------------- convolution

Tensor convolution_overrideable(
    const Tensor& input,
    const Tensor& weight,
    const c10::optional<Tensor>& bias,
    ConvInts stride,
    ConvInts padding,
    ConvInts dilation,
    bool transposed,
    ConvInts output_padding,
    ConvInt groups) {
  const c10::DeviceGuard guard(input.device());
  c10::optional<Tensor> bias_cpu;
  if (bias.has_value() && bias->defined()) {
    bias_cpu = alias_cpu(*bias);
  }
  Tensor out = at::convolution(
      alias_cpu(input), alias_cpu(weight), bias_cpu,
      concrete(stride), concrete(padding),
      concrete(dilation), transposed,
      concrete(output_padding), concrete(groups));
  return cpu_result_to_device(out, input.device());
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward_overrideable(
    const Tensor& grad_output,
    const Tensor& input,
    const Tensor& weight,
    ConvInts stride,
    ConvInts padding,
    ConvInts dilation,
    bool transposed,
    ConvInts output_padding,
    ConvInt groups,
    std::array<bool, 3> output_mask) {
  const c10::DeviceGuard guard(input.device());
  const int64_t g = concrete(groups);
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * g : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(
      alias_cpu(grad_output), alias_cpu(input), alias_cpu(weight),
      output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(),
      concrete(stride), concrete(padding),
      concrete(dilation), transposed,
      concrete(output_padding), g, output_mask);
  return {cpu_result_to_device(gi, input.device()), cpu_result_to_device(gw, weight.device()),
          cpu_result_to_device(gb, weight.device())};
}

// ------------------------------------------------------------- SyncBatchNorm
// Same contracts as the CUDA kernels in aten/src/ATen/native/cuda/Normalization.cu.
// Statistics are accumulated in double and returned in float (double for
// double input), like the CUDA accumulate type.

at::ScalarType acc_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

std::vector<int64_t> reduce_dims(const Tensor& x) {
  TORCH_CHECK(x.dim() >= 2, "batch norm expects an input with at least 2 dimensions, got ", x.dim());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) {
    dims.push_back(d);
  }
  return dims;
}

std::vector<int64_t> channel_shape(const Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = x.size(1);
  return shape;
}

Tensor opt_cpu(const c10::optional<Tensor>& t) {
  if (t.has_value() && t->defined()) {
    return alias_cpu(*t);
  }
  return Tensor();
}

std::tuple<Tensor, Tensor> batch_norm_stats(const Tensor& input, double eps) {
  const c10::DeviceGuard guard(input.device());
  const Tensor x = alias_cpu(input).to(at::kDouble);
  const auto dims = reduce_dims(x);
  const Tensor mean = x.mean(dims);
  const Tensor var = (x - mean.view(channel_shape(x))).pow(2).mean(dims);
  const Tensor invstd = (var + eps).rsqrt();
  const auto acc = acc_type(input.scalar_type());
  return {cpu_result_to_device(mean.to(acc), input.device()), cpu_result_to_device(invstd.to(acc), input.device())};
}

std::tuple<Tensor, Tensor> gather_stats_impl(
    const Tensor& input,
    const Tensor& mean_all,
    const Tensor& invstd_all,
    const c10::optional<Tensor>& running_mean,
    const c10::optional<Tensor>& running_var,
    double momentum,
    double eps,
    const Tensor& counts_cpu) {
  const c10::DeviceGuard guard(input.device());
  const Tensor m = alias_cpu(mean_all).to(at::kDouble);
  const Tensor inv = alias_cpu(invstd_all).to(at::kDouble);
  const Tensor c = counts_cpu.to(at::kDouble).reshape({-1, 1});
  const Tensor n = c.sum(0);
  const Tensor mean = (m * c).sum(0) / n;
  const Tensor var_i = inv.pow(-2) - eps;
  const Tensor var = ((var_i + (m - mean).pow(2)) * c).sum(0) / n;
  const Tensor invstd = (var + eps).rsqrt();
  Tensor rm = opt_cpu(running_mean);
  if (rm.defined()) {
    rm.copy_(rm.to(at::kDouble) * (1 - momentum) + mean * momentum);
  }
  Tensor rv = opt_cpu(running_var);
  if (rv.defined()) {
    const Tensor unbiased = var * n / (n - 1);
    rv.copy_(rv.to(at::kDouble) * (1 - momentum) + unbiased * momentum);
  }
  const auto out_type = mean_all.scalar_type();
  return {cpu_result_to_device(mean.to(out_type), input.device()), cpu_result_to_device(invstd.to(out_type), input.device())};
}

std::tuple<Tensor, Tensor> batch_norm_gather_stats_with_counts(
    const Tensor& input,
    const Tensor& mean,
    const Tensor& invstd,
    const c10::optional<Tensor>& running_mean,
    const c10::optional<Tensor>& running_var,
    double momentum,
    double eps,
    const Tensor& counts) {
  return gather_stats_impl(
      input, mean, invstd, running_mean, running_var, momentum, eps, alias_cpu(counts));
}

std::tuple<Tensor, Tensor> batch_norm_gather_stats(
    const Tensor& input,
    const Tensor& mean,
    const Tensor& invstd,
    const c10::optional<Tensor>& running_mean,
    const c10::optional<Tensor>& running_var,
    double momentum,
    double eps,
    int64_t count) {
  const Tensor counts = at::full({mean.size(0)}, static_cast<double>(count), at::kDouble);
  return gather_stats_impl(input, mean, invstd, running_mean, running_var, momentum, eps, counts);
}

Tensor batch_norm_elemt(
    const Tensor& input,
    const c10::optional<Tensor>& weight,
    const c10::optional<Tensor>& bias,
    const Tensor& mean,
    const Tensor& invstd,
    double eps) {
  const c10::DeviceGuard guard(input.device());
  const Tensor x = alias_cpu(input);
  const auto shape = channel_shape(x);
  const auto acc = acc_type(input.scalar_type());
  Tensor y = (x.to(acc) - alias_cpu(mean).to(acc).view(shape)) * alias_cpu(invstd).to(acc).view(shape);
  const Tensor w = opt_cpu(weight);
  if (w.defined()) {
    y = y * w.to(acc).view(shape);
  }
  const Tensor b = opt_cpu(bias);
  if (b.defined()) {
    y = y + b.to(acc).view(shape);
  }
  return cpu_result_to_device(y.to(input.scalar_type()).contiguous(input.suggest_memory_format()), input.device());
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_backward_reduce(
    const Tensor& grad_out,
    const Tensor& input,
    const Tensor& mean,
    const Tensor& invstd,
    const c10::optional<Tensor>& weight,
    bool input_g,
    bool weight_g,
    bool bias_g) {
  const c10::DeviceGuard guard(input.device());
  const Tensor dy = alias_cpu(grad_out).to(at::kDouble);
  const Tensor x = alias_cpu(input).to(at::kDouble);
  const auto dims = reduce_dims(x);
  const auto shape = channel_shape(x);
  const Tensor xmu = x - alias_cpu(mean).to(at::kDouble).view(shape);
  const Tensor sum_dy = dy.sum(dims);
  const Tensor sum_dy_xmu = (dy * xmu).sum(dims);
  const auto acc = acc_type(input.scalar_type());
  const Tensor w = opt_cpu(weight);
  const auto wtype = w.defined() ? w.scalar_type() : input.scalar_type();
  Tensor r_sum_dy, r_sum_dy_xmu, r_gw, r_gb;
  if (input_g) {
    r_sum_dy = cpu_result_to_device(sum_dy.to(acc), input.device());
    r_sum_dy_xmu = cpu_result_to_device(sum_dy_xmu.to(acc), input.device());
  }
  if (weight_g) {
    r_gw = cpu_result_to_device((sum_dy_xmu * alias_cpu(invstd).to(at::kDouble)).to(wtype), input.device());
  }
  if (bias_g) {
    r_gb = cpu_result_to_device(sum_dy.to(wtype), input.device());
  }
  return {r_sum_dy, r_sum_dy_xmu, r_gw, r_gb};
}

Tensor batch_norm_backward_elemt(
    const Tensor& grad_out,
    const Tensor& input,
    const Tensor& mean,
    const Tensor& invstd,
    const c10::optional<Tensor>& weight,
    const Tensor& sum_dy,
    const Tensor& sum_dy_xmu,
    const Tensor& count) {
  const c10::DeviceGuard guard(input.device());
  const Tensor dy = alias_cpu(grad_out).to(at::kDouble);
  const Tensor x = alias_cpu(input).to(at::kDouble);
  const auto shape = channel_shape(x);
  const Tensor total = alias_cpu(count).to(at::kDouble).sum();
  const Tensor mean_dy = alias_cpu(sum_dy).to(at::kDouble) / total;
  const Tensor mean_dy_xmu = alias_cpu(sum_dy_xmu).to(at::kDouble) / total;
  const Tensor inv = alias_cpu(invstd).to(at::kDouble);
  const Tensor xmu = x - alias_cpu(mean).to(at::kDouble).view(shape);
  Tensor scale = inv;
  const Tensor w = opt_cpu(weight);
  if (w.defined()) {
    scale = inv * w.to(at::kDouble);
  }
  const Tensor gi = (dy - mean_dy.view(shape) - xmu * (inv * inv * mean_dy_xmu).view(shape)) *
      scale.view(shape);
  return cpu_result_to_device(gi.to(input.scalar_type()).contiguous(input.suggest_memory_format()), input.device());
}

// native_batch_norm updates running_mean/running_var in place although its
// schema does not mark them as mutated, so the CPU fallback would update a
// temporary copy. Run the CPU kernel on aliases of the device memory instead.
std::tuple<Tensor, Tensor, Tensor> native_batch_norm(
    const Tensor& input,
    const c10::optional<Tensor>& weight,
    const c10::optional<Tensor>& bias,
    const c10::optional<Tensor>& running_mean,
    const c10::optional<Tensor>& running_var,
    bool training,
    double momentum,
    double eps) {
  const c10::DeviceGuard guard(input.device());
  auto as_opt = [](const Tensor& t) { return t.defined() ? c10::optional<Tensor>(t) : c10::nullopt; };
  auto [out, save_mean, save_invstd] = at::native_batch_norm(
      alias_cpu(input), as_opt(opt_cpu(weight)), as_opt(opt_cpu(bias)),
      as_opt(opt_cpu(running_mean)), as_opt(opt_cpu(running_var)), training, momentum, eps);
  return {cpu_result_to_device(out, input.device()), cpu_result_to_device(save_mean, input.device()),
          cpu_result_to_device(save_invstd, input.device())};
}

// ------------------------------------------------------------------ dropout
// Same composition as the CPU kernel (bernoulli_ mask, input * mask * scale),
// but the bernoulli_ draw runs on the device and so uses the device generator.

std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, c10::optional<bool> train) {
  if (input.numel() == 0) {
    return {input, at::empty_like(input, input.options())};
  }
  if (!train.has_value() || *train) {
    const double p1m = 1. - p;
    const double scale = p1m == 0 ? 0. : 1. / p1m;
    Tensor mask = at::empty_like(input, at::MemoryFormat::Contiguous);
    mask.bernoulli_(p1m);
    Tensor output = input.mul(mask).mul_(scale);
    return {output, mask.to(at::kBool)};
  }
  return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
}

#if SIM_TORCH_BEFORE(2, 3)
// torch < 2.3 has CUDA kernels only for GradScaler's two ops (the fallback finds no CPU one):
// the device's own, as a vendor ships them, mirroring aten/src/ATen/native/cuda/AmpKernels.cu
// on CPU aliases of the device memory.
void amp_foreach_non_finite_check_and_unscale_(
    at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  Tensor found = alias_cpu(found_inf);
  Tensor factor = alias_cpu(inv_scale);
  for (const Tensor& grad : grads) {
    Tensor g = alias_cpu(grad);
    if (!g.isfinite().all().item<bool>()) {
      found.fill_(1.0);
    }
    g.mul_(factor.to(g.scalar_type()));
  }
}

Tensor& amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval) {
  Tensor s = alias_cpu(scale);
  Tensor tracker = alias_cpu(growth_tracker);
  if (alias_cpu(found_inf).item<double>() != 0.0) {
    s.mul_(backoff_factor);
    tracker.fill_(0);
    return scale;
  }
  const int64_t successful = tracker.item<int64_t>() + 1;
  if (successful == growth_interval) {
    Tensor grown = s * growth_factor;
    if (grown.isfinite().all().item<bool>()) {
      s.copy_(grown);
    }
    tracker.fill_(0);
  } else {
    tracker.fill_(successful);
  }
  return scale;
}
#endif

}  // namespace
}  // namespace sim_accel

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#if SIM_TORCH_BEFORE(2, 3)
  m.impl("_amp_foreach_non_finite_check_and_unscale_", &sim_accel::amp_foreach_non_finite_check_and_unscale_);
  m.impl("_amp_update_scale_", &sim_accel::amp_update_scale_);
#endif
  using namespace sim_accel;
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("as_strided", &as_strided);
  m.impl("resize_", &resize_);
  m.impl("_reshape_alias", &reshape_alias);
  m.impl("view", &view);
  m.impl("unfold", &unfold);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("_local_scalar_dense", &local_scalar_dense);
  m.impl("record_stream", &record_stream);
  m.impl("set_.source_Tensor", &set_source_tensor);
  m.impl("set_.source_Storage", &set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &set_source_storage_offset);
  m.impl("set_", &set_empty);
  m.impl("convolution_overrideable", &convolution_overrideable);
  m.impl("convolution_backward_overrideable", &convolution_backward_overrideable);
  m.impl("batch_norm_stats", &batch_norm_stats);
  m.impl("batch_norm_gather_stats", &batch_norm_gather_stats);
  m.impl("batch_norm_gather_stats_with_counts", &batch_norm_gather_stats_with_counts);
  m.impl("batch_norm_elemt", &batch_norm_elemt);
  m.impl("batch_norm_backward_reduce", &batch_norm_backward_reduce);
  m.impl("batch_norm_backward_elemt", &batch_norm_backward_elemt);
  m.impl("native_dropout", &native_dropout);
  m.impl("native_batch_norm", &native_batch_norm);
  // Ops whose CompositeExplicitAutogradNonFunctional kernel would win over
  // the fallback and call the CPU out= kernel with a wrongly shaped output.
  m.impl("mse_loss", torch::CppFunction::makeFromBoxedFunction<&sim_accel::fallback>());
  // Ops whose CompositeExplicitAutograd kernel would win over the fallback with other math than the
  // CPU's and CUDA's kernels (torch_npu registers kernels of its own for all three). math_group_norm
  // views its input as (1, N * groups, -1): "view size is not compatible with input tensor's size and
  // stride" on a channels_last or permuted input (torch 2.13-2.14's group_norm no longer makes it
  // contiguous first), and rounds differently from the CPU kernel where it runs.
  m.impl("native_group_norm", torch::CppFunction::makeFromBoxedFunction<&sim_accel::fallback>());
  m.impl("native_layer_norm", torch::CppFunction::makeFromBoxedFunction<&sim_accel::fallback>());
  m.impl("addr", torch::CppFunction::makeFromBoxedFunction<&sim_accel::fallback>());
}

// copy_ of a lazily conjugated (or negated) tensor re-dispatches, on a device torch's copy_ does not know, to
// _copy_from, which has no fallthrough for these keys: their fallback would resolve the bit with clone, whose
// copy_ calls _copy_from again, until the stack overflows (torch.fft.hfft conjugates its input lazily).
// copy_from reads the bits itself, as copy_ does for CPU tensors.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sim_accel::fallback>());
}
