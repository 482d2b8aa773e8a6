#include "codegen/portable_math.h"

#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace weft::codegen::portable_math {
namespace {

using llvm::Value;

// The IEEE layout of the float type of x.
struct Format {
  bool f64;
  unsigned bits, mantissa;
  int bias;
  llvm::IntegerType* int_type;
};

Format format_of(llvm::IRBuilder<>& b, Value* x) {
  bool f64 = x->getType()->isDoubleTy();
  return f64 ? Format{true, 64, 52, 1023, b.getInt64Ty()} : Format{false, 32, 23, 127, b.getInt32Ty()};
}

Value* c(Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }
Value* fma(llvm::IRBuilder<>& b, Value* x, Value* y, Value* z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
}

// sum coefficients[k] * z^k, by Horner's rule with fused multiply-adds.
Value* polynomial(llvm::IRBuilder<>& b, Value* z, const std::vector<double>& coefficients) {
  Value* acc = c(z, coefficients.back());
  for (size_t k = coefficients.size() - 1; k-- > 0;) acc = fma(b, acc, z, c(z, coefficients[k]));
  return acc;
}

// 1/k! for k = 0..n.
std::vector<double> taylor_exp(int n) {
  std::vector<double> v(n + 1);
  double f = 1;
  for (int k = 0; k <= n; ++k) v[k] = 1 / (k ? (f *= k) : f);
  return v;
}

// p * 2^n for an integer-valued float n, as two exact scalings (so huge and subnormal results come out
// right); n is clamped to what the two steps can represent.
Value* scale_by_power_of_two(llvm::IRBuilder<>& b, Value* p, Value* n) {
  Format f = format_of(b, p);
  int lo = -2 * (f.bias - 1), hi = 2 * f.bias;
  Value* clamped = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, n, c(n, hi)), c(n, lo));
  Value* k = b.CreateFPToSI(clamped, f.int_type);
  Value* half = b.CreateAShr(k, 1);
  auto power = [&](Value* e) {
    Value* biased = b.CreateAdd(e, llvm::ConstantInt::get(f.int_type, f.bias));
    return b.CreateBitCast(b.CreateShl(biased, f.mantissa), p->getType());
  };
  return b.CreateFMul(b.CreateFMul(p, power(half)), power(b.CreateSub(k, half)));
}

// e^r for |r| <= ln2 / 2 (Taylor: its tail is below half an ulp there).
Value* exp_reduced(llvm::IRBuilder<>& b, Value* r) {
  return polynomial(b, r, taylor_exp(format_of(b, r).f64 ? 14 : 7));
}

// ln(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], as f - (f^2/2 - s (f^2/2 + R)) with s = f / (2 + f) and
// R = 2 s^3/3 + 2 s^5/5 + ... over s: the exact f leads, the rounding errors sit in the small correction.
// `extra` (e ln2_lo for log) joins the correction before it is subtracted.
Value* log1p_reduced(llvm::IRBuilder<>& b, Value* f, Value* extra) {
  Value* s = b.CreateFDiv(f, b.CreateFAdd(c(f, 2.0), f));
  Value* z = b.CreateFMul(s, s);
  int terms = format_of(b, f).f64 ? 12 : 5;
  std::vector<double> even(terms);
  for (int k = 0; k < terms; ++k) even[k] = 2.0 / (2 * k + 3);
  Value* r = b.CreateFMul(z, polynomial(b, z, even));
  Value* half_square = b.CreateFMul(c(f, 0.5), b.CreateFMul(f, f));
  Value* correction = fma(b, s, b.CreateFAdd(half_square, r), extra);
  return b.CreateFSub(f, b.CreateFSub(half_square, correction));
}

// x = m * 2^e with m in [sqrt(1/2), sqrt(2)); returns {m - 1, e as a float}. x positive and finite.
std::pair<Value*, Value*> split_mantissa(llvm::IRBuilder<>& b, Value* x) {
  Format f = format_of(b, x);
  Value* smallest_normal = c(x, f.f64 ? 0x1p-1022 : 0x1p-126);
  Value* tiny = b.CreateFCmpOLT(x, smallest_normal);
  Value* scaled = b.CreateSelect(tiny, b.CreateFMul(x, c(x, f.f64 ? 0x1p54 : 0x1p25)), x);
  Value* bits = b.CreateBitCast(scaled, f.int_type);
  Value* biased = b.CreateLShr(bits, f.mantissa);
  Value* e = b.CreateSub(biased, llvm::ConstantInt::get(f.int_type, f.bias));
  uint64_t mantissa_mask = (uint64_t(1) << f.mantissa) - 1;
  Value* m_bits = b.CreateOr(b.CreateAnd(bits, llvm::ConstantInt::get(f.int_type, mantissa_mask)),
                             llvm::ConstantInt::get(f.int_type, uint64_t(f.bias) << f.mantissa));
  Value* m = b.CreateBitCast(m_bits, x->getType());  // [1, 2)
  Value* big = b.CreateFCmpOGT(m, c(x, std::numbers::sqrt2));
  m = b.CreateSelect(big, b.CreateFMul(m, c(x, 0.5)), m);
  Value* ef = b.CreateSIToFP(e, x->getType());
  ef = b.CreateFAdd(ef, b.CreateSelect(big, c(x, 1.0), c(x, 0.0)));
  ef = b.CreateFSub(ef, b.CreateSelect(tiny, c(x, f.f64 ? 54.0 : 25.0), c(x, 0.0)));
  return {b.CreateFSub(m, c(x, 1.0)), ef};
}

// log's special cases: NaN for x < 0 or NaN, -inf at 0, +inf at +inf.
Value* log_special_cases(llvm::IRBuilder<>& b, Value* x, Value* finite_result) {
  Value* inf = c(x, INFINITY);
  Value* r = b.CreateSelect(b.CreateFCmpOEQ(x, inf), inf, finite_result);
  r = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, 0.0)), c(x, -INFINITY), r);
  return b.CreateSelect(b.CreateFCmpULT(x, c(x, 0.0)), c(x, NAN), r);
}

// sin or cos of r in [-pi/4, pi/4], r an f64.
Value* sin_reduced(llvm::IRBuilder<>& b, Value* r) {
  int terms = 9;  // r, r^3, ... : Taylor coefficients (-1)^k / (2k+1)!
  std::vector<double> v(terms);
  double fact = 1;
  for (int k = 0; k < terms; ++k) {
    if (k) fact *= (2.0 * k) * (2.0 * k + 1);
    v[k] = (k % 2 ? -1.0 : 1.0) / fact;
  }
  return b.CreateFMul(r, polynomial(b, b.CreateFMul(r, r), v));
}
Value* cos_reduced(llvm::IRBuilder<>& b, Value* r) {
  int terms = 10;  // (-1)^k / (2k)!
  std::vector<double> v(terms);
  double fact = 1;
  for (int k = 0; k < terms; ++k) {
    if (k) fact *= (2.0 * k - 1) * (2.0 * k);
    v[k] = (k % 2 ? -1.0 : 1.0) / fact;
  }
  return polynomial(b, b.CreateFMul(r, r), v);
}

// x - j pi/2 with j = rint(x * 2/pi), in three parts (Cody and Waite), x an f64; returns {r, j mod 4}.
std::pair<Value*, Value*> reduce_quadrant(llvm::IRBuilder<>& b, Value* x) {
  Value* j = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, c(x, 2 / std::numbers::pi)));
  const double parts[3] = {1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21};
  Value* r = x;
  for (double part : parts) r = fma(b, b.CreateFNeg(j), c(x, part), r);
  Value* q = b.CreateAnd(b.CreateFPToSI(b.CreateFRem(j, c(x, 4.0)), b.getInt32Ty()), 3);
  return {r, q};
}

Value* sin_or_cos(llvm::IRBuilder<>& b, Value* x, bool cosine) {
  // f32 goes through f64: its reduction then stays exact far beyond the f32 constants' reach.
  if (!x->getType()->isDoubleTy())
    return b.CreateFPTrunc(sin_or_cos(b, b.CreateFPExt(x, b.getDoubleTy()), cosine), x->getType());
  auto [r, q] = reduce_quadrant(b, x);
  if (cosine) q = b.CreateAdd(q, b.getInt32(1));  // cos x = sin(x + pi/2)
  Value* s = sin_reduced(b, r);
  Value* co = cos_reduced(b, r);
  Value* odd = b.CreateICmpNE(b.CreateAnd(q, 1), b.getInt32(0));
  Value* negative = b.CreateICmpNE(b.CreateAnd(q, 2), b.getInt32(0));
  Value* v = b.CreateSelect(odd, co, s);
  v = b.CreateSelect(negative, b.CreateFNeg(v), v);
  // sin/cos of +-inf or NaN is NaN.
  Value* finite = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), c(x, INFINITY));
  return b.CreateSelect(finite, v, c(x, NAN));
}

}  // namespace

Value* exp(llvm::IRBuilder<>& b, Value* x) {
  bool f64 = format_of(b, x).f64;
  // Keep n finite (NaN and infinities would make the integer conversion poison); x itself carries them.
  Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, c(x, std::numbers::log2e)));
  n = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, n, c(x, 4096)), c(x, -4096));
  double ln2_hi = f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  double ln2_lo = f64 ? 1.90821492927058770002e-10 : 1.42860682030941723212e-6;
  Value* r = fma(b, b.CreateFNeg(n), c(x, ln2_hi), x);
  r = fma(b, b.CreateFNeg(n), c(x, ln2_lo), r);
  Value* v = scale_by_power_of_two(b, exp_reduced(b, r), n);
  v = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, -INFINITY)), c(x, 0.0), v);
  return b.CreateSelect(b.CreateFCmpOEQ(x, c(x, INFINITY)), x, v);
}

Value* exp2(llvm::IRBuilder<>& b, Value* x) {
  Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x);
  n = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, n, c(x, 4096)), c(x, -4096));
  Value* r = b.CreateFMul(b.CreateFSub(x, n), c(x, std::numbers::ln2));
  Value* v = scale_by_power_of_two(b, exp_reduced(b, r), n);
  v = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, -INFINITY)), c(x, 0.0), v);
  return b.CreateSelect(b.CreateFCmpOEQ(x, c(x, INFINITY)), x, v);
}

Value* log(llvm::IRBuilder<>& b, Value* x) {
  bool f64 = format_of(b, x).f64;
  auto [f, e] = split_mantissa(b, x);
  double ln2_hi = f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  double ln2_lo = f64 ? 1.90821492927058770002e-10 : 1.42860682030941723212e-6;
  Value* v = fma(b, e, c(x, ln2_hi), log1p_reduced(b, f, b.CreateFMul(e, c(x, ln2_lo))));
  return log_special_cases(b, x, v);
}

Value* log2(llvm::IRBuilder<>& b, Value* x) {
  auto [f, e] = split_mantissa(b, x);
  Value* v = fma(b, log1p_reduced(b, f, c(x, 0.0)), c(x, std::numbers::log2e), e);
  return log_special_cases(b, x, v);
}

Value* sin(llvm::IRBuilder<>& b, Value* x) { return sin_or_cos(b, x, false); }
Value* cos(llvm::IRBuilder<>& b, Value* x) { return sin_or_cos(b, x, true); }

}  // namespace weft::codegen::portable_math
