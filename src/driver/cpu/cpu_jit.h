// The CPU backend's JIT: lowers a kernel to LLVM IR, optimizes it and compiles it in-process (ORC LLJIT).
#pragma once

#include <memory>

#include "codegen/cpu/cpu_abi.h"
#include "ir/node.h"

namespace weft::driver::cpu {

struct JitKernel {
  codegen::cpu::KernelFn entry = nullptr;
  int64_t frame_bytes = 0;
};

// Compiles `f` for the host; thread-safe. The code lives as long as the process.
JitKernel jit_compile(const ir::Function& f);

}  // namespace weft::driver::cpu
