// The CUDA driver, opened at run time: loading libcuda.so.1, turning CUresults into weft::Errors, a
// device's primary context, and PTX -> loaded kernel (compiled by the driver). The CUDA backend (cuda_backend.cpp) is
// built on this; tests use it directly to run hand-written PTX.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/nvptx/compile_ptx.h"
#include "driver/backend.h"
#include "driver/cuda/cuda_api.h"
#include "passes/wait_sites.h"
#include "weft/error.h"

namespace weft::driver::cuda {

// The driver's entry points, one member per line of WEFT_CUDA_DRIVER_SYMBOLS (null: an optional symbol
// this driver lacks).
struct CudaDriver {
  void* library = nullptr;  // the dlopen handle
  int version = 0;          // cuDriverGetVersion: 12080 for CUDA 12.8
#define WEFT_CUDA_DECLARE_MEMBER(required, member, symbol, fallback, parameters) member##_fn member = nullptr;
  WEFT_CUDA_DRIVER_SYMBOLS(WEFT_CUDA_DECLARE_MEMBER)
#undef WEFT_CUDA_DECLARE_MEMBER
};

// The process's driver: libcuda.so.1 opened, its symbols resolved and cuInit done, once and thread-safely.
// Throws weft::Error saying why not (no driver installed, too old, or cuInit failed).
const CudaDriver& cuda_driver();

// Whether the driver works and sees at least one device; if not, the reason goes to `why_not`.
bool cuda_available(std::string* why_not = nullptr);
// Whether the process has begun to exit since the driver was initialised: objects in static storage made
// before that (a Kernel compiled later, a Buffer) are then destroyed after the driver's own state may be,
// so they leave their modules and memory to the process's end instead of calling into the driver.
bool cuda_driver_exiting();

// Opens `library` and resolves the symbol table without initialising or caching anything; null with the
// reason in `why_not` on failure. cuda_driver() uses it; tests call it to exercise the failure paths.
std::unique_ptr<CudaDriver> open_cuda_driver(const char* library, std::string* why_not);

// "CUDA 12.8" for a cuDriverGetVersion value.
std::string cuda_version_string(int version);

// "CUDA_ERROR_INVALID_VALUE (invalid argument)", and advice where the cause lies elsewhere.
std::string cuda_error_text(CUresult result);

// Throws weft::Error unless `result` is CUDA_SUCCESS, naming the call, the driver's name and text for the
// error, and what it concerned (e.g. "kernel 'softmax'").
[[noreturn]] void throw_cuda_error(CUresult result, const char* call, std::string_view what);
inline void check(CUresult result, const char* call, std::string_view what) {
  if (result != CUDA_SUCCESS) throw_cuda_error(result, call, what);
}

// One device and its primary context (retained while this object lives).
class CudaDevice {
 public:
  // Throws weft::Error if the driver is unavailable or `ordinal` names no device.
  explicit CudaDevice(int ordinal);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // Makes the primary context current on the calling thread, as every driver call needs; cheap when it
  // already is. try_make_current() reports instead of throwing, for destructors.
  void make_current() const;
  CUresult try_make_current() const;

  int ordinal() const { return ordinal_; }
  CUdevice handle() const { return device_; }
  CUcontext context() const { return context_; }
  const std::string& name() const { return name_; }  // "NVIDIA H200"
  std::string label() const;                          // "cuda:0 (NVIDIA H200)"
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  int shared_bytes_per_block() const { return shared_per_block_; }              // without opt-in (48 KiB)
  int shared_bytes_per_block_optin() const { return shared_per_block_optin_; }  // the most a kernel can ask for
  int multiprocessors() const { return multiprocessors_; }

 private:
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0;
  int shared_per_block_ = 0, shared_per_block_optin_ = 0, multiprocessors_ = 0;
};

// A module compiled from PTX by the driver's own PTX compiler and loaded on `device`; unloaded when this goes
// away (errors then are ignored: it may be at process exit). On failure, a weft::Error carrying the
// compiler's error and info logs.
//
// cuModuleLoadDataEx, not cuLinkCreate/AddData/Complete: the linker compiles its input as relocatable device
// code (nvcc -rdc), where ptxas ignores setmaxnreg and serializes every wgmma ("Potential Performance Loss",
// C7504 and C7509 in its log) -- on the H200 that cost the attention kernel each wgmma's full latency. The
// driver keeps its own cache of compiled PTX (~/.nv/ComputeCache; CUDA_CACHE_DISABLE=1 turns it off), so
// weft's compile cache stores the PTX.
class CudaModule {
 public:
  CudaModule(const std::string& ptx, const CudaDevice& device, std::string_view what);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  CUfunction function(const std::string& entry, std::string_view what) const;
  // The compiler's verbose report: registers, spills, performance advisories.
  const std::string& jit_log() const { return jit_log_; }

 private:
  const CudaDevice& device_;
  CUmodule module_ = nullptr;
  std::string jit_log_;
};

// A kernel ready to launch with cuLaunchKernel.
struct CudaKernel : detail::CompiledKernel {
  std::string label;  // "kernel 'softmax'", for error messages
  std::unique_ptr<CudaModule> module;
  CUfunction function = nullptr;
  int threads = 0;                // per block
  unsigned shared_bytes = 0;      // dynamic shared memory per block
  std::string ptx;                // what a compile cache stores
  // Parameter i is a TMA descriptor (passed by value, 128 bytes); empty when none is.
  std::vector<bool> descriptor_params;
  // GPU debug mode (KernelOptions::debug, WEFT_DEBUG): its wait sites; the kernel then takes three hidden
  // parameters after the user's (codegen/nvptx/debug_waits.h). Null otherwise.
  std::shared_ptr<const passes::WaitSites> debug_waits;
  // The kernel calls wait_for_prior_grid: launched with programmatic stream serialization, so that it may
  // start before the kernel queued ahead of it ends.
  bool waits_for_prior_grid = false;
};

// The compile cache's key of the PTX of `f` compiled with `options` for `target`, to be compiled by the driver
// of `driver_version`: everything that changes the code, debug mode included.
std::string module_cache_key(const ir::Function& f, const KernelOptions& options,
                            const codegen::nvptx::PtxTarget& target, int driver_version);

// Compiles `ptx` and loads it on `device` (making its context current), and prepares `entry` for launches
// of `threads` threads with `shared_bytes` of dynamic shared memory: raises the function's shared-memory
// limit past 48 KiB when needed. Throws weft::Error (located at `where`) when the device cannot run it so.
std::shared_ptr<CudaKernel> load_cuda_kernel(const std::string& name, std::string ptx, const std::string& entry,
                                             int threads, int64_t shared_bytes, const CudaDevice& device,
                                             SourceLoc where = {});
// The same for the code generator's output.
std::shared_ptr<CudaKernel> load_cuda_kernel(const std::string& name, const codegen::nvptx::PtxKernel& ptx,
                                             const CudaDevice& device, SourceLoc where = {});

}  // namespace weft::driver::cuda
