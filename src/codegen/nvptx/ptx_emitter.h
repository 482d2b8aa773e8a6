// weft's own PTX emitter: the optimized LLVM module of one kernel -> PTX text, without LLVM's code generator.
//
// PTX is a virtual-register language and ptxas is an optimizing compiler (register allocation, scheduling,
// strength reduction, addressing modes), so a kernel's PTX needs no instruction selection of ours: each LLVM
// instruction weft's lowering leaves after its pass pipeline becomes one PTX instruction or a few, every SSA
// value one virtual register, a phi a copy on each incoming edge. That skips the SelectionDAG and the
// machine passes, which are three quarters of a compile (issue 12). The emitter covers the LLVM IR weft's
// lowering produces (integer and float arithmetic, compares, selects, casts, loads and stores by address
// space, the NVVM intrinsics weft calls, inline asm); for anything else it says what it met and the
// caller uses LLVM's code generator instead, so a kernel always gets PTX.
//
// The default since session 18 (its PTX passed the GPU suite); WEFT_PTX_EMITTER=llvm chooses LLVM's instead.
#pragma once

#include <optional>
#include <string>

#include "codegen/nvptx/compile_ptx.h"

namespace llvm {
class Module;
}

namespace weft::codegen::nvptx {

// The PTX module for the one kernel in `m` (already optimized), or nothing when `m` holds something the
// emitter does not handle; then `unsupported` says what (an instruction, an intrinsic, a type).
std::optional<std::string> emit_ptx(const llvm::Module& m, const PtxTarget& target, std::string* unsupported);

}  // namespace weft::codegen::nvptx
