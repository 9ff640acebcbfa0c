// Device memory shared between processes, as a vendor's IPC shares it (torch_npu's storage._share_npu_ /
// _new_shared_npu, CUDA's cudaIpcGetMemHandle): the sending process moves a device storage's bytes into a
// named POSIX shared-memory segment (the storage keeps its device, size and contents, now in the segment) and
// hands the segment's name on; the receiving process maps it as a storage of the same device. Both then read
// and write the same memory, as two processes holding one CUDA allocation through IPC do.
//
// The sender owns the segment: its name is unlinked when the sender's storage is freed or the sender exits
// normally (a receiver must open it while the sender keeps the tensor alive, CUDA's rule too). Shared
// storages are counted by the device's allocator statistics like any other allocation.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include <ATen/ATen.h>

#include "sim_accel.h"

namespace sim_accel {
namespace {

struct Segment {
  void* ptr;
  size_t size;  // mapped bytes (at least 1)
  std::string name;
  bool owner;
  int device;
};

std::mutex g_owned_mutex;
std::unordered_set<std::string>* g_owned = new std::unordered_set<std::string>();  // never destroyed

struct UnlinkAtExit {
  ~UnlinkAtExit() {
    std::lock_guard<std::mutex> lock(g_owned_mutex);
    for (const auto& name : *g_owned) {
      shm_unlink(name.c_str());
    }
    g_owned->clear();
  }
} g_unlink_at_exit;

void free_segment(void* ctx) {
  auto* segment = static_cast<Segment*>(ctx);
  note_shared_block(segment->device, segment->ptr, segment->size, /*alive=*/false);
  munmap(segment->ptr, segment->size);
  if (segment->owner) {
    shm_unlink(segment->name.c_str());
    std::lock_guard<std::mutex> lock(g_owned_mutex);
    g_owned->erase(segment->name);
  }
  delete segment;
}

void* map_segment(const std::string& name, size_t size, bool create) {
  const int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  TORCH_CHECK(fd >= 0, "simulated device IPC: cannot ", create ? "create" : "open", " shared memory ", name, ": ",
              std::strerror(errno), create ? "" : " (the sending process must keep the tensor alive)");
  if (create && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    TORCH_CHECK(false, "simulated device IPC: cannot size shared memory ", name, ": ", std::strerror(err));
  }
  void* ptr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (ptr == MAP_FAILED) {
    if (create) {
      shm_unlink(name.c_str());
    }
    TORCH_CHECK(false, "simulated device IPC: cannot map shared memory ", name, ": ", std::strerror(err));
  }
  return ptr;
}

}  // namespace

std::string share_device_storage(const at::Tensor& tensor) {
  c10::Storage storage = tensor.storage();
  const c10::Device device = storage.device();
  TORCH_CHECK(is_sim(device), "share_device_storage: a tensor of the simulated device expected, got ",
              device);
  auto* impl = storage.unsafeGetStorageImpl();
  if (impl->data_ptr().get_deleter() == &free_segment) {
    return static_cast<Segment*>(impl->data_ptr().get_context())->name;  // shared before: the same segment
  }
  static std::atomic<uint64_t> counter{0};
  const std::string name = "/sim_accel_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  const size_t nbytes = storage.nbytes();
  const size_t size = nbytes > 0 ? nbytes : 1;
  void* ptr = map_segment(name, size, /*create=*/true);
  if (nbytes > 0 && storage.data() != nullptr) {
    std::memcpy(ptr, storage.data(), nbytes);
  }
  {
    std::lock_guard<std::mutex> lock(g_owned_mutex);
    g_owned->insert(name);
  }
  auto* segment = new Segment{ptr, size, name, true, static_cast<int>(device.index())};
  note_shared_block(segment->device, ptr, size, /*alive=*/true);
  impl->set_data_ptr_noswap(c10::DataPtr(ptr, segment, &free_segment, device));  // frees the old block
  return name;
}

at::Tensor open_device_storage(const std::string& name, int64_t nbytes, int device) {
  TORCH_CHECK(nbytes >= 0, "open_device_storage: negative size");
  const c10::Device where(device_type(), static_cast<c10::DeviceIndex>(device));
  const size_t size = nbytes > 0 ? static_cast<size_t>(nbytes) : 1;
  void* ptr = map_segment(name, size, /*create=*/false);
  auto* segment = new Segment{ptr, size, name, false, device};
  note_shared_block(device, ptr, size, /*alive=*/true);
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes),
                       c10::DataPtr(ptr, segment, &free_segment, where), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(where)).set_(storage, 0, {nbytes}, {1});
}

}  // namespace sim_accel
