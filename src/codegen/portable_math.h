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

}  // namespace weft::codegen::portable_math
