// Shared declarations between runtime.cpp and kernels.cpp.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <optional>

namespace sim_accel {

constexpr int kMaxDevices = 16;

int device_count();
int current_device();

// The device's default generator (index -1: current device).
const at::Generator& default_generator(int index);

// For a generator of the simulated device: the CPU generator it wraps, which
// the CPU kernels run by the fallback accept. nullopt for anything else.
std::optional<at::Generator> cpu_generator_for(const at::Generator& gen);

void resize_storage_bytes(const c10::Storage& storage, size_t newsize);

at::Allocator* device_allocator();

// A CPU tensor that aliases the memory of a device tensor (same sizes,
// strides, dtype); it keeps the device storage alive. CPU tensors and
// undefined tensors are returned unchanged.
at::Tensor alias_cpu(const at::Tensor& t);

}  // namespace sim_accel
