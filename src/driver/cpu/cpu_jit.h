// The CPU backend's JIT: lowers a kernel to LLVM IR, optimizes it, compiles it to an object (or takes the
// object from the compile cache) and links it in-process (ORC LLJIT), each kernel in a JITDylib of its own
// so that its code is freed when the last JitKernel holding it goes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "codegen/cpu/cpu_abi.h"
#include "ir/node.h"

namespace weft::driver::cpu {

struct JitKernel {
  codegen::cpu::KernelFn entry = nullptr;
  int64_t frame_bytes = 0;
  std::shared_ptr<const codegen::cpu::BlockPlan> block;  // set when the kernel runs as blocks of fibers
  std::shared_ptr<const std::vector<codegen::cpu::AccessSite>> access_sites;  // set when compiled with bounds checks
  std::shared_ptr<void> code;  // owns the JIT code behind `entry`: freed with the last copy
};

// Compiles `f` for the host; thread-safe. `default_warps`: the warps of a kernel without async_tasks (what
// its named barriers count); `check_bounds`: every load and store checked against its allocation
// (codegen/cpu/cpu_abi.h, LaunchChecks). The object code goes through the compile cache (src/cache), keyed
// on the IR, `default_warps`, the bounds checks, the host CPU and its features, LLVM's version and weft's
// build; WEFT_DUMP=llvm or llvm-opt compiles afresh so that there is something to dump.
//
// `check`: what must hold before the kernel is compiled (the CPU backend's: the GPU target accepts it), run
// unless the object comes from the cache; `check.key` names everything the check depends on besides `f`
// and `default_warps` and goes into the cache key, so that an entry exists only where the check passed.
struct JitCheck {
  std::string key;
  std::function<void()> run;
};
JitKernel jit_compile(const ir::Function& f, int default_warps, bool check_bounds, const JitCheck& check = {});

// What the JIT has done in this process: kernels compiled by LLVM, kernels whose object came from the
// compile cache, kernels whose code is still loaded, and the bytes of code and data the JIT holds for them.
struct JitStats {
  uint64_t compiled = 0;
  uint64_t loaded_from_cache = 0;
  uint64_t live_kernels = 0;
  uint64_t live_code_bytes = 0;
};
JitStats jit_stats();

}  // namespace weft::driver::cpu
