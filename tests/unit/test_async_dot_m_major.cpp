// async_dot with an M-major A: a stage stored [K, M] (M contiguous) read through local_trans, which wgmma
// takes as its transposed A operand (imm-trans-a = 1, 16-bit types from shared memory only). Checked
// against a double-precision loop with fresh random inputs and poisoned outputs on the CPU backend (and,
// in the gpu-ops run, on the GPU against the CPU backend), the PTX it becomes and ptxas's verdict on it,
// and the errors of what wgmma cannot do.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "error_checks.h"
#include "ptxas_check.h"
#include "test_util.h"

using namespace weft_test;

namespace {

// c = a b + a b (two chained async_dots), a [M, K] stored [K, M] and read through local_trans; b stored
// [N, K] and read through local_trans (K-major) or stored [K, N] (N-major, both operands transposed). The
// stages are filled with local_store from row-major global arrays of the stored shapes.
template <class T, int M, int N, int K, bool kBNMajor> Kernel m_major_dot_kernel() {
  return Kernel("wgmma_a_m_major", [](Ptr<T> a_km, Ptr<T> b, Ptr<float> c) {
    auto a_s = local_alloc<T>({K, M}, 1, "a_s");
    auto b_s = kBNMajor ? local_alloc<T>({K, N}, 1, "b_s") : local_alloc<T>({N, K}, 1, "b_s");
    Int ms = arange(0, M), ns = arange(0, N), ks = arange(0, K);
    local_store(a_s[0], load(a_km + ks.expand_dims(1) * M + ms.expand_dims(0)));
    if (kBNMajor) local_store(b_s[0], load(b + ks.expand_dims(1) * N + ns.expand_dims(0)));
    else local_store(b_s[0], load(b + ns.expand_dims(1) * K + ks.expand_dims(0)));
    SharedView<T> bv = kBNMajor ? b_s[0] : local_trans(b_s[0]);
    Var acc = zeros<float>({M, N});
    acc = async_dot(local_trans(a_s[0]), bv, acc);
    acc = async_dot(local_trans(a_s[0]), bv, acc);
    store(c + ms.expand_dims(1) * N + ns.expand_dims(0), async_dot_wait(0, acc));
  }, KernelOptions{.num_warps = 4});
}

// Reference of `times` x a b in double: a stored [K, M], b stored [N, K] or [K, N].
template <class T>
void reference(const std::vector<T>& a_km, const std::vector<T>& b, bool b_n_major, int M, int N, int K, int times,
               std::vector<double>& want, std::vector<double>& tol) {
  want.assign(size_t(M) * N, 0);
  tol.assign(want.size(), 0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        double bv = double(float(b_n_major ? b[size_t(k) * N + j] : b[size_t(j) * K + k]));
        double p = double(float(a_km[size_t(k) * M + i])) * bv;
        s += p;
        mag += std::fabs(p);
      }
      want[size_t(i) * N + j] = times * s;
      tol[size_t(i) * N + j] = times * (1e-5 * mag) + 1e-6;
    }
}

template <class T, int M, int N, int K, bool kBNMajor> void check_m_major_dot(Rng& rng) {
  INFO(dtype_of<T>.str() << " " << M << "x" << N << "x" << K << ", b " << (kBNMajor ? "N-major" : "K-major"));
  std::vector<T> a = generate<T>(rng, size_t(M) * K, uniform_real<T>(-1, 1));
  std::vector<T> b = generate<T>(rng, size_t(N) * K, uniform_real<T>(-1, 1));
  Output<float> c(static_cast<size_t>(M) * N);
  launch(m_major_dot_kernel<T, M, N, K, kBNMajor>(), Grid(1), Input<T>(a), Input<T>(b), c);
  std::vector<double> want, tol;
  reference(a, b, kBNMajor, M, N, K, 2, want, tol);
  check_within<float>(c, want, tol, "C = 2 A B");
}

}  // namespace

TEST_CASE("async_dot with an M-major a (local_trans of a stage stored [K, M]): bf16 and f16, b either way", "[async][wgmma]") {
  WEFT_SEEDED_RNG(rng);
  check_m_major_dot<bf16, 64, 64, 64, false>(rng);   // one 128-byte row of M: no panels
  check_m_major_dot<f16, 64, 32, 128, true>(rng);    // both operands transposed; 8 k-steps
  check_m_major_dot<bf16, 128, 16, 32, false>(rng);  // M 128: two 64-column panels, one per wgmma block
  check_m_major_dot<bf16, 256, 32, 16, true>(rng);   // four panels, one k-step, b N-major
}

TEST_CASE("async_dot with an M-major a viewed by panel (cols) or by K rows (rows), panels filled by TMA", "[async][wgmma]") {
  WEFT_SEEDED_RNG(rng);
  // a stored [K, 128]: two TMA boxes of [K, 64] fill the stage's two 64-column panels, and each half of M is
  // an async_dot of its own on local_trans(stage.cols(64 h, 64)). A second buffer holds a's first 64
  // columns (local_store) and a product over K rows 16-31 only reads local_trans(stage.rows(16, 16)), with
  // b's rows 16-31 (b stored [K, N]: N-major).
  constexpr int M = 128, N = 64, K = 64;
  Kernel k("wgmma_a_m_major_views", [](TensorDesc<bf16, 2> a_desc, Ptr<bf16> a_km, Ptr<bf16> b_kn, Ptr<float> c,
                                       Ptr<float> c_rows) {
    auto a_s = local_alloc<bf16>({K, M}, 1, "a_s");
    auto a64 = local_alloc<bf16>({K, 64}, 1, "a64");
    auto b_s = local_alloc<bf16>({K, N}, 1, "b_s");
    auto bar = alloc_barriers(1, 1, "bar");
    async_tasks(task("mma", {.warps = 4}, [&] {
      Int ms = arange(0, 64), ns = arange(0, N), ks = arange(0, K);
      barrier_expect_bytes(bar[0], a_s.stage_bytes());
      for (int h = 0; h < 2; ++h) async_descriptor_load(a_desc, a_s[0].cols(h * 64, 64), {0, h * 64}, bar[0]);
      local_store(a64[0], load(a_km + ks.expand_dims(1) * M + ms.expand_dims(0)));
      local_store(b_s[0], load(b_kn + ks.expand_dims(1) * N + ns.expand_dims(0)));
      fence_async_shared();
      barrier_wait(bar[0], 0);
      for (int h = 0; h < 2; ++h) {
        Tile<float> d = async_dot_wait(0, async_dot(local_trans(a_s[0].cols(h * 64, 64)), b_s[0], zeros<float>({64, N})));
        store(c + (ms.expand_dims(1) + h * 64) * N + ns.expand_dims(0), d);
      }
      Tile<float> r = async_dot_wait(0, async_dot(local_trans(a64[0].rows(16, 16)), b_s[0].rows(16, 16),
                                                  zeros<float>({64, N})));
      store(c_rows + ms.expand_dims(1) * N + ns.expand_dims(0), r);
    }));
  });
  Device dev = Device::current();
  std::vector<bf16> a = generate<bf16>(rng, size_t(K) * M, uniform_real<bf16>(-1, 1));
  std::vector<bf16> b = generate<bf16>(rng, size_t(K) * N, uniform_real<bf16>(-1, 1));
  Buffer<bf16> da = dev.upload(a), db = dev.upload(b);
  Buffer<float> dc = dev.upload(std::vector<float>(size_t(M) * N, poison_value<float>()));
  Buffer<float> dr = dev.upload(std::vector<float>(size_t(64) * N, poison_value<float>()));
  k.launch(dev.stream(), Grid(1), tma(da, {K, M}, {K, 64}), da, db, dc, dr);
  std::vector<double> want, tol;
  reference(a, b, true, M, N, K, 1, want, tol);
  check_within<float>(dc.download(), want, tol, "C = A B, by panel");
  // K rows 16-31 of a (stored [K, M]: rows 16-31, the first 64 columns) and of b.
  std::vector<bf16> a_part(size_t(16) * 64), b_part(size_t(16) * N);
  for (int k2 = 0; k2 < 16; ++k2) {
    for (int i = 0; i < 64; ++i) a_part[size_t(k2) * 64 + i] = a[size_t(16 + k2) * M + i];
    for (int j = 0; j < N; ++j) b_part[size_t(k2) * N + j] = b[size_t(16 + k2) * N + j];
  }
  reference(a_part, b_part, true, 64, N, 16, 1, want, tol);
  check_within<float>(dr.download(), want, tol, "C = A B over K rows 16-31");
}

TEST_CASE("the PTX of an M-major async_dot is wgmma with imm-trans-a = 1, and ptxas accepts it", "[async][wgmma]") {
  // b K-major: imm-trans-a 1, imm-trans-b 0; b N-major: both 1. (The operands after the descriptors:
  // scale-d as the predicate p, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b.)
  std::string ptx = m_major_dot_kernel<bf16, 64, 64, 64, false>().ptx();
  INFO(ptx.substr(0, 4000));
  size_t at = ptx.find("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16");
  REQUIRE(at != std::string::npos);
  std::string line = ptx.substr(at, ptx.find('\n', at) - at);
  INFO(line);
  CHECK(line.find(", p, 1, 1, 1, 0;") != std::string::npos);
  std::string both = m_major_dot_kernel<f16, 64, 32, 128, true>().ptx();
  CHECK(both.find("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16") != std::string::npos);
  CHECK(both.find(", p, 1, 1, 1, 1;") != std::string::npos);
  CHECK(both.find(", p, 1, 1, 0, ") == std::string::npos);  // no step reads a K-major
  std::string ptxas = weft_test::find_ptxas();
  if (ptxas.empty()) {
    WARN("SKIPPED the ptxas check: no ptxas on PATH or at /usr/local/cuda/bin/ptxas");
    return;
  }
  for (const std::string* text : {&ptx, &both}) {
    weft_test::PtxasRun run = weft_test::run_ptxas(ptxas, *text, "");
    INFO("ptxas: " << run.output);
    CHECK(run.status == 0);
  }
}

TEST_CASE("async_dot with an M-major a: what wgmma cannot read is an Error at the call", "[async][wgmma][errors]") {
  int line = 0;
  // M 32 stored [K, 32]: wgmma's M is 64 rows per instruction, transposed or not.
  Kernel narrow("m_major_narrow", [&](Ptr<float> c) {
    auto a_s = local_alloc<bf16>({64, 32}, 1, "a_s");
    auto b_s = local_alloc<bf16>({64, 64}, 1, "b_s");
    line = __LINE__; Float d = async_dot(local_trans(a_s[0]), local_trans(b_s[0]), zeros<float>({32, 64}));
    store(c + arange(0, 32), async_dot_wait(0, d).slice(1, 0, 1).reshape({32}));
  });
  require_weft_error([&] { narrow.ir(); }, "test_async_dot_m_major.cpp", line, "M = 32 is not a multiple of 64");
  // K rows of a buffer kept in panels (M 128: two of them) are not one block of memory.
  Kernel rows_of_panels("m_major_rows_of_panels", [&](Ptr<float> c) {
    auto a_s = local_alloc<bf16>({64, 128}, 1, "a_s");
    auto b_s = local_alloc<bf16>({64, 32}, 1, "b_s");
    line = __LINE__; Float d = async_dot(local_trans(a_s[0].rows(0, 32)), local_trans(b_s[0]), zeros<float>({128, 64}));
    store(c + arange(0, 128), async_dot_wait(0, d).slice(1, 0, 1).reshape({128}));
  });
  require_weft_error([&] { (void)rows_of_panels.ptx(); }, "test_async_dot_m_major.cpp", line, "keeps its columns in panels of 64");
  // fp8 has no transposed form: test_fp8_dot.cpp ("needs a K-major").
}
