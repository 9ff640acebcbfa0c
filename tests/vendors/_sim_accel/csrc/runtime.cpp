// Simulated accelerator runtime for the test-only vendor stand-ins
// (torch_npu / torch_sdaa / torch_gcu under tests/vendors).
//
// Everything a real PrivateUse1 backend registers at the C++ level, backed by
// host memory:
//   * a per-device caching allocator that counts real bytes per device and
//     remembers which device indices ever held storage,
//   * a DeviceGuardImplInterface (thread-local current device and stream,
//     timing events based on the host's steady clock),
//   * a PrivateUse1HooksInterface (availability, default generators, pinned
//     host memory, resize of storages),
//   * one generator per device that wraps a CPU generator, so random kernels
//     run by the CPU fallback draw from the device's own stream.
// The aten kernels live in kernels.cpp; the Python bindings at the bottom.

#include "sim_accel.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/_pin_memory_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/is_pinned_ops.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Generator.h>
#if SIM_TORCH_BEFORE(2, 4)
#include <ATen/autocast_mode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#endif
#include <torch/csrc/utils/pybind.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sim_accel {

namespace {

std::atomic<int> g_device_count{0};
// PrivateUse1, or XPU for the xpu stand-in (xpu.cpp): set by _init before any tensor of the device exists.
c10::DeviceType g_type = c10::DeviceType::PrivateUse1;
c10::DispatchKey g_key = c10::DispatchKey::PrivateUse1;
std::atomic<bool> g_device_explicitly_set{false};
thread_local int tls_device = 0;
thread_local std::array<int64_t, kMaxDevices> tls_stream{};  // 0 = default

void check_index(int index) {
  TORCH_CHECK(
      index >= 0 && index < g_device_count.load(),
      "Invalid device index ", index, ": the simulated accelerator has ",
      g_device_count.load(), " device(s) (SIM_ACCEL_DEVICE_COUNT)");
}

// Interface methods that may not throw (noexcept) get an index no one checked: they use it only
// when it names an installed device, never as an array index otherwise.
bool valid_index(int index) {
  return index >= 0 && index < g_device_count.load();
}

// ---------------------------------------------------------------- allocator

constexpr size_t kRound = 512;

struct Block {
  void* ptr;
  size_t size;  // rounded size
  int device;
};

struct DeviceCounters {
  int64_t allocated_current = 0;
  int64_t allocated_peak = 0;
  int64_t allocated_total = 0;  // cumulative bytes handed out
  int64_t freed_total = 0;
  int64_t reserved_current = 0;
  int64_t reserved_peak = 0;
  int64_t alloc_count_current = 0;
  int64_t alloc_count_total = 0;
  int64_t free_count_total = 0;
  int64_t segment_count = 0;
  std::unordered_multimap<size_t, void*> cache;  // size -> free block

  // Reserved bytes grow or shrink (g_alloc_mutex held).
  void reserved(int64_t size) {
    reserved_current += size;
    reserved_peak = std::max(reserved_peak, reserved_current);
  }
};

std::mutex g_alloc_mutex;
std::array<DeviceCounters, kMaxDevices> g_counters;
std::array<std::atomic<bool>, kMaxDevices> g_device_used{};
std::unordered_map<void*, int> g_live;  // ptr -> device

void free_block(void* ctx);

// The statistics of a block coming to life or freed (the caller holds g_alloc_mutex).
void count_alloc(int dev, void* ptr, size_t size) {
  auto& c = g_counters[dev];
  c.allocated_current += size;
  c.allocated_peak = std::max(c.allocated_peak, c.allocated_current);
  c.allocated_total += size;
  c.alloc_count_current += 1;
  c.alloc_count_total += 1;
  g_live[ptr] = dev;
}

void count_free(int dev, void* ptr, size_t size) {
  auto& c = g_counters[dev];
  c.allocated_current -= size;
  c.freed_total += size;
  c.alloc_count_current -= 1;
  c.free_count_total += 1;
  g_live.erase(ptr);
}

struct SimAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) SIM_ALLOCATE_CONST override {
    const int dev = tls_device;
    check_index(dev);
    const c10::Device device(g_type, dev);
    if (nbytes == 0) {
      return {nullptr, nullptr, &free_block, device};
    }
    const size_t size = ((nbytes + kRound - 1) / kRound) * kRound;
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_alloc_mutex);
      auto& c = g_counters[dev];
      auto it = c.cache.find(size);
      if (it != c.cache.end()) {
        ptr = it->second;
        c.cache.erase(it);
      }
    }
    if (ptr == nullptr) {
      if (posix_memalign(&ptr, 64, size) != 0 || ptr == nullptr) {
        TORCH_CHECK_WITH(
            OutOfMemoryError, false,
            "simulated device ", dev, ": out of host memory trying to allocate ",
            size, " bytes");
      }
      std::lock_guard<std::mutex> lock(g_alloc_mutex);
      auto& c = g_counters[dev];
      c.reserved(size);
      c.segment_count += 1;
    }
    auto* block = new Block{ptr, size, dev};
    {
      std::lock_guard<std::mutex> lock(g_alloc_mutex);
      count_alloc(dev, ptr, size);
    }
    g_device_used[dev].store(true);
    return {ptr, block, &free_block, device};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const {  // virtual since torch 2.3
    std::memcpy(dest, src, count);
  }
};

void free_block(void* ctx) {
  if (ctx == nullptr) {
    return;
  }
  auto* block = static_cast<Block*>(ctx);
  {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    count_free(block->device, block->ptr, block->size);
    g_counters[block->device].cache.emplace(block->size, block->ptr);
  }
  delete block;
}

SimAllocator g_allocator;

// Pinned ("page-locked") host memory: ordinary host memory, remembered so
// that is_pinned() answers truthfully.
std::mutex g_pinned_mutex;
std::unordered_set<void*> g_pinned;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  free(ptr);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) SIM_ALLOCATE_CONST override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      TORCH_CHECK(
          posix_memalign(&ptr, 64, nbytes) == 0 && ptr != nullptr,
          "pinned host allocation of ", nbytes, " bytes failed");
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const {  // virtual since torch 2.3
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// ---------------------------------------------------------------- generator

class SimGenerator final : public c10::GeneratorImpl {
 public:
  SimGenerator(c10::DeviceIndex index, uint64_t seed)
      : c10::GeneratorImpl(
            c10::Device(g_type, index),
            c10::DispatchKeySet(g_key)),
        inner_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  SimGenerator(c10::DeviceIndex index, at::Generator inner)
      : c10::GeneratorImpl(
            c10::Device(g_type, index),
            c10::DispatchKeySet(g_key)),
        inner_(std::move(inner)) {}

  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    inner_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    inner_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    return inner_.get_offset();
  }
  uint64_t current_seed() const override {
    return inner_.current_seed();
  }
  uint64_t seed() override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    return inner_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    inner_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    return inner_.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() {
    return g_type;
  }
  const at::Generator& inner() const {
    return inner_;
  }

 private:
  SimGenerator* clone_impl() const override {
    std::lock_guard<std::mutex> lock(inner_.mutex());
    return new SimGenerator(device().index(), inner_.clone());
  }
  mutable at::Generator inner_;
};

std::once_flag g_generators_once;
std::vector<at::Generator> g_default_generators;

void init_generators() {
  std::call_once(g_generators_once, [] {
    const int n = std::max(g_device_count.load(), 1);
    for (int i = 0; i < n; ++i) {
      g_default_generators.push_back(at::make_generator<SimGenerator>(
          static_cast<c10::DeviceIndex>(i), c10::detail::getNonDeterministicRandom()));
    }
  });
}

// ---------------------------------------------------------------- events

struct SimEvent {
  std::chrono::steady_clock::time_point when;
  bool timing;
  bool recorded = false;
};

std::atomic<int64_t> g_next_stream{1};

// ---------------------------------------------------------------- guard

struct SimGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  // PrivateUse1 (registered below), or XPU (xpu.cpp registers a second instance for the xpu stand-in).
  c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  SimGuardImpl() = default;
  explicit SimGuardImpl(c10::DeviceType t) : static_type(t) {
    TORCH_CHECK(t == c10::DeviceType::PrivateUse1 || t == c10::DeviceType::XPU);
  }
  c10::DeviceType type() const override {
    return static_type;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == static_type, "expected a ", static_type, " device, got ", d);
    const int old = tls_device;
    if (d.index() >= 0) {
      check_index(d.index());
      tls_device = d.index();
    }
    return c10::Device(static_type, static_cast<c10::DeviceIndex>(old));
  }
  c10::Device getDevice() const override {
    return c10::Device(static_type, static_cast<c10::DeviceIndex>(tls_device));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == static_type, "expected a ", static_type, " device, got ", d);
    if (d.index() >= 0) {
      check_index(d.index());
      tls_device = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_device_count.load()) {
      tls_device = d.index();
    }
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    const int idx = d.index() >= 0 ? d.index() : tls_device;
    return c10::Stream(
        c10::Stream::UNSAFE, c10::Device(static_type, static_cast<c10::DeviceIndex>(idx)),
        valid_index(idx) ? tls_stream[idx] : 0);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    const int idx = d.index() >= 0 ? d.index() : tls_device;
    return c10::Stream(
        c10::Stream::UNSAFE, c10::Device(static_type, static_cast<c10::DeviceIndex>(idx)), 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const {
    const int idx = d.index() >= 0 ? d.index() : tls_device;
    check_index(idx);
    return c10::Stream(
        c10::Stream::UNSAFE, c10::Device(static_type, static_cast<c10::DeviceIndex>(idx)),
        g_next_stream.fetch_add(1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false)
      const override {
    return getNewStream(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const int idx = s.device_index() >= 0 ? s.device_index() : tls_device;
    if (!valid_index(idx)) {
      return c10::Stream(c10::Stream::UNSAFE, c10::Device(static_type, static_cast<c10::DeviceIndex>(idx)), 0);
    }
    const int64_t old = tls_stream[idx];
    tls_stream[idx] = s.id();
    return c10::Stream(
        c10::Stream::UNSAFE, c10::Device(static_type, static_cast<c10::DeviceIndex>(idx)), old);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }

  // Work on the simulated device is synchronous, so events and streams are
  // always complete; timing events record the host's steady clock.
  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ", device_index,
        " does not match recording stream's device index ",
        stream.device_index(), ".");
    auto* ev = static_cast<SimEvent*>(*event);
    if (ev == nullptr) {
      ev = new SimEvent{{}, flag == c10::EventFlag::BACKEND_DEFAULT};
      *event = ev;
    }
    ev->when = std::chrono::steady_clock::now();
    ev->recorded = true;
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index)
      const noexcept override {
    delete static_cast<SimEvent*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {}
  void synchronizeEvent(void* event) const {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  // getNewStream, synchronizeEvent, elapsedTime (torch >= 2.2?) and synchronizeDevice (torch >= 2.6?)
  // are not in every torch's interface: no `override`, so older torch compiles them as plain members.
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex device_index)
      const {
    TORCH_CHECK(
        event1 != nullptr && event2 != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    auto* a = static_cast<SimEvent*>(event1);
    auto* b = static_cast<SimEvent*>(event2);
    TORCH_CHECK(
        a->timing && b->timing,
        "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(b->when - a->when).count();
  }
};

// ---------------------------------------------------------------- hooks

// The hooks interface grew from two methods (torch 2.1) to the accelerator
// hooks of torch 2.13; methods an older torch lacks are plain members there,
// so only getDeviceFromPtr (in every version) is marked `override`.
struct SimHooks final : public at::PrivateUse1HooksInterface {
  void init() const {
    init_generators();
  }
  bool isBuilt() const {
    return true;
  }
  bool isAvailable() const {
    return g_device_count.load() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const {
    return valid_index(device_index);
  }
  c10::DeviceIndex deviceCount() const {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(c10::DeviceIndex device) const {
    check_index(device);
    tls_device = device;
    g_device_explicitly_set.store(true);
  }
  c10::DeviceIndex getCurrentDevice() const {
    return static_cast<c10::DeviceIndex>(tls_device);
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const {
    const int old = tls_device;
    if (device >= 0) {
      check_index(device);
      tls_device = device;
    }
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const {
    if (device < 0 || device >= g_device_count.load()) {
      return static_cast<c10::DeviceIndex>(tls_device);
    }
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const {
    return default_generator(device_index);
  }
  // torch < 2.5: the virtual getDefaultGenerator is non-const.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) {
    return default_generator(device_index);
  }
  // torch 2.2-2.x: initPrivateUse1 instead of init.
  void initPrivateUse1() const {
    init_generators();
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const {
    const int idx = device_index >= 0 ? device_index : tls_device;
    check_index(idx);
    return at::make_generator<SimGenerator>(
        static_cast<c10::DeviceIndex>(idx), c10::default_rng_seed_val);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    auto it = g_live.find(data);
    TORCH_CHECK(it != g_live.end(), "pointer was not allocated on the simulated device");
    return at::Device(g_type, static_cast<c10::DeviceIndex>(it->second));
  }
  bool isPinnedPtr(const void* data) const {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(const_cast<void*>(data)) > 0;
  }
  at::Allocator* getPinnedMemoryAllocator() const {
    return &g_pinned_allocator;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
    resize_storage_bytes(storage, newsize);
  }
};

}  // namespace

// ---------------------------------------------------------------- shared API

int device_count() {
  return g_device_count.load();
}

int current_device() {
  return tls_device;
}

const at::Generator& default_generator(int index) {
  init_generators();
  const int idx = index >= 0 ? index : tls_device;
  check_index(idx);
  return g_default_generators[idx];
}

c10::optional<at::Generator> cpu_generator_for(const at::Generator& gen) {
  if (!gen.defined()) {
    return c10::nullopt;
  }
  if (is_sim(gen.device())) {
    return gen.get<SimGenerator>()->inner();
  }
  return c10::nullopt;
}

void resize_storage_bytes(const c10::Storage& storage, size_t newsize) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  const auto device = storage.device();
  c10::DeviceGuard guard(device);
  auto* impl = storage.unsafeGetStorageImpl();
  at::DataPtr new_data = g_allocator.allocate(newsize);
  const size_t copy = std::min(newsize, storage.nbytes());
  if (copy > 0 && storage.data() != nullptr) {
    std::memcpy(new_data.get(), storage.data(), copy);
  }
  impl->set_data_ptr_noswap(std::move(new_data));
  impl->set_nbytes(newsize);
}

at::Allocator* device_allocator() {
  return &g_allocator;
}

c10::DeviceType device_type() {
  return g_type;
}

c10::DispatchKey dispatch_key() {
  return g_key;
}

at::Generator new_generator(int index) {
  const int idx = index >= 0 ? index : tls_device;
  check_index(idx);
  return at::make_generator<SimGenerator>(static_cast<c10::DeviceIndex>(idx), c10::default_rng_seed_val);
}

at::Device device_of_pointer(void* data) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  auto it = g_live.find(data);
  TORCH_CHECK(it != g_live.end(), "pointer was not allocated on the simulated device");
  return at::Device(g_type, static_cast<c10::DeviceIndex>(it->second));
}

bool is_pinned_pointer(const void* data) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(const_cast<void*>(data)) > 0;
}

at::Allocator* pinned_allocator() {
  return &g_pinned_allocator;
}

void set_current_device(int index) {
  check_index(index);
  tls_device = index;
  g_device_explicitly_set.store(true);
}

int exchange_device(int index) {
  const int old = tls_device;
  if (index >= 0) {
    check_index(index);
    tls_device = index;
  }
  return old;
}

namespace {

// Host memory a CPU kernel allocated, handed to a device tensor without a copy (adopt_cpu): the CPU
// storage stays alive until the device storage lets go of it, and the bytes count for the device
// like a block of its own allocator (allocated/reserved, used indices, getDeviceFromPtr).
struct AdoptedBlock {
  c10::StorageImpl* cpu;  // one reference held
  void* ptr;
  size_t size;  // rounded like the allocator's blocks
  int device;
};

void free_adopted(void* ctx) {
  auto* block = static_cast<AdoptedBlock*>(ctx);
  {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    count_free(block->device, block->ptr, block->size);
    // not cached: the CPU allocator takes it back
    g_counters[block->device].reserved(-static_cast<int64_t>(block->size));
  }
  c10::raw::intrusive_ptr::decref(block->cpu);
  delete block;
}

}  // namespace

at::Tensor adopt_cpu(const at::Tensor& cpu, c10::Device device) {
  const int dev = device.has_index() ? device.index() : tls_device;
  check_index(dev);
  const c10::Storage& source = cpu.storage();
  c10::StorageImpl* impl = source.unsafeGetStorageImpl();
  void* ptr = impl->data_ptr().get();
  const size_t nbytes = impl->nbytes();
  const size_t size = ((nbytes + kRound - 1) / kRound) * kRound;
  c10::raw::intrusive_ptr::incref(impl);
  auto* block = new AdoptedBlock{impl, ptr, size, dev};
  {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    count_alloc(dev, ptr, size);
    g_counters[dev].reserved(size);
  }
  g_device_used[dev].store(true);
  const c10::Device target(g_type, static_cast<c10::DeviceIndex>(dev));
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), nbytes, c10::DataPtr(ptr, block, &free_adopted, target),
      &g_allocator, /*resizable=*/true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(g_key), cpu.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides());
  out.unsafeGetTensorImpl()->set_storage_offset(cpu.storage_offset());
  return out;
}

void note_shared_block(int device, void* ptr, size_t size, bool alive) {
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  if (alive) {
    count_alloc(device, ptr, size);
    g_device_used[device].store(true);
  } else {
    count_free(device, ptr, size);
  }
}

at::Tensor alias_cpu(const at::Tensor& t) {
  if (!t.defined() || !is_sim(t.device())) {
    return t;
  }
  if (t.numel() == 0 || t.data_ptr() == nullptr) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  }
  c10::Storage keep = t.storage();
  return at::from_blob(
      t.data_ptr(), t.sizes(), t.strides(),
      [keep](void*) mutable { keep = c10::Storage(); },
      t.options().device(at::kCPU));
}

at::Tensor cpu_result_to_device(const at::Tensor& cpu, c10::Device device) {
  if (!cpu.defined()) {
    return cpu;
  }
  if (cpu.device().is_cpu() && cpu.layout() == c10::Layout::Strided && !cpu.is_quantized() &&
      !cpu.is_conj() && !cpu.is_neg() && cpu.numel() > 0 && cpu.storage().data() != nullptr) {
    return adopt_cpu(cpu, device);
  }
  return cpu.to(device);
}

namespace {

// ---------------------------------------------------------------- bindings

void py_init(int count, bool xpu) {
  TORCH_CHECK(count >= 0 && count <= kMaxDevices, "device count must be in [0, ", kMaxDevices, "]");
  if (xpu && g_type != c10::DeviceType::XPU) {
    g_type = c10::DeviceType::XPU;
    g_key = c10::DispatchKey::XPU;
    install_xpu();
  }
  int expected = 0;
  if (!g_device_count.compare_exchange_strong(expected, count)) {
    TORCH_CHECK(expected == count, "simulated accelerator already initialised with ", expected, " devices");
  }
  init_generators();
}

void py_set_device(int index) {
  check_index(index);
  tls_device = index;
  g_device_explicitly_set.store(true);
}

py::dict py_memory_counters(int index) {
  const int idx = index >= 0 ? index : tls_device;
  check_index(idx);
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  const auto& c = g_counters[idx];
  int64_t cached = 0;
  for (const auto& kv : c.cache) {
    cached += static_cast<int64_t>(kv.first);
  }
  py::dict d;
  d["allocated_current"] = c.allocated_current;
  d["allocated_peak"] = c.allocated_peak;
  d["allocated_total"] = c.allocated_total;
  d["freed_total"] = c.freed_total;
  d["reserved_current"] = c.reserved_current;
  d["reserved_peak"] = c.reserved_peak;
  d["alloc_count_current"] = c.alloc_count_current;
  d["alloc_count_total"] = c.alloc_count_total;
  d["free_count_total"] = c.free_count_total;
  d["segment_count"] = c.segment_count;
  d["cached_bytes"] = cached;
  d["cached_blocks"] = static_cast<int64_t>(c.cache.size());
  return d;
}

void py_reset_peak(int index) {
  const int idx = index >= 0 ? index : tls_device;
  check_index(idx);
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  auto& c = g_counters[idx];
  c.allocated_peak = c.allocated_current;
  c.reserved_peak = c.reserved_current;
}

void py_reset_accumulated(int index) {
  const int idx = index >= 0 ? index : tls_device;
  check_index(idx);
  std::lock_guard<std::mutex> lock(g_alloc_mutex);
  auto& c = g_counters[idx];
  c.allocated_total = 0;
  c.freed_total = 0;
  c.alloc_count_total = 0;
  c.free_count_total = 0;
}

void py_empty_cache() {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(g_alloc_mutex);
    for (auto& c : g_counters) {
      for (const auto& kv : c.cache) {
        to_free.push_back(kv.second);
        c.reserved_current -= static_cast<int64_t>(kv.first);
        c.segment_count -= 1;
      }
      c.cache.clear();
    }
  }
  for (void* p : to_free) {
    free(p);
  }
}

std::vector<int> py_used_devices() {
  std::vector<int> out;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (g_device_used[i].load()) {
      out.push_back(i);
    }
  }
  return out;
}

py::object py_default_generator(int index) {
  const at::Generator& gen = default_generator(index);
  PyObject* obj = THPGenerator_initDefaultGenerator(gen);
  if (obj == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(obj);
}

}  // namespace

c10::impl::DeviceGuardImplInterface* new_guard(c10::DeviceType type) {
  return new SimGuardImpl(type);
}

}  // namespace sim_accel

C10_REGISTER_GUARD_IMPL(PrivateUse1, sim_accel::SimGuardImpl);

#if SIM_TORCH_BEFORE(2, 5)
// torch < 2.5 pins for CUDA when no device is named (and < 2.3 has no pinned-memory hooks); like
// torch_npu on 2.1 (csrc/aten/PinMemory.cpp), the stand-in overrides BackendSelect's
// is_pinned/_pin_memory and pins for its own device by default.
namespace {
bool pins_for_us(const c10::optional<at::Device>& device) {
  return !device.has_value() || device->is_privateuseone();
}

bool sim_is_pinned(const at::Tensor& self, c10::optional<at::Device> device) {
  if (!pins_for_us(device)) {
    auto keys = c10::DispatchKeySet(c10::computeDispatchKey(c10::nullopt, self.layout(), *device));
    return at::_ops::is_pinned::redispatch(keys, self, device);
  }
  if (!self.is_cpu()) {
    return false;
  }
  std::lock_guard<std::mutex> lock(sim_accel::g_pinned_mutex);
  return sim_accel::g_pinned.count(self.storage().data_ptr().get()) > 0;
}

at::Tensor sim_pin_memory(const at::Tensor& self, c10::optional<at::Device> device) {
  if (!pins_for_us(device)) {
    auto keys = c10::DispatchKeySet(c10::computeDispatchKey(c10::nullopt, self.layout(), *device));
    return at::_ops::_pin_memory::redispatch(keys, self, device);
  }
  TORCH_CHECK(self.is_cpu(), "cannot pin '", self.toString(), "' only dense CPU tensors can be pinned");
  auto nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, &sim_accel::g_pinned_allocator, false);
  auto pinned = at::empty({0}, self.options()).set_(storage, 0, self.sizes(), self.strides());
  pinned.copy_(self);
  return pinned;
}

struct SilentWarnings final : public c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// Registered like TORCH_LIBRARY_IMPL, but without torch's "overwrote a previously registered
// kernel" warning on stderr at every import (the override is intended).
struct PinRegistrar {
  PinRegistrar() {
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard guard(&silent);
    library = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect, __FILE__, __LINE__);
    library->impl("is_pinned", TORCH_FN(sim_is_pinned));
    library->impl("_pin_memory", TORCH_FN(sim_pin_memory));
  }
  std::unique_ptr<torch::Library> library;
};
PinRegistrar g_pin_registrar;
}  // namespace
#endif

namespace {
struct Registrar {
  Registrar() {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &sim_accel::g_allocator);
    at::RegisterPrivateUse1HooksInterface(new sim_accel::SimHooks());
  }
};
Registrar g_registrar;
}  // namespace

namespace sim_accel {
void bind_backend(pybind11::module& m);  // backend.cpp: the collective backend's C++ half
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace sim_accel;
  bind_backend(m);
  m.def("_init", &py_init, py::arg("count"), py::arg("xpu") = false);
  m.def("device_count", &device_count);
  m.def("current_device", &current_device);
  m.def("set_device", &py_set_device);
  m.def("device_was_set", [] { return g_device_explicitly_set.load(); });
  m.def("exchange_device", [](int index) {
    const int old = tls_device;
    if (index >= 0) {
      check_index(index);
      tls_device = index;
    }
    return old;
  });
  m.def("maybe_exchange_device", [](int index) {
    if (index < 0 || index >= g_device_count.load()) {
      return tls_device;
    }
    const int old = tls_device;
    tls_device = index;
    return old;
  });
  m.def("memory_counters", &py_memory_counters);
  m.def("reset_peak", &py_reset_peak);
  m.def("reset_accumulated", &py_reset_accumulated);
  m.def("empty_cache", &py_empty_cache);
  m.def("used_devices", &py_used_devices);
  m.def("default_generator", &py_default_generator);
#if SIM_TORCH_BEFORE(2, 4)
  // torch < 2.4's autocast keeps a device's state through its module (no torch.get_autocast_dtype(device)).
  m.def("is_autocast_enabled", [] { return at::autocast::is_privateuseone_enabled(); });
  m.def("set_autocast_enabled", [](bool enabled) { at::autocast::set_privateuseone_enabled(enabled); });
  m.def("get_autocast_dtype", [] {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(at::autocast::get_autocast_privateuseone_dtype())));
  });
  m.def("set_autocast_dtype", [](py::object dtype) {
    TORCH_CHECK(THPDtype_Check(dtype.ptr()), "set_autocast_dtype expects a torch.dtype");
    at::autocast::set_autocast_privateuseone_dtype(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
  });
#endif
  m.def("alias_cpu", &alias_cpu, "CPU tensor aliasing the memory of a device tensor (no copy)");
  m.def("share_device_storage", &share_device_storage,
        "move a device tensor's storage into a named shared-memory segment; returns its name (ipc.cpp)");
  m.def("open_device_storage", &open_device_storage,
        "a uint8 device tensor over a segment another process shared (ipc.cpp)");
}
