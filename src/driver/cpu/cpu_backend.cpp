// The CPU backend: host memory, kernels JIT-compiled by LLVM, a grid spread over host threads. Kernels
// with block ops (shared memory, barriers, tasks) run each program instance as a block of fibers
// (block_runtime.h); the others call the kernel once per program instance.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "codegen/nvptx/compile_ptx.h"
#include "driver/backend.h"
#include "driver/cpu/block_runtime.h"
#include "driver/cpu/bounds_checks.h"
#include "driver/cpu/cpu_jit.h"
#include "support/env.h"

namespace weft::detail {
namespace {

using codegen::cpu::kFrameAlign;
using codegen::cpu::ProgramCtx;

struct CpuKernel : CompiledKernel {
  driver::cpu::JitKernel code;
};

// One program instance's scratch frame.
struct Frame {
  explicit Frame(int64_t bytes) : data(static_cast<char*>(std::aligned_alloc(kFrameAlign, round_up(bytes)))) {
    if (!data) throw Error(fmt::format("the CPU backend could not allocate a {}-byte kernel frame", bytes));
  }
  ~Frame() { std::free(data); }
  static size_t round_up(int64_t b) { return static_cast<size_t>((b + kFrameAlign - 1) / kFrameAlign * kFrameAlign); }
  char* data;
};

// Runs work(thread, program) for every program in [0, total) on `threads` host threads (the caller's
// among them). The first exception any of them throws stops the others from taking more programs and is
// rethrown here, on the launching thread.
template <class Work> void run_grid(int64_t total, int64_t threads, const Work& work) {
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::exception_ptr first_error;
  auto worker = [&](int64_t t) {
    try {
      for (int64_t p = next++; p < total; p = next++) work(t, p);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first_error) first_error = std::current_exception();
      next = total;
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (std::thread& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override { return "cpu"; }

  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kFrameAlign, Frame::round_up(static_cast<int64_t>(bytes)));
    if (!p) throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
    registry_.add(p, bytes);
    return p;
  }
  void release(void* address) override {
    registry_.remove(address);
    std::free(address);
  }
  void note_borrowed(void* address, size_t bytes) override { registry_.add(address, bytes); }
  void forget_borrowed(void* address) override { registry_.remove(address); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }

  // The CPU backend accepts exactly the kernels the GPU target accepts: each kernel is first lowered for it
  // (WEFT_TARGET, else sm_90a) and what that lowering rejects -- shared memory including the scratch weft adds
  // per task, registers, barrier ids, task placement -- is rejected here with the same Error. The JIT runs
  // that check only when it compiles: an object in the compile cache was stored after the check passed for
  // the same IR, warps, cluster shape and target.
  std::shared_ptr<CompiledKernel> compile(const ir::Function& f, const KernelOptions& options) override {
    const std::string& knob = support::knobs().target;
    const codegen::nvptx::PtxTarget target{knob.starts_with("sm_") ? knob : "sm_90a", "+ptx85"};
    driver::cpu::JitCheck gpu_check{
        fmt::format("accepted by {} {} in clusters of {} {} {}", target.arch, target.features, options.cluster.x,
                    options.cluster.y, options.cluster.z),
        [&] { codegen::nvptx::plan_for_target(f, options, target); }};
    auto k = std::make_shared<CpuKernel>();
    k->name = f.name;
    k->code = driver::cpu::jit_compile(f, options.num_warps, checks_bounds(options), gpu_check);
    k->cluster = options.cluster;
    return k;
  }

  void launch(const CompiledKernel& compiled, const LaunchDims& grid, const uint64_t* args, size_t count,
              void*) override {
    const auto& k = static_cast<const CpuKernel&>(compiled);
    std::optional<driver::cpu::LaunchBounds> bounds;  // compiled with bounds checks
    if (k.code.access_sites) bounds.emplace(k.name, *k.code.access_sites, args, count, registry_);
    const codegen::cpu::LaunchChecks* checks = bounds ? bounds->checks() : nullptr;
    int64_t total = grid.x * grid.y * grid.z;
    int64_t threads = support::knobs().cpu_threads > 0 ? support::knobs().cpu_threads
                                                       : support::host_cores();
    threads = std::min(threads, total);
    const int32_t num_programs[3] = {int32_t(grid.x), int32_t(grid.y), int32_t(grid.z)};
    auto program_id = [&](int64_t p, int32_t* id) {
      id[0] = static_cast<int32_t>(p % grid.x);
      id[1] = static_cast<int32_t>((p / grid.x) % grid.y);
      id[2] = static_cast<int32_t>(p / (grid.x * grid.y));
    };

    if (k.code.block) {
      // Blocks of fibers, a cluster of them at a time (a block without clusters: the grid is a multiple of
      // the cluster, checked at launch); one runner (stacks, frames, shared memory) per thread.
      const ClusterDims& c = k.cluster;
      const int64_t clusters_x = grid.x / c.x, clusters_y = grid.y / c.y;
      const int64_t clusters = total / c.blocks();
      threads = std::min(threads, clusters);
      std::optional<uint64_t> seed = support::cpu_sched_seed();
      std::vector<std::unique_ptr<driver::cpu::ClusterRunner>> runners;
      for (int64_t t = 0; t < threads; ++t)
        runners.push_back(
            std::make_unique<driver::cpu::ClusterRunner>(*k.code.block, k.code.entry, k.code.frame_bytes, c));
      run_grid(clusters, threads, [&](int64_t t, int64_t p) {
        const int32_t first[3] = {static_cast<int32_t>(p % clusters_x * c.x),
                                  static_cast<int32_t>((p / clusters_x) % clusters_y * c.y),
                                  static_cast<int32_t>(p / (clusters_x * clusters_y) * c.z)};
        runners[t]->run(args, first, num_programs, seed, checks);
      });
      return;
    }

    std::vector<std::unique_ptr<Frame>> frames;  // allocated here, so a failure is an Error, not a crash in a thread
    for (int64_t t = 0; t < threads; ++t) frames.push_back(std::make_unique<Frame>(k.code.frame_bytes));
    struct alignas(64) ThreadCtx {  // one cache line each: threads write theirs for every program
      ProgramCtx ctx;
    };
    std::vector<ThreadCtx> contexts(threads);
    for (ThreadCtx& c : contexts) {
      std::copy(num_programs, num_programs + 3, c.ctx.num_programs);
      c.ctx.checks = checks;
    }
    run_grid(total, threads, [&](int64_t t, int64_t p) {
      program_id(p, contexts[t].ctx.program_id);
      k.code.entry(args, &contexts[t].ctx, frames[t]->data);
      if (bounds && bounds->failed()) bounds->throw_report();  // the program returned at the violation
    });
  }

  void synchronize(void*) override {}

 private:
  static bool checks_bounds(const KernelOptions& options) {
    return options.debug || support::knobs().check_bounds;
  }

  driver::cpu::AllocationRegistry registry_;  // what bounds checks compare pointer arguments with
};

}  // namespace

// Never destroyed, as the CUDA backends: Buffers in static storage made before the backend (a library's
// workspace map) are destroyed after it would be, and still remove themselves from its registry.
Backend& cpu_backend() {
  static CpuBackend* backend = new CpuBackend;
  return *backend;
}

}  // namespace weft::detail
