// The CUDA backend: device memory through the driver API, kernels compiled to PTX by the NVPTX code
// generator and to machine code by the driver, launched with cuLaunchKernel on the caller's stream.
#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string_view>

#include "cache/disk_cache.h"
#include "driver/backend.h"
#include "driver/cuda/cuda_driver.h"
#include "driver/cuda/cuda_tensor_map.h"
#include "ir/printer.h"
#include "ir/walk.h"
#include "support/build_id.h"
#include "support/compile_timing.h"
#include "support/env.h"

namespace weft::driver::cuda {

std::string module_cache_key(const ir::Function& f, const KernelOptions& options,
                             const codegen::nvptx::PtxTarget& target, int driver_version) {
  return cache::KeyBuilder()
      .add("cuda ptx 2")
      .add(ir::print(f))
      .add(options.num_warps)
      .add(codegen::nvptx::debug_mode(options) ? "debug" : "release")
      .add(fmt::format("cluster {} {} {}", options.cluster.x, options.cluster.y, options.cluster.z))
      .add(target.arch)
      .add(target.features)
      .add(support::weft_identity())
      .add(codegen::nvptx::code_generator_version())
      .add(driver_version)
      .finish();
}

}  // namespace weft::driver::cuda

namespace weft::detail {
namespace {

using namespace driver::cuda;

// After a debug-mode timeout, why weft does not carry on (see CudaBackend::finish_debug_launch).
constexpr const char* kContextLost =
    "\nthe kernel was stopped with a trap, which leaves the CUDA context unusable: restart the process (weft does "
    "not reset the device's primary context, which would free memory and modules that Buffers and compiled "
    "kernels still hold)";

// The oldest PTX ISA that knows the architecture (8.6 brought sm_100a/sm_101a, 8.7 sm_120a, 8.8 sm_103a and
// sm_121a); null keeps the code generator's default.
const char* minimum_ptx_features(int major, int minor) {
  if (major < 10) return nullptr;
  if (major == 10 && minor <= 1) return "+ptx86";
  if (major == 12 && minor == 0) return "+ptx87";
  return "+ptx88";
}

// Compiled for exactly the device's architecture; on sm_90 and later the "a" variant, which unlocks the
// architecture-specific instructions (wgmma, setmaxnreg, ...): fine for code JIT-compiled where it runs.
codegen::nvptx::PtxTarget ptx_target_for(const CudaDevice& device) {
  codegen::nvptx::PtxTarget target;
  int major = device.cc_major(), minor = device.cc_minor();
  target.arch = fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : "");
  if (const char* features = minimum_ptx_features(major, minor)) target.features = features;
  return target;
}

// weft::Error's what() starts with "weft::Error: "; a reason quoted inside another message drops it.
std::string reason_of(const Error& e) {
  std::string_view text = e.what(), prefix = "weft::Error: ";
  if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  return std::string(text);
}

// The path of the CUDA tool `name` on PATH or in /usr/local/cuda/bin; empty if there is none.
std::string find_cuda_tool(const char* name) {
  std::string command = fmt::format("command -v {} 2>/dev/null || command -v /usr/local/cuda/bin/{} 2>/dev/null", name, name);
  std::string path;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[4096];
    if (std::fgets(buffer, sizeof buffer, p)) path = buffer;
    pclose(p);
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return path;
}

// WEFT_DUMP=sass: the machine code of the PTX, by the CUDA toolkit's ptxas and cuobjdump when they are
// installed (weft does not need them). The toolkit's ptxas may be another version than the driver's.
void dump_sass(const std::string& kernel, const std::string& ptx, const std::string& arch) {
  std::string ptxas = find_cuda_tool("ptxas"), cuobjdump = find_cuda_tool("cuobjdump");
  if (ptxas.empty() || cuobjdump.empty()) {
    support::dump("sass", kernel, "sass", "(no SASS: the CUDA toolkit's ptxas and cuobjdump are not installed)");
    return;
  }
  char path[] = "/tmp/weft-sass-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    throw Error(fmt::format("WEFT_DUMP=sass: cannot create {} for ptxas: {}; free /tmp or drop sass from WEFT_DUMP",
                            path, std::strerror(errno)));
  bool written = ::write(fd, ptx.data(), ptx.size()) == static_cast<ssize_t>(ptx.size());
  ::close(fd);
  if (!written) {
    std::remove(path);
    throw Error(fmt::format("WEFT_DUMP=sass: writing the PTX to {} failed (is /tmp full?); free /tmp or drop sass "
                            "from WEFT_DUMP",
                            path));
  }
  std::string cubin = std::string(path) + ".cubin";
  std::string text = fmt::format("// {} -arch={}, then {} --dump-sass\n", ptxas, arch, cuobjdump);
  std::string command = fmt::format("{} -arch={} -o {} {} 2>&1 && {} --dump-sass {} 2>&1", ptxas, arch, cubin, path,
                                    cuobjdump, cubin);
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) text.append(buffer, n);
    pclose(p);
  }
  std::remove(path);
  std::remove(cubin.c_str());
  support::dump("sass", kernel, "sass", text);
}

// The driver compiler's performance advisories ("Potential Performance Loss: ..."), one line each, printed on
// stderr: they name a cost the user can act on (spills, serialized wgmma) and are otherwise invisible.
void report_advisories(const std::string& kernel, const std::string& jit_log) {
  size_t start = 0;
  while (start < jit_log.size()) {
    size_t end = jit_log.find('\n', start);
    if (end == std::string::npos) end = jit_log.size();
    std::string_view line(jit_log.data() + start, end - start);
    if (line.find("Performance Loss") != std::string_view::npos)
      std::fprintf(stderr, "weft: kernel '%s': the driver's PTX compiler says: %.*s\n", kernel.c_str(),
                   static_cast<int>(line.size()), line.data());
    start = end + 1;
  }
}

CUdeviceptr device_address(const void* address) { return reinterpret_cast<CUdeviceptr>(address); }

unsigned grid_dimension(int64_t n, const CudaKernel& k) {
  if (n < 1 || n > std::numeric_limits<unsigned>::max())
    throw Error(fmt::format("{} launched with a grid dimension of {}, outside 1..{}", k.label, n,
                            std::numeric_limits<unsigned>::max()));
  return static_cast<unsigned>(n);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : device_(ordinal), name_(device_.label()) {}

  BackendKind kind() const override { return BackendKind::cuda; }
  std::string name() const override { return name_; }
  int multiprocessors() const override { return device_.multiprocessors(); }

  void* allocate(size_t bytes) override {
    device_.make_current();
    CUdeviceptr address = 0;
    check(driver().cuMemAlloc(&address, bytes), "cuMemAlloc", name_);
    return reinterpret_cast<void*>(address);
  }

  // Runs in destructors (Allocation's), so it reports instead of throwing.
  void release(void* address) override {
    if (cuda_driver_exiting()) return;  // the process's end frees it (cuda_driver.h)
    CUresult result = device_.try_make_current();
    if (result == CUDA_SUCCESS) result = driver().cuMemFree(device_address(address));
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_DEINITIALIZED) {  // DEINITIALIZED: at process exit
      try {
        check(result, "cuMemFree", name_);
      } catch (const Error& e) {
        std::fprintf(stderr, "weft: warning: %s\n", e.what());
      }
    }
  }

  // Synchronous copies on the legacy default stream: they wait for the work queued there (and on blocking
  // streams) before them, not for a user's non-blocking stream, which the user synchronizes first.
  // The copy from pageable memory may return before its DMA lands; waiting for it means a kernel launched
  // next on any stream, even a non-blocking one, sees the data.
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    device_.make_current();
    check(driver().cuMemcpyHtoD(device_address(dst), src, bytes), "cuMemcpyHtoD", name_);
    check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize after cuMemcpyHtoD", name_);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    device_.make_current();
    check(driver().cuMemcpyDtoH(dst, device_address(src), bytes), "cuMemcpyDtoH", name_);
  }
  // Synchronous like the copies above: after it returns, a launch on any stream sees the data.
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    device_.make_current();
    check(driver().cuMemcpyDtoD(device_address(dst), device_address(src), bytes), "cuMemcpyDtoD", name_);
    check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize after cuMemcpyDtoD", name_);
  }
  // From another GPU: cuMemcpyPeer (over NVLink or PCIe where the devices are peers, else staged by the
  // driver), ordered after the work on both devices' legacy default streams.
  bool copy_from_peer(void* dst, const Backend& from, const void* src, size_t bytes) override {
    const auto* peer = dynamic_cast<const CudaBackend*>(&from);
    if (!peer || !driver().cuMemcpyPeer) return false;
    device_.make_current();
    check(driver().cuMemcpyPeer(device_address(dst), device_.context(), device_address(src), peer->device_.context(),
                                bytes),
          "cuMemcpyPeer", fmt::format("{} from {}", name_, peer->name_));
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize after cuMemcpyPeer", name_);
    return true;
  }
  int ordinal() const override { return device_.ordinal(); }

  // Through the compile cache: a hit loads the PTX an earlier process (or thread) generated, skipping LLVM;
  // the driver's own cache then usually skips its compiler too.
  std::shared_ptr<CompiledKernel> compile(const ir::Function& f, const KernelOptions& options) override {
    std::shared_ptr<CudaKernel> k = compile_module(f, options);
    mark_descriptor_params(*k, f);
    // From the IR, as the lowering numbered the waits: the same for a kernel from the compile cache.
    if (codegen::nvptx::debug_mode(options))
      k->debug_waits = std::make_shared<const passes::WaitSites>(passes::plan_wait_sites(f, options.num_warps));
    k->cluster = options.cluster;
    k->waits_for_prior_grid =
        ir::any_statement(f.body, [](const ir::Node& n) { return n.op == ir::Op::WaitForPriorGrid; });
    return k;
  }

  // The address of the descriptor's CUtensorMap, encoded at the first launch that passes it: launch()
  // hands the driver that address for the parameter, and the driver copies the 128 bytes it points at.
  uint64_t tensor_desc_slot(const TmaDescriptor& d) override {
    check(device_.try_make_current(), "cuCtxSetCurrent", name_);
    return reinterpret_cast<uint64_t>(&encoded_tensor_map(d));
  }

  // Nothing here may synchronize or allocate: launches must be capturable into a CUDA graph, and this is
  // the hot path of every launch (bench_launch measures it against a bare cuLaunchKernel). Except in GPU
  // debug mode, which appends three hidden parameters and synchronizes (finish_debug_launch).
  void launch(const CompiledKernel& compiled, const LaunchDims& grid, const uint64_t* args, size_t count,
              void* stream) override {
    const auto& k = static_cast<const CudaKernel&>(compiled);
    // What device_.make_current() does (the context is set only when another one is current), but with
    // the label formatted once, in name_, instead of on every launch.
    check(device_.try_make_current(), "cuCtxSetCurrent", name_);
    // The driver reads each parameter's value through a pointer: a .u64 parameter's points to its slot; a
    // TMA descriptor's (a 128-byte .param the kernel receives by value) is the slot itself, the address of
    // the CUtensorMap (tensor_desc_slot). The pointers live on the stack; only a kernel of more than
    // kInlineParams parameters uses the heap.
    constexpr size_t kInlineParams = 32;
    const size_t total = count + (k.debug_waits ? 3 : 0);
    void* inline_params[kInlineParams];
    std::vector<void*> heap_params;
    void** params = inline_params;
    if (total > kInlineParams) {
      heap_params.resize(total);
      params = heap_params.data();
    }
    for (size_t i = 0; i < count; ++i) params[i] = const_cast<uint64_t*>(&args[i]);
    for (size_t i = 0; i < k.descriptor_params.size() && i < count; ++i)
      if (k.descriptor_params[i]) params[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(args[i]));
    uint64_t hidden[3] = {};  // debug mode: the timeout record, its claim word, the timeout in ns
    if (k.debug_waits) {
      const TimeoutRecord& record = timeout_record();
      hidden[0] = record.device;
      hidden[1] = record.claim;
      hidden[2] = static_cast<uint64_t>(support::knobs().debug_timeout_ms) * 1000000u;
      for (size_t i = 0; i < 3; ++i) params[count + i] = &hidden[i];
    }
    if (k.cluster.blocks() > 1 || k.waits_for_prior_grid)
      launch_with_attributes(k, grid, stream, total == 0 ? nullptr : params);
    else
      check(driver().cuLaunchKernel(k.function, grid_dimension(grid.x, k), grid_dimension(grid.y, k),
                                    grid_dimension(grid.z, k), static_cast<unsigned>(k.threads), 1, 1, k.shared_bytes,
                                    static_cast<CUstream>(stream), total == 0 ? nullptr : params, nullptr),
            "cuLaunchKernel", k.label);
    if (k.debug_waits) finish_debug_launch(k, static_cast<CUstream>(stream));
  }

  // cuLaunchKernelEx with the kernel's launch attributes: a grid in thread-block clusters
  // (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, the same shape as the kernel's .reqnctapercluster; the grid is a
  // multiple of it, checked at launch), and for a kernel that calls wait_for_prior_grid, programmatic stream
  // serialization (it may start before the kernel ahead of it on the stream has ended).
  void launch_with_attributes(const CudaKernel& k, const LaunchDims& grid, void* stream, void** params) {
    if (!driver().cuLaunchKernelEx)
      throw Error(fmt::format("{} {}, which needs cuLaunchKernelEx (CUDA 12.0); the driver ({}) lacks it: update the "
                              "driver",
                              k.label,
                              k.cluster.blocks() > 1 ? "runs in thread-block clusters"
                                                     : "calls wait_for_prior_grid (programmatic dependent launch)",
                              cuda_version_string(driver().version)));
    CUlaunchAttribute attributes[2]{};
    unsigned count = 0;
    if (k.cluster.blocks() > 1) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attributes[count++].value.clusterDim = {static_cast<unsigned>(k.cluster.x), static_cast<unsigned>(k.cluster.y),
                                              static_cast<unsigned>(k.cluster.z)};
    }
    if (k.waits_for_prior_grid) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[count++].value.programmaticStreamSerializationAllowed = 1;
    }
    CUlaunchConfig config{};
    config.gridDimX = grid_dimension(grid.x, k);
    config.gridDimY = grid_dimension(grid.y, k);
    config.gridDimZ = grid_dimension(grid.z, k);
    config.blockDimX = static_cast<unsigned>(k.threads);
    config.blockDimY = config.blockDimZ = 1;
    config.sharedMemBytes = k.shared_bytes;
    config.hStream = static_cast<CUstream>(stream);
    config.attrs = attributes;
    config.numAttrs = count;
    check(driver().cuLaunchKernelEx(&config, k.function, params, nullptr), "cuLaunchKernelEx", k.label);
  }

  // nullptr (Device::synchronize, and the default Stream) waits for all work on the device, whichever
  // stream it went to; a user's stream waits for that stream only.
  void synchronize(void* stream) override {
    device_.make_current();
    if (stream)
      check(driver().cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize", name_);
    else
      check(driver().cuCtxSynchronize(), "cuCtxSynchronize", name_);
  }

 private:
  static const CudaDriver& driver() { return cuda_driver(); }

  // Which parameters are TMA descriptors, read from the IR (the slots do not say).
  static void mark_descriptor_params(CudaKernel& k, const ir::Function& f) {
    std::vector<bool> marks(f.params.size(), false);
    bool any = false;
    for (size_t i = 0; i < f.params.size(); ++i)
      if (f.params[i]->type.kind == ir::Type::Kind::TensorDesc) marks[i] = any = true;
    k.descriptor_params = any ? std::move(marks) : std::vector<bool>{};
  }

  // GPU debug mode's passes::WaitTimeoutRecord: pinned host memory mapped into the device, made at the
  // first debug launch and kept for the process. Host memory because a timeout ends in a trap, after which
  // the context answers every call with an error: the record must be readable without the driver. The
  // claim word, which lets one thread write the record, is device memory. Neither is ever reset: the first
  // timeout is also the context's last.
  struct TimeoutRecord {
    passes::WaitTimeoutRecord* host = nullptr;
    CUdeviceptr device = 0;  // the record, as the device addresses it
    CUdeviceptr claim = 0;   // u32, 0 until claimed
  };
  const TimeoutRecord& timeout_record() {
    std::call_once(timeout_record_once_, [&] {
      device_.make_current();
      void* host = nullptr;
      check(driver().cuMemHostAlloc(&host, sizeof(passes::WaitTimeoutRecord), CU_MEMHOSTALLOC_DEVICEMAP),
            "cuMemHostAlloc (GPU debug mode's timeout record)", name_);
      timeout_record_.host = new (host) passes::WaitTimeoutRecord{};  // all zero: not complete
      check(driver().cuMemHostGetDevicePointer(&timeout_record_.device, host, 0), "cuMemHostGetDevicePointer", name_);
      const uint32_t unclaimed = 0;
      check(driver().cuMemAlloc(&timeout_record_.claim, sizeof unclaimed), "cuMemAlloc (debug mode's claim word)", name_);
      check(driver().cuMemcpyHtoD(timeout_record_.claim, &unclaimed, sizeof unclaimed), "cuMemcpyHtoD", name_);
    });
    return timeout_record_;
  }

  // Debug mode: waits for the launch, so that a wait that timed out on the device becomes an Error here
  // with its record (the first thread that gave up), rather than an anonymous CUDA_ERROR_ILLEGAL_INSTRUCTION
  // at some later call. A trap is the only way out of a deadlocked kernel, and it poisons the context; weft
  // leaves it so (kContextLost says why) and tells the user to restart the process.
  void finish_debug_launch(const CudaKernel& k, CUstream stream) {
    CUresult result = driver().cuStreamSynchronize(stream);
    if (result == CUDA_SUCCESS) return;
    const volatile passes::WaitTimeoutRecord* written = timeout_record().host;
    if (written->complete) {
      passes::WaitTimeoutRecord r;
      r.site = written->site;
      r.barrier = written->barrier;
      r.parity = written->parity;
      r.thread = written->thread;
      for (int axis = 0; axis < 3; ++axis) r.block[axis] = written->block[axis];
      throw Error(k.debug_waits->describe(r, support::knobs().debug_timeout_ms) + kContextLost,
                  k.debug_waits->site_loc(r.site));
    }
    throw_cuda_error(result, "cuStreamSynchronize after a launch in GPU debug mode", k.label);
  }

  std::shared_ptr<CudaKernel> compile_module(const ir::Function& f, const KernelOptions& options) {
    codegen::nvptx::PtxTarget target = ptx_target_for(device_);
    std::string key = module_cache_key(f, options, target, driver().version);
    // Asked for dumps, compile afresh so that every stage is there to dump.
    const support::Knobs& knobs = support::knobs();
    bool dumping = knobs.dumps_llvm_ir() || knobs.dumps("ptx") || knobs.dumps("sass");
    if (!dumping)
      if (std::optional<std::string> hit = cache::load(key))
        if (auto k = from_cache_entry(f, *hit)) return k;
    codegen::nvptx::PtxKernel ptx = codegen::nvptx::compile_to_ptx(f, options, target);
    std::shared_ptr<CudaKernel> k;
    {
      // cuModuleLoadDataEx compiles the PTX and loads the module in one call: all of it counts as link
      support::StageTimer timer(support::CompileStage::link);
      k = load_cuda_kernel(f.name, ptx, device_, f.loc);
    }
    report_advisories(f.name, k->module->jit_log());
    if (knobs.dumps("sass")) dump_sass(f.name, k->ptx, target.arch);
    cache::store(key, fmt::format("{}\n{}\n{}\n", ptx.entry, k->threads, k->shared_bytes) + k->ptx);
    return k;
  }

  // A cache entry is "entry\nthreads\nshared bytes\n" followed by the PTX; null if it does not parse.
  std::shared_ptr<CudaKernel> from_cache_entry(const ir::Function& f, const std::string& entry) {
    size_t a = entry.find('\n'), b = entry.find('\n', a + 1), c = entry.find('\n', b + 1);
    if (c == std::string::npos) return nullptr;
    int threads = std::atoi(entry.substr(a + 1, b - a - 1).c_str());
    int64_t shared = std::atoll(entry.substr(b + 1, c - b - 1).c_str());
    support::StageTimer timer(support::CompileStage::link);
    return load_cuda_kernel(f.name, entry.substr(c + 1), entry.substr(0, a), threads, shared, device_, f.loc);
  }

  CudaDevice device_;
  std::string name_;  // "cuda:0 (NVIDIA H200)"
  std::once_flag timeout_record_once_;
  TimeoutRecord timeout_record_;
};

struct Creation {
  Backend* backend = nullptr;
  std::string why_not;
};

Creation create_cuda_backend(int ordinal) {
  Creation created;
  if (!cuda_available(&created.why_not)) return created;
  try {
    // Never deleted: Buffers and Kernels in static storage are destroyed after any static backend would
    // be, and must still find the primary context retained when they free their memory and modules.
    created.backend = new CudaBackend(ordinal);
  } catch (const Error& e) {
    created.why_not = reason_of(e);
  }
  return created;
}

}  // namespace

int cuda_device_count() {
  if (!cuda_available(nullptr)) return 0;
  int count = 0;
  if (cuda_driver().cuDeviceGetCount(&count) != CUDA_SUCCESS) return 0;
  return count;
}

// One backend per device, made at its first use and kept (with the reason when it could not be made).
Backend* cuda_backend_for(int ordinal, std::string* why_not) {
  // Never destroyed (see above), the lock neither: Buffers freed by static destructors may still ask.
  static std::mutex* mutex = new std::mutex;
  static std::map<int, Creation>* backends = new std::map<int, Creation>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = backends->find(ordinal);
  if (it == backends->end()) it = backends->emplace(ordinal, create_cuda_backend(ordinal)).first;
  if (!it->second.backend && why_not) *why_not = it->second.why_not;
  return it->second.backend;
}

Backend* cuda_backend_or_null(std::string* why_not) {
  return cuda_backend_for(support::knobs().cuda_device, why_not);
}

}  // namespace weft::detail
