// Lowering a verified kernel to per-thread LLVM IR for NVPTX (see lower_nvptx.cpp for the layout).
#pragma once

#include <memory>
#include <string>

#include "ir/node.h"
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
LoweredKernel lower_to_nvptx(const ir::Function& f, llvm::LLVMContext& context, int num_warps,
                             const ClusterDims& cluster, const std::string& symbol);

}  // namespace weft::codegen::nvptx
