// Shared declarations between runtime.cpp and kernels.cpp.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <optional>
#include <string>
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

// The simulated device's type and dispatch key: PrivateUse1 (a vendor plug-in), or XPU when the xpu stand-in
// makes it torch's own xpu device (xpu.cpp; `_init(count, xpu=True)` before any tensor exists).
c10::DeviceType device_type();
c10::DispatchKey dispatch_key();
inline bool is_sim(const c10::Device& d) { return d.type() == device_type(); }
void install_xpu();  // xpu.cpp

int device_count();
int current_device();

// The device's default generator (index -1: current device).
const at::Generator& default_generator(int index);

// For a generator of the simulated device: the CPU generator it wraps, which
// the CPU kernels run by the fallback accept. nullopt for anything else.
c10::optional<at::Generator> cpu_generator_for(const at::Generator& gen);

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

at::Allocator* device_allocator();

// Memory of the device not from its allocator (ipc.cpp's shared segments): counted as allocated while alive,
// and known to getDeviceFromPtr.
void note_shared_block(int device, void* ptr, size_t size, bool alive);

// ipc.cpp: a device storage moved into a named shared-memory segment (returns its name), and a storage of
// `device` mapping such a segment in another process (a uint8 tensor over it).
std::string share_device_storage(const at::Tensor& tensor);
at::Tensor open_device_storage(const std::string& name, int64_t nbytes, int device);

// A CPU tensor that aliases the memory of a device tensor (same sizes,
// strides, dtype); it keeps the device storage alive. CPU tensors and
// undefined tensors are returned unchanged.
at::Tensor alias_cpu(const at::Tensor& t);

// For a hooks interface of the device (xpu.cpp's, runtime.cpp's PrivateUse1 one).
at::Generator new_generator(int index);
at::Device device_of_pointer(void* data);
bool is_pinned_pointer(const void* data);
at::Allocator* pinned_allocator();
void set_current_device(int index);
int exchange_device(int index);

// A device tensor on `device` (no index: the current device) over the memory of the dense CPU tensor
// `cpu`, without a copy: the device storage keeps the CPU storage alive and its bytes count as the
// device's allocations. For results of CPU kernels that nothing else holds (kernels.cpp, rnn.cpp).
at::Tensor adopt_cpu(const at::Tensor& cpu, c10::Device device);

// A CPU kernel's result as a device tensor: adopted (adopt_cpu) when it is dense and not empty, else
// copied. Undefined stays undefined.
at::Tensor cpu_result_to_device(const at::Tensor& cpu, c10::Device device);

// The boxed fallback's fast path (alias_fallback.cpp): run the operator's CPU kernel on CPU aliases
// of the device tensors (no copies) and hand back device tensors. False, with the stack untouched,
// where it cannot keep the semantics of torch's copying fallback (views, sparse or quantized
// tensors, outputs meant for another device): the caller then copies.
bool run_on_cpu_aliases(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);

}  // namespace sim_accel
