// The fp8 GEMM of examples/gemm_fp8.h (per-tensor and DeepGEMM-style block scales, two-level accumulation)
// against a double reference on the same fp8 values: small odd shapes on every backend (the CPU backend in
// CI, the GPU in the gpu-ops: run) for the default and every candidate configuration (GemmFp8Config), larger
// ones and GPU-against-CPU-backend comparisons on the GPU only ([gpu]), ptxas's verdict on every candidate
// (no spills, no wgmma serialization), and bad calls as Errors at the caller's line.
#include "ptxas_check.h"
#include "test_util.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

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

// Uploads p, runs `run` (which launches the GEMM on the uploaded buffers into C, poisoned first) and returns
// C.
template <class Run> std::vector<bf16> run_on(Device& dev, const Problem& p, Run&& run) {
  Buffer<f8e4m3> da = dev.upload(p.a), db = dev.upload(p.b);
  Buffer<float> dsa = dev.upload(p.sa), dsb = dev.upload(p.sb);
  Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
  run(da, db, dc, dsa, dsb);
  return dc.download();
}

// C through gemm_fp8() with configuration cfg.
std::vector<bf16> run_gemm(Device& dev, const Problem& p, std::optional<GemmFp8Config> cfg = std::nullopt) {
  return run_on(dev, p, [&](auto& da, auto& db, auto& dc, auto& dsa, auto& dsb) {
    gemm_fp8(da, db, dc, dsa, dsb, p.M, p.N, p.K, p.scaling, cfg);
  });
}

// C from configuration cfg's kernel launched on `blocks` blocks (a multiple of cfg.cluster_m): few blocks make
// each one walk several tiles whatever the machine's core count.
std::vector<bf16> run_kernel(Device& dev, const Problem& p, const GemmFp8Config& cfg, int blocks) {
  return run_on(dev, p, [&](auto& da, auto& db, auto& dc, auto& dsa, auto& dsb) {
    make_gemm_fp8(cfg, p.scaling)
        .launch(Grid(blocks), tma(da, {p.M, p.K}, {cfg.BM, cfg.BK}), tma(db, {p.N, p.K}, {cfg.BN / cfg.cluster_m, cfg.BK}),
                tma(dc, {p.M, p.N}, {cfg.BM / 2, cfg.epilogue_n}), dsa, dsb, p.M, p.N, p.K);
  });
}

// Checks every element of c (or `samples` pseudo-random ones when > 0) against the double reference of a
// GEMM promoting every `promote_k` of K.
void check_c(const Problem& p, const std::vector<bf16>& c, int samples = 0, int promote_k = 128) {
  INFO("M " << p.M << " N " << p.N << " K " << p.K << (p.scaling == Fp8Scaling::block ? " block scales" : " per-tensor scales"));
  if (samples == 0) {
    std::vector<double> want(c.size()), tol(c.size());
    for (int i = 0; i < p.M; ++i)
      for (int j = 0; j < p.N; ++j)
        reference(p, i, j, want[size_t(i) * p.N + j], tol[size_t(i) * p.N + j], promote_k);
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
    reference(p, i, j, want, tol, promote_k);
    double got = float(c[size_t(i) * p.N + j]);
    if (!(std::fabs(got - want) <= tol) && ++bad <= 8)
      FAIL_CHECK("C[" << i << "][" << j << "] = " << got << ", want " << want << " +- " << tol);
  }
  CHECK(bad == 0);
}

// Runs the GEMM through gemm_fp8() (default configuration) and checks it.
void check_gemm(Device& dev, const Problem& p, int samples = 0) { check_c(p, run_gemm(dev, p), samples); }

// Every candidate configuration with each scaling it supports.
std::vector<std::pair<GemmFp8Config, Fp8Scaling>> supported_candidates() {
  std::vector<std::pair<GemmFp8Config, Fp8Scaling>> out;
  for (const GemmFp8Config& cfg : gemm_fp8_candidates())
    for (Fp8Scaling s : {Fp8Scaling::per_tensor, Fp8Scaling::block})
      if (cfg.problems(s).empty()) out.push_back({cfg, s});
  return out;
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

TEST_CASE("gemm_fp8's default configuration: two partials for per-tensor scales, no clusters", "[fp8]") {
  for (Fp8Scaling s : {Fp8Scaling::per_tensor, Fp8Scaling::block}) {
    INFO((s == Fp8Scaling::block ? "block scales" : "per-tensor scales"));
    const bool block = s == Fp8Scaling::block;
    for (int n : {128, 4096, 8192}) {
      GemmFp8Config c = gemm_fp8_default_config(s, n, n, 132);
      CHECK(c.cluster_m == 1);  // clusters of two ran 2.7-3x slower on the H200 (benchmarks/NOTES.md, session 8)
      CHECK(c.partials == (block ? 1 : 2));
      CHECK(c.epilogue_buffers == 2);
      CHECK(c.problems(s).empty());
    }
    // Every default is a candidate: the candidates' checks (references, ptxas) cover what gemm_fp8() runs.
    std::vector<GemmFp8Config> all = gemm_fp8_candidates();
    for (int m : {128, 4096})
      CHECK(std::find(all.begin(), all.end(), gemm_fp8_default_config(s, m, 16384, 132)) != all.end());
  }
}

// Each candidate on one cluster's worth of blocks, so that every block walks several tiles: 3 tile rows (the
// cluster's second row of the last pair is past the end), one partial tile column, and K of 1, 2 or 3
// k-tiles, the last one partial (the next test covers the two-partial schedules' paths in full).
TEST_CASE("every candidate configuration of the fp8 GEMM against a double reference", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int ks[] = {80, 208, 336};
  int next_k = 0;
  for (const auto& [cfg, s] : supported_candidates()) {
    INFO("configuration " << cfg.name());
    int K = ks[next_k++ % 3];
    Problem p = make_problem(rng, 300, 72, K, s);
    check_c(p, run_kernel(dev, p, cfg, 2), 0, 128 * cfg.promote_k_tiles(s));
  }
}

// The two-partial schedule over each tile's k-tiles, and over all k-tiles of a block's tiles as one stream
// (continuous, with clusters and two staging buffers), on 2 x 2 tiles walked by one block or one cluster:
// k-tiles 1 (no loop iteration), 2 (a pair after the loop), 3 (one iteration), 4 (one and a pair after it), 5.
TEST_CASE("the two-partial schedules with 1 to 5 k-tiles per tile", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (const GemmFp8Config& cfg :
       {GemmFp8Config{.partials = 2, .consumer_regs = 240},
        GemmFp8Config{.partials = 2, .cluster_m = 2, .consumer_regs = 240, .continuous = true, .epilogue_buffers = 2}}) {
    for (int k_tiles = 1; k_tiles <= 5; ++k_tiles) {
      INFO("configuration " << cfg.name() << ", " << k_tiles << " k-tiles");
      Problem p = make_problem(rng, 136, 136, 128 * k_tiles - 48, Fp8Scaling::per_tensor);
      check_c(p, run_kernel(dev, p, cfg, cfg.cluster_m));
    }
  }
}

TEST_CASE("the fp8 GEMM promoting every few k-tiles (per-tensor scales)", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  // promote_every = 2 over 5 k-tiles: promotions after tiles 2, 4 and the last, 5.
  GemmFp8Config cfg{.promote_every = 2};
  Problem p = make_problem(rng, 64, 128, 640 - 32, Fp8Scaling::per_tensor);
  check_c(p, run_kernel(dev, p, cfg, 1), 0, 2 * 128);  // two k-tiles per promotion
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
  // Configurations the kernel does not support: every broken rule, at the caller's line.
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, one, 64, 64, 24, Fp8Scaling::per_tensor, GemmFp8Config{.partials = 3}),
                    Catch::Contains("configuration 128x128x128_s6_g8_p3 is not supported: partials must be 1 or 2") &&
                        at_this_line(line));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, one, 64, 64, 24, Fp8Scaling::per_tensor, GemmFp8Config{.BN = 256}),
                    Catch::Contains("1 partial(s) of 64 x 256 need 256 registers per consumer thread, at most 192 fit") &&
                        at_this_line(line));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, many, 64, 64, 24, Fp8Scaling::block, GemmFp8Config{.partials = 2}),
                    Catch::Contains("at most 152 fit with block scales") && at_this_line(line));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_fp8(a, b, c, one, one, 64, 64, 24, Fp8Scaling::per_tensor, GemmFp8Config{.continuous = true}),
                    Catch::Contains("continuous needs partials = 2") && at_this_line(line));
}

// ptxas -v on every candidate's PTX (sm_90a): no spills, and no advisory that wgmma is serialized (ptxas
// then waits for each wgmma before the next: registers of a pending accumulator touched, too few registers).
// Needs no GPU, only the CUDA toolkit's ptxas; skipped without it.
TEST_CASE("ptxas: every candidate configuration of the fp8 GEMM compiles without spills or wgmma serialization",
          "[fp8][cpu-only]") {
  std::string ptxas = weft_test::find_ptxas();
  if (ptxas.empty()) {
    WARN("SKIPPED: no ptxas on PATH or at /usr/local/cuda/bin/ptxas");
    return;
  }
  Device dev = Device::cpu();
  const int M = 256, N = 256, K = 256;
  Buffer<f8e4m3> a = dev.alloc<f8e4m3>(M * K), b = dev.alloc<f8e4m3>(N * K);
  Buffer<bf16> c = dev.alloc<bf16>(M * N);
  for (const auto& [cfg, s] : supported_candidates()) {
    std::string label = std::string(s == Fp8Scaling::block ? "block " : "per-tensor ") + cfg.name();
    INFO(label);
    std::string ptx = make_gemm_fp8(cfg, s).ptx(tma(a, {M, K}, {cfg.BM, cfg.BK}),
                                                tma(b, {N, K}, {cfg.BN / cfg.cluster_m, cfg.BK}),
                                                tma(c, {M, N}, {cfg.BM / 2, cfg.epilogue_n}));
    weft_test::PtxasRun run = weft_test::run_ptxas(ptxas, ptx);
    INFO("ptxas said:\n" << run.output);
    CHECK(run.status == 0);
    CHECK_THAT(run.output, Catch::Contains("0 bytes spill stores, 0 bytes spill loads"));
    CHECK_THAT(run.output, !Catch::Contains("wgmma") && !Catch::Contains("Performance Loss"));
  }
}

// In clusters of two, each consumer releases every stage at both blocks' `empty` barriers, once per k-tile.
// Only TMA writes cross blocks here, so the releases are CTA-scope arrivals (mbarrier.arrive.shared::cluster,
// as CUTLASS's) and the waits acquire at CTA scope: a cluster-scope release is a MEMBAR.ALL.GPU in the SASS
// (ptxas), two per k-tile and consumer, and every `_cl2` candidate ran ~2.7x slower than its twin with
// them on the H200 (benchmarks/NOTES.md, "clusters").
TEST_CASE("the clustered fp8 GEMM releases stages with CTA-scope remote arrivals", "[fp8]") {
  Device dev = Device::cpu();
  const int M = 256, N = 256, K = 256;
  Buffer<f8e4m3> a = dev.alloc<f8e4m3>(M * K), b = dev.alloc<f8e4m3>(N * K);
  Buffer<bf16> c = dev.alloc<bf16>(M * N);
  int clustered = 0;
  for (const auto& [cfg, s] : supported_candidates()) {
    if (cfg.cluster_m == 1) continue;
    ++clustered;
    INFO((s == Fp8Scaling::block ? "block " : "per-tensor ") << cfg.name());
    std::string ptx = make_gemm_fp8(cfg, s).ptx(tma(a, {M, K}, {cfg.BM, cfg.BK}),
                                                tma(b, {N, K}, {cfg.BN / cfg.cluster_m, cfg.BK}),
                                                tma(c, {M, N}, {cfg.BM / 2, cfg.epilogue_n}));
    CHECK(ptx.find("mbarrier.arrive.shared::cluster.b64") != std::string::npos);
    CHECK(ptx.find("mbarrier.arrive.release.cluster") == std::string::npos);
    CHECK(ptx.find("try_wait.parity.acquire.cluster") == std::string::npos);
  }
  CHECK(clustered >= 6);
}

// Each candidate on the GPU (sampled against the double reference) and on the CPU backend with the same
// inputs: both within the reference's tolerance, so within twice of it of each other. Shapes with partial
// tiles, an odd number of tile rows (the cluster's last pair half past the end) and more tiles than the
// GPU's multiprocessors (blocks walk several).
TEST_CASE("the fp8 GEMM on the GPU: every candidate configuration against the CPU backend", "[async][fp8][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  WEFT_SEEDED_RNG(rng);
  Device cpu = Device::cpu();
  for (const auto& [cfg, s] : supported_candidates()) {
    INFO("configuration " << cfg.name());
    const int promote_k = 128 * cfg.promote_k_tiles(s);
    // Small enough for the CPU backend: 3 x 3 tiles, 5 k-tiles.
    Problem small = make_problem(rng, 300, 264, 592, s);
    std::vector<bf16> gpu = run_gemm(dev, small, cfg), host = run_gemm(cpu, small, cfg);
    check_c(small, gpu, 0, promote_k);
    check_c(small, host, 0, promote_k);
    size_t apart = 0;
    for (int i = 0; i < small.M; ++i)
      for (int j = 0; j < small.N; ++j) {
        double want, tol;
        reference(small, i, j, want, tol, promote_k);
        size_t e = size_t(i) * small.N + j;
        if (!(std::fabs(double(float(gpu[e])) - double(float(host[e]))) <= 2 * tol) && ++apart <= 8)
          FAIL_CHECK("C[" << i << "][" << j << "]: GPU " << float(gpu[e]) << ", CPU backend " << float(host[e]));
      }
    CHECK(apart == 0);
    // Large: 17 x 9 tiles (153 > 132 multiprocessors), 17 k-tiles, sampled.
    Problem large = make_problem(rng, 2100, 1032, 2064, s);
    check_c(large, run_gemm(dev, large, cfg), 2048, promote_k);
  }
}

