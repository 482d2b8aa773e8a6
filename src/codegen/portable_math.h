// Transcendental functions as plain LLVM IR arithmetic (range reduction + polynomials), for targets with
// no accurate library at hand (the GPUs). For f32 and f64 alike; within 2 ulp of the exact result on the
// ranges the tests cover (|x| up to ~1e4 for sin/cos), with NaN, infinities and zero handled as libm does.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace weft::codegen::portable_math {

llvm::Value* exp(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* exp2(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* log(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* log2(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* sin(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* cos(llvm::IRBuilder<>& b, llvm::Value* x);

// f32 only (f16/bf16 compute in f32): computed in f64 and rounded once, within 1 ulp; nullptr for an f64 x.
llvm::Value* tanh(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* sigmoid(llvm::IRBuilder<>& b, llvm::Value* x);  // 1 / (1 + e^-x)
llvm::Value* erf(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);  // C's powf, special cases included

}  // namespace weft::codegen::portable_math
