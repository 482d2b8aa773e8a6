#include "weft/dtype.h"

namespace weft {

int DType::bits() const {
  if (pointer) return 64;
  switch (scalar) {
    case ScalarType::i1: return 1;
    case ScalarType::i8: return 8;
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

}  // namespace detail
}  // namespace weft
