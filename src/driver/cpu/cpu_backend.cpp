// The CPU backend: host memory, kernels JIT-compiled by LLVM, a grid spread over host threads.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "driver/backend.h"
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

class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override { return "cpu"; }

  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kFrameAlign, Frame::round_up(static_cast<int64_t>(bytes)));
    if (!p) throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
    return p;
  }
  void release(void* address) override { std::free(address); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  std::shared_ptr<CompiledKernel> compile(const ir::Function& f, const KernelOptions&) override {
    auto k = std::make_shared<CpuKernel>();
    k->name = f.name;
    k->code = driver::cpu::jit_compile(f);
    return k;
  }

  void launch(const CompiledKernel& compiled, const LaunchDims& grid, const uint64_t* args, size_t,
              void*) override {
    const auto& k = static_cast<const CpuKernel&>(compiled);
    int64_t total = grid.x * grid.y * grid.z;
    int64_t threads = support::knobs().cpu_threads > 0 ? support::knobs().cpu_threads
                                                       : std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads = std::min(threads, total);
    std::vector<std::unique_ptr<Frame>> frames;  // allocated here, so a failure is an Error, not a crash in a thread
    for (int64_t t = 0; t < threads; ++t) frames.push_back(std::make_unique<Frame>(k.code.frame_bytes));
    std::atomic<int64_t> next{0};
    auto worker = [&](char* frame) {
      ProgramCtx ctx{{0, 0, 0}, {int32_t(grid.x), int32_t(grid.y), int32_t(grid.z)}};
      for (int64_t p = next++; p < total; p = next++) {
        ctx.program_id[0] = static_cast<int32_t>(p % grid.x);
        ctx.program_id[1] = static_cast<int32_t>((p / grid.x) % grid.y);
        ctx.program_id[2] = static_cast<int32_t>(p / (grid.x * grid.y));
        k.code.entry(args, &ctx, frame);
      }
    };
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker, frames[t]->data);
    worker(frames[0]->data);
    for (std::thread& t : pool) t.join();
  }

  void synchronize(void*) override {}
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace weft::detail
