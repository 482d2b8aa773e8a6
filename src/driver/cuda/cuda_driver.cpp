#include "driver/cuda/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace weft::driver::cuda {
namespace {

constexpr const char* kDriverLibrary = "libcuda.so.1";
constexpr const char* kNoDriverAdvice = "use WEFT_BACKEND=cpu or install the NVIDIA driver";

// ---- loading -------------------------------------------------------------------------------------------

void* find_symbol(void* library, const char* symbol, const char* fallback) {
  void* address = dlsym(library, symbol);
  if (!address && fallback) address = dlsym(library, fallback);
  return address;
}

// "cuA, cuB, cuC, cuD and 7 more".
std::string symbol_list(const std::vector<const char*>& symbols) {
  constexpr size_t kShown = 4;
  std::string list;
  for (size_t i = 0; i < symbols.size() && i < kShown; ++i) list += fmt::format("{}{}", i ? ", " : "", symbols[i]);
  if (symbols.size() > kShown) list += fmt::format(" and {} more", symbols.size() - kShown);
  return list;
}

// The process's driver, loaded by the first call that needs it.
struct DriverState {
  std::unique_ptr<CudaDriver> driver;  // symbols resolved (set even when cuInit then failed)
  bool initialised = false;
  std::string failure;  // why not, when !initialised
};

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)". Takes the driver explicitly because the
// loader reports cuInit's failure before the process's DriverState is complete.
std::string describe(const CudaDriver* driver, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver && driver->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (driver && driver->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
  std::string s = name ? name : fmt::format("CUresult {}", static_cast<int>(result));
  if (text) s += fmt::format(" ({})", text);
  return s;
}

// What to do about errors whose cause is not where they are reported.
const char* advice_for(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      return "; a kernel faulted and the CUDA context is now unusable (restart the process). Launches are "
             "asynchronous, so the faulting kernel may be an earlier one: run with CUDA_LAUNCH_BLOCKING=1 to "
             "report the fault at its own launch";
    case CUDA_ERROR_STUB_LIBRARY:
      return "; the libcuda.so.1 found is the CUDA toolkit's stub library, not the NVIDIA driver (is a "
             "toolkit's lib64/stubs directory on LD_LIBRARY_PATH?)";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return "; the PTX needs a newer NVIDIA driver than this one";
    default:
      return "";
  }
}

std::atomic<bool> exiting{false};

void initialise(DriverState& state) {
  const CudaDriver& driver = *state.driver;
  CUresult result = driver.cuInit(0);
  if (result != CUDA_SUCCESS) {
    const char* what = result == CUDA_ERROR_NO_DEVICE ? "no CUDA device" : "the CUDA driver failed to initialise";
    state.failure = fmt::format("{}: cuInit returned {}{}; use WEFT_BACKEND=cpu, or check the NVIDIA driver and "
                                "the device (nvidia-smi)",
                                what, describe(&driver, result), advice_for(result));
    return;
  }
  if (driver.cuDriverGetVersion(&state.driver->version) != CUDA_SUCCESS) state.driver->version = 0;
  state.initialised = true;
  // At exit, handlers run in the reverse order of their registration: this one before the destructors of
  // everything in static storage made before the driver was (a static Kernel made before its first launch),
  // and before any teardown the driver registered in cuInit. Measured on the H200: such a Kernel's
  // cuModuleUnload at exit aborted in the driver (double free).
  std::atexit([] { exiting.store(true); });
}

// Never destroyed: modules and buffers released by static destructors still reach the driver through it.
DriverState& driver_state() {
  static DriverState* state = new DriverState;
  static std::once_flag once;
  std::call_once(once, [] {
    state->driver = open_cuda_driver(kDriverLibrary, &state->failure);
    if (state->driver) initialise(*state);
  });
  return *state;
}

std::string trimmed(const std::vector<char>& log) {
  std::string s(log.data(), strnlen(log.data(), log.size()));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// ---- the driver's PTX compiler -------------------------------------------------------------------------

// The JIT options of cuModuleLoadDataEx and the log buffers they point at.
struct JitLogs {
  static constexpr size_t kBytes = size_t(1) << 16;
  std::vector<char> info = std::vector<char>(kBytes, '\0');
  std::vector<char> error = std::vector<char>(kBytes, '\0');
  CUjit_option options[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                             CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
  // Sizes and flags travel in the pointer slots themselves, as the driver API defines.
  void* values[5] = {info.data(), reinterpret_cast<void*>(uintptr_t{kBytes}), error.data(),
                     reinterpret_cast<void*>(uintptr_t{kBytes}), reinterpret_cast<void*>(uintptr_t{1})};
  static constexpr unsigned count = 5;
};

[[noreturn]] void throw_jit_error(CUresult result, std::string_view what, const JitLogs& logs) {
  std::string error_log = trimmed(logs.error), info_log = trimmed(logs.info);
  std::string message = fmt::format("compiling the PTX of {} failed: cuModuleLoadDataEx returned {}{}", what,
                                    describe(&cuda_driver(), result), advice_for(result));
  message += fmt::format("\n--- error log of the driver's PTX compiler ({}) ---\n{}",
                         cuda_version_string(cuda_driver().version), error_log.empty() ? "(empty)" : error_log);
  if (!info_log.empty()) message += fmt::format("\n--- info log ---\n{}", info_log);
  message += "\n(WEFT_DUMP=ptx prints the PTX)";
  throw Error(message);
}

// ---- kernels -------------------------------------------------------------------------------------------

int function_attribute(const CudaKernel& k, CUfunction_attribute attribute, const char* attribute_name) {
  int value = 0;
  check(cuda_driver().cuFuncGetAttribute(&value, attribute, k.function),
        fmt::format("cuFuncGetAttribute({})", attribute_name).c_str(), k.label);
  return value;
}

// Register pressure can leave room for fewer threads than the kernel was compiled for; say so here rather
// than as CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES at every launch.
void check_threads_fit(const CudaKernel& k, const CudaDevice& device, SourceLoc where) {
  if (k.threads < 1 || k.threads > 1024)
    throw InternalError(fmt::format("{} was compiled for {} threads per block", k.label, k.threads));
  int max_threads = function_attribute(k, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
  if (k.threads <= max_threads) return;
  int registers = function_attribute(k, CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS");
  throw Error(fmt::format("{} runs {} threads per block (num_warps = {}) but uses {} registers per thread, so at "
                          "most {} threads fit in a block on {}; lower num_warps or the tile sizes",
                          k.label, k.threads, k.threads / 32, registers, max_threads, device.label()),
              where);
}

// Blocks get 48 KiB of shared memory unless the function opts in to more, up to the device's maximum.
unsigned reserve_shared_memory(const CudaKernel& k, int64_t dynamic_bytes, const CudaDevice& device,
                               SourceLoc where) {
  if (dynamic_bytes < 0)
    throw InternalError(fmt::format("{} asks for {} bytes of shared memory", k.label, dynamic_bytes));
  int64_t static_bytes = function_attribute(k, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES");
  int64_t total = static_bytes + dynamic_bytes;
  if (total <= device.shared_bytes_per_block()) return static_cast<unsigned>(dynamic_bytes);
  if (total > device.shared_bytes_per_block_optin())
    throw Error(fmt::format("{} needs {} bytes of shared memory per block ({} dynamic + {} static) but {} allows at "
                            "most {}; use smaller tiles or fewer pipeline stages",
                            k.label, total, dynamic_bytes, static_bytes, device.label(),
                            device.shared_bytes_per_block_optin()),
                where);
  check(cuda_driver().cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(dynamic_bytes)),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k.label);
  return static_cast<unsigned>(dynamic_bytes);
}

}  // namespace

// ---- the driver ----------------------------------------------------------------------------------------

std::unique_ptr<CudaDriver> open_cuda_driver(const char* library, std::string* why_not) {
  auto fail = [&](std::string reason) {
    if (why_not) *why_not = std::move(reason);
    return std::unique_ptr<CudaDriver>();
  };
  dlerror();  // clear a stale error
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    return fail(fmt::format("no CUDA driver: dlopen({}) failed: {}; {}", library, reason ? reason : "unknown error",
                            kNoDriverAdvice));
  }
  auto driver = std::make_unique<CudaDriver>();
  driver->library = handle;
  std::vector<const char*> missing;
#define WEFT_CUDA_RESOLVE(required, member, symbol, fallback, parameters)                \
  driver->member = reinterpret_cast<member##_fn>(find_symbol(handle, symbol, fallback)); \
  if (required && !driver->member) missing.push_back(symbol);
  WEFT_CUDA_DRIVER_SYMBOLS(WEFT_CUDA_RESOLVE)
#undef WEFT_CUDA_RESOLVE
  if (!missing.empty()) {
    dlclose(handle);
    return fail(fmt::format("the CUDA driver {} is too old or not a CUDA driver: it lacks {}; update the NVIDIA "
                            "driver or use WEFT_BACKEND=cpu",
                            library, symbol_list(missing)));
  }
  return driver;
}

const CudaDriver& cuda_driver() {
  const DriverState& state = driver_state();
  if (!state.initialised) throw Error(state.failure);
  return *state.driver;
}

bool cuda_driver_exiting() { return exiting.load(); }

bool cuda_available(std::string* why_not) {
  const DriverState& state = driver_state();
  std::string reason = state.failure;
  if (state.initialised) {
    int count = 0;
    CUresult result = state.driver->cuDeviceGetCount(&count);
    if (result != CUDA_SUCCESS)
      reason = fmt::format("cuDeviceGetCount returned {}", describe(state.driver.get(), result));
    else if (count < 1)
      reason = "no CUDA device: the NVIDIA driver is installed but sees no device; use WEFT_BACKEND=cpu";
    else
      return true;
  }
  if (why_not) *why_not = reason;
  return false;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return "CUDA driver of unknown version";
  return fmt::format("CUDA {}.{}", version / 1000, version % 1000 / 10);
}

std::string cuda_error_text(CUresult result) {
  return describe(driver_state().driver.get(), result) + advice_for(result);
}

void throw_cuda_error(CUresult result, const char* call, std::string_view what) {
  const DriverState& state = driver_state();
  throw Error(fmt::format("{} failed{}{}: {}{}", call, what.empty() ? "" : " for ", what,
                          describe(state.driver.get(), result), advice_for(result)));
}

// ---- devices -------------------------------------------------------------------------------------------

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  const CudaDriver& driver = cuda_driver();
  int count = 0;
  check(driver.cuDeviceGetCount(&count), "cuDeviceGetCount", "");
  if (ordinal < 0 || ordinal >= count)
    throw Error(fmt::format("CUDA device {} does not exist: the driver sees {} device{}{}", ordinal, count,
                            count == 1 ? "" : "s",
                            count > 0 ? fmt::format(" (WEFT_CUDA_DEVICE picks one of 0..{})", count - 1) : ""));
  std::string what = fmt::format("CUDA device {}", ordinal);
  check(driver.cuDeviceGet(&device_, ordinal), "cuDeviceGet", what);
  char name[256] = {};
  check(driver.cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName", what);
  name_ = name;
  auto attribute = [&](CUdevice_attribute a, const char* a_name) {
    int value = 0;
    check(driver.cuDeviceGetAttribute(&value, a, device_), fmt::format("cuDeviceGetAttribute({})", a_name).c_str(),
          what);
    return value;
  };
  cc_major_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
  cc_minor_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
  multiprocessors_ = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
  shared_per_block_ = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK");
  shared_per_block_optin_ =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN");
  // Last, so that nothing after it can throw and leak the retained context.
  check(driver.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain", what);
}

CudaDevice::~CudaDevice() {
  if (context_) cuda_driver().cuDevicePrimaryCtxRelease(device_);  // errors ignored: may run at exit
}

CUresult CudaDevice::try_make_current() const {
  const CudaDriver& driver = cuda_driver();
  CUcontext current = nullptr;
  CUresult result = driver.cuCtxGetCurrent(&current);
  if (result != CUDA_SUCCESS || current == context_) return result;
  return driver.cuCtxSetCurrent(context_);
}

void CudaDevice::make_current() const { check(try_make_current(), "cuCtxSetCurrent", label()); }

std::string CudaDevice::label() const { return fmt::format("cuda:{} ({})", ordinal_, name_); }

// ---- PTX, modules, kernels -----------------------------------------------------------------------------

CudaModule::CudaModule(const std::string& ptx, const CudaDevice& device, std::string_view what) : device_(device) {
  device.make_current();
  JitLogs logs;
  CUresult result = cuda_driver().cuModuleLoadDataEx(&module_, ptx.c_str(), JitLogs::count, logs.options, logs.values);
  if (result != CUDA_SUCCESS) throw_jit_error(result, what, logs);
  jit_log_ = trimmed(logs.info);
}

CudaModule::~CudaModule() {
  if (!module_ || cuda_driver_exiting()) return;
  // Errors ignored: a module may outlive the driver at process exit.
  if (device_.try_make_current() == CUDA_SUCCESS) cuda_driver().cuModuleUnload(module_);
}

CUfunction CudaModule::function(const std::string& entry, std::string_view what) const {
  CUfunction function = nullptr;
  check(cuda_driver().cuModuleGetFunction(&function, module_, entry.c_str()),
        fmt::format("cuModuleGetFunction('{}')", entry).c_str(), what);
  return function;
}

std::shared_ptr<CudaKernel> load_cuda_kernel(const std::string& name, std::string ptx, const std::string& entry,
                                             int threads, int64_t shared_bytes, const CudaDevice& device,
                                             SourceLoc where) {
  auto k = std::make_shared<CudaKernel>();
  k->name = name;
  k->label = fmt::format("kernel '{}'", name);
  k->ptx = std::move(ptx);
  k->module = std::make_unique<CudaModule>(k->ptx, device, k->label);
  k->function = k->module->function(entry, k->label);
  k->threads = threads;
  check_threads_fit(*k, device, where);
  k->shared_bytes = reserve_shared_memory(*k, shared_bytes, device, where);
  return k;
}

std::shared_ptr<CudaKernel> load_cuda_kernel(const std::string& name, const codegen::nvptx::PtxKernel& ptx,
                                             const CudaDevice& device, SourceLoc where) {
  return load_cuda_kernel(name, ptx.ptx, ptx.entry, ptx.threads, ptx.shared_bytes, device, where);
}

}  // namespace weft::driver::cuda
