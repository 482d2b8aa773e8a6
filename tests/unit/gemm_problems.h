// Shared by the GEMM tests (test_gemm_shapes.cpp, test_gemm_plain_loads.cpp): a product's random inputs and
// its double-precision reference, and a check of C against it with C poisoned before the call.
#pragma once

#include <stdlib.h>

#include <cmath>
#include <random>
#include <vector>

#include <weft/weft.h>

#include "test_util.h"

namespace weft_test::gemm_test {

using weft::bf16;

// Inputs of one shape: A (M x K), B as N x K and the same values as K x N, the reference C and its
// tolerance (bf16 rounding of an f32 sum).
struct Problem {
  int M, N, K;
  std::vector<bf16> a, b_nk, b_kn;
  std::vector<double> want, tol;
};

inline Problem make_problem(std::mt19937_64& rng, int M, int N, int K) {
  Problem p{M, N, K, generate<bf16>(rng, size_t(M) * K, uniform_real<bf16>(-1, 1)),
            generate<bf16>(rng, size_t(N) * K, uniform_real<bf16>(-1, 1)), {}, {}, {}};
  p.b_kn.resize(p.b_nk.size());
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) p.b_kn[size_t(k) * N + j] = p.b_nk[size_t(j) * K + k];
  p.want.resize(size_t(M) * N);
  p.tol.resize(p.want.size());
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        double x = double(float(p.a[size_t(i) * K + k])) * double(float(p.b_nk[size_t(j) * K + k]));
        s += x;
        mag += std::fabs(x);
      }
      p.want[size_t(i) * N + j] = s;
      p.tol[size_t(i) * N + j] = 0x1p-8 * std::fabs(s) + 1e-5 * mag + 1e-6;
    }
  return p;
}

// Runs `call(a, b, c)` with C poisoned and checks C against the reference.
template <class Call> inline void check_gemm(const Problem& p, bool b_is_nk, Call&& call) {
  weft::Device dev = weft::Device::current();
  weft::Buffer<bf16> da = dev.upload(p.a), db = dev.upload(b_is_nk ? p.b_nk : p.b_kn);
  weft::Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
  call(da, db, dc);
  check_within<bf16>(dc.download(), p.want, p.tol, "C");
}

struct EnvAutotune {
  explicit EnvAutotune(const char* value) { setenv("WEFT_AUTOTUNE", value, 1); }
  ~EnvAutotune() { unsetenv("WEFT_AUTOTUNE"); }
};

}  // namespace weft_test::gemm_test
