// libFuzzer target: random plain-op programs (elementwise ops, reductions, where, casts, literals over
// random 2-D shapes and element types), traced through weft's public API and run on the CPU backend,
// with a differential check: every output element is compared with an independent scalar evaluation of
// the same program, written here in double (floats: each op's exact result rounded to the op's type,
// which is what a correctly rounded op gives) and wrapping int64 (integers).
//
// Tolerance: ops the CPU backend computes correctly rounded (+ - * / % sqrt floor ceil abs neg min max
// casts, comparisons, where, integer ops, f32/f64 sums, which it adds in order) must match bit for bit
// (NaN matches NaN, -0 matches +0). The transcendentals (exp exp2 log log2 sin cos rsqrt), fma below
// f64 and f16/bf16 sums get 4 ulp of their type; from there each element carries an error bound that
// the later ops propagate (interval style: |f(x') - f(x)| for |x' - x| <= err, plus the rounding of the
// op), a comparison or a float-to-int cast whose outcome that bound leaves undecided makes the element
// unknown, and unknown elements are not compared. A mismatch beyond the bound aborts with the program.
//
// weft::Error from a program weft rejects is expected (the generator sometimes asks for what weft does
// not allow); so is one a 4-byte shape that is not a power of two gets. Crashes, sanitizer reports,
// hangs (libFuzzer's -timeout) and mismatches are findings.
#include <fuzzer/FuzzedDataProvider.h>
#include <weft/weft.h>

#include <cfenv>
#include <cinttypes>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <variant>
#include <vector>

using namespace weft;

namespace {

// ---- element types ---------------------------------------------------------------------------------

enum DT { B1, I8, I16, I32, I64, F16, BF16, F32, F64, kTypes };
const char* const kTypeNames[kTypes] = {"bool", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
bool is_float(int t) { return t >= F16; }
bool is_int(int t) { return t >= I8 && t <= I64; }
int int_bits(int t) { return t == I8 ? 8 : t == I16 ? 16 : t == I32 ? 32 : 64; }
int precision(int t) { return t == F16 ? 11 : t == BF16 ? 8 : t == F32 ? 24 : 53; }
int min_exponent(int t) { return t == F16 ? -14 : t == F64 ? -1022 : -126; }
double max_finite(int t) {
  return t == F16 ? 65504.0 : t == BF16 ? 3.3895313892515355e38 : t == F32 ? 3.4028234663852886e38 : 1.7976931348623157e308;
}

int64_t wrap(int64_t v, int t) {
  if (t == B1) return v != 0;
  int bits = int_bits(t);
  if (bits == 64) return v;
  uint64_t m = (uint64_t(1) << bits) - 1, u = uint64_t(v) & m;
  if (u >> (bits - 1)) u |= ~m;
  return int64_t(u);
}

// x rounded to nearest-even in type t (subnormals and overflow to infinity included), once.
double round_to(long double x, int t) {
  if (t == F64) return double(x);
  if (t == F32) return double(float(x));
  if (!std::isfinite(x) || x == 0) return double(x);
  int e;
  std::frexp(x, &e);  // |x| = m * 2^e, 0.5 <= m < 1: the leading bit has weight 2^(e-1)
  int lead = std::max(e - 1, min_exponent(t));
  long double scale = std::ldexp(1.0L, precision(t) - 1 - lead);
  long double r = std::nearbyint(x * scale) / scale;
  if (std::fabs(r) > max_finite(t)) return x > 0 ? INFINITY : -INFINITY;
  return double(r);
}
// One unit in the last place of t at magnitude |x| (at least the smallest subnormal's).
double ulp(double x, int t) {
  double a = std::fabs(x);
  if (!std::isfinite(a)) a = max_finite(t);
  int e = 0;
  if (a > 0) std::frexp(a, &e);
  return std::ldexp(1.0, std::max(e - 1, min_exponent(t)) - (precision(t) - 1));
}

// ---- the program -----------------------------------------------------------------------------------

enum Kind { kCast, kUnary, kBinary, kBinaryLit, kCompare, kWhere, kReduce, kFma, kKinds };
enum UnOp { uNeg, uAbs, uNot, uExp, uExp2, uLog, uLog2, uSqrt, uRsqrt, uSin, uCos, uFloor, uCeil, kUnOps };
// weft's max and min (README, "NaN"): NaN when either operand is NaN, and -0 below +0.
double weft_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double weft_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

enum BinOp { bAdd, bSub, bMul, bDiv, bRem, bMin, bMax, bAnd, bOr, bXor, bShl, bShr, kBinOps };
enum CmpOp { cLt, cLe, cGt, cGe, cEq, cNe, kCmpOps };
enum RedOp { rSum, rMax, rMin, rArgMax, rArgMin, kRedOps };
const char* const kUnNames[] = {"neg", "abs", "not", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil"};
const char* const kBinNames[] = {"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr"};
const char* const kCmpNames[] = {"lt", "le", "gt", "ge", "eq", "ne"};
const char* const kRedNames[] = {"sum", "max", "min", "argmax", "argmin"};
const double kFloatLits[] = {0.5, -2.0, 3.0, 0.1, 1e4, -0.0, 1.0, 7.0};

struct Step {
  Kind kind;
  int op = 0, a = 0, b = 0, c = 0;
  int type = 0;  // kCast: the target type
  int axis = 0;
  int lit = 0;  // kBinaryLit: integer literal, or an index into kFloatLits for float types
};

struct Program {
  int rows = 1, cols = 1, warps = 4;
  std::vector<Step> steps;
  std::vector<float> xf;
  std::vector<int64_t> xi;
  int out_f = 0, out_i = 0;  // the values stored (after a cast) to the f64 and i64 outputs
};

std::string describe(const Program& p) {
  std::string s = "shape [" + std::to_string(p.rows) + ", " + std::to_string(p.cols) + "], " + std::to_string(p.warps) +
                  " warps\n  v0 = load f32, v1 = load i64\n";
  int v = 2;
  for (const Step& st : p.steps) {
    char line[160];
    switch (st.kind) {
      case kCast: std::snprintf(line, sizeof line, "cast<%s>(v%d)", kTypeNames[st.type], st.a); break;
      case kUnary: std::snprintf(line, sizeof line, "%s(v%d)", kUnNames[st.op], st.a); break;
      case kBinary: std::snprintf(line, sizeof line, "%s(v%d, v%d)", kBinNames[st.op], st.a, st.b); break;
      case kBinaryLit: std::snprintf(line, sizeof line, "%s(v%d, literal #%d)", kBinNames[st.op], st.a, st.lit); break;
      case kCompare: std::snprintf(line, sizeof line, "%s(v%d, v%d)", kCmpNames[st.op], st.a, st.b); break;
      case kWhere: std::snprintf(line, sizeof line, "where(v%d, v%d, v%d)", st.c, st.a, st.b); break;
      case kReduce: std::snprintf(line, sizeof line, "expand_dims(%s(v%d, %d), %d)", kRedNames[st.op], st.a, st.axis, st.axis); break;
      default: std::snprintf(line, sizeof line, "fma(v%d, v%d, v%d)", st.a, st.b, st.c); break;
    }
    s += "  v" + std::to_string(v++) + " = " + line + "\n";
  }
  s += "  store cast<f64>(v" + std::to_string(p.out_f) + "), cast<i64>(v" + std::to_string(p.out_i) + ")\n";
  return s;
}

// ---- tracing through the public API -------------------------------------------------------------------

using V = std::variant<Tile<bool>, Tile<int8_t>, Tile<int16_t>, Tile<int32_t>, Tile<int64_t>, Tile<f16>, Tile<bf16>,
                       Tile<float>, Tile<double>>;

template <class E> constexpr bool kIsFloat = std::is_floating_point_v<E> || std::is_same_v<E, f16> || std::is_same_v<E, bf16>;
template <class E> constexpr bool kIsBool = std::is_same_v<E, bool>;
template <class E> constexpr bool kIsInt = !kIsFloat<E> && !kIsBool<E>;

V cast_to(const V& v, int t) {
  return std::visit(
      [&](const auto& x) -> V {
        switch (t) {
          case B1: return cast<bool>(x);
          case I8: return cast<int8_t>(x);
          case I16: return cast<int16_t>(x);
          case I32: return cast<int32_t>(x);
          case I64: return cast<int64_t>(x);
          case F16: return cast<f16>(x);
          case BF16: return cast<bf16>(x);
          case F32: return cast<float>(x);
          default: return cast<double>(x);
        }
      },
      v);
}

[[noreturn]] void not_allowed() { throw Error("fuzz_ops: this op does not apply to this type (generator)"); }

V unary(const V& v, int op) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        if constexpr (kIsBool<E>) {
          if (op == uNot) return !x;
          not_allowed();
        } else {
          switch (op) {
            case uNeg: return -x;
            case uAbs: return abs(x);
            case uNot:
              if constexpr (kIsInt<E>) return ~x;
              not_allowed();
            default: break;
          }
          if constexpr (kIsFloat<E>) {
            switch (op) {
              case uExp: return exp(x);
              case uExp2: return exp2(x);
              case uLog: return log(x);
              case uLog2: return log2(x);
              case uSqrt: return sqrt(x);
              case uRsqrt: return rsqrt(x);
              case uSin: return sin(x);
              case uCos: return cos(x);
              case uFloor: return floor(x);
              default: return ceil(x);
            }
          }
          not_allowed();
        }
      },
      v);
}

template <class E> Tile<E> binary_tiles(const Tile<E>& x, const Operand<E>& y, int op) {
  if constexpr (kIsBool<E>) {
    switch (op) {
      case bAnd: return x & y;
      case bOr: return x | y;
      case bXor: return x ^ y;
      default: not_allowed();
    }
  } else {
    switch (op) {
      case bAdd: return x + y;
      case bSub: return x - y;
      case bMul: return x * y;
      case bDiv: return x / y;
      case bRem: return x % y;
      case bMin: return minimum(x, Tile<E>(y.node));
      case bMax: return maximum(x, Tile<E>(y.node));
      default: break;
    }
    if constexpr (kIsInt<E>) {
      switch (op) {
        case bAnd: return x & y;
        case bOr: return x | y;
        case bXor: return x ^ y;
        case bShl: return x << y;
        default: return x >> y;
      }
    }
    not_allowed();
  }
}

V binary(const V& a, const V& b, int op) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        return binary_tiles<E>(x, Operand<E>(std::get<Tile<E>>(b)), op);
      },
      a);
}

V binary_literal(const V& a, int op, int lit) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        if constexpr (kIsBool<E>) {
          not_allowed();
        } else if constexpr (kIsFloat<E>) {
          return binary_tiles<E>(x, Operand<E>(kFloatLits[lit & 7]), op);
        } else {
          return binary_tiles<E>(x, Operand<E>(lit), op);
        }
      },
      a);
}

V compare(const V& a, const V& b, int op) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        const Tile<E>& y = std::get<Tile<E>>(b);
        if constexpr (!kIsBool<E>) {
          switch (op) {
            case cLt: return x < y;
            case cLe: return x <= y;
            case cGt: return x > y;
            case cGe: return x >= y;
            default: break;
          }
        }
        if (op == cEq) return x == y;
        if (op == cNe) return x != y;
        not_allowed();
      },
      a);
}

V select(const V& c, const V& a, const V& b) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        return where(std::get<Tile<bool>>(c), x, std::get<Tile<E>>(b));
      },
      a);
}

V reduce(const V& a, int op, int axis) {
  return std::visit(
      [&](const auto& x) -> V {
        switch (op) {
          case rSum: return expand_dims(sum(x, axis), axis);
          case rMax: return expand_dims(max(x, axis), axis);
          case rMin: return expand_dims(min(x, axis), axis);
          case rArgMax: return expand_dims(argmax(x, axis), axis);
          default: return expand_dims(argmin(x, axis), axis);
        }
      },
      a);
}

V fused(const V& a, const V& b, const V& c) {
  return std::visit(
      [&](const auto& x) -> V {
        using E = typename std::decay_t<decltype(x)>::element_type;
        if constexpr (kIsFloat<E>) {
          return fma(x, std::get<Tile<E>>(b), std::get<Tile<E>>(c));
        } else {
          not_allowed();
        }
      },
      a);
}

int type_of(const V& v) { return int(v.index()); }
bool op_applies(const Step& s, int t);

// The operands of a step in the types the op takes: b (and c) cast to a's type, where's condition to bool.
// The reference evaluation inserts the same casts.
void trace_program(const Program& p, Ptr<float> xf, Ptr<int64_t> xi, Ptr<double> of, Ptr<int64_t> oi) {
  Int offs = reshape(arange(0, p.rows * p.cols), {p.rows, p.cols});
  std::vector<V> v;
  v.push_back(load(xf + offs));
  v.push_back(load(xi + offs));
  for (const Step& s : p.steps) {
    const V& a = v.at(s.a);
    // What this harness does not model is not asked of weft either (weft may accept it, e.g. sum of bools).
    if (!op_applies(s, type_of(a))) not_allowed();
    auto as_a = [&](int i) { return type_of(v.at(i)) == type_of(a) ? v.at(i) : cast_to(v.at(i), type_of(a)); };
    switch (s.kind) {
      case kCast: v.push_back(cast_to(a, s.type)); break;
      case kUnary: v.push_back(unary(a, s.op)); break;
      case kBinary: v.push_back(binary(a, as_a(s.b), s.op)); break;
      case kBinaryLit: v.push_back(binary_literal(a, s.op, s.lit)); break;
      case kCompare: v.push_back(compare(a, as_a(s.b), s.op)); break;
      case kWhere: {
        V c = type_of(v.at(s.c)) == B1 ? v.at(s.c) : cast_to(v.at(s.c), B1);
        v.push_back(select(c, a, as_a(s.b)));
        break;
      }
      case kReduce: v.push_back(reduce(a, s.op, s.axis)); break;
      default: v.push_back(fused(a, as_a(s.b), as_a(s.c))); break;
    }
  }
  auto full = [&](const V& x) {
    return std::visit([&](const auto& t) -> V { return broadcast_to(t, {p.rows, p.cols}); }, x);
  };
  store(of + offs, std::get<Tile<double>>(cast_to(full(v.at(p.out_f)), F64)));
  store(oi + offs, std::get<Tile<int64_t>>(cast_to(full(v.at(p.out_i)), I64)));
}

// ---- the reference evaluation ----------------------------------------------------------------------------

constexpr double kUnknown = INFINITY;  // an element whose value the bounds leave undecided

struct Elem {
  double f = 0;   // floats (and bools / ints as a number where needed)
  int64_t i = 0;  // ints and bools
  double err = 0; // floats: a bound on |weft's value - f|; ints: 0 or kUnknown
};

struct RVal {
  int type = F32, rows = 1, cols = 1;
  std::vector<Elem> e;
  const Elem& at(int r, int c) const { return e[size_t((rows == 1 ? 0 : r) * cols + (cols == 1 ? 0 : c))]; }
};

double num(const Elem& x, int t) { return is_float(t) ? x.f : double(x.i); }

Elem cast_elem(const Elem& x, int from, int to) {
  Elem r;
  if (is_float(from)) {
    if (to == B1) {
      r.i = x.f != 0 || std::isnan(x.f);
      if (x.err > 0 && (std::isnan(x.f) || std::fabs(x.f) <= x.err)) r.err = kUnknown;
    } else if (is_int(to)) {
      int bits = int_bits(to);
      long double lo = -std::ldexp(1.0L, bits - 1), hi = std::ldexp(1.0L, bits - 1) - 1;
      auto sat = [&](double v) -> int64_t {
        if (std::isnan(v)) return 0;
        long double t = std::trunc((long double)v);
        if (t <= lo) return bits == 64 ? INT64_MIN : int64_t(lo);
        if (t >= hi) return bits == 64 ? INT64_MAX : int64_t(hi);
        return int64_t(t);
      };
      r.i = sat(x.f);
      if (x.err > 0 && (std::isnan(x.f) || !std::isfinite(x.err) || sat(x.f - x.err) != sat(x.f + x.err))) r.err = kUnknown;
    } else {
      r.f = round_to(x.f, to);
      r.err = x.err > 0 ? x.err + ulp(r.f, to) : 0;
    }
  } else {
    int64_t v = from == B1 ? (x.i != 0) : x.i;
    if (is_float(to)) {
      r.f = round_to((long double)v, to);
    } else {
      r.i = wrap(v, to);
    }
    r.err = x.err > 0 ? kUnknown : 0;
  }
  return r;
}

RVal cast_val(const RVal& v, int to) {
  RVal r{to, v.rows, v.cols, {}};
  for (const Elem& x : v.e) r.e.push_back(cast_elem(x, v.type, to));
  return r;
}

// err of a float result computed from operands with errors, before the op's own rounding (added here).
double settle(double value, double err, int t) {
  if (err == 0) return 0;
  if (!std::isfinite(err) || std::isnan(value)) return kUnknown;
  return err + 2 * ulp(std::fabs(value) + err, t);
}

Elem unary_elem(const Elem& x, int op, int t) {
  Elem r;
  if (t == B1) {  // not
    r.i = !x.i;
    r.err = x.err;
    return r;
  }
  if (!is_float(t)) {
    int64_t v = x.i;
    if (op == uNeg) r.i = wrap(int64_t(0 - uint64_t(v)), t);
    else if (op == uAbs) r.i = wrap(v < 0 ? int64_t(0 - uint64_t(v)) : v, t);
    else r.i = wrap(~v, t);
    r.err = x.err;
    return r;
  }
  double a = x.f, e = x.err, v;
  bool approx = false;
  switch (op) {
    case uNeg: v = -a; break;
    case uAbs: v = std::fabs(a); break;
    case uExp: v = std::exp(a); approx = true; break;
    case uExp2: v = std::exp2(a); approx = true; break;
    case uLog: v = std::log(a); approx = true; break;
    case uLog2: v = std::log2(a); approx = true; break;
    case uSqrt: v = std::sqrt(a); break;
    case uRsqrt: v = 1 / std::sqrt(a); approx = true; break;
    case uSin: v = std::sin(a); approx = true; break;
    case uCos: v = std::cos(a); approx = true; break;
    case uFloor: v = std::floor(a); break;
    default: v = std::ceil(a); break;
  }
  r.f = round_to(v, t);
  // Propagated error: how far f(a') can be from f(a) for |a' - a| <= e.
  double p = 0;
  if (e > 0) {
    if (!std::isfinite(e) || std::isnan(a) || std::isinf(a)) return Elem{r.f, 0, kUnknown};
    auto spread = [&](double (*fn)(double)) {
      double lo = fn(a - e), hi = fn(a + e);
      if (std::isnan(lo) || std::isnan(hi)) return kUnknown;
      return std::max(std::fabs(hi - v), std::fabs(lo - v));
    };
    switch (op) {
      case uNeg: case uAbs: case uSin: case uCos: p = e; break;
      case uExp: p = spread([](double z) { return std::exp(z); }); break;
      case uExp2: p = spread([](double z) { return std::exp2(z); }); break;
      case uLog: p = a - e > 0 ? spread([](double z) { return std::log(z); }) : kUnknown; break;
      case uLog2: p = a - e > 0 ? spread([](double z) { return std::log2(z); }) : kUnknown; break;
      case uSqrt: p = a - e >= 0 ? std::sqrt(e) : kUnknown; break;
      case uRsqrt: p = a - e > 0 ? spread([](double z) { return 1 / std::sqrt(z); }) : kUnknown; break;
      case uFloor: p = std::floor(a - e) == std::floor(a + e) ? 0 : std::floor(a + e) - std::floor(a - e); break;
      default: p = std::ceil(a - e) == std::ceil(a + e) ? 0 : std::ceil(a + e) - std::ceil(a - e); break;
    }
    if (op == uFloor || op == uCeil) return Elem{r.f, 0, p};  // exact once the bound cannot cross an integer
    r.err = settle(r.f, p, t);
  }
  if (approx) {
    // Special values (NaN, infinite inputs) are exact; a finite result gets 4 ulp of t.
    if (!(e == 0 && (std::isnan(v) || !std::isfinite(a)))) r.err += 4 * ulp(r.f, t);
  }
  return r;
}

int64_t int_binary(int64_t a, int64_t b, int op, int t) {
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  int bits = int_bits(t);
  switch (op) {
    case bAdd: return wrap(int64_t(ua + ub), t);
    case bSub: return wrap(int64_t(ua - ub), t);
    case bMul: return wrap(int64_t(ua * ub), t);
    case bDiv:
      if (b == 0) return 0;
      if (b == -1) return wrap(int64_t(0 - ua), t);
      return wrap(a / b, t);
    case bRem:
      if (b == 0 || b == -1) return 0;
      return wrap(a % b, t);
    case bMin: return std::min(a, b);
    case bMax: return std::max(a, b);
    case bAnd: return a & b;
    case bOr: return a | b;
    case bXor: return wrap(a ^ b, t);
    case bShl: {
      uint64_t amount = uint64_t(b) & (bits == 64 ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1));
      return amount >= uint64_t(bits) ? 0 : wrap(int64_t(ua << amount), t);
    }
    default: {
      uint64_t amount = uint64_t(b) & (bits == 64 ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1));
      return a >> (amount >= uint64_t(bits) ? bits - 1 : int(amount));
    }
  }
}

Elem binary_elem(const Elem& x, const Elem& y, int op, int t) {
  Elem r;
  if (!is_float(t)) {
    r.i = t == B1 ? (op == bAnd ? (x.i & y.i) : op == bOr ? (x.i | y.i) : (x.i ^ y.i)) : int_binary(x.i, y.i, op, t);
    r.err = std::max(x.err, y.err);
    return r;
  }
  double a = x.f, b = y.f, v;
  switch (op) {
    case bAdd: v = a + b; break;
    case bSub: v = a - b; break;
    case bMul: v = a * b; break;
    case bDiv: v = a / b; break;
    case bRem: v = std::fmod(a, b); break;
    case bMin: v = weft_min(a, b); break;
    default: v = weft_max(a, b); break;
  }
  r.f = round_to(v, t);
  double ea = x.err, eb = y.err;
  if (ea == 0 && eb == 0) return r;
  if (!std::isfinite(ea) || !std::isfinite(eb) || !std::isfinite(a) || !std::isfinite(b)) return Elem{r.f, 0, kUnknown};
  double p;
  switch (op) {
    case bAdd: case bSub: p = ea + eb; break;
    case bMul: p = std::fabs(a) * eb + std::fabs(b) * ea + ea * eb; break;
    case bDiv: p = std::fabs(b) > eb ? (std::fabs(a) * eb + std::fabs(b) * ea) / (std::fabs(b) * (std::fabs(b) - eb)) : kUnknown; break;
    case bRem: p = kUnknown; break;
    default: p = std::max(ea, eb); break;
  }
  r.err = settle(r.f, p, t);
  return r;
}

Elem compare_elem(const Elem& x, const Elem& y, int op, int t) {
  Elem r;
  double a = num(x, t), b = num(y, t);
  bool v;
  if (is_float(t)) {
    switch (op) {
      case cLt: v = a < b; break;
      case cLe: v = a <= b; break;
      case cGt: v = a > b; break;
      case cGe: v = a >= b; break;
      case cEq: v = a == b; break;
      default: v = !(a == b); break;
    }
    double e = x.err + y.err;
    if (e > 0 && (std::isnan(a) || std::isnan(b) || !std::isfinite(e) || std::fabs(a - b) <= e || std::isinf(a) || std::isinf(b)))
      r.err = kUnknown;
  } else {
    int64_t p = x.i, q = y.i;
    switch (op) {
      case cLt: v = p < q; break;
      case cLe: v = p <= q; break;
      case cGt: v = p > q; break;
      case cGe: v = p >= q; break;
      case cEq: v = p == q; break;
      default: v = p != q; break;
    }
    r.err = std::max(x.err, y.err);
  }
  r.i = v;
  return r;
}

RVal broadcast2(const RVal& a, const RVal& b, int type) {
  return RVal{type, std::max(a.rows, b.rows), std::max(a.cols, b.cols), {}};
}

RVal reduce_val(const RVal& x, int op, int axis) {
  const int t = x.type;
  const bool arg = op == rArgMax || op == rArgMin;
  RVal r{arg ? I32 : t, axis == 0 ? 1 : x.rows, axis == 0 ? x.cols : 1, {}};
  const int len = axis == 0 ? x.rows : x.cols, n = axis == 0 ? x.cols : x.rows;
  for (int o = 0; o < n; ++o) {
    auto at = [&](int k) -> const Elem& { return axis == 0 ? x.at(k, o) : x.at(o, k); };
    Elem acc = at(0);
    int best = 0;
    double err = acc.err, magnitude = std::fabs(acc.f);
    bool unknown = false;
    // As the CPU backend's loop: f32/f64 add in order in their type; f16/bf16 in f32 (then rounded).
    double facc = acc.f;
    for (int k = 1; k < len; ++k) {
      const Elem& v = at(k);
      err += v.err;
      if (is_float(t)) {
        switch (op) {
          case rSum:
            facc = t == F64 ? facc + v.f : double(float(facc) + float(v.f));
            magnitude += std::fabs(v.f);
            break;
          case rMax: facc = weft_max(facc, v.f); break;
          case rMin: facc = weft_min(facc, v.f); break;
          default: {  // the first NaN wins, then nothing does
            bool better = !std::isnan(facc) && (std::isnan(v.f) || (op == rArgMax ? v.f > facc : v.f < facc));
            if (v.err > 0 || acc.err > 0) unknown = true;
            if (better) { facc = v.f; best = k; }
          }
        }
      } else {
        switch (op) {
          case rSum: acc.i = wrap(int64_t(uint64_t(acc.i) + uint64_t(v.i)), t); break;
          case rMax: acc.i = t == B1 ? (acc.i | v.i) : std::max(acc.i, v.i); break;
          case rMin: acc.i = t == B1 ? (acc.i & v.i) : std::min(acc.i, v.i); break;
          default: {
            bool better = op == rArgMax ? v.i > acc.i : v.i < acc.i;
            if (better) { acc.i = v.i; best = k; }
          }
        }
        if (v.err > 0) unknown = true;
      }
    }
    Elem e;
    if (arg) {
      e.i = best;
      e.err = (unknown || err > 0) ? kUnknown : 0;
    } else if (is_float(t)) {
      e.f = round_to(facc, t);
      e.err = err;
      if (op == rSum) {
        if (t == F16 || t == BF16) e.err += (len + 1) * ulp(magnitude, t) + (len + 1) * ulp(magnitude, F32);
        else if (err > 0) e.err += (len + 1) * ulp(magnitude, t);
        if (e.err > 0 && !std::isfinite(magnitude)) e.err = kUnknown;
      } else if (err > 0) {
        e.err = settle(e.f, err, t);
      }
    } else {
      e.i = acc.i;
      e.err = unknown || err > 0 ? kUnknown : 0;
    }
    r.e.push_back(e);
  }
  return r;
}

bool op_applies(const Step& s, int t) {
  switch (s.kind) {
    case kUnary:
      if (t == B1) return s.op == uNot;
      if (is_int(t)) return s.op <= uNot;
      return s.op != uNot;
    case kBinary: case kBinaryLit:
      if (t == B1) return s.kind == kBinary && (s.op == bAnd || s.op == bOr || s.op == bXor);
      if (is_float(t)) return s.op <= bMax;
      return true;
    case kReduce: return t != B1;
    case kFma: return is_float(t);
    case kCompare: return t != B1 || s.op >= cEq;  // bools have == and != only
    default: return true;
  }
}

// Evaluates p; false when p uses an op on a type this harness does not model (then weft must reject it).
bool evaluate(const Program& p, std::vector<RVal>& v) {
  RVal xf{F32, p.rows, p.cols, {}}, xi{I64, p.rows, p.cols, {}};
  for (int k = 0; k < p.rows * p.cols; ++k) {
    xf.e.push_back(Elem{p.xf[k], 0, 0});
    xi.e.push_back(Elem{0, p.xi[k], 0});
  }
  v = {xf, xi};
  for (const Step& s : p.steps) {
    const RVal a = v.at(s.a);
    if (!op_applies(s, a.type)) return false;
    auto as_a = [&](int i) { return v.at(i).type == a.type ? v.at(i) : cast_val(v.at(i), a.type); };
    switch (s.kind) {
      case kCast: v.push_back(cast_val(a, s.type)); break;
      case kUnary: {
        RVal r{a.type, a.rows, a.cols, {}};
        for (const Elem& x : a.e) r.e.push_back(unary_elem(x, s.op, a.type));
        v.push_back(r);
        break;
      }
      case kBinary: case kBinaryLit: case kCompare: {
        RVal b;
        if (s.kind == kBinaryLit) {
          b = RVal{a.type, 1, 1, {}};
          Elem lit;
          if (is_float(a.type)) lit.f = round_to(kFloatLits[s.lit & 7], a.type);
          else lit.i = wrap(s.lit, a.type);
          b.e.push_back(lit);
        } else {
          b = as_a(s.b);
        }
        RVal r = broadcast2(a, b, s.kind == kCompare ? B1 : a.type);
        for (int i = 0; i < r.rows; ++i)
          for (int j = 0; j < r.cols; ++j)
            r.e.push_back(s.kind == kCompare ? compare_elem(a.at(i, j), b.at(i, j), s.op, a.type)
                                             : binary_elem(a.at(i, j), b.at(i, j), s.op, a.type));
        v.push_back(r);
        break;
      }
      case kWhere: {
        RVal c = v.at(s.c).type == B1 ? v.at(s.c) : cast_val(v.at(s.c), B1), b = as_a(s.b);
        RVal r = broadcast2(broadcast2(a, b, a.type), c, a.type);
        for (int i = 0; i < r.rows; ++i)
          for (int j = 0; j < r.cols; ++j) {
            const Elem &ce = c.at(i, j), &x = a.at(i, j), &y = b.at(i, j);
            Elem e = ce.i ? x : y;
            if (ce.err > 0) {  // either branch: both must agree within their bounds
              if (is_float(a.type)) {
                double d = std::fabs(x.f - y.f);
                e.err = std::isfinite(d) ? std::max(x.err, y.err) + d : kUnknown;
                if (std::isnan(x.f) != std::isnan(y.f)) e.err = kUnknown;
              } else {
                e.err = (x.i == y.i && x.err == 0 && y.err == 0) ? 0 : kUnknown;
              }
            }
            r.e.push_back(e);
          }
        v.push_back(r);
        break;
      }
      case kReduce: v.push_back(reduce_val(a, s.op, s.axis)); break;
      default: {
        RVal b = as_a(s.b), c = as_a(s.c);
        RVal r = broadcast2(broadcast2(a, b, a.type), c, a.type);
        for (int i = 0; i < r.rows; ++i)
          for (int j = 0; j < r.cols; ++j) {
            const Elem &x = a.at(i, j), &y = b.at(i, j), &z = c.at(i, j);
            Elem e;
            double exact = a.type == F64 ? std::fma(x.f, y.f, z.f) : double(std::fmal(x.f, y.f, z.f));
            e.f = round_to(exact, a.type);
            double p = x.err + y.err + z.err;
            if (p > 0) {
              if (!std::isfinite(p) || !std::isfinite(x.f) || !std::isfinite(y.f) || !std::isfinite(z.f)) {
                e.err = kUnknown;
              } else {
                p = std::fabs(x.f) * y.err + std::fabs(y.f) * x.err + x.err * y.err + z.err;
                e.err = settle(e.f, p, a.type);
              }
            }
            if (a.type != F64 && std::isfinite(e.f)) e.err += ulp(e.f, a.type);  // fma rounded twice in f32
            r.e.push_back(e);
          }
        v.push_back(r);
      }
    }
    if (v.back().e.size() != size_t(v.back().rows * v.back().cols)) std::abort();
  }
  return true;
}

// ---- decoding the fuzz input ----------------------------------------------------------------------------

const float kSpecialFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 3.0f, 1e-3f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN,
                                1e-40f, 65504.0f, 7.0f, 100.0f, 1.5f, 2.5f, -2.5f, 0.1f, 1e4f, -7.75f, 3.14159f};
const int64_t kSpecialInts[] = {0, 1, -1, 2, 7, -128, 127, 255, 32767, -32768, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX,
                                64, 63, 31, 8, 16, -3, 1000, 65536};

Program decode(FuzzedDataProvider& in) {
  Program p;
  const int dims[] = {1, 2, 4, 8, 16, 3};  // 3: not a power of two, a weft::Error
  uint8_t shape = in.ConsumeIntegral<uint8_t>();
  int ri = (shape & 7) % 6, ci = ((shape >> 3) & 7) % 6;
  if (ri == 5 && !(shape & 0x80)) ri = 0;  // a 3 (rarely)
  if (ci == 5 && !(shape & 0x40)) ci = 1;
  p.rows = dims[ri];
  p.cols = dims[ci];
  p.warps = 1 << in.ConsumeIntegralInRange<int>(0, 3);
  int n = p.rows * p.cols;
  for (int k = 0; k < n; ++k) {
    uint8_t sel = in.ConsumeIntegral<uint8_t>();
    if (sel < 224) {
      p.xf.push_back(kSpecialFloats[sel % std::size(kSpecialFloats)] * ((sel >> 5) & 1 ? 1.0f : 0.75f));
    } else {
      uint32_t bits = in.ConsumeIntegral<uint32_t>();
      float f;
      std::memcpy(&f, &bits, 4);
      p.xf.push_back(f);
    }
    sel = in.ConsumeIntegral<uint8_t>();
    if (sel < 224) p.xi.push_back(int64_t(uint64_t(kSpecialInts[sel % std::size(kSpecialInts)]) + (sel >> 5) - 3));
    else p.xi.push_back(in.ConsumeIntegral<int64_t>());
  }
  int count = in.ConsumeIntegralInRange<int>(1, 12);
  std::vector<int> types = {F32, I64};  // each value's type, to pick ops that apply to it
  for (int k = 0; k < count && in.remaining_bytes() > 0; ++k) {
    int values = int(types.size());
    Step s;
    s.kind = Kind(in.ConsumeIntegralInRange<int>(0, kKinds - 1));
    s.a = in.ConsumeIntegralInRange<int>(0, values - 1);
    s.b = in.ConsumeIntegralInRange<int>(0, values - 1);
    s.c = in.ConsumeIntegralInRange<int>(0, values - 1);
    switch (s.kind) {
      case kCast: s.type = in.ConsumeIntegralInRange<int>(0, kTypes - 1); break;
      case kUnary: s.op = in.ConsumeIntegralInRange<int>(0, kUnOps - 1); break;
      case kBinary: s.op = in.ConsumeIntegralInRange<int>(0, kBinOps - 1); break;
      case kBinaryLit:
        s.op = in.ConsumeIntegralInRange<int>(0, kBinOps - 1);
        s.lit = in.ConsumeIntegralInRange<int>(-8, 8);
        if (s.lit < 0 && s.op >= bAnd) s.lit = -s.lit;  // keep shift amounts small
        break;
      case kCompare: s.op = in.ConsumeIntegralInRange<int>(0, kCmpOps - 1); break;
      case kReduce:
        s.op = in.ConsumeIntegralInRange<int>(0, kRedOps - 1);
        s.axis = in.ConsumeIntegralInRange<int>(0, 1);
        break;
      default: break;
    }
    // Turn the op into one that applies to v[a]'s type.
    const int t = types[s.a];
    switch (s.kind) {
      case kUnary: s.op = t == B1 ? uNot : is_int(t) ? s.op % 3 : (s.op == uNot ? uNeg : s.op); break;
      case kBinaryLit:
        if (t == B1) s.kind = kBinary;
        [[fallthrough]];
      case kBinary: s.op = t == B1 ? bAnd + s.op % 3 : is_float(t) ? s.op % (bMax + 1) : s.op; break;
      case kCompare: if (t == B1) s.op = cEq + s.op % 2; break;
      case kReduce: if (t == B1) { s.kind = kCast; s.type = I32; } break;
      case kFma: if (!is_float(t)) { s.kind = kBinary; s.op = bMul; } break;
      default: break;
    }
    int result = t;
    if (s.kind == kCast) result = s.type;
    if (s.kind == kCompare) result = B1;
    if (s.kind == kReduce && (s.op == rArgMax || s.op == rArgMin)) result = I32;
    types.push_back(result);
    p.steps.push_back(s);
  }
  int values = int(types.size());
  p.out_f = values - 1;
  p.out_i = in.ConsumeIntegralInRange<int>(0, values - 1);
  return p;
}

bool same(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("WEFT_BACKEND", "cpu", 1);
  setenv("WEFT_CACHE", "0", 1);  // compile every program: the cache would hide the code generator
  setenv("WEFT_CPU_THREADS", "1", 1);
  setenv("WEFT_VERIFY_LLVM", "1", 1);  // an invalid module is a finding, not a crash later
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Program p = decode(in);
  const bool verbose = std::getenv("WEFT_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s", describe(p).c_str());
  const size_t n = size_t(p.rows) * size_t(p.cols);
  std::vector<double> got_f;
  std::vector<int64_t> got_i;
  try {
    Kernel k("fuzz_ops",
             [&p](Ptr<float> xf, Ptr<int64_t> xi, Ptr<double> of, Ptr<int64_t> oi) { trace_program(p, xf, xi, of, oi); },
             KernelOptions{.num_warps = p.warps});
    Device d = Device::cpu();
    Buffer<float> xf = d.upload(p.xf);
    Buffer<int64_t> xi = d.upload(p.xi);
    Buffer<double> of = d.upload(std::vector<double>(n, -12345.0));
    Buffer<int64_t> oi = d.upload(std::vector<int64_t>(n, -12345));
    k.launch(Grid(1), xf, xi, of, oi);
    got_f = of.download();
    got_i = oi.download();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "weft::InternalError (a finding) for\n%s%s\n", describe(p).c_str(), e.what());
    std::abort();
  } catch (const Error& e) {
    if (verbose) std::fprintf(stderr, "weft::Error: %s\n", e.what());
    return 0;  // a program weft rejects
  }
  std::vector<RVal> ref;
  if (!evaluate(p, ref)) {
    std::fprintf(stderr, "weft accepted a program this harness thinks it rejects (check op_applies):\n%s",
                 describe(p).c_str());
    std::abort();
  }
  RVal rf = cast_val(ref.at(p.out_f), F64), ri = cast_val(ref.at(p.out_i), I64);
  if (std::getenv("WEFT_FUZZ_BREAK_REFERENCE")) rf.e.at(0).f += 1;  // checks that the check fires
  int exact = 0, bounded = 0, unknown = 0;
  for (int r = 0; r < p.rows; ++r)
    for (int c = 0; c < p.cols; ++c) {
      const size_t k = size_t(r * p.cols + c);
      const Elem &wf = rf.at(r, c), &wi = ri.at(r, c);
      bool bad_f = false, bad_i = false;
      if (wf.err == 0) {
        bad_f = !same(got_f[k], wf.f);
      } else if (std::isfinite(wf.err) && std::isfinite(wf.f) && std::isfinite(got_f[k])) {
        bad_f = !(std::fabs(got_f[k] - wf.f) <= wf.err * (1 + 1e-12));
      }
      if (wi.err == 0) bad_i = got_i[k] != wi.i;
      for (double err : {wf.err, wi.err}) (err == 0 ? exact : std::isfinite(err) ? bounded : unknown) += 1;
      if (bad_f || bad_i) {
        std::fprintf(stderr,
                     "MISMATCH at [%d, %d]: f64 output %.17g (want %.17g +- %g), i64 output %" PRId64 " (want %" PRId64
                     "%s)\nprogram:\n%s",
                     r, c, got_f[k], wf.f, wf.err, got_i[k], wi.i, wi.err == 0 ? "" : ", unknown", describe(p).c_str());
        std::fprintf(stderr, "inputs: ");
        for (size_t q = 0; q < n; ++q) std::fprintf(stderr, "(%.9g, %" PRId64 ") ", p.xf[q], p.xi[q]);
        std::fprintf(stderr, "\n");
        std::abort();
      }
    }
  if (verbose) std::fprintf(stderr, "compared %d elements exactly, %d within a bound; %d unknown\n", exact, bounded, unknown);
  return 0;
}
