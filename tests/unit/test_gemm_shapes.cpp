// The bf16 GEMM family of examples/gemm_hopper_ws.h and its entry point examples/gemm.h across shapes:
// every configuration path (tile shapes, one or two consumers, split-K, swapped operands for small M, K
// tails, both B layouts, the fallback without TMA) against a double-precision reference, C poisoned before
// each call. The shapes are small: the CPU backend runs the same tasks as fibers. Run with WEFT_BACKEND=cuda
// (ctest's gpu-ops: copies) the same checks run on the GPU; [gpu] cases use GPU-sized shapes.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <stdlib.h>

#include <string>
#include <vector>

#include "../../examples/gemm_hopper_ws.h"
#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// Inputs of one shape: A (M x K), B as N x K and the same values as K x N, the reference C and its
// tolerance (bf16 rounding of an f32 sum).
struct Problem {
  int M, N, K;
  std::vector<bf16> a, b_nk, b_kn;
  std::vector<double> want, tol;
};

Problem make_problem(std::mt19937_64& rng, int M, int N, int K) {
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
template <class Call> void check_gemm(const Problem& p, bool b_is_nk, Call&& call) {
  Device dev = Device::current();
  Buffer<bf16> da = dev.upload(p.a), db = dev.upload(b_is_nk ? p.b_nk : p.b_kn);
  Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
  call(da, db, dc);
  check_within<bf16>(dc.download(), p.want, p.tol, "C");
}

struct EnvAutotune {
  explicit EnvAutotune(const char* value) { setenv("WEFT_AUTOTUNE", value, 1); }
  ~EnvAutotune() { unsetenv("WEFT_AUTOTUNE"); }
};

}  // namespace

TEST_CASE("GEMM configurations: tile shapes, consumers, BK, both B layouts, K tails", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  Problem p = make_problem(rng, 136, 200, 200);  // no dimension a multiple of any tile; K = 3 * 64 + 8
  const std::vector<GemmConfig> configs{
      {.BM = 64, .BN = 128, .stages = 3, .consumers = 1},   // one consumer of 64 rows
      {.BM = 128, .BN = 128, .stages = 2, .consumers = 1},  // one consumer of 128 rows (two wgmma blocks)
      {.BM = 256, .BN = 64, .stages = 2, .group = 2},       // two consumers of 128 rows
      {.BM = 128, .BN = 64, .BK = 32, .stages = 5},         // BK 32: 64-byte swizzle
  };
  for (const GemmConfig& cfg : configs)
    for (bool b_is_nk : {true, false}) {
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg); });
    }
  // Narrow tiles with B N x K (wgmma N of 16 and 32).
  for (int bn : {16, 32}) {
    GemmConfig cfg{.BM = 64, .BN = bn, .consumers = 1};
    INFO(cfg.name());
    check_gemm(p, true, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, true, cfg); });
  }
}

TEST_CASE("GEMM split-K: f32 partial sums and a deterministic reduction, empty slices included", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // K = 328: 6 k-tiles of 64; split 4 takes 2, 2, 2, 0 of them (the last slice writes zeros).
  Problem p = make_problem(rng, 72, 136, 328);
  for (int split : {2, 4})
    for (bool b_is_nk : {true, false}) {
      GemmConfig cfg{.BM = 64, .BN = 128, .consumers = 1, .split_k = split};
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      std::vector<bf16> first;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
        gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg);
        first = c.download();
        // Deterministic: a second call gives the same bits.
        c.upload(std::vector<bf16>(c.size(), poison_value<bf16>()));
        gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg);
      });
      Device dev = Device::current();
      (void)dev;
    }
}

TEST_CASE("GEMM with swapped operands for small M (C^T = B A^T), with and without split-K", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  for (int M : {1, 13, 40}) {
    Problem p = make_problem(rng, M, 200, 136);
    for (GemmConfig cfg : {GemmConfig{.BM = 64, .BN = 16, .consumers = 1, .swap_ab = true},
                           GemmConfig{.BM = 128, .BN = 32, .stages = 3, .swap_ab = true},
                           GemmConfig{.BM = 64, .BN = 64, .BK = 32, .consumers = 1, .split_k = 3, .swap_ab = true},
                           GemmConfig{.BM = 64, .BN = 8, .consumers = 1, .swap_ab = true}}) {
      INFO("M " << M << " " << cfg.name());
      check_gemm(p, true, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, true, cfg); });
    }
  }
}

TEST_CASE("GEMM configuration errors name the caller's line", "[async][gemm][errors]") {
  Device dev = Device::cpu();
  Buffer<bf16> a = dev.alloc<bf16>(64 * 64), b = dev.alloc<bf16>(64 * 64), c = dev.alloc<bf16>(64 * 64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, false, GemmConfig{.swap_ab = true}),
                    Catch::Contains("swap_ab needs B stored N x K") && Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.BM = 96}),
                    Catch::Contains("BM / consumers must be 64 or 128") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.stages = 8}),
                    Catch::Contains("bytes of shared memory") && Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
}
