#include "weft/dtype.h"

#include <cmath>

namespace weft {

int DType::bits() const {
  if (pointer) return 64;
  switch (scalar) {
    case ScalarType::i1: return 1;
    case ScalarType::i8:
    case ScalarType::f8e4m3:
    case ScalarType::f8e5m2: return 8;
    case ScalarType::i16:
    case ScalarType::f16:
    case ScalarType::bf16: return 16;
    case ScalarType::i32:
    case ScalarType::f32: return 32;
    case ScalarType::i64:
    case ScalarType::f64: return 64;
  }
  return 0;
}

int DType::bytes() const { return bits() == 1 ? 1 : bits() / 8; }

static const char* scalar_name(ScalarType s) {
  switch (s) {
    case ScalarType::i1: return "i1";
    case ScalarType::i8: return "i8";
    case ScalarType::i16: return "i16";
    case ScalarType::i32: return "i32";
    case ScalarType::i64: return "i64";
    case ScalarType::f16: return "f16";
    case ScalarType::bf16: return "bf16";
    case ScalarType::f32: return "f32";
    case ScalarType::f64: return "f64";
    case ScalarType::f8e4m3: return "f8e4m3";
    case ScalarType::f8e5m2: return "f8e5m2";
  }
  return "?";
}

std::string DType::str() const {
  return pointer ? std::string("ptr<") + scalar_name(scalar) + ">" : scalar_name(scalar);
}

namespace detail {

// IEEE binary16 <-> binary32 with round-to-nearest-even, subnormals, infinities and NaN.
uint16_t float_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (mag >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity (>= 65520)
  if (mag < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    if (mag < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
    uint32_t exponent = mag >> 23;
    uint32_t mantissa = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (result & 1u))) ++result;
    return uint16_t(sign | result);
  }
  uint32_t result = ((mag - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return uint16_t(sign | result);
}

float f16_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | uint32_t(112 - e) << 23 | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- OCP FP8 -----------------------------------------------------------------------------------------

namespace {

struct Fp8Format {
  int mantissa_bits;    // 3 (e4m3) or 2 (e5m2)
  int bias;             // 7 or 15
  uint8_t max_finite;   // the code of the largest finite magnitude: 0x7E (448) or 0x7B (57344)
};
constexpr Fp8Format kE4M3{3, 7, 0x7E}, kE5M2{2, 15, 0x7B};

float fp8_magnitude(uint8_t code, const Fp8Format& f) {  // code without its sign bit, finite
  int exponent = code >> f.mantissa_bits, mantissa = code & ((1 << f.mantissa_bits) - 1);
  if (exponent == 0) return std::ldexp(static_cast<float>(mantissa), 1 - f.bias - f.mantissa_bits);
  return std::ldexp(static_cast<float>(mantissa + (1 << f.mantissa_bits)), exponent - f.bias - f.mantissa_bits);
}

// Round to nearest even, saturating to the largest finite value; NaN -> 0x7F (cvt.rn.satfinite on sm_89+).
uint8_t float_to_fp8(float x, const Fp8Format& f) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  float a = std::fabs(x);
  if (a >= fp8_magnitude(f.max_finite, f)) return sign | f.max_finite;  // infinities too
  if (a < std::ldexp(1.0f, 1 - f.bias)) {
    // Below the smallest normal: the code is the magnitude in units of the smallest subnormal, rounded to
    // an integer (scaling by a power of two is exact; nearbyint rounds to nearest even). A result of
    // 2^mantissa_bits is the smallest normal's code, as it should be.
    float units = std::ldexp(a, f.bias - 1 + f.mantissa_bits);
    return sign | static_cast<uint8_t>(std::nearbyint(units));
  }
  uint32_t mag = u & 0x7fffffffu;
  int drop = 23 - f.mantissa_bits;
  uint32_t rounded = mag + ((1u << (drop - 1)) - 1) + ((mag >> drop) & 1u);  // ties to even
  uint32_t code = (rounded >> drop) - (uint32_t(127 - f.bias) << f.mantissa_bits);
  return sign | static_cast<uint8_t>(code);
}

float fp8_to_float(uint8_t code, const Fp8Format& f) {
  uint8_t mag = code & 0x7f;
  bool negative = code & 0x80;
  int exponent = mag >> f.mantissa_bits;
  if (f.bias == 7 && mag == 0x7f) return std::nanf("");
  if (f.bias == 15 && exponent == 31)
    return (mag & 3) ? std::nanf("") : (negative ? -INFINITY : INFINITY);
  float v = fp8_magnitude(mag, f);
  return negative ? -v : v;
}

}  // namespace

uint8_t float_to_f8e4m3_bits(float x) { return float_to_fp8(x, kE4M3); }
uint8_t float_to_f8e5m2_bits(float x) { return float_to_fp8(x, kE5M2); }
float f8e4m3_bits_to_float(uint8_t b) { return fp8_to_float(b, kE4M3); }
float f8e5m2_bits_to_float(uint8_t b) { return fp8_to_float(b, kE5M2); }

}  // namespace detail
}  // namespace weft
