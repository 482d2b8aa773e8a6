// The fp8 GEMM of examples/gemm_fp8.h (per-tensor and DeepGEMM-style block scales, two-level accumulation)
// against a double reference on the same fp8 values: small odd shapes on every backend (the CPU backend in
// CI, the GPU in the gpu-ops: run), larger ones on the GPU only ([gpu]), and bad calls as Errors at the
// caller's line.
#include "test_util.h"

#include "../../examples/gemm_fp8.h"

using namespace weft_test;

namespace {

struct Problem {
  int M, N, K;
  std::vector<f8e4m3> a, b;       // A [M, K], B [N, K]
  std::vector<float> sa, sb;      // per-tensor: one each; block: [ceil(K/128), M] and [ceil(N/128), ceil(K/128)]
  Fp8Scaling scaling;
};

Problem make_problem(Rng& rng, int M, int N, int K, Fp8Scaling scaling) {
  Problem p{M, N, K, {}, {}, {}, {}, scaling};
  // Values over six binades, and one in sixteen a subnormal (fp8 e4m3's normals start at 2^-6); never all zero.
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> exp(-4, 1), sub(-9, -7), pick(0, 15);
  auto value = [&] { return f8e4m3(std::ldexp(mant(rng), pick(rng) == 0 ? sub(rng) : exp(rng))); };
  for (size_t i = 0; i < size_t(M) * K; ++i) p.a.push_back(value());
  for (size_t i = 0; i < size_t(N) * K; ++i) p.b.push_back(value());
  p.a[0] = f8e4m3(1.0f);
  std::uniform_real_distribution<float> scale(0.25f, 4.0f);
  int kb = (K + 127) / 128, nb = (N + 127) / 128;
  size_t na = scaling == Fp8Scaling::block ? size_t(kb) * M : 1, nbs = scaling == Fp8Scaling::block ? size_t(nb) * kb : 1;
  for (size_t i = 0; i < na; ++i) p.sa.push_back(scale(rng));
  for (size_t i = 0; i < nbs; ++i) p.sb.push_back(scale(rng));
  return p;
}

// C[i][j] in double, and a tolerance: bf16's rounding of the result plus the tensor cores' fp8
// accumulation (test_util.h), whose accumulator is promoted into f32 every `promote_k` of K (the k-tile, or
// `promote_every` k-tiles) and starts again at zero.
void reference(const Problem& p, int i, int j, double& value, double& tol, int promote_k = 128) {
  int kb = (p.K + 127) / 128;
  double s = 0, err = 0;
  for (int c0 = 0; c0 < p.K; c0 += promote_k) {
    std::vector<double> products;
    for (int k = c0; k < std::min(p.K, c0 + promote_k); ++k)
      products.push_back(double(float(p.a[size_t(i) * p.K + k])) * double(float(p.b[size_t(j) * p.K + k])));
    double part = 0, part_err = add_fp8_wgmma_steps(products, part);
    double scale = p.scaling == Fp8Scaling::block ? double(p.sa[size_t(c0 / 128) * p.M + i]) *
                                                        double(p.sb[size_t(j / 128) * kb + c0 / 128])
                                                  : double(p.sa[0]) * double(p.sb[0]);
    s += part * scale;
    err += part_err * scale;
  }
  value = s;
  tol = 0x1p-8 * std::fabs(s) + err + 1e-6;
}

// Runs the GEMM and checks every element (or `samples` pseudo-random ones when > 0).
void check_gemm(Device& dev, const Problem& p, int samples = 0) {
  INFO("M " << p.M << " N " << p.N << " K " << p.K << (p.scaling == Fp8Scaling::block ? " block scales" : " per-tensor scales"));
  Buffer<f8e4m3> da = dev.upload(p.a), db = dev.upload(p.b);
  Buffer<float> dsa = dev.upload(p.sa), dsb = dev.upload(p.sb);
  Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
  gemm_fp8(da, db, dc, dsa, dsb, p.M, p.N, p.K, p.scaling);
  std::vector<bf16> c = dc.download();
  if (samples == 0) {
    std::vector<double> want(c.size()), tol(c.size());
    for (int i = 0; i < p.M; ++i)
      for (int j = 0; j < p.N; ++j) reference(p, i, j, want[size_t(i) * p.N + j], tol[size_t(i) * p.N + j]);
    check_within<bf16>(c, want, tol, "C");
    return;
  }
  Rng pick(777);
  size_t bad = 0, unwritten = 0;
  for (bf16 v : c) unwritten += is_poison<bf16>(v);
  CHECK(unwritten == 0);
  for (int s = 0; s < samples; ++s) {
    int i = int(pick() % p.M), j = int(pick() % p.N);
    double want, tol;
    reference(p, i, j, want, tol);
    double got = float(c[size_t(i) * p.N + j]);
    if (!(std::fabs(got - want) <= tol) && ++bad <= 8)
      FAIL_CHECK("C[" << i << "][" << j << "] = " << got << ", want " << want << " +- " << tol);
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("the fp8 GEMM of examples/gemm_fp8.h with per-tensor and block scales at odd sizes", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (Fp8Scaling s : {Fp8Scaling::per_tensor, Fp8Scaling::block}) {
    check_gemm(dev, make_problem(rng, 72, 136, 208, s));  // partial tiles in M, N and K
    check_gemm(dev, make_problem(rng, 130, 256, 384, s)); // two row tiles, two 128-blocks of N, three of K
  }
}

TEST_CASE("the fp8 GEMM promoting every few k-tiles (per-tensor scales)", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  // promote_every = 2 over 5 k-tiles: promotions after tiles 2, 4 and the last, 5.
  GemmFp8Config cfg;
  cfg.promote_every = 2;
  Kernel k = make_gemm_fp8(cfg, Fp8Scaling::per_tensor);
  Problem p = make_problem(rng, 64, 128, 640 - 32, Fp8Scaling::per_tensor);
  Buffer<f8e4m3> da = dev.upload(p.a), db = dev.upload(p.b);
  Buffer<float> dsa = dev.upload(p.sa), dsb = dev.upload(p.sb);
  Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
  k.launch(Grid(1), tma(da, {p.M, p.K}, {128, 128}), tma(db, {p.N, p.K}, {128, 128}), tma(dc, {p.M, p.N}, {64, 64}),
           dsa, dsb, p.M, p.N, p.K);
  std::vector<double> want(size_t(p.M) * p.N), tol(want.size());
  for (int i = 0; i < p.M; ++i)
    for (int j = 0; j < p.N; ++j) {
      reference(p, i, j, want[size_t(i) * p.N + j], tol[size_t(i) * p.N + j], 2 * 128);  // two k-tiles per promotion
    }
  check_within<bf16>(dc.download(), want, tol, "C");
}

TEST_CASE("gemm_fp8: a bad call through the helper is an Error at the caller's line", "[async][fp8][errors]") {
  Device dev = Device::cpu();
  auto at_this_line = [](int line) { return Catch::Contains("test_gemm_fp8.cpp:" + std::to_string(line)); };
  Buffer<f8e4m3> a = dev.alloc<f8e4m3>(64 * 24), b = dev.alloc<f8e4m3>(64 * 24);
  Buffer<bf16> c = dev.alloc<bf16>(64 * 64);
  Buffer<float> one = dev.alloc<float>(1), many = dev.alloc<float>(64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, one, 64, 64, 32, Fp8Scaling::per_tensor),
                    Catch::Contains("A holds 1536 elements, the shapes need 2048") && at_this_line(line));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, many, 64, 64, 24, Fp8Scaling::block),
                    Catch::Contains("a_scale holds 1 elements, the shapes need 64") && at_this_line(line));
  // K = 24: rows of 24 bytes, which TMA cannot stride (tma() inside the helper).
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, one, 64, 64, 24, Fp8Scaling::per_tensor),
                    Catch::Contains("multiple of 16") && at_this_line(line));
}

TEST_CASE("the fp8 GEMM on the GPU: 1024 to 2048, odd sizes, both scalings", "[async][fp8][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  WEFT_SEEDED_RNG(rng);
  for (Fp8Scaling s : {Fp8Scaling::per_tensor, Fp8Scaling::block}) {
    check_gemm(dev, make_problem(rng, 1024, 1024, 1024, s), 2048);
    check_gemm(dev, make_problem(rng, 2000, 1032, 2064, s), 2048);
    check_gemm(dev, make_problem(rng, 2048, 2048, 4096, s), 1024);
  }
}
