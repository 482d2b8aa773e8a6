// Host-side rounding helpers shared by the code generators (constants) and the launch path (arguments).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace weft::support {

// v as an f32 rounded to odd (toward zero, then the last bit set if inexact). Rounding that to f16/bf16
// rounds v once; rounding v to the nearest f32 first can land on a halfway point of the narrower type.
inline float f32_round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) --u;
  u |= 1;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace weft::support
