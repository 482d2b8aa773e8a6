// Inputs and checks the GEMM benchmarks share (bench_gemm, bench_gemm_fp8): a fast random generator for the
// ~10^8 values a run needs (std::mt19937 would take seconds), device addresses for cuBLASLt, and the error
// measures of a bf16 result against a reference.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include <weft/weft.h>

#include "cublaslt.h"

namespace bench {

// splitmix64.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform_pm1() { return float(next() >> 40) * (2.0f / float(1 << 24)) - 1.0f; }  // [-1, 1)
};

// `n` values uniform in [-1, 1), rounded to T (never zeros: they run faster and hide unwritten outputs).
template <class T> std::vector<T> random_values(size_t n, uint64_t seed) {
  Rng rng{seed};
  std::vector<T> v(n);
  for (T& x : v) x = T(rng.uniform_pm1());
  return v;
}

template <class T> weft::driver::cuda::CUdeviceptr device_ptr(const weft::Buffer<T>& b) {
  return reinterpret_cast<weft::driver::cuda::CUdeviceptr>(b.data());
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ||x - ref|| / ||ref|| over all elements, in double; NaN if any element of x is not finite (unwritten).
inline double rel_frobenius(const std::vector<weft::bf16>& x, const std::vector<weft::bf16>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double a = float(x[i]), r = float(ref[i]);
    if (!std::isfinite(a)) return NAN;
    diff += (a - r) * (a - r);
    norm += r * r;
  }
  return std::sqrt(diff / norm);
}

inline size_t count_not_finite(const std::vector<weft::bf16>& x) {
  size_t n = 0;
  for (weft::bf16 v : x) n += !std::isfinite(float(v));
  return n;
}

}  // namespace bench
