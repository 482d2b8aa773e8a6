// The semantics of one element: types, conversions and arithmetic as LLVM IR, shared by every backend so
// that the CPU reference and the GPUs compute the same thing. Only transcendental math differs by target
// (libm on the host, the GPU's approximate instructions on NVPTX).
//
// Element semantics, in short: f16/bf16 and the fp8 types compute in f32 and round to their type after every
// operation (fp8: saturating to the largest finite value, as the GPU's cvt.rn.satfinite does);
// integer x / 0 == 0 and x % 0 == 0, MIN / -1 wraps; shifts by >= the width give 0 (<<) or the sign (>>);
// float -> int saturates (NaN -> 0); to bool means != 0; min/max of floats propagate NaN (and order -0
// below +0), argmax/argmin give the index of the first NaN if there is one; a
// conversion to f16/bf16 rounds once, from any type; float % is fmod (exact on the GPU too, for
// quotients below 2^29); exp, log, sin … are within 2 ulp on every target.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "codegen/deferred_math.h"
#include "ir/node.h"

namespace weft::codegen {

enum class MathTarget { Host, Nvptx };

// Whether a unary math node asks for the fast, approximate flavour (attrs.ints[0] == 1; weft::fast::*).
inline bool approximate(const ir::Node& n) {
  return ir::op_category(n.op) == ir::OpCategory::Unary && !n.attrs.ints.empty() && n.attrs.ints[0] == 1;
}

class ElementOps {
 public:
  ElementOps(llvm::IRBuilder<>& b, MathTarget target, unsigned global_address_space = 0)
      : b_(b), target_(target), global_as_(global_address_space) {}

  llvm::Type* compute_type(DType d);  // what arithmetic runs on (f16/bf16: float; i1: i1)
  llvm::Type* memory_type(DType d);   // what memory holds (i1: i8; f16: half; bf16: i16; fp8: i8)
  llvm::Value* to_compute(DType d, llvm::Value* in_memory);
  llvm::Value* to_memory(DType d, llvm::Value* computed);
  // Two 16-bit elements as memory holds them, packed into a 32-bit word (lo in the low half).
  llvm::Value* to_memory_pair(DType d, llvm::Value* lo, llvm::Value* hi);
  // The low or high 16-bit element of a 32-bit word (two f16/bf16/i16 as memory holds them), computable.
  llvm::Value* to_compute_half_of(DType d, llvm::Value* word, bool high);
  llvm::Value* round(DType d, llvm::Value* computed);  // f16/bf16 keep only their precision
  llvm::Value* constant(DType d, double value);
  // A Constant node's value: exact for an integer dtype (Attrs::integer_value), else `number`.
  llvm::Value* constant(DType d, const ir::Attrs& a);
  // A kernel argument from its 64-bit slot (pointers as addresses, numbers in their low bits).
  llvm::Value* from_slot(DType d, llvm::Value* slot64);

  // `approximate`: the fast flavour of a math function (weft::fast::exp2): the GPU's approximate
  // instruction, computed on the host to within that instruction's documented error (see approximate()).
  llvm::Value* unary(ir::Op op, DType d, llvm::Value* x, bool approximate = false);
  llvm::Value* binary(ir::Op op, DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* compare(ir::Op op, DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* cast(DType from, DType to, llvm::Value* x);
  llvm::Value* fma(llvm::Value* a, llvm::Value* b, llvm::Value* c);
  // argmax (op ArgMax) / argmin: whether candidate b replaces the extreme so far, a: b is strictly greater
  // (smaller), or b is NaN and a is not. With arg_same (equal, or both NaN) and the lower index winning
  // ties, any order of combining finds the first index of the extreme, NaN counting as the extreme.
  llvm::Value* arg_better(ir::Op op, DType d, llvm::Value* b, llvm::Value* a);
  llvm::Value* arg_same(DType d, llvm::Value* b, llvm::Value* a);

 private:
  llvm::Value* widened_from(llvm::Value* v, llvm::Type* narrow);
  llvm::Value* bf16_bits_to_float(llvm::Value* bits16);
  llvm::Value* float_to_bf16_bits(llvm::Value* f);
  llvm::Value* fp8_bits_to_float(ScalarType s, llvm::Value* code);
  llvm::Value* float_to_fp8_bits(ScalarType s, llvm::Value* f, bool keep_infinity);
  llvm::Value* f32_round_to_odd(DType from, llvm::Value* x);
  llvm::Value* portable(deferred_math::Fn fn, std::initializer_list<llvm::Value*> args);
  llvm::Value* gpu_math(ir::Op op, llvm::Value* x);
  llvm::Value* approximate_math(ir::Op op, llvm::Value* x);
  llvm::Value* gpu_fmod(llvm::Value* a, llvm::Value* b);

  llvm::IRBuilder<>& b_;
  MathTarget target_;
  unsigned global_as_;
};

}  // namespace weft::codegen
