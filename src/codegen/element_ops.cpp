#include "codegen/element_ops.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/PatternMatch.h>

#include <numbers>

#include "codegen/deferred_math.h"
#include "support/float_rounding.h"

namespace weft::codegen {

using ir::Op;
using llvm::Value;

llvm::Type* ElementOps::compute_type(DType d) {
  if (d.pointer) return llvm::PointerType::get(b_.getContext(), global_as_);
  switch (d.scalar) {
    case ScalarType::i1: return b_.getInt1Ty();
    case ScalarType::i8: return b_.getInt8Ty();
    case ScalarType::i16: return b_.getInt16Ty();
    case ScalarType::i32: return b_.getInt32Ty();
    case ScalarType::i64: return b_.getInt64Ty();
    case ScalarType::f16:
    case ScalarType::bf16:
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2:
    case ScalarType::f32: return b_.getFloatTy();
    case ScalarType::f64: return b_.getDoubleTy();
  }
  return nullptr;
}

llvm::Type* ElementOps::memory_type(DType d) {
  if (d.pointer) return compute_type(d);
  switch (d.scalar) {
    case ScalarType::i1: return b_.getInt8Ty();
    case ScalarType::f16: return b_.getHalfTy();
    case ScalarType::bf16: return b_.getInt16Ty();
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2: return b_.getInt8Ty();
    default: return compute_type(d);
  }
}

Value* ElementOps::bf16_bits_to_float(Value* bits16) {
  return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(bits16, b_.getInt32Ty()), 16), b_.getFloatTy());
}

// Round-to-nearest-even f32 -> bf16 bits, NaN kept quiet.
Value* ElementOps::float_to_bf16_bits(Value* f) {
  Value* u = b_.CreateBitCast(f, b_.getInt32Ty());
  Value* lsb = b_.CreateAnd(b_.CreateLShr(u, 16), 1);
  Value* rounded = b_.CreateAdd(b_.CreateAdd(u, b_.getInt32(0x7fff)), lsb);
  Value* nan = b_.CreateOr(b_.CreateLShr(u, 16), 0x40);
  Value* bits = b_.CreateSelect(b_.CreateFCmpUNO(f, f), nan, b_.CreateLShr(rounded, 16));
  return b_.CreateTrunc(bits, b_.getInt16Ty());
}

Value* ElementOps::to_compute(DType d, Value* m) {
  if (d.pointer) return m;
  switch (d.scalar) {
    case ScalarType::i1: return b_.CreateICmpNE(m, b_.getInt8(0));
    case ScalarType::f16: return b_.CreateFPExt(m, b_.getFloatTy());
    case ScalarType::bf16: return bf16_bits_to_float(m);
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2: return fp8_bits_to_float(d.scalar, m);
    default: return m;
  }
}

Value* ElementOps::to_compute_half_of(DType d, Value* word, bool high) {
  // bf16 is the top half of an f32: one and (high) or shl (low) instead of unpack + extend + shift.
  if (!d.pointer && d.scalar == ScalarType::bf16)
    return b_.CreateBitCast(high ? b_.CreateAnd(word, b_.getInt32(0xffff0000u)) : b_.CreateShl(word, 16), b_.getFloatTy());
  Value* bits = b_.CreateTrunc(high ? b_.CreateLShr(word, 16) : word, b_.getInt16Ty());
  return to_compute(d, b_.CreateBitCast(bits, memory_type(d)));
}

Value* ElementOps::to_memory_pair(DType d, Value* lo, Value* hi) {
  bool half_float = d.scalar == ScalarType::bf16 || d.scalar == ScalarType::f16;
  if (!d.pointer && half_float && target_ == MathTarget::Nvptx) {
    // One vector fptrunc (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32). A value round() already made 16-bit
    // (maybe more than once) rounds to itself: take the f32 it came from, so that the pair does not
    // round again.
    llvm::Type* narrow = d.scalar == ScalarType::bf16 ? b_.getBFloatTy() : b_.getHalfTy();
    auto unrounded = [&](Value* v) {
      using namespace llvm::PatternMatch;
      for (Value* x; match(v, m_FPExt(m_FPTrunc(m_Value(x)))) && v->getType() == x->getType() &&
                     llvm::cast<llvm::Instruction>(v)->getOperand(0)->getType() == narrow;)
        v = x;
      return v;
    };
    lo = unrounded(lo);
    hi = unrounded(hi);
    // Two values loaded as 16-bit floats and not changed since (a copy, a relayout) are packed as they are.
    Value* lo16 = widened_from(lo, narrow);
    Value* hi16 = widened_from(hi, narrow);
    bool exact = lo16 && hi16;
    llvm::Type* pair = llvm::FixedVectorType::get(exact ? narrow : b_.getFloatTy(), 2);
    Value* both = b_.CreateInsertElement(b_.CreateInsertElement(llvm::PoisonValue::get(pair), exact ? lo16 : lo, uint64_t(0)),
                                         exact ? hi16 : hi, uint64_t(1));
    if (!exact) both = b_.CreateFPTrunc(both, llvm::FixedVectorType::get(narrow, 2));
    return b_.CreateBitCast(both, b_.getInt32Ty());
  }
  auto bits = [&](Value* v) { return b_.CreateZExt(b_.CreateBitCast(to_memory(d, v), b_.getInt16Ty()), b_.getInt32Ty()); };
  return b_.CreateOr(bits(lo), b_.CreateShl(bits(hi), 16));
}

// x where v = fpext(x) from `narrow` (a 16-bit float widened for arithmetic), else null: narrowing v again gives x
// exactly, with no conversion for the optimizer to fold.
Value* ElementOps::widened_from(Value* v, llvm::Type* narrow) {
  auto* ext = llvm::dyn_cast<llvm::FPExtInst>(v);
  return ext && ext->getSrcTy() == narrow ? ext->getOperand(0) : nullptr;
}

Value* ElementOps::to_memory(DType d, Value* v) {
  if (d.pointer) return v;
  switch (d.scalar) {
    case ScalarType::i1: return b_.CreateZExt(v, b_.getInt8Ty());
    case ScalarType::f16:
      if (Value* x = widened_from(v, b_.getHalfTy())) return x;
      return b_.CreateFPTrunc(v, b_.getHalfTy());
    case ScalarType::bf16:
      // The GPU rounds to bf16 in one instruction (cvt.rn.bf16.f32); hosts without it would need a libcall.
      if (target_ == MathTarget::Nvptx) {
        Value* x = widened_from(v, b_.getBFloatTy());
        return b_.CreateBitCast(x ? x : b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getInt16Ty());
      }
      return float_to_bf16_bits(v);
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2: return float_to_fp8_bits(d.scalar, v, /*keep_infinity=*/true);
    default: return v;
  }
}

Value* ElementOps::round(DType d, Value* v) {
  // On the GPU, bf16 rounds as fptrunc + fpext: a store's to_memory of the result then takes the bf16 value
  // (widened_from) instead of rounding a second time. A value that is already such an fpext (a cast's result,
  // rounded again by the op that made it) is returned as it is.
  if (!d.pointer && d.scalar == ScalarType::bf16 && target_ == MathTarget::Nvptx) {
    if (widened_from(v, b_.getBFloatTy())) return v;
    return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getBFloatTy()), b_.getFloatTy());
  }
  // fp8 rounds as cvt.rn.satfinite does: an e5m2 infinity becomes the largest finite value here.
  if (d.is_fp8()) return to_compute(d, float_to_fp8_bits(d.scalar, v, /*keep_infinity=*/false));
  if (!d.pointer && d.scalar == ScalarType::f16 && widened_from(v, b_.getHalfTy())) return v;
  if (!d.pointer && (d.scalar == ScalarType::f16 || d.scalar == ScalarType::bf16)) return to_compute(d, to_memory(d, v));
  return v;
}


Value* ElementOps::constant(DType d, double v) {
  llvm::Type* t = compute_type(d);
  if (d.is_float()) {
    if (d.scalar == ScalarType::f16) v = static_cast<float>(f16(support::f32_round_to_odd(v)));
    if (d.scalar == ScalarType::bf16) v = static_cast<float>(bf16(support::f32_round_to_odd(v)));
    if (d.scalar == ScalarType::f8e4m3) v = static_cast<float>(f8e4m3(support::f32_round_to_odd(v)));
    if (d.scalar == ScalarType::f8e5m2) v = static_cast<float>(f8e5m2(support::f32_round_to_odd(v)));
    return llvm::ConstantFP::get(t, v);
  }
  return llvm::ConstantInt::get(t, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
}

Value* ElementOps::constant(DType d, const ir::Attrs& a) {
  if (d.is_float()) return constant(d, a.number);
  return llvm::ConstantInt::get(compute_type(d), static_cast<uint64_t>(a.integer_value()), true);
}

Value* ElementOps::from_slot(DType d, Value* slot) {
  if (d.pointer) return b_.CreateIntToPtr(slot, compute_type(d));
  switch (d.scalar) {
    case ScalarType::i1: return b_.CreateICmpNE(slot, b_.getInt64(0));
    case ScalarType::f16: return to_compute(d, b_.CreateBitCast(b_.CreateTrunc(slot, b_.getInt16Ty()), b_.getHalfTy()));
    case ScalarType::bf16: return bf16_bits_to_float(b_.CreateTrunc(slot, b_.getInt16Ty()));
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2: return to_compute(d, b_.CreateTrunc(slot, b_.getInt8Ty()));
    case ScalarType::f32: return b_.CreateBitCast(b_.CreateTrunc(slot, b_.getInt32Ty()), b_.getFloatTy());
    case ScalarType::f64: return b_.CreateBitCast(slot, b_.getDoubleTy());
    default: return b_.CreateTrunc(slot, compute_type(d));
  }
}

// portable_math's code for fn: on the GPU as a placeholder call that the NVPTX pipeline expands after its passes
// (deferred_math.h), on the host here and now.
Value* ElementOps::portable(deferred_math::Fn fn, std::initializer_list<Value*> args) {
  if (target_ == MathTarget::Nvptx) return deferred_math::call(b_, fn, args);
  return deferred_math::expand_now(b_, fn, args);
}

// Transcendentals on the GPU: portable range reduction + polynomials (see portable_math.h); rsqrt uses
// the special-function unit's rsqrt.approx.f32 (within 1 ulp after rounding).
Value* ElementOps::gpu_math(Op op, Value* x) {
  switch (op) {
    case Op::Exp: return portable(deferred_math::Fn::exp, {x});
    case Op::Exp2: return portable(deferred_math::Fn::exp2, {x});
    case Op::Log: return portable(deferred_math::Fn::log, {x});
    case Op::Log2: return portable(deferred_math::Fn::log2, {x});
    case Op::Sin: return portable(deferred_math::Fn::sin, {x});
    case Op::Cos: return portable(deferred_math::Fn::cos, {x});
    case Op::Rsqrt:
      if (x->getType()->isFloatTy()) return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_rsqrt_approx_f, {}, {x});
      return nullptr;
    default: return nullptr;
  }
}

// fmod for f32 (and narrower) on the GPU, whose own lowering of frem is inexact: a - trunc(a / b) * b in
// f64 is exact while the quotient is below 2^29, once a quotient rounded across an integer is undone.
Value* ElementOps::gpu_fmod(Value* a, Value* b) {
  llvm::Type* f64 = b_.getDoubleTy();
  Value* x = b_.CreateFPExt(a, f64);
  Value* y = b_.CreateFPExt(b, f64);
  Value* q = b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, b_.CreateFDiv(x, y));
  Value* r = fma(b_.CreateFNeg(q), y, x);
  Value* overshot = b_.CreateFCmpOLT(b_.CreateFMul(r, x), llvm::ConstantFP::get(f64, 0.0));  // sign flipped
  Value* abs_y = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, y);
  Value* back = b_.CreateSelect(b_.CreateFCmpOLT(x, llvm::ConstantFP::get(f64, 0.0)), b_.CreateFNeg(abs_y), abs_y);
  r = b_.CreateSelect(overshot, b_.CreateFAdd(r, back), r);
  Value* undershot = b_.CreateFCmpOGE(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, r), abs_y);  // a whole y left
  r = b_.CreateSelect(undershot, b_.CreateFSub(r, back), r);
  // Keep fmod's signed zero, and its NaN for b == 0 or an infinite a (which the arithmetic gives already).
  r = b_.CreateSelect(b_.CreateFCmpOEQ(r, llvm::ConstantFP::get(f64, 0.0)), b_.CreateFMul(x, llvm::ConstantFP::get(f64, 0.0)), r);
  // fmod(a, inf) is a.
  r = b_.CreateSelect(b_.CreateFCmpOEQ(abs_y, llvm::ConstantFP::get(f64, INFINITY)), x, r);
  return b_.CreateFPTrunc(r, a->getType());
}

// The fast flavours (f32; f16/bf16 compute in f32): one approximate instruction each on the GPU (exp: an
// f32 multiply by log2(e) first). The host computes the same function exactly (exp: 2^fl(x log2 e), the
// GPU's rounded argument) with the GPU's flushing of subnormal inputs and results to zero (.ftz), so both
// agree within the GPU's documented error (README, "Math accuracy"). tanh.approx.f32 has no .ftz form and
// no LLVM intrinsic: inline PTX.
Value* ElementOps::approximate_math(Op op, Value* x) {
  bool offered = op == Op::Exp2 || op == Op::Exp || op == Op::Log2 || op == Op::Rcp || op == Op::Rsqrt || op == Op::Tanh;
  if (!offered || !x->getType()->isFloatTy())
    throw InternalError(fmt::format("element ops: no fast flavour of '{}' for this type", ir::op_name(op)));
  llvm::Type* f32 = x->getType();
  if (op == Op::Exp) x = b_.CreateFMul(x, llvm::ConstantFP::get(f32, std::numbers::log2e));
  if (target_ == MathTarget::Nvptx) {
    switch (op) {
      case Op::Exp:
      case Op::Exp2: return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz, {f32}, {x});
      case Op::Log2: return b_.CreateIntrinsic(f32, llvm::Intrinsic::nvvm_lg2_approx_ftz_f, {x});
      case Op::Rcp: return b_.CreateIntrinsic(f32, llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {x});
      case Op::Rsqrt: return b_.CreateIntrinsic(f32, llvm::Intrinsic::nvvm_rsqrt_approx_ftz_f, {x});
      default: {
        auto* type = llvm::FunctionType::get(f32, {f32}, false);
        return b_.CreateCall(llvm::InlineAsm::get(type, "tanh.approx.f32 $0, $1;", "=f,f", /*hasSideEffects=*/false), {x});
      }
    }
  }
  auto flush = [&](Value* v) {  // |v| below the smallest normal float: a zero of v's sign (.ftz)
    Value* tiny = b_.CreateFCmpOLT(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, v), llvm::ConstantFP::get(f32, 0x1p-126));
    return b_.CreateSelect(tiny, b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, llvm::ConstantFP::get(f32, 0.0), v), v);
  };
  Value* one = llvm::ConstantFP::get(f32, 1.0);
  switch (op) {
    case Op::Exp:
    case Op::Exp2: return flush(b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp2, flush(x)));
    case Op::Log2: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log2, flush(x));
    case Op::Rcp: return flush(b_.CreateFDiv(one, flush(x)));
    case Op::Rsqrt: return b_.CreateFDiv(one, b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, flush(x)));
    default: return portable(deferred_math::Fn::tanh, {x});  // tanh.approx keeps subnormals
  }
}

Value* ElementOps::unary(Op op, DType d, Value* x, bool approximate) {
  bool f = d.is_float();
  if (approximate) return approximate_math(op, x);
  if (f && target_ == MathTarget::Nvptx)
    if (Value* v = gpu_math(op, x)) return v;
  switch (op) {
    case Op::Neg: return f ? b_.CreateFNeg(x) : b_.CreateNeg(x);
    case Op::Not: return b_.CreateNot(x);
    case Op::Abs:
      return f ? b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x)
               : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
    case Op::Exp: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
    case Op::Exp2: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp2, x);
    case Op::Log: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
    case Op::Log2: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log2, x);
    case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case Op::Rsqrt:
      return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
    case Op::Sin: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sin, x);
    case Op::Cos: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::cos, x);
    case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
    case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
    // The same code on every target (portable_math.h), f32 only (the verifier keeps f64 away).
    case Op::Tanh: return portable(deferred_math::Fn::tanh, {x});
    case Op::Sigmoid: return portable(deferred_math::Fn::sigmoid, {x});
    case Op::Erf: return portable(deferred_math::Fn::erf, {x});
    case Op::Rcp: return b_.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0), x);  // correctly rounded
    default: break;
  }
  throw InternalError(fmt::format("element ops: '{}' is not a unary op", ir::op_name(op)));
}

Value* ElementOps::binary(Op op, DType d, Value* a, Value* b) {
  if (op == Op::Pow) return portable(deferred_math::Fn::pow, {a, b});  // floats, f32 only (the verifier keeps f64 away)
  bool f = d.is_float();
  llvm::Type* t = a->getType();
  switch (op) {
    case Op::Add: return f ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
    case Op::Sub: return f ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
    case Op::Mul: return f ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
    case Op::Div:
    case Op::Rem: {
      if (f && op == Op::Rem && target_ == MathTarget::Nvptx && t->isFloatTy()) return gpu_fmod(a, b);
      if (f) return op == Op::Div ? b_.CreateFDiv(a, b) : b_.CreateFRem(a, b);
      // Integer division never traps: x / 0 = 0, x % 0 = 0, and MIN / -1 wraps.
      Value* zero = llvm::ConstantInt::get(t, 0);
      Value* is_zero = b_.CreateICmpEQ(b, zero);
      Value* is_minus_one = b_.CreateICmpEQ(b, llvm::ConstantInt::getSigned(t, -1));
      Value* special_divisor = b_.CreateOr(is_zero, is_minus_one);
      Value* safe = b_.CreateSelect(special_divisor, llvm::ConstantInt::get(t, 1), b);
      Value* q = op == Op::Div ? b_.CreateSDiv(a, safe) : b_.CreateSRem(a, safe);
      Value* special = op == Op::Div ? b_.CreateSelect(is_zero, zero, b_.CreateNeg(a)) : zero;
      return b_.CreateSelect(special_divisor, special, q);
    }
    // NaN-propagating, and -0 < +0 (llvm.minimum/maximum: min.NaN/max.NaN on the GPU, one instruction).
    case Op::Min: return b_.CreateBinaryIntrinsic(f ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, a, b);
    case Op::Max: return b_.CreateBinaryIntrinsic(f ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, a, b);
    case Op::And: return b_.CreateAnd(a, b);
    case Op::Or: return b_.CreateOr(a, b);
    case Op::Xor: return b_.CreateXor(a, b);
    case Op::Shl:
    case Op::Shr: {
      // Shifting by the width or more gives 0 (left) or the sign (right), never poison.
      unsigned bits = t->getIntegerBitWidth();
      Value* too_far = b_.CreateICmpUGE(b, llvm::ConstantInt::get(t, bits));
      if (op == Op::Shl) return b_.CreateSelect(too_far, llvm::ConstantInt::get(t, 0), b_.CreateShl(a, b));
      return b_.CreateAShr(a, b_.CreateSelect(too_far, llvm::ConstantInt::get(t, bits - 1), b));
    }
    default: break;
  }
  throw InternalError(fmt::format("element ops: '{}' is not a binary op", ir::op_name(op)));
}

Value* ElementOps::compare(Op op, DType d, Value* a, Value* b) {
  if (d.is_float()) {
    switch (op) {
      case Op::Eq: return b_.CreateFCmpOEQ(a, b);
      case Op::Ne: return b_.CreateFCmpUNE(a, b);
      case Op::Lt: return b_.CreateFCmpOLT(a, b);
      case Op::Le: return b_.CreateFCmpOLE(a, b);
      case Op::Gt: return b_.CreateFCmpOGT(a, b);
      default: return b_.CreateFCmpOGE(a, b);
    }
  }
  bool u = d.is_bool();  // false < true
  switch (op) {
    case Op::Eq: return b_.CreateICmpEQ(a, b);
    case Op::Ne: return b_.CreateICmpNE(a, b);
    case Op::Lt: return u ? b_.CreateICmpULT(a, b) : b_.CreateICmpSLT(a, b);
    case Op::Le: return u ? b_.CreateICmpULE(a, b) : b_.CreateICmpSLE(a, b);
    case Op::Gt: return u ? b_.CreateICmpUGT(a, b) : b_.CreateICmpSGT(a, b);
    default: return u ? b_.CreateICmpUGE(a, b) : b_.CreateICmpSGE(a, b);
  }
}

Value* ElementOps::arg_better(Op op, DType d, Value* b, Value* a) {
  Value* strictly = compare(op == Op::ArgMax ? Op::Gt : Op::Lt, d, b, a);
  if (!d.is_float()) return strictly;
  // NaN is the extreme of both argmax and argmin, as max and min propagate it: a NaN beats any number.
  return b_.CreateOr(strictly, b_.CreateAnd(b_.CreateFCmpUNO(b, b), b_.CreateFCmpORD(a, a)));
}

Value* ElementOps::arg_same(DType d, Value* b, Value* a) {
  if (!d.is_float()) return compare(Op::Eq, d, b, a);
  return b_.CreateOr(b_.CreateFCmpOEQ(b, a), b_.CreateAnd(b_.CreateFCmpUNO(b, b), b_.CreateFCmpUNO(a, a)));
}

// x, an f64 or an integer, as an f32 rounded to odd (toward zero, then the last bit set if inexact).
// Rounding that to f16/bf16 rounds x once; rounding x to the nearest f32 first can land on a halfway
// point of the narrower type and round it the wrong way.
Value* ElementOps::f32_round_to_odd(DType from, Value* x) {
  llvm::Type* f32 = b_.getFloatTy();
  Value* f = from.is_float() ? b_.CreateFPTrunc(x, f32) : b_.CreateSIToFP(x, f32);
  Value *exact, *away;  // f == x; |f| > |x|
  if (from.is_float()) {
    Value* back = b_.CreateFPExt(f, x->getType());
    exact = b_.CreateFCmpOEQ(back, x);
    away = b_.CreateFCmpOGT(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, back),
                            b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x));
  } else {
    // Saturation only bites at 2^31 / 2^63, where f is the right answer either way.
    Value* back = b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {x->getType(), f32}, {f});
    exact = b_.CreateICmpEQ(back, x);
    away = b_.CreateSelect(b_.CreateICmpSLT(x, llvm::ConstantInt::get(x->getType(), 0)), b_.CreateICmpSLT(back, x),
                           b_.CreateICmpSGT(back, x));
  }
  Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
  bits = b_.CreateSelect(away, b_.CreateSub(bits, b_.getInt32(1)), bits);
  bits = b_.CreateSelect(exact, bits, b_.CreateOr(bits, 1));
  return b_.CreateBitCast(bits, f32);
}

// ---- OCP FP8 (include/weft/dtype.h has the semantics) ----

// On the GPU, one cvt.rn.f16x2.{e4m3x2,e5m2x2} (the code in the low byte) and cvt.f32.f16; on the host,
// the value from its fields: exact either way.
Value* ElementOps::fp8_bits_to_float(ScalarType s, Value* code) {
  bool e4m3 = s == ScalarType::f8e4m3;
  if (target_ == MathTarget::Nvptx) {
    auto id = e4m3 ? llvm::Intrinsic::nvvm_e4m3x2_to_f16x2_rn : llvm::Intrinsic::nvvm_e5m2x2_to_f16x2_rn;
    Value* pair = b_.CreateIntrinsic(id, {}, {b_.CreateZExt(code, b_.getInt16Ty())});
    return b_.CreateFPExt(b_.CreateExtractElement(pair, uint64_t(0)), b_.getFloatTy());
  }
  llvm::Type* f32 = b_.getFloatTy();
  int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  Value* mag = b_.CreateZExt(b_.CreateAnd(code, b_.getInt8(0x7f)), b_.getInt32Ty());
  Value* negative = b_.CreateICmpNE(b_.CreateAnd(code, b_.getInt8(0x80)), b_.getInt8(0));
  // Normal codes: the fields moved into f32's and the exponent rebiased; subnormal ones (exponent field 0):
  // the mantissa times the smallest subnormal.
  Value* normal = b_.CreateBitCast(
      b_.CreateAdd(b_.CreateShl(mag, 23 - mantissa_bits), b_.getInt32(uint32_t(127 - bias) << 23)), f32);
  Value* subnormal =
      b_.CreateFMul(b_.CreateUIToFP(mag, f32), llvm::ConstantFP::get(f32, std::ldexp(1.0, 1 - bias - mantissa_bits)));
  Value* v = b_.CreateSelect(b_.CreateICmpULT(mag, b_.getInt32(1u << mantissa_bits)), subnormal, normal);
  Value* nan = llvm::ConstantFP::getNaN(f32);
  if (e4m3) {
    v = b_.CreateSelect(b_.CreateICmpEQ(mag, b_.getInt32(0x7f)), nan, v);
  } else {
    Value* top = b_.CreateICmpUGE(mag, b_.getInt32(0x7c));
    v = b_.CreateSelect(top, b_.CreateSelect(b_.CreateICmpEQ(mag, b_.getInt32(0x7c)), llvm::ConstantFP::getInfinity(f32), nan), v);
  }
  return b_.CreateSelect(negative, b_.CreateFNeg(v), v);
}

// f32 -> fp8 code: round to nearest even, saturate to the largest finite value, NaN -> 0x7F. On the GPU
// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (the other half of the pair is 0); on the host the same in integer
// arithmetic, bit for bit. `keep_infinity`: an e5m2 infinity keeps its code (0x7C / 0xFC) instead of
// saturating: storing a value that is already an fp8 value (a loaded infinity) must not change it; every
// rounding (casts, arithmetic, round()) saturates.
Value* ElementOps::float_to_fp8_bits(ScalarType s, Value* x, bool keep_infinity) {
  bool e4m3 = s == ScalarType::f8e4m3;
  keep_infinity = keep_infinity && !e4m3;
  auto infinity_kept = [&](Value* code) -> Value* {
    if (!keep_infinity) return code;
    Value* inf = b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                                  llvm::ConstantFP::getInfinity(b_.getFloatTy()));
    Value* sign = b_.CreateTrunc(b_.CreateLShr(b_.CreateBitCast(x, b_.getInt32Ty()), 24), b_.getInt8Ty());
    return b_.CreateSelect(inf, b_.CreateOr(b_.CreateAnd(sign, b_.getInt8(0x80)), b_.getInt8(0x7c)), code);
  };
  if (target_ == MathTarget::Nvptx) {
    auto id = e4m3 ? llvm::Intrinsic::nvvm_ff_to_e4m3x2_rn : llvm::Intrinsic::nvvm_ff_to_e5m2x2_rn;
    // The first operand lands in the high byte.
    Value* pair = b_.CreateIntrinsic(id, {}, {llvm::ConstantFP::get(b_.getFloatTy(), 0.0), x});
    return infinity_kept(b_.CreateTrunc(pair, b_.getInt8Ty()));
  }
  llvm::Type* f32 = b_.getFloatTy();
  llvm::Type* i32 = b_.getInt32Ty();
  int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, drop = 23 - mantissa_bits;
  uint32_t max_code = e4m3 ? 0x7e : 0x7b;
  double max_finite = e4m3 ? 448.0 : 57344.0;
  Value* u = b_.CreateBitCast(x, i32);
  Value* sign = b_.CreateAnd(b_.CreateLShr(u, 24), b_.getInt32(0x80));
  Value* mag = b_.CreateAnd(u, b_.getInt32(0x7fffffff));
  Value* a = b_.CreateBitCast(mag, f32);
  // Normal results: round the f32 fields to mantissa_bits (ties to even), rebias the exponent.
  Value* rounded = b_.CreateAdd(b_.CreateAdd(mag, b_.getInt32((1u << (drop - 1)) - 1)),
                                b_.CreateAnd(b_.CreateLShr(mag, drop), b_.getInt32(1)));
  Value* normal = b_.CreateSub(b_.CreateLShr(rounded, drop), b_.getInt32(uint32_t(127 - bias) << mantissa_bits));
  // Below the smallest normal: the magnitude in units of the smallest subnormal, rounded to an integer by
  // adding and removing 2^23 (f32 arithmetic rounds to nearest even; the scaling is exact).
  llvm::Constant* two23 = llvm::ConstantFP::get(f32, 8388608.0);
  Value* units = b_.CreateFMul(a, llvm::ConstantFP::get(f32, std::ldexp(1.0, bias - 1 + mantissa_bits)));
  Value* subnormal = b_.CreateFPToUI(b_.CreateFSub(b_.CreateFAdd(units, two23), two23), i32);
  Value* small = b_.CreateFCmpOLT(a, llvm::ConstantFP::get(f32, std::ldexp(1.0, 1 - bias)));
  Value* code = b_.CreateSelect(small, subnormal, normal);
  code = b_.CreateSelect(b_.CreateFCmpOGE(a, llvm::ConstantFP::get(f32, max_finite)), b_.getInt32(max_code), code);
  code = b_.CreateSelect(b_.CreateFCmpUNO(x, x), b_.getInt32(0x7f), b_.CreateOr(code, sign));
  return infinity_kept(b_.CreateTrunc(code, b_.getInt8Ty()));
}

Value* ElementOps::cast(DType from, DType to, Value* x) {
  llvm::Type* t = compute_type(to);
  // A conversion to a type narrower than f32 from one wider goes through f32 rounded to odd: one rounding.
  bool to_16bit = to.scalar == ScalarType::f16 || to.scalar == ScalarType::bf16 || to.is_fp8();
  bool wide_from = from.scalar == ScalarType::f64 || from.scalar == ScalarType::i32 || from.scalar == ScalarType::i64;
  Value* out;
  if (to_16bit && wide_from) {
    out = f32_round_to_odd(from, x);
  } else if (from.is_float() && to.is_float()) {
    out = b_.CreateFPCast(x, t);
  } else if (from.is_float()) {
    out = to.is_bool() ? b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0.0))
                       : b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {t, x->getType()}, {x});
  } else if (to.is_float()) {
    out = from.is_bool() ? b_.CreateUIToFP(x, t) : b_.CreateSIToFP(x, t);
  } else if (to.is_bool()) {
    out = b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
  } else {
    out = from.is_bool() ? b_.CreateZExt(x, t) : b_.CreateSExtOrTrunc(x, t);
  }
  return round(to, out);
}

Value* ElementOps::fma(Value* a, Value* b, Value* c) {
  return b_.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, b, c});
}

}  // namespace weft::codegen
