// wgmma with fp8 operands: async_dot of f8e4m3 / f8e5m2 stages (m64nNk32), checked against a double
// reference on the same fp8 values, the verifier's rules for them (both operands K-major, K a multiple of
// 32, a from shared memory) and the PTX they become.
#include "error_checks.h"
#include "test_util.h"

using namespace weft_test;

namespace {

// Random fp8 values in [-range, range] (rounded by the host type), never all zero.
template <class T> std::vector<T> random_fp8(Rng& rng, size_t n, float range) {
  std::vector<T> v(n);
  std::uniform_real_distribution<float> u(-range, range);
  for (auto& x : v) x = T(u(rng));
  v[n / 2] = T(1.0f);
  return v;
}

// The kernel of the tests below: a [M, K] and b stored [N, K], staged through swizzled shared memory by
// local_store, c = a b^T (+ acc0 when chained) in f32.
template <class TA, class TB, int M, int N, int K> Kernel fp8_dot_kernel() {
  return Kernel("wgmma_fp8_tile", [](Ptr<TA> a, Ptr<TB> b, Ptr<float> c) {
    auto a_s = local_alloc<TA>({M, K}, 1, "a_s");
    auto b_s = local_alloc<TB>({N, K}, 1, "b_s");
    Int rows = arange(0, M), cols = arange(0, N), ks = arange(0, K);
    local_store(a_s[0], load(a + rows.expand_dims(1) * K + ks.expand_dims(0)));
    local_store(b_s[0], load(b + cols.expand_dims(1) * K + ks.expand_dims(0)));
    Var acc = zeros<float>({M, N});
    acc = async_dot(a_s[0], local_trans(b_s[0]), acc);
    // A second product chained on the first: c = 2 a b^T.
    acc = async_dot(a_s[0], local_trans(b_s[0]), acc);
    store(c + rows.expand_dims(1) * N + cols.expand_dims(0), async_dot_wait(0, acc));
  }, KernelOptions{.num_warps = 4});
}

template <class TA, class TB, int M, int N, int K> void check_fp8_dot(Rng& rng) {
  INFO(dtype_of<TA>.str() << " x " << dtype_of<TB>.str() << ", " << M << "x" << N << "x" << K);
  std::vector<TA> a = random_fp8<TA>(rng, M * K, 8);
  std::vector<TB> b = random_fp8<TB>(rng, N * K, 8);
  Output<float> c(M * N);
  c.poison();
  Device dev = Device::current();
  fp8_dot_kernel<TA, TB, M, N, K>().launch(Grid(1), dev.upload(a), dev.upload(b), c.arg());
  std::vector<double> want(M * N), tol(M * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      std::vector<double> products;
      for (int q = 0; q < K; ++q) products.push_back(double(float(a[i * K + q])) * double(float(b[j * K + q])));
      // Two chained products into one accumulator: the second continues from the first's sum.
      double s = 0, bound = add_fp8_wgmma_steps(products, s);
      bound += add_fp8_wgmma_steps(products, s);
      want[i * N + j] = s;
      tol[i * N + j] = bound + 1e-6;
    }
  check_within<float>(c, want, tol, "C = 2 A B^T");
}

}  // namespace

TEST_CASE("async_dot with fp8 operands: every mix of e4m3 and e5m2 (wgmma m64nNk32)", "[async][fp8]") {
  WEFT_SEEDED_RNG(rng);
  check_fp8_dot<f8e4m3, f8e4m3, 64, 64, 128>(rng);  // 128-byte rows: the 128-byte swizzle
  check_fp8_dot<f8e4m3, f8e5m2, 128, 32, 64>(rng);  // 64-byte rows
  check_fp8_dot<f8e5m2, f8e4m3, 64, 256, 32>(rng);  // 32-byte rows, N = 256
  check_fp8_dot<f8e5m2, f8e5m2, 64, 64, 256>(rng);  // 256-byte rows: two 128-byte panels
}

TEST_CASE("the PTX of an fp8 async_dot is wgmma m64nNk32 with e4m3 and e5m2 operands", "[async][fp8]") {
  std::string ptx = fp8_dot_kernel<f8e4m3, f8e5m2, 64, 64, 128>().ptx();
  CHECK(ptx.find("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2") != std::string::npos);
  CHECK(ptx.find("k16") == std::string::npos);
  // The fp8 stores of a cast: cvt.rn.satfinite; loads widen through cvt.rn.f16x2.e4m3x2.
  Kernel cvt("fp8_cvt", [](Ptr<f8e4m3> out, Ptr<float> x, Ptr<f8e5m2> y, Ptr<float> z) {
    Int offs = arange(0, 128);
    store(out + offs, cast<f8e4m3>(load(x + offs)));
    store(z + offs, cast<float>(load(y + offs)));
  });
  std::string p = cvt.ptx();
  CHECK(p.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
  CHECK(p.find("cvt.rn.f16x2.e5m2x2") != std::string::npos);
}

TEST_CASE("fp8 async_dot: a transposed operand, a in registers or K not a multiple of 32 is an Error", "[async][fp8][errors]") {
  int line = 0;
  // b stored [K, N] (N contiguous): fp8 wgmma has no transposed form.
  Kernel n_major("fp8_n_major", [&](Ptr<float> c) {
    auto a_s = local_alloc<f8e4m3>({64, 64}, 1, "a_s");
    auto b_s = local_alloc<f8e4m3>({64, 64}, 1, "b_s");
    line = __LINE__; Float d = async_dot(a_s[0], b_s[0], zeros<float>({64, 64}));
    store(c + arange(0, 64), async_dot_wait(0, d).slice(1, 0, 1).reshape({64}));
  });
  require_weft_error([&] { n_major.ir(); }, "test_fp8_dot.cpp", line, "store b as [N, K] (K contiguous)");
  // a seen through local_trans.
  Kernel a_trans("fp8_a_trans", [&](Ptr<float> c) {
    auto a_s = local_alloc<f8e5m2>({64, 64}, 1, "a_s");
    auto b_s = local_alloc<f8e4m3>({64, 64}, 1, "b_s");
    line = __LINE__; Float d = async_dot(local_trans(a_s[0]), local_trans(b_s[0]), zeros<float>({64, 64}));
    store(c + arange(0, 64), async_dot_wait(0, d).slice(1, 0, 1).reshape({64}));
  });
  require_weft_error([&] { a_trans.ir(); }, "test_fp8_dot.cpp", line, "needs a K-major");
  // a from registers.
  Kernel a_regs("fp8_a_registers", [&](Ptr<f8e4m3> a, Ptr<float> c) {
    auto b_s = local_alloc<f8e4m3>({64, 64}, 1, "b_s");
    Int r = arange(0, 64);
    Tile<f8e4m3> at = load(a + r.expand_dims(1) * 64 + r.expand_dims(0));
    line = __LINE__; Float d = async_dot(at, local_trans(b_s[0]), zeros<float>({64, 64}));
    store(c + r, async_dot_wait(0, d).slice(1, 0, 1).reshape({64}));
  });
  require_weft_error([&] { a_regs.ir(); }, "test_fp8_dot.cpp", line, "reads a from shared memory");
  // K = 16: a multiple of 16 (enough for bf16) but not of 32.
  Kernel k16("fp8_k16", [&](Ptr<float> c) {
    auto a_s = local_alloc<f8e4m3>({64, 16}, 1, "a_s");
    auto b_s = local_alloc<f8e4m3>({64, 16}, 1, "b_s");
    line = __LINE__; Float d = async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({64, 64}));
    store(c + arange(0, 64), async_dot_wait(0, d).slice(1, 0, 1).reshape({64}));
  });
  require_weft_error([&] { k16.ir(); }, "test_fp8_dot.cpp", line, "K = 16 is not a multiple of 32");
  // (fp8 with bf16 does not compile: async_dot takes one 16-bit type, or fp8 on both sides.)
  // The plain dot has no fp8 path: an Error that says to convert.
  Kernel plain("fp8_plain_dot", [&](Ptr<f8e4m3> a, Ptr<float> c) {
    Int r = arange(0, 16);
    Tile<f8e4m3> t = load(a + r.expand_dims(1) * 16 + r.expand_dims(0));
    line = __LINE__; Float d = dot(t, t);
    store(c + r, d.slice(1, 0, 1).reshape({16}));
  });
  require_weft_error([&] { plain.ir(); }, "test_fp8_dot.cpp", line, "dot takes f16, bf16 or f32 operands");
}
