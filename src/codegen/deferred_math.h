// Transcendental functions kept whole through LLVM's pipeline on the GPU, expanded after it.
//
// portable_math spells exp, log, sin … as 20-40 instructions of range reduction and polynomial each; a softmax
// row of eight elements is then a third polynomials, which the pipeline visits several times and has nothing
// to improve in (bench_compile: softmax's warm compile 2.06 ms with them, 1.18 with a one-instruction exp).
// On NVPTX, ElementOps emits a call to `weft.math.<fn>.<f32|f64>` instead, a function without memory effects
// that the pipeline may merge, hoist and sink like any arithmetic; expand() then replaces each call by
// portable_math's code. Nothing optimizes that code afterwards, so portable_math writes it in the form LLVM's
// passes used to leave (no dead tests, tests on the f32 argument rather than its f64 copy, constants as the
// second factor): the SASS of the math tests and softmax is as long as before, and results are unchanged.
#pragma once

#include <llvm/ADT/ArrayRef.h>
#include <llvm/IR/IRBuilder.h>

namespace llvm {
class Module;
}

namespace weft::codegen::deferred_math {

enum class Fn { exp, exp2, log, log2, sin, cos, tanh, sigmoid, erf, pow };

// portable_math's code for fn, here and now (nullptr where portable_math has none, e.g. tanh of an f64).
llvm::Value* expand_now(llvm::IRBuilder<>& b, Fn fn, llvm::ArrayRef<llvm::Value*> args);

// A call to fn's placeholder (args of one type, f32, or f64 for exp … cos); other types expand now.
llvm::Value* call(llvm::IRBuilder<>& b, Fn fn, llvm::ArrayRef<llvm::Value*> args);

// Replaces every placeholder call in m by expand_now's code and removes the placeholders.
void expand(llvm::Module& m);

}  // namespace weft::codegen::deferred_math
