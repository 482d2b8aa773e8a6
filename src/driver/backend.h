// The interface every backend implements (CPU today; CUDA and HIP join it). Nothing here knows LLVM.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/tma_descriptor.h"
#include "ir/node.h"
#include "weft/kernel.h"
#include "weft/runtime.h"

namespace weft::detail {

// A kernel compiled for one backend, ready to launch.
struct CompiledKernel {
  virtual ~CompiledKernel() = default;
  std::string name;
  ClusterDims cluster;  // the KernelOptions' it was compiled for: launches run its blocks in such clusters
};

struct LaunchDims {
  int64_t x = 1, y = 1, z = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;
  // Blocks that run at once, for persistent kernels: streaming multiprocessors (the CPU's cores).
  virtual int multiprocessors() const;

  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* address) = 0;
  // Memory of the caller's that a Buffer now refers to (Device::wrap), and when that Buffer is gone: the
  // CPU backend's bounds checks learn its extent.
  virtual void note_borrowed(void*, size_t) {}
  virtual void forget_borrowed(void*) {}
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // A copy between two allocations of this backend (Buffer::copy_from). By default through host memory.
  virtual void copy_on_device(void* dst, const void* src, size_t bytes);
  // A copy into this backend's `dst` from `src` on another backend `from`, done directly (CUDA: from another
  // GPU with cuMemcpyPeer); false when this backend cannot, and the caller goes through host memory.
  virtual bool copy_from_peer(void*, const Backend& /*from*/, const void*, size_t) { return false; }
  // Which device of its kind this is (Device::index): the CUDA ordinal; 0 for the CPU.
  virtual int ordinal() const { return 0; }

  // Compiles a verified kernel. Throws weft::Error for what the target cannot do.
  virtual std::shared_ptr<CompiledKernel> compile(const ir::Function& f, const KernelOptions& options) = 0;
  // The 64-bit slot of a TensorDesc parameter: by default (the CPU) the address of the descriptor's
  // TensorDescData. Called at every launch with a descriptor: cheap after the first call.
  virtual uint64_t tensor_desc_slot(const TmaDescriptor& d) { return reinterpret_cast<uint64_t>(&d.cpu); }
  // Launches `k` over `grid` (a multiple of k.cluster, checked by the caller); `args` points to `count` 64-bit slots, one per Tile or TensorDesc parameter,
  // in order (pointers as addresses, numbers in the low bits of their own type, descriptors as
  // tensor_desc_slot made them). On the hot path of every launch: no allocation here where it can be helped.
  virtual void launch(const CompiledKernel& k, const LaunchDims& grid, const uint64_t* args, size_t count,
                      void* stream) = 0;
  // The same with the slots in a vector, for tests and tools (Kernel::launch uses the one above).
  void launch(const CompiledKernel& k, const LaunchDims& grid, const std::vector<uint64_t>& args, void* stream) {
    launch(k, grid, args.data(), args.size(), stream);
  }
  virtual void* default_stream() { return nullptr; }
  virtual void synchronize(void* stream) = 0;
};

// The process-wide CPU backend (always available).
Backend& cpu_backend();
// The process-wide CUDA backend (the device WEFT_CUDA_DEVICE names, default 0), or null with the reason in
// `why_not` when there is no usable driver or device. Created on first call.
Backend* cuda_backend_or_null(std::string* why_not);
// The CUDA backend of device `ordinal` (one per device and process, made at first use: its own primary
// context, compiled modules and TMA encodings), or null with the reason in `why_not`.
Backend* cuda_backend_for(int ordinal, std::string* why_not);
// How many CUDA devices the driver sees; 0 when there is no usable driver.
int cuda_device_count();

// A backend that compiles kernels for the GPU architecture `arch` (e.g. "sm_90a") but cannot run them
// (WEFT_TARGET on a machine without that GPU); `why_no_device` ends up in the launch error.
Backend& compile_only_backend(const std::string& arch, const std::string& why_no_device);

}  // namespace weft::detail
