// weft — element types.
//
// A kernel value has an element type (`DType`): a scalar type, or a global pointer to one. On the host,
// the C++ types below name them: bool, int8_t … int64_t, float, double, weft::f16 / weft::bf16 (16-bit
// storage types with conversions to and from float) and weft::f8e4m3 / weft::f8e5m2 (the OCP 8-bit
// floats). `Pointer<T>` is the element type of a tile of global pointers; kernels usually spell it `Ptr<T>`.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace weft {

// Floating-point types come last (is_float); the 8-bit ones after f64 so that the older codes keep their values.
enum class ScalarType : uint8_t { i1, i8, i16, i32, i64, f16, bf16, f32, f64, f8e4m3, f8e5m2 };

struct DType {
  ScalarType scalar = ScalarType::f32;
  bool pointer = false;  // a global pointer to `scalar`

  friend bool operator==(DType a, DType b) { return a.scalar == b.scalar && a.pointer == b.pointer; }
  friend bool operator!=(DType a, DType b) { return !(a == b); }

  bool is_float() const { return !pointer && scalar >= ScalarType::f16; }
  bool is_int() const { return !pointer && scalar <= ScalarType::i64; }  // i1 included
  bool is_bool() const { return !pointer && scalar == ScalarType::i1; }
  bool is_fp8() const { return !pointer && (scalar == ScalarType::f8e4m3 || scalar == ScalarType::f8e5m2); }
  int bits() const;       // storage bits of one element (pointers: 64)
  int bytes() const;      // storage bytes of one element (i1: 1)
  std::string str() const;  // "f32", "ptr<bf16>"
};

// ---- 16-bit floating-point host types ---------------------------------------------------------------

namespace detail {
uint16_t float_to_f16_bits(float);
float f16_bits_to_float(uint16_t);
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  f16(float f) : bits(detail::float_to_f16_bits(f)) {}
  operator float() const { return detail::f16_bits_to_float(bits); }
  static f16 from_bits(uint16_t b) { f16 h; h.bits = b; return h; }
};

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  operator float() const { return detail::bf16_bits_to_float(bits); }
  static bf16 from_bits(uint16_t b) { bf16 h; h.bits = b; return h; }
};

// ---- 8-bit floating-point host types (OCP FP8, what sm_89+ tensor cores take) ------------------------
//
// f8e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN; largest finite 448,
// smallest subnormal 2^-9. f8e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: infinities,
// NaNs (S.11111.xx, xx != 0); largest finite 57344, smallest subnormal 2^-16.
// Conversion from float (on the host, in kernels on every backend) is what the GPU's
// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 does: round to nearest even; a magnitude above the largest finite
// value (infinity included) saturates to it, keeping the sign; any NaN becomes 0x7F (positive NaN).
// Conversion to float is exact.

namespace detail {
uint8_t float_to_f8e4m3_bits(float);
uint8_t float_to_f8e5m2_bits(float);
float f8e4m3_bits_to_float(uint8_t);
float f8e5m2_bits_to_float(uint8_t);
}  // namespace detail

struct f8e4m3 {
  uint8_t bits = 0;
  f8e4m3() = default;
  f8e4m3(float f) : bits(detail::float_to_f8e4m3_bits(f)) {}
  operator float() const { return detail::f8e4m3_bits_to_float(bits); }
  static f8e4m3 from_bits(uint8_t b) { f8e4m3 h; h.bits = b; return h; }
};

struct f8e5m2 {
  uint8_t bits = 0;
  f8e5m2() = default;
  f8e5m2(float f) : bits(detail::float_to_f8e5m2_bits(f)) {}
  operator float() const { return detail::f8e5m2_bits_to_float(bits); }
  static f8e5m2 from_bits(uint8_t b) { f8e5m2 h; h.bits = b; return h; }
};

using f32 = float;
using f64 = double;
using i8 = int8_t;
using i16 = int16_t;
using i32 = int32_t;
using i64 = int64_t;

template <class T> struct Pointer {};  // element tag: a global pointer to T

// ---- mapping C++ element types to DType --------------------------------------------------------------

template <class T> struct dtype_traits;  // undefined: not an element type
#define WEFT_ELEMENT_TYPE(cpp, st)                                      \
  template <> struct dtype_traits<cpp> {                                \
    static constexpr DType value{ScalarType::st, false};                \
  };
WEFT_ELEMENT_TYPE(bool, i1)
WEFT_ELEMENT_TYPE(int8_t, i8)
WEFT_ELEMENT_TYPE(int16_t, i16)
WEFT_ELEMENT_TYPE(int32_t, i32)
WEFT_ELEMENT_TYPE(int64_t, i64)
WEFT_ELEMENT_TYPE(f16, f16)
WEFT_ELEMENT_TYPE(bf16, bf16)
WEFT_ELEMENT_TYPE(f8e4m3, f8e4m3)
WEFT_ELEMENT_TYPE(f8e5m2, f8e5m2)
WEFT_ELEMENT_TYPE(float, f32)
WEFT_ELEMENT_TYPE(double, f64)
#undef WEFT_ELEMENT_TYPE
template <class T> struct dtype_traits<Pointer<T>> {
  static constexpr DType value{dtype_traits<T>::value.scalar, true};
};

template <class T> inline constexpr DType dtype_of = dtype_traits<T>::value;

template <class T> inline constexpr bool is_pointer_elem = false;
template <class T> inline constexpr bool is_pointer_elem<Pointer<T>> = true;
template <class T> inline constexpr bool is_fp8_elem = std::is_same_v<T, f8e4m3> || std::is_same_v<T, f8e5m2>;
template <class T> inline constexpr bool is_float_elem = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                                         std::is_same_v<T, f16> || std::is_same_v<T, bf16> ||
                                                         is_fp8_elem<T>;
template <class T> inline constexpr bool is_int_elem = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <class T> inline constexpr bool is_numeric_elem = is_float_elem<T> || is_int_elem<T>;

}  // namespace weft
