// Lowering a verified kernel to LLVM IR for the host CPU: tiles live in a per-instance frame and each
// tile operation becomes a loop over its elements (which LLVM vectorizes). Block ops (shared memory,
// barriers, tasks) become calls into the block runtime (see cpu_abi.h).
#pragma once

#include <memory>
#include <string>

#include "codegen/cpu/cpu_abi.h"
#include "ir/node.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace weft::codegen::cpu {

struct CpuModule {
  std::unique_ptr<llvm::Module> module;
  std::string symbol;        // the kernel function's name in `module`
  int64_t frame_bytes = 0;   // scratch each program instance needs (each fiber, with block ops)
  std::shared_ptr<const BlockPlan> block;  // null when the kernel uses no block ops (no fibers needed)
  std::shared_ptr<const std::vector<AccessSite>> access_sites;  // compiled with bounds checks: the checked accesses
};

// `default_warps`: the warps of the one implicit task of a kernel without async_tasks (its named-barrier
// thread count). `check_bounds`: test every load and store against its allocation (cpu_abi.h, LaunchChecks).
CpuModule lower_to_cpu(const ir::Function& f, llvm::LLVMContext& context, const std::string& symbol,
                       int default_warps, bool check_bounds);

}  // namespace weft::codegen::cpu
