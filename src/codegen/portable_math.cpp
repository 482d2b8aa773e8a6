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
  for (size_t k = coefficients.size() - 1; k-- > 0;)  // (the constant as the second factor: LLVM's canonical form)
    acc = llvm::isa<llvm::Constant>(acc) ? fma(b, z, acc, c(z, coefficients[k])) : fma(b, acc, z, c(z, coefficients[k]));
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
  auto power = [&](Value* e) {  // (e + bias) << mantissa, as a shift and an add of the shifted bias (one LEA)
    Value* shifted = b.CreateShl(e, f.mantissa);
    return b.CreateBitCast(b.CreateAdd(shifted, llvm::ConstantInt::get(f.int_type, uint64_t(f.bias) << f.mantissa)),
                           p->getType());
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
  // Past +-1000 (f64) or +-200 (f32) the result is 0 or inf anyway; clamping keeps the reduced argument
  // small (a huge finite x would leave r huge and the polynomial at inf or NaN). NaN stays NaN.
  Value* limit = c(x, f64 ? 1000.0 : 200.0);
  x = b.CreateSelect(b.CreateFCmpOGT(x, limit), limit, x);
  x = b.CreateSelect(b.CreateFCmpOLT(x, b.CreateFNeg(limit)), b.CreateFNeg(limit), x);
  // Keep n finite (NaN and infinities would make the integer conversion poison); x itself carries them.
  Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, c(x, std::numbers::log2e)));
  n = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, n, c(x, 4096)), c(x, -4096));
  double ln2_hi = f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  double ln2_lo = f64 ? 1.90821492927058770002e-10 : 1.42860682030941723212e-6;
  Value* minus_n = b.CreateFNeg(n);
  Value* r = fma(b, minus_n, c(x, ln2_hi), x);
  r = fma(b, minus_n, c(x, ln2_lo), r);
  // No test for +-inf: x is clamped (or NaN) here, and the +-limit give inf and 0 through the scaling.
  return scale_by_power_of_two(b, exp_reduced(b, r), n);
}

Value* exp2(llvm::IRBuilder<>& b, Value* x) {
  // Past +-1500 (f64) or +-300 (f32) the result is 0 or inf anyway; clamped as in exp(), so that a huge
  // finite x does not leave x - n huge (exp2(-FLT_MAX) gave -inf). NaN stays NaN.
  Value* limit = c(x, format_of(b, x).f64 ? 1500.0 : 300.0);
  x = b.CreateSelect(b.CreateFCmpOGT(x, limit), limit, x);
  x = b.CreateSelect(b.CreateFCmpOLT(x, b.CreateFNeg(limit)), b.CreateFNeg(limit), x);
  Value* n = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, x);
  n = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, n, c(x, 4096)), c(x, -4096));
  Value* r = b.CreateFMul(b.CreateFSub(x, n), c(x, std::numbers::ln2));
  return scale_by_power_of_two(b, exp_reduced(b, r), n);  // +-inf: as in exp()
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

// ---- functions of f32 (and narrower) computed in f64 ------------------------------------------------------
// The f64 steps below are within a few f64 ulp, 2^29 times finer than an f32 ulp, so rounding the f64 result
// to f32 once gives the f32 result within 1 ulp (the rounding's half ulp plus a sliver).

namespace {

Value* to_f64(llvm::IRBuilder<>& b, Value* x) { return b.CreateFPExt(x, b.getDoubleTy()); }

// (-1)^k 2 / (sqrt(pi) k! (2k + 1)): erf(x) = x * sum_k c_k x^2k (Taylor, all x).
std::vector<double> erf_taylor(int terms) {
  std::vector<double> v(terms);
  double factorial = 1;
  for (int k = 0; k < terms; ++k) {
    if (k) factorial *= k;
    v[k] = (k % 2 ? -2.0 : 2.0) / (std::sqrt(std::numbers::pi) * factorial * (2 * k + 1));
  }
  return v;
}

}  // namespace

Value* tanh(llvm::IRBuilder<>& b, Value* x) {
  if (x->getType()->isDoubleTy()) return nullptr;  // f32 and narrower only
  Value* d = to_f64(b, x);
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, d);
  // tanh|x| = (1 - t) / (1 + t), t = e^-2|x|: 1 - t is exact for t >= 1/2 (Sterbenz), and t's own error
  // relative to 1 - t ~ 2|x| stays below 2^-32 for |x| >= 2^-12; below that tanh x = x to within 2^-25.
  Value* t = exp(b, b.CreateFMul(a, c(a, -2.0)));
  Value* r = b.CreateFDiv(b.CreateFSub(c(a, 1.0), t), b.CreateFAdd(c(a, 1.0), t));
  r = b.CreateSelect(b.CreateFCmpOLT(x, c(x, 0.0)), b.CreateFNeg(r), r);  // (tests on x: d's exact copy)
  r = b.CreateSelect(b.CreateFCmpOLT(a, c(a, 0x1p-12)), d, r);  // also keeps -0
  return b.CreateFPTrunc(r, x->getType());
}

Value* sigmoid(llvm::IRBuilder<>& b, Value* x) {
  if (x->getType()->isDoubleTy()) return nullptr;
  Value* d = to_f64(b, x);
  // 1 / (1 + e^-x): e^-x overflows to +inf for x < -709, giving 0, which the f32 result is anyway.
  return b.CreateFPTrunc(b.CreateFDiv(c(d, 1.0), b.CreateFAdd(c(d, 1.0), exp(b, b.CreateFNeg(d)))), x->getType());
}

Value* erf(llvm::IRBuilder<>& b, Value* x) {
  if (x->getType()->isDoubleTy()) return nullptr;
  Value* d = to_f64(b, x);
  // Taylor up to |x| = 4 (64 terms: the tail is below 2^-37; the largest term, ~1e5, costs ~2^-30 of
  // rounding); past 4, erf rounds to +-1 in f32 (1 - erf 4 = 1.5e-8 < 2^-25).
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, d);
  Value* clamped = b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, d, c(d, 4.0));
  clamped = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, clamped, c(d, -4.0));
  Value* series = b.CreateFMul(clamped, polynomial(b, b.CreateFMul(clamped, clamped), erf_taylor(64)));
  Value* one = b.CreateSelect(b.CreateFCmpOLT(x, c(x, 0.0)), c(d, -1.0), c(d, 1.0));  // (tests on x: d's exact copy)
  Value* r = b.CreateFPTrunc(b.CreateSelect(b.CreateFCmpOGE(a, c(a, 4.0)), one, series), x->getType());
  return b.CreateSelect(b.CreateFCmpUNO(x, c(x, 0.0)), x, r);
}

Value* pow(llvm::IRBuilder<>& b, Value* x, Value* y) {
  if (x->getType()->isDoubleTy()) return nullptr;
  Value* dx = to_f64(b, x);
  Value* dy = to_f64(b, y);
  // |x|^y = 2^(y log2|x|): y log2|x| is within 2^-50 relative, so the result within 2^-42 relative while
  // it is a finite f32 (|y log2|x|| < 150).
  Value* ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, dx);
  Value* magnitude = exp2(b, b.CreateFMul(dy, log2(b, ax)));
  // y's kind: an integer (infinities count as even ones), odd or not.
  Value* integer = b.CreateFCmpOEQ(b.CreateUnaryIntrinsic(llvm::Intrinsic::floor, dy), dy);
  Value* half = b.CreateFMul(dy, c(dy, 0.5));
  Value* odd = b.CreateAnd(integer, b.CreateFCmpONE(b.CreateUnaryIntrinsic(llvm::Intrinsic::floor, half), half));
  // The tests below are on x and y themselves: dx and dy are their exact copies.
  Value* negative_x = b.CreateICmpSLT(b.CreateBitCast(x, b.getIntNTy(x->getType()->getScalarSizeInBits())),
                                      b.getIntN(x->getType()->getScalarSizeInBits(), 0));  // -0 too
  Value* r = b.CreateSelect(b.CreateAnd(negative_x, odd), b.CreateFNeg(magnitude), magnitude);
  // A negative finite x (not -0, not -inf) to a finite non-integer power has no real value.
  Value* below_zero = b.CreateAnd(b.CreateFCmpOLT(x, c(x, 0.0)), b.CreateFCmpOGT(x, c(x, -INFINITY)));
  Value* finite_y = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, y), c(y, INFINITY));
  r = b.CreateSelect(b.CreateAnd(below_zero, b.CreateAnd(finite_y, b.CreateNot(integer))), c(dx, NAN), r);
  // C's exact cases: x^0 = 1 and 1^y = 1 whatever the other (NaN too); (-1)^+-inf = 1 (0 * inf above is NaN).
  Value* unit = b.CreateOr(b.CreateFCmpOEQ(y, c(y, 0.0)), b.CreateFCmpOEQ(x, c(x, 1.0)));
  Value* infinite_y = b.CreateFCmpOEQ(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, y), c(y, INFINITY));
  unit = b.CreateOr(unit, b.CreateAnd(b.CreateFCmpOEQ(x, c(x, -1.0)), infinite_y));
  r = b.CreateSelect(unit, c(dx, 1.0), r);
  return b.CreateFPTrunc(r, x->getType());
}

}  // namespace weft::codegen::portable_math
