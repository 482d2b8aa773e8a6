// matmul: C = A @ B for any M, N, K (bf16 in, f32 accumulate, f32 out), tiled with `dot`; edge tiles are
// masked. A is M x K and B is K x N, both row-major.
#include "matmul.h"

#include <cmath>
#include <cstdio>
#include <random>

using namespace weft;

int main(int argc, char** argv) try {
  int M = argc > 3 ? std::atoi(argv[1]) : 317, N = argc > 3 ? std::atoi(argv[2]) : 205,
      K = argc > 3 ? std::atoi(argv[3]) : 131;
  const int BM = 32, BN = 32, BK = 32;
  Kernel matmul = make_matmul();
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<bf16> a(size_t(M) * K), b(size_t(K) * N);
  for (bf16& v : a) v = dist(rng);
  for (bf16& v : b) v = dist(rng);

  Device dev = Device::current();
  Buffer<bf16> da = dev.upload(a), db = dev.upload(b);
  Buffer<float> dc = dev.upload(std::vector<float>(size_t(M) * N, std::nanf("")));
  matmul.launch(Grid((M + BM - 1) / BM, (N + BN - 1) / BN), da, db, dc, M, N, K, BM, BN, BK);
  std::vector<float> c = dc.download();

  int bad = 0;
  double worst = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        double p = double(float(a[size_t(i) * K + k])) * double(float(b[size_t(k) * N + j]));
        want += p;
        mag += std::abs(p);
      }
      double err = std::abs(c[size_t(i) * N + j] - want);
      worst = std::max(worst, err);
      if (!(err <= 1e-5 * mag + 1e-6)) ++bad;  // f32 accumulation of exact bf16 products
    }
  std::printf("matmul %d x %d x %d on %s: max abs error %.2e, %d mismatches: %s\n", M, N, K, dev.name().c_str(), worst,
              bad, bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
} catch (const weft::Error& e) {  // e.g. WEFT_TARGET=sm_90a without that GPU: compiled, cannot run
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
