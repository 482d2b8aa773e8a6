// Devices, buffers and streams on top of the backends.
#include <fmt/format.h>

#include <cstdint>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "codegen/nvptx/compile_ptx.h"
#include "driver/backend.h"
#include "support/env.h"

namespace weft {

std::string to_string(BackendKind k) {
  switch (k) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::cuda: return "cuda";
    case BackendKind::hip: return "hip";
  }
  return "?";
}

namespace {

detail::Backend* backend_named(const std::string& name) {
  if (name == "cpu") return &detail::cpu_backend();
  if (name == "cuda") {
    std::string why_not;
    if (detail::Backend* cuda = detail::cuda_backend_or_null(&why_not)) return cuda;
    throw Error(fmt::format("WEFT_BACKEND=cuda, but the CUDA backend is unavailable: {}", why_not));
  }
  if (name == "hip")
    throw Error(fmt::format("WEFT_BACKEND={}: this build of weft has no {} backend yet; use WEFT_BACKEND=cpu", name, name));
  throw Error(fmt::format("WEFT_BACKEND={} is not a backend; use cpu, cuda or hip", name));
}

std::atomic<detail::Backend*> current_backend{nullptr};

// WEFT_TARGET=sm_XX on a machine without a GPU: compile for it, launch nothing.
detail::Backend* target_without_device(const std::string& target) {
  if (std::string why = codegen::nvptx::unknown_arch_reason(target); !why.empty())
    throw Error(fmt::format("WEFT_TARGET={}: {}", target, why));
  std::string why_not;
  if (detail::Backend* cuda = detail::cuda_backend_or_null(&why_not)) return cuda;
  return &detail::compile_only_backend(target, why_not);
}

}  // namespace

Device Device::best() {
  const support::Knobs& k = support::knobs();
  if (!k.target.empty() && (k.backend.empty() || k.backend == "cuda")) return Device(target_without_device(k.target));
  if (!k.backend.empty()) return Device(backend_named(k.backend));
  // Unasked, a GPU is used when one works; otherwise the CPU, quietly (WEFT_BACKEND=cuda says why not).
  if (detail::Backend* cuda = detail::cuda_backend_or_null(nullptr)) return Device(cuda);
  return Device(&detail::cpu_backend());
}

Device Device::cpu() { return Device(&detail::cpu_backend()); }

Device Device::cuda(int index, SourceLoc loc) {
  std::string why_not;
  if (index < 0)
    throw Error(fmt::format("Device::cuda({}): device indices start at 0 (Device::count(BackendKind::cuda) says how "
                            "many there are)",
                            index),
                loc);
  if (detail::Backend* b = detail::cuda_backend_for(index, &why_not)) return Device(b);
  throw Error(fmt::format("Device::cuda({}): {}", index, why_not), loc);
}

int Device::count(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return 1;
    case BackendKind::cuda: return detail::cuda_device_count();
    case BackendKind::hip: return 0;
  }
  return 0;
}

Device Device::current() {
  detail::Backend* b = current_backend.load();
  if (!b) {
    static std::once_flag once;
    std::call_once(once, [] {
      detail::Backend* expected = nullptr;
      current_backend.compare_exchange_strong(expected, &best().backend());
    });
    b = current_backend.load();
  }
  return Device(b);
}

void Device::set_current(Device d) { current_backend.store(d.backend_); }

BackendKind Device::kind() const { return backend_->kind(); }
std::string Device::name() const { return backend_->name(); }
int Device::index() const { return backend_->ordinal(); }
int Device::multiprocessors() const { return backend_->multiprocessors(); }

int detail::Backend::multiprocessors() const {
  return support::host_cores();
}
Stream Device::stream() const { return Stream(backend_, backend_->default_stream()); }
Stream Device::wrap_stream(void* native) const { return Stream(backend_, native); }
void Device::synchronize() const { backend_->synchronize(backend_->default_stream()); }
void Stream::synchronize() const { backend_->synchronize(native_); }

namespace detail {

Allocation::~Allocation() {
  if (owned && backend && address) backend->release(address);
  if (!owned && backend && address) backend->forget_borrowed(address);
}

std::shared_ptr<Allocation> borrow(Backend& b, void* address, size_t count, size_t element_bytes, SourceLoc loc) {
  if (count != 0 && !address)
    throw Error(fmt::format("Device::wrap: a null pointer for {} elements; pass the address of memory allocated on {}",
                            count, b.name()),
                loc);
  if (element_bytes != 0 && count > SIZE_MAX / element_bytes)
    throw Error(fmt::format("Device::wrap: {} elements of {} bytes overflow the address space", count, element_bytes),
                loc);
  auto a = std::make_shared<Allocation>();
  a->backend = &b;
  a->address = count ? address : nullptr;
  a->bytes = count * element_bytes;
  a->owned = false;
  if (a->address) b.note_borrowed(a->address, a->bytes);
  return a;
}

std::shared_ptr<Allocation> allocate(Backend& b, size_t bytes, SourceLoc loc) {
  auto a = std::make_shared<Allocation>();
  a->backend = &b;
  a->bytes = bytes;
  if (bytes == 0) return a;
  try {
    a->address = b.allocate(bytes);
  } catch (const Error& e) {
    throw Error(fmt::format("allocating {} bytes on {} failed: {}", bytes, b.name(), e.what()), loc);
  }
  return a;
}

std::shared_ptr<Allocation> allocate(Backend& b, size_t count, size_t element_bytes, SourceLoc loc) {
  // As in borrow: count * element_bytes must not wrap around (it would allocate a few bytes for a huge count).
  if (element_bytes != 0 && count > SIZE_MAX / element_bytes)
    throw Error(fmt::format("Device::alloc: {} elements of {} bytes overflow the address space (at most {} elements "
                            "of this type fit in size_t); allocate fewer elements",
                            count, element_bytes, SIZE_MAX / element_bytes),
                loc);
  return allocate(b, count * element_bytes, loc);
}

static void check_range(const Allocation& a, size_t offset, size_t bytes, const char* what, SourceLoc loc) {
  if (offset + bytes > a.bytes || offset + bytes < offset)
    throw Error(fmt::format("{}: {} bytes at offset {} do not fit in a buffer of {} bytes", what, bytes, offset, a.bytes),
                loc);
}

void copy_to_device(const Allocation& a, size_t offset, const void* src, size_t bytes, SourceLoc loc) {
  check_range(a, offset, bytes, "copy to device", loc);
  if (bytes) a.backend->copy_to_device(static_cast<char*>(a.address) + offset, src, bytes);
}

void copy_to_host(const Allocation& a, size_t offset, void* dst, size_t bytes, SourceLoc loc) {
  check_range(a, offset, bytes, "copy to host", loc);
  if (bytes) a.backend->copy_to_host(dst, static_cast<const char*>(a.address) + offset, bytes);
}

void copy_between(const Allocation& dst, const Allocation& src, size_t bytes, SourceLoc loc) {
  check_range(dst, 0, bytes, "Buffer::copy_from", loc);
  check_range(src, 0, bytes, "Buffer::copy_from (the source)", loc);
  if (bytes == 0) return;
  if (dst.backend == src.backend) return dst.backend->copy_on_device(dst.address, src.address, bytes);
  if (dst.backend->copy_from_peer(dst.address, *src.backend, src.address, bytes)) return;
  std::vector<char> staged(bytes);  // different kinds of device (or GPUs without a direct copy): via the host
  src.backend->copy_to_host(staged.data(), src.address, bytes);
  dst.backend->copy_to_device(dst.address, staged.data(), bytes);
}

void Backend::copy_on_device(void* dst, const void* src, size_t bytes) {
  std::vector<char> staged(bytes);
  copy_to_host(staged.data(), src, bytes);
  copy_to_device(dst, staged.data(), bytes);
}

}  // namespace detail
}  // namespace weft
