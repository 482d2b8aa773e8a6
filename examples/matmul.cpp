// matmul: C = A @ B for any M, N, K (bf16 in, f32 accumulate, f32 out), tiled with `dot`; edge tiles are
// masked. A is M x K and B is K x N, both row-major.
#include <weft/weft.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace weft;

Kernel make_matmul() {
  return Kernel("matmul", [](Ptr<bf16> a, Ptr<bf16> b, Ptr<float> c, Int M, Int N, Int K, Const<int> BM, Const<int> BN,
                             Const<int> BK) {
    Int rows = program_id(0) * BM + arange(0, BM);  // [BM]
    Int cols = program_id(1) * BN + arange(0, BN);  // [BN]
    Int ks = arange(0, BK);                         // [BK]
    Var acc = zeros<float>({BM, BN});
    for_range(0, K, BK, [&](Int k0) {
      Int ka = k0 + ks;
      // A tile [BM, BK] and B tile [BK, BN], zero outside the matrices.
      Tile<bf16> a_tile = load(a + expand_dims(rows, 1) * K + expand_dims(ka, 0),
                               (expand_dims(rows, 1) < M) & (expand_dims(ka, 0) < K), 0);
      Tile<bf16> b_tile = load(b + expand_dims(ka, 1) * N + expand_dims(cols, 0),
                               (expand_dims(ka, 1) < K) & (expand_dims(cols, 0) < N), 0);
      acc = dot(a_tile, b_tile, acc);
    });
    store(c + expand_dims(rows, 1) * N + expand_dims(cols, 0), acc,
          (expand_dims(rows, 1) < M) & (expand_dims(cols, 0) < N));
  });
}

int main(int argc, char** argv) {
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
}
