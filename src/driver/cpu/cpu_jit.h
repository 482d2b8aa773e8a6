// The CPU backend's JIT: lowers a kernel to LLVM IR, optimizes it and compiles it in-process (ORC LLJIT).
#pragma once

#include <memory>

#include "codegen/cpu/cpu_abi.h"
#include "ir/node.h"

namespace weft::driver::cpu {

struct JitKernel {
  codegen::cpu::KernelFn entry = nullptr;
  int64_t frame_bytes = 0;
  std::shared_ptr<const codegen::cpu::BlockPlan> block;  // set when the kernel runs as blocks of fibers
  std::shared_ptr<const std::vector<codegen::cpu::AccessSite>> access_sites;  // set when compiled with bounds checks
};

// Compiles `f` for the host; thread-safe. The code lives as long as the process. `default_warps`: the
// warps of a kernel without async_tasks (what its named barriers count); `check_bounds`: every load and
// store checked against its allocation (codegen/cpu/cpu_abi.h, LaunchChecks).
JitKernel jit_compile(const ir::Function& f, int default_warps, bool check_bounds);

}  // namespace weft::driver::cpu
