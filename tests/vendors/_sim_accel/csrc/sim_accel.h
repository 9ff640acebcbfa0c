// Shared declarations between runtime.cpp and kernels.cpp.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <optional>
#include <torch/version.h>

// Old torch (tests/vendors/README.md, "Old torch"): what differs is guarded here or where it is used.
#define SIM_TORCH_BEFORE(major, minor) \
  (TORCH_VERSION_MAJOR < (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR < (minor)))

// torch < 2.3: c10::Allocator::allocate is const (and has no copy_data).
#if SIM_TORCH_BEFORE(2, 3)
#define SIM_ALLOCATE_CONST const
#else
#define SIM_ALLOCATE_CONST
#endif

// torch < 2.2?: convolution_overrideable and its backward take int[] / int, not SymInt[] / SymInt.
#if SIM_TORCH_BEFORE(2, 2)
using ConvInts = c10::IntArrayRef;
using ConvInt = int64_t;
#else
using ConvInts = c10::SymIntArrayRef;
using ConvInt = c10::SymInt;
#endif

namespace sim_accel {

inline c10::IntArrayRef concrete(c10::IntArrayRef a) { return a; }
inline c10::IntArrayRef concrete(c10::SymIntArrayRef a) { return C10_AS_INTARRAYREF_SLOW(a); }
inline int64_t concrete(int64_t v) { return v; }
inline int64_t concrete(const c10::SymInt& v) { return v.guard_int(__FILE__, __LINE__); }

constexpr int kMaxDevices = 16;

int device_count();
int current_device();

// The device's default generator (index -1: current device).
const at::Generator& default_generator(int index);

// For a generator of the simulated device: the CPU generator it wraps, which
// the CPU kernels run by the fallback accept. nullopt for anything else.
c10::optional<at::Generator> cpu_generator_for(const at::Generator& gen);

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

at::Allocator* device_allocator();

// A CPU tensor that aliases the memory of a device tensor (same sizes,
// strides, dtype); it keeps the device storage alive. CPU tensors and
// undefined tensors are returned unchanged.
at::Tensor alias_cpu(const at::Tensor& t);

}  // namespace sim_accel
