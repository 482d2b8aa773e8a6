// weft — devices, buffers and streams: the runtime API that every backend shares.
//
// `Device::best()` is the GPU when one is present and usable, else the CPU backend; the environment
// variable WEFT_BACKEND=cpu|cuda|hip overrides the choice. Buffers are typed, sized allocations on a
// device; copies between host and device are explicit.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/dtype.h"
#include "weft/error.h"

namespace weft {

enum class BackendKind { cpu, cuda, hip };
std::string to_string(BackendKind);

namespace detail {
class Backend;
// One device allocation; freed when the last Buffer referring to it goes away.
struct Allocation {
  Backend* backend = nullptr;
  void* address = nullptr;  // a device address (on the CPU backend, a host address)
  size_t bytes = 0;
  bool owned = true;        // false: the caller's memory (Device::wrap), never freed by weft
  ~Allocation();
};
std::shared_ptr<Allocation> allocate(Backend&, size_t bytes, SourceLoc loc);
// `count` elements of `element_bytes` each; a count whose size overflows size_t is an Error.
std::shared_ptr<Allocation> allocate(Backend&, size_t count, size_t element_bytes, SourceLoc loc);
std::shared_ptr<Allocation> borrow(Backend&, void* address, size_t count, size_t element_bytes, SourceLoc loc);
void copy_to_device(const Allocation&, size_t offset, const void* src, size_t bytes, SourceLoc loc);
void copy_to_host(const Allocation&, size_t offset, void* dst, size_t bytes, SourceLoc loc);
// `bytes` from `src` to `dst`, whichever devices they are on (Buffer::copy_from).
void copy_between(const Allocation& dst, const Allocation& src, size_t bytes, SourceLoc loc);
}  // namespace detail

template <class T> class Buffer;

// A queue of work on a device. The CPU backend runs everything synchronously; GPU backends map a Stream
// to a native stream (and accept the user's own, see Device::wrap_stream).
class Stream {
 public:
  void* native() const { return native_; }
  detail::Backend& backend() const { return *backend_; }
  void synchronize() const;

 private:
  friend class Device;
  Stream(detail::Backend* b, void* native) : backend_(b), native_(native) {}
  detail::Backend* backend_;
  void* native_;
};

class Device {
 public:
  // The device kernels launch on by default: chosen once per process (see the top of this file).
  static Device current();
  // Make `d` the default device of this process.
  static void set_current(Device d);
  // The GPU if one is present and usable, else the CPU; WEFT_BACKEND overrides.
  static Device best();
  // The CPU backend (always available).
  static Device cpu();
  // CUDA device `index` (0 .. count(BackendKind::cuda) - 1): each has its own context, compiled modules and
  // TMA encodings; a Kernel compiles once per device it launches on. An Error (naming `loc`) when there is
  // no usable driver or no such device. Device::cuda(i) == Device::cuda(i) for the whole process.
  static Device cuda(int index, SourceLoc loc = SourceLoc::current());
  // How many devices of `kind` this process can use: 1 for the CPU, the GPUs the CUDA driver sees (0
  // without a usable driver), 0 for a backend this build lacks.
  static int count(BackendKind kind);

  BackendKind kind() const;
  std::string name() const;
  // Which device of its kind this is: the index Device::cuda takes (0 for the CPU).
  int index() const;
  // How many blocks run at once: the GPU's multiprocessors (the CPU's cores): the grid of a persistent
  // kernel.
  int multiprocessors() const;

  template <class T> Buffer<T> alloc(size_t count, SourceLoc loc = SourceLoc::current()) const;
  template <class T> Buffer<T> upload(const std::vector<T>& host, SourceLoc loc = SourceLoc::current()) const;
  // A Buffer over `count` elements of memory the caller allocated on this device (a cudaMalloc'd pointer, a
  // PyTorch tensor's data_ptr(); on the CPU backend, host memory). weft never frees it: the caller keeps it
  // alive while weft uses it. A null pointer with count > 0 is an Error.
  template <class T> Buffer<T> wrap(T* device_pointer, size_t count, SourceLoc loc = SourceLoc::current()) const;

  Stream stream() const;                 // the device's default stream
  Stream wrap_stream(void* native) const;  // a stream the caller created (a CUstream on CUDA)
  void synchronize() const;

  detail::Backend& backend() const { return *backend_; }
  static Device from_backend(detail::Backend& b) { return Device(&b); }  // for weft's own backends
  friend bool operator==(const Device& a, const Device& b) { return a.backend_ == b.backend_; }

 private:
  explicit Device(detail::Backend* b) : backend_(b) {}
  detail::Backend* backend_;
};

// `count` elements of T on a device.
template <class T> class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<detail::Allocation> a, size_t count) : alloc_(std::move(a)), count_(count) {}

  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void* data() const { return alloc_ ? alloc_->address : nullptr; }
  detail::Backend* backend() const { return alloc_ ? alloc_->backend : nullptr; }

  // Copies `host` (exactly size() elements) into the buffer. An empty buffer (default-constructed, or of
  // 0 elements) takes an empty vector and nothing happens.
  void upload(const std::vector<T>& host, SourceLoc loc = SourceLoc::current()) {
    if (host.size() != count_)
      throw Error("Buffer::upload: the host vector has " + std::to_string(host.size()) +
                      " elements but the buffer holds " + std::to_string(count_) +
                      (alloc_ ? std::string()
                              : std::string(" (a default-constructed Buffer holds no memory: make it with "
                                            "Device::alloc<T>(n) or Device::upload(host))")),
                  loc);
    if (count_ == 0) return;
    const detail::Allocation& a = allocation("Buffer::upload", loc);
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits; kernels see one byte each
      std::vector<uint8_t> bytes_of(host.begin(), host.end());
      detail::copy_to_device(a, 0, bytes_of.data(), bytes(), loc);
    } else {
      detail::copy_to_device(a, 0, host.data(), bytes(), loc);
    }
  }
  // Copies `src` (exactly size() elements, on this buffer's device or any other: another GPU, the CPU)
  // into this buffer. Synchronous: it waits for the work queued on both devices' default streams, and a
  // kernel launched afterwards sees the data. Between two GPUs it goes directly (cuMemcpyPeer, over
  // NVLink where the devices are peers); between the CPU and a GPU, as upload/download do.
  void copy_from(const Buffer& src, SourceLoc loc = SourceLoc::current()) {
    if (src.count_ != count_)
      throw Error("Buffer::copy_from: the source holds " + std::to_string(src.count_) +
                      " elements but this buffer holds " + std::to_string(count_) +
                      "; copy between buffers of one size",
                  loc);
    if (count_ == 0) return;
    detail::copy_between(allocation("Buffer::copy_from", loc), src.allocation("Buffer::copy_from (the source)", loc),
                         bytes(), loc);
  }
  // The buffer's size() elements; an empty buffer gives an empty vector.
  std::vector<T> download(SourceLoc loc = SourceLoc::current()) const {
    if (count_ == 0) return {};
    const detail::Allocation& a = allocation("Buffer::download", loc);
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<uint8_t> bytes_of(count_);
      detail::copy_to_host(a, 0, bytes_of.data(), bytes(), loc);
      return std::vector<bool>(bytes_of.begin(), bytes_of.end());
    } else {
      std::vector<T> host(count_);
      detail::copy_to_host(a, 0, host.data(), bytes(), loc);
      return host;
    }
  }

 private:
  // The memory of a buffer of count_ > 0 elements (a Buffer built from a null allocation has none).
  const detail::Allocation& allocation(const char* what, SourceLoc loc) const {
    if (!alloc_)
      throw Error(std::string(what) + ": the buffer claims " + std::to_string(count_) +
                      " elements but has no memory (it was built from a null allocation); make it with "
                      "Device::alloc<T>(n), Device::upload(host) or Device::wrap(pointer, n)",
                  loc);
    return *alloc_;
  }

  std::shared_ptr<detail::Allocation> alloc_;
  size_t count_ = 0;
};

template <class T> Buffer<T> Device::alloc(size_t count, SourceLoc loc) const {
  return Buffer<T>(detail::allocate(*backend_, count, sizeof(T), loc), count);
}
template <class T> Buffer<T> Device::wrap(T* device_pointer, size_t count, SourceLoc loc) const {
  return Buffer<T>(detail::borrow(*backend_, device_pointer, count, sizeof(T), loc), count);
}
template <class T> Buffer<T> Device::upload(const std::vector<T>& host, SourceLoc loc) const {
  Buffer<T> b = alloc<T>(host.size(), loc);
  b.upload(host, loc);
  return b;
}

}  // namespace weft
