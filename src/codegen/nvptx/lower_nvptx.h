// Lowering a verified kernel to per-thread LLVM IR for NVPTX (see lowering.h for the layout).
#pragma once

#include <memory>
#include <string>

#include "ir/node.h"
#include "passes/wait_sites.h"
#include "weft/kernel.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace weft::codegen::nvptx {

struct LoweredKernel {
  std::unique_ptr<llvm::Module> module;
  std::string symbol;
  int64_t shared_bytes = 0;  // dynamic shared memory the kernel uses
  int threads = 0;           // per block: num_warps * 32, or all warps of the kernel's tasks
};

// `num_warps`: the block's warps when the kernel has no async_tasks (its tasks say how many otherwise);
// `cluster`: the blocks per thread-block cluster the kernel is launched in.
// `debug_waits`: GPU debug mode (debug_waits.h): the kernel's wait sites (passes::plan_wait_sites); the
// kernel then takes three hidden trailing parameters and its mbarrier waits time out. Null: no debug mode.
LoweredKernel lower_to_nvptx(const ir::Function& f, llvm::LLVMContext& context, int num_warps,
                             const ClusterDims& cluster, const std::string& symbol,
                             const passes::WaitSites* debug_waits = nullptr);

}  // namespace weft::codegen::nvptx
