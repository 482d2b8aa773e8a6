// Lowering a verified kernel to LLVM IR for the host CPU: tiles live in a per-instance frame and each
// tile operation becomes a loop over its elements (which LLVM vectorizes).
#pragma once

#include <memory>
#include <string>

#include "ir/node.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace weft::codegen::cpu {

struct CpuModule {
  std::unique_ptr<llvm::Module> module;
  std::string symbol;        // the kernel function's name in `module`
  int64_t frame_bytes = 0;   // scratch each program instance needs
};

CpuModule lower_to_cpu(const ir::Function& f, llvm::LLVMContext& context, const std::string& symbol);

}  // namespace weft::codegen::cpu
