// The boxed fallback's fast path: an operator without a kernel of the device's own runs its CPU
// kernel on CPU tensors that alias the device memory, and its results become device tensors without
// a copy (the device's memory is host memory: runtime.cpp).
//
// torch's at::native::cpu_fallback copies every device input to the CPU, runs the CPU kernel and
// copies the results (and every mutated input) back: a matmul copied its weights on every call, an
// optimizer step every parameter, and an LSTM language model ran 7x slower than on the CPU. Here:
//
// * device tensor arguments (also inside Tensor[] and Tensor?[]) are replaced by CPU aliases with the
//   same sizes, strides and conjugate/negative bits; a device argument by the CPU;
// * the CPU kernel runs (redispatch to the CPU key, as cpu_fallback does), so results, in-place
//   writes, out= writes and overlap checks are the CPU's own, on the very memory of the device tensors;
// * a mutated argument whose metadata the CPU kernel changed (an out= tensor resized) gets the new
//   sizes on the device tensor, or, where the CPU kernel had to reallocate, a resize and copy exactly as
//   cpu_fallback does (_copy_from_and_resize);
// * results: a mutable alias (in-place, out=) returns the original device argument, as cpu_fallback
//   does; a fresh CPU result is adopted by a device tensor (adopt_cpu: no copy, counted on the device);
//   a result sharing an aliased argument's memory becomes a device tensor over that same memory.
//
// Left to the copying fallback (run_on_cpu_aliases returns false before touching the stack): view
// operators (cpu_fallback warns and copies; the device's real view kernels are in kernels.cpp), sparse,
// quantized or other non-strided device tensors, and operators whose results cpu_fallback would leave on
// the CPU (no device tensor or device argument picks the device).

#include "sim_accel.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/intrusive_ptr.h>

#include <vector>

namespace sim_accel {
namespace {

using at::Tensor;

// The device storage stays alive as long as the CPU alias uses its memory.
void release_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// A CPU tensor over the memory of the dense device tensor `t`. For a mutated argument the alias storage
// is resizable with the CPU allocator: a CPU kernel that must grow an out= tensor then reallocates the
// alias (the device memory is left alone) and the caller copies back, as cpu_fallback does.
Tensor cpu_alias(const Tensor& t, bool mutated) {
  if (t.numel() == 0 || t.data_ptr() == nullptr) {
    Tensor empty = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
    return empty;
  }
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(impl);
  const size_t nbytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.dtype().itemsize());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), nbytes,
      c10::DataPtr(t.data_ptr(), impl, &release_storage, c10::Device(c10::DeviceType::CPU)),
      mutated ? c10::GetCPUAllocator() : nullptr, /*resizable=*/mutated);
  Tensor cpu = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  cpu.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  if (t.is_conj()) {
    cpu._set_conj(true);
  }
  if (t.is_neg()) {
    cpu._set_neg(true);
  }
  return cpu;
}

bool aliasable(const Tensor& t) {
  return !t.defined() || !is_sim(t.device()) ||
      (t.layout() == c10::Layout::Strided && !t.is_quantized());
}

// A Tensor, Tensor?, Tensor[] or Tensor?[] return.
bool holds_tensors(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  for (int unwrap = 0; unwrap < 3; ++unwrap) {
    if (t->kind() == c10::OptionalType::Kind) {
      t = t->expectRef<c10::OptionalType>().getElementType();
    } else if (t->kind() == c10::ListType::Kind) {
      t = t->expectRef<c10::ListType>().getElementType();
    }
  }
  return t->kind() == c10::TensorType::Kind;
}

bool writes(const c10::Argument& a) {
  return a.alias_info() != nullptr && a.alias_info()->isWrite();
}

// One device tensor argument and its CPU alias.
struct Aliased {
  Tensor device;
  Tensor cpu;
  void* base;  // the device memory the alias began at
  bool mutated;
};

// The device tensor's metadata and memory after the CPU kernel changed its alias's (an out= resize).
void reconcile(const Aliased& a) {
  const Tensor& cpu = a.cpu;
  const Tensor& dev = a.device;
  const bool same_memory = a.base != nullptr && cpu.storage().data() == a.base;
  if (same_memory && cpu.storage_offset() == 0 && cpu.sizes().equals(dev.sizes()) &&
      cpu.strides().equals(dev.strides())) {
    return;  // the usual case: written in place
  }
  if (same_memory) {  // new sizes within the memory it had (resize_ to fewer or as many bytes)
    dev.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides());
    dev.unsafeGetTensorImpl()->set_storage_offset(dev.storage_offset() + cpu.storage_offset());
    return;
  }
  at::_copy_from_and_resize(cpu, const_cast<Tensor&>(dev));
}

c10::Device device_or_current(const c10::Device& d) {
  return d.has_index() ? d
                       : c10::Device(device_type(), static_cast<c10::DeviceIndex>(current_device()));
}

// The device tensor a CPU result becomes.
class Results {
 public:
  Results(const std::vector<Aliased>& aliased, const std::vector<const c10::StorageImpl*>& cpu_inputs,
          c10::Device device)
      : aliased_(aliased), cpu_inputs_(cpu_inputs), device_(device) {}

  Tensor to_device(const Tensor& cpu) {
    if (!cpu.defined() || !cpu.device().is_cpu()) {
      return cpu;
    }
    if (cpu.layout() != c10::Layout::Strided || cpu.is_quantized() || cpu.numel() == 0 ||
        cpu.storage().data() == nullptr) {
      return cpu.to(device_);
    }
    const c10::StorageImpl* impl = cpu.storage().unsafeGetStorageImpl();
    for (const Aliased& a : aliased_) {
      if (a.cpu.storage().unsafeGetStorageImpl() == impl) {
        if (impl->data_ptr().get() != a.base) {
          break;  // the alias was reallocated: host memory of its own (copied below)
        }
        return over_device_memory(cpu, a.device);
      }
    }
    for (const c10::StorageImpl* input : cpu_inputs_) {
      if (input == impl) {
        return cpu.to(device_);  // a CPU argument's memory: the device gets a copy, as with cpu_fallback
      }
    }
    for (const auto& done : adopted_) {
      if (done.first == impl) {  // another result over the same fresh memory: share it on the device too
        return with_metadata(c10::Storage(done.second), cpu, 0, cpu.storage_offset());
      }
    }
    Tensor out = adopt_cpu(cpu, device_);
    adopted_.emplace_back(impl, out.storage());
    return with_math_bits(out, cpu);
  }

 private:
  static Tensor with_math_bits(Tensor out, const Tensor& cpu) {
    if (cpu.is_conj()) {
      out._set_conj(true);
    }
    if (cpu.is_neg()) {
      out._set_neg(true);
    }
    return out;
  }

  static Tensor with_metadata(c10::Storage storage, const Tensor& cpu, int64_t base_bytes, int64_t offset) {
    Tensor out = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(dispatch_key()), cpu.dtype());
    out.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides());
    out.unsafeGetTensorImpl()->set_storage_offset(base_bytes / static_cast<int64_t>(cpu.dtype().itemsize()) + offset);
    return with_math_bits(out, cpu);
  }

  // A result of the CPU kernel that shares the memory of an aliased device argument (a kernel that
  // returned its input): on the CPU it would alias that input, so on the device it does too.
  Tensor over_device_memory(const Tensor& cpu, const Tensor& dev) const {
    const int64_t item = static_cast<int64_t>(cpu.dtype().itemsize());
    const int64_t base_bytes = dev.storage_offset() * static_cast<int64_t>(dev.dtype().itemsize());
    if (base_bytes % item != 0) {
      return cpu.to(device_);
    }
    return with_metadata(dev.storage(), cpu, base_bytes, cpu.storage_offset());
  }

  const std::vector<Aliased>& aliased_;
  const std::vector<const c10::StorageImpl*>& cpu_inputs_;
  c10::Device device_;
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> adopted_;
};

}  // namespace

bool run_on_cpu_aliases(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  for (const auto& r : schema.returns()) {
    if (r.alias_info() != nullptr && !r.alias_info()->isWrite()) {
      return false;  // a view operator
    }
  }
  const auto& args = schema.arguments();
  const size_t begin = stack->size() - args.size();

  // Where results go, as cpu_fallback decides: a device argument, else the first tensor argument's
  // device, else the first tensor of a Tensor[] argument. Anything but this device: the copying path.
  c10::optional<c10::Device> target;
  c10::optional<c10::Device> first_tensor;
  c10::optional<c10::Device> first_listed;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[begin + i];
    if (v.isTensor()) {
      const Tensor& t = v.toTensor();
      if (!aliasable(t)) {
        return false;
      }
      if (!first_tensor.has_value() && t.defined()) {
        first_tensor = t.device();
      }
    } else if (v.isTensorList()) {
      for (const Tensor& t : v.toTensorList()) {
        if (!aliasable(t)) {
          return false;
        }
        if (!first_listed.has_value() && t.defined()) {
          first_listed = t.device();
        }
      }
    } else if (v.isOptionalTensorList()) {
      for (const c10::optional<Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value() && !aliasable(*t)) {
          return false;
        }
      }
    } else if (v.isDevice()) {
      target = v.toDevice();
    }
  }
  if (!target.has_value()) {
    target = first_tensor.has_value() ? first_tensor : first_listed;
  }
  bool fresh_results = false;  // returns that are not an argument written in place
  for (const auto& r : schema.returns()) {
    fresh_results = fresh_results || (r.alias_info() == nullptr && holds_tensors(r.type()));
  }
  if (fresh_results && (!target.has_value() || !is_sim(*target))) {
    return false;  // cpu_fallback would leave them on the CPU (e.g. mul.out with a CPU scalar first)
  }
  const c10::Device device = target.has_value() && is_sim(*target)
      ? device_or_current(*target)
      : c10::Device(device_type(), static_cast<c10::DeviceIndex>(current_device()));

  // The arguments as the CPU kernel sees them.
  std::vector<Aliased> aliased;
  std::vector<const c10::StorageImpl*> cpu_inputs;
  std::vector<c10::IValue> originals(args.size());
  auto to_cpu = [&](const Tensor& t, bool mutated) -> Tensor {
    if (!t.defined() || !is_sim(t.device())) {
      if (t.defined() && t.layout() == c10::Layout::Strided && t.has_storage()) {
        cpu_inputs.push_back(t.storage().unsafeGetStorageImpl());
      }
      return t;
    }
    Tensor cpu = cpu_alias(t, mutated);
    aliased.push_back({t, cpu, cpu.numel() == 0 ? nullptr : t.data_ptr(), mutated});
    return cpu;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& v = (*stack)[begin + i];
    const bool mutated = writes(args[i]);
    if (v.isTensor()) {
      originals[i] = v;
      v = c10::IValue(to_cpu(v.toTensor(), mutated));
    } else if (v.isTensorList()) {
      originals[i] = v;
      std::vector<Tensor> cpu;
      for (const Tensor& t : v.toTensorList()) {
        cpu.push_back(to_cpu(t, mutated));
      }
      v = c10::IValue(c10::List<Tensor>(std::move(cpu)));
    } else if (v.isOptionalTensorList()) {
      originals[i] = v;
      c10::List<c10::optional<Tensor>> cpu;
      for (const c10::optional<Tensor>& t : v.toOptionalTensorList()) {
        cpu.push_back(t.has_value() ? c10::optional<Tensor>(to_cpu(*t, mutated)) : c10::nullopt);
      }
      v = c10::IValue(std::move(cpu));
    } else if (v.isDevice() && is_sim(v.toDevice())) {
      v = c10::IValue(c10::Device(c10::DeviceType::CPU));
    }
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  for (const Aliased& a : aliased) {
    if (a.mutated) {
      reconcile(a);
    }
  }
  const auto& returns = schema.returns();
  const size_t rbegin = stack->size() - returns.size();
  Results results(aliased, cpu_inputs, device);
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& v = (*stack)[rbegin + r];
    const c10::AliasInfo* info = returns[r].alias_info();
    if (info != nullptr) {  // a mutable alias (views were refused above): the argument it aliases
      bool found = false;
      for (size_t i = 0; i < args.size() && !found; ++i) {
        const c10::AliasInfo* arg_info = args[i].alias_info();
        if (arg_info != nullptr && *arg_info == *info && !originals[i].isNone()) {
          v = originals[i];
          found = true;
        }
      }
      TORCH_CHECK(found, "The operator ", schema.operator_name(),
                  " appears to have invalid alias information: no argument for its return ", returns[r]);
    } else if (v.isTensor()) {
      v = c10::IValue(results.to_device(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<Tensor> out;
      for (const Tensor& t : v.toTensorList()) {
        out.push_back(results.to_device(t));
      }
      v = c10::IValue(c10::List<Tensor>(std::move(out)));
    }
  }
  return true;
}

}  // namespace sim_accel
