// gemm_hopper_ws: the persistent warp-specialized GEMM of gemm_hopper_ws.h on the current device (the H200,
// or the CPU backend, which runs the same tasks as fibers), with B stored N x K and K x N, each checked
// against a double-precision reference.
//   gemm_hopper_ws [M N K]     (default 4096 x 4096 x 4096 on a GPU, 200 x 296 x 136 on the CPU)
#include "gemm_hopper_ws.h"

#include <cmath>
#include <cstdio>
#include <random>

using namespace weft;

int main(int argc, char** argv) try {
  Device dev = Device::current();
  bool gpu = dev.kind() != BackendKind::cpu;
  int M = argc > 3 ? std::atoi(argv[1]) : gpu ? 4096 : 200, N = argc > 3 ? std::atoi(argv[2]) : gpu ? 4096 : 296,
      K = argc > 3 ? std::atoi(argv[3]) : gpu ? 4096 : 136;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<bf16> a(size_t(M) * K), b(size_t(N) * K);
  for (bf16& v : a) v = dist(rng);
  for (bf16& v : b) v = dist(rng);
  std::vector<bf16> bt(size_t(K) * N);  // the same B stored K x N
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) bt[size_t(k) * N + j] = b[size_t(j) * K + k];
  Buffer<bf16> da = dev.upload(a), db = dev.upload(b), dbt = dev.upload(bt);
  int bad = 0;
  for (bool b_is_nk : {true, false}) {
    Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(M) * N, bf16::from_bits(0x7fda)));  // poison
    gemm_hopper_ws(da, b_is_nk ? db : dbt, dc, M, N, K, b_is_nk);
    std::vector<bf16> c = dc.download();
    // Every element on the CPU; a sample of 4096 on a GPU (the full reference would take minutes).
    std::uniform_int_distribution<int> pick_i(0, M - 1), pick_j(0, N - 1);
    int checks = gpu ? 4096 : M * N, wrong = 0;
    double worst = 0;
    for (int t = 0; t < checks; ++t) {
      int i = gpu ? pick_i(rng) : t / N, j = gpu ? pick_j(rng) : t % N;
      double want = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        double p = double(float(a[size_t(i) * K + k])) * double(float(b[size_t(j) * K + k]));
        want += p;
        mag += std::abs(p);
      }
      double got = float(c[size_t(i) * N + j]);
      double err = std::abs(got - want);
      worst = std::max(worst, err / (mag + 1e-30));
      if (!(err <= 0x1p-8 * std::abs(want) + 1e-5 * mag + 1e-6)) {  // bf16 rounding of the f32 result
        if (++wrong <= 5) std::printf("C[%d][%d] = %g, want %g\n", i, j, got, want);
      }
    }
    std::printf("gemm_hopper_ws %d x %d x %d, B %s, on %s: %d of %d checked elements wrong (worst error %.2e of the "
                "sum of |products|)\n",
                M, N, K, b_is_nk ? "N x K" : "K x N", dev.name().c_str(), wrong, checks, worst);
    bad += wrong;
  }
  std::printf("%s\n", bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gemm_hopper_ws: %s\n", e.what());
  return 1;
}
