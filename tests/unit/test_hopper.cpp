// The Hopper constructs end to end: a warp-specialized ring of shared buffers guarded by mbarriers, and
// wgmma tiles, each checked against a double-precision reference with fresh random inputs and poisoned
// outputs — on the CPU backend, and on the GPU (gpu-ops:) where `launch` also compares with the CPU.
#include "test_util.h"

#include "../../examples/gemm_hopper_ws.h"

using namespace weft_test;

TEST_CASE("a producer task feeds two consumer replicas through a shared ring guarded by mbarriers", "[async]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kTile = 256, kStages = 3;
  // Each iteration the producer stages one tile of x; consumer replica r sums the half of it that it owns
  // and writes it scaled by (r + 1).
  Kernel k("ring_sum", [](Ptr<float> x, Ptr<float> y, Int iters) {
    auto ring = local_alloc<float>({kTile}, kStages, "ring");
    auto full = alloc_barriers(kStages, 1, "full");
    auto empty = alloc_barriers(kStages, 2, "empty");
    Long base = cast<int64_t>(program_id(0)) * cast<int64_t>(iters) * kTile;
    async_tasks(
        task("producer", {.warps = 4, .regs = 40}, [&] {
          Pipeline p(kStages);
          for_range(0, iters, [&](Int i) {
            p.acquire(empty);
            local_store(ring[p.index()], load(x + base + cast<int64_t>(i) * kTile + cast<int64_t>(arange(0, kTile))));
            barrier_arrive(full[p.index()]);
            p.advance();
          });
        }),
        task("consumer", {.warps = 4, .regs = 232, .replicas = 2}, [&] {
          Pipeline p(kStages);
          Int r = task_replica_id();
          for_range(0, iters, [&](Int i) {
            p.wait(full);
            Float v = local_load(ring[p.index()]);
            Bool mine = (arange(0, kTile) / (kTile / 2)) == r;
            Float s = sum(where(mine, v, 0.0f), 0) * cast<float>(r + 1);
            store(y + (cast<int64_t>(program_id(0)) * cast<int64_t>(iters) + cast<int64_t>(i)) * 2 + cast<int64_t>(r), s);
            p.release(empty);
            p.advance();
          });
        }));
  });
  const int blocks = 8, iters = 37;
  std::vector<float> x = generate<float>(rng, size_t(blocks) * iters * kTile, uniform_real<float>(-1, 1));
  Output<float> y(size_t(blocks) * iters * 2);
  launch(k, Grid(blocks), Input<float>(x), y, iters);
  std::vector<double> want(size_t(blocks) * iters * 2), tol(want.size());
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < iters; ++i)
      for (int r = 0; r < 2; ++r) {
        double s = 0, mag = 0;
        for (int e = r * kTile / 2; e < (r + 1) * kTile / 2; ++e) {
          double v = x[(size_t(b) * iters + i) * kTile + e];
          s += v;
          mag += std::fabs(v);
        }
        want[(size_t(b) * iters + i) * 2 + r] = s * (r + 1);
        tol[(size_t(b) * iters + i) * 2 + r] = 1e-5 * mag * (r + 1) + 1e-6;
      }
  check_within<float>(y, want, tol, "ring sums");
}

TEST_CASE("async_dot computes a 128x128x64 bf16 tile on the tensor cores (wgmma)", "[async]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int M = 128, N = 128, K = 64;
  // a [M, K] and b stored [N, K], both staged through swizzled shared memory by local_store.
  Kernel k("wgmma_tile", [](Ptr<bf16> a, Ptr<bf16> b, Ptr<float> c, Ptr<float> c_plus) {
    auto a_s = local_alloc<bf16>({M, K}, 1, "a_s");
    auto b_s = local_alloc<bf16>({N, K}, 1, "b_s");
    Int rows = arange(0, M), cols = arange(0, N), ks = arange(0, K);
    local_store(a_s[0], load(a + rows.expand_dims(1) * K + ks.expand_dims(0)));
    local_store(b_s[0], load(b + cols.expand_dims(1) * K + ks.expand_dims(0)));
    Float acc = async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({M, N}));
    acc = async_dot_wait(0, acc);
    Int offs = rows.expand_dims(1) * N + cols.expand_dims(0);
    store(c + offs, acc);
    store(c_plus + offs, acc + 1.0f);  // an elementwise op in the wgmma layout
  }, KernelOptions{.num_warps = 4});
  std::vector<bf16> a = generate<bf16>(rng, M * K, uniform_real<bf16>(-1, 1));
  std::vector<bf16> b = generate<bf16>(rng, N * K, uniform_real<bf16>(-1, 1));
  Output<float> c(M * N), c_plus(M * N);
  launch(k, Grid(1), Input<bf16>(a), Input<bf16>(b), c, c_plus);
  std::vector<double> want(M * N), want_plus(M * N), tol(M * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int q = 0; q < K; ++q) {
        double p = double(float(a[i * K + q])) * double(float(b[j * K + q]));
        s += p;
        mag += std::fabs(p);
      }
      want[i * N + j] = s;
      want_plus[i * N + j] = s + 1;
      tol[i * N + j] = 1e-5 * mag + 1e-6;
    }
  check_within<float>(c, want, tol, "C = A B^T");
  check_within<float>(c_plus, want_plus, tol, "C + 1");
}

TEST_CASE("reading an async_dot result before async_dot_wait is an error at the read", "[async][errors]") {
  int line = 0;
  Kernel k("early_read", [&](Ptr<float> c) {
    auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
    auto b_s = local_alloc<bf16>({64, 64}, 1, "b_s");
    Float d = async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({64, 64}));
    line = __LINE__; store(c + arange(0, 64), d.slice(1, 0, 1).reshape({64}));
  });
  try {
    k.ir();
    FAIL("no error");
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("before async_dot_wait") != std::string::npos);
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("a pending async_dot value carried in a Var reads as NaN until its wait (CPU semantics)", "[async][cpu-only]") {
  // The value travels through a Var, which the verifier cannot follow: the CPU backend poisons it.
  Kernel k("late_wait", [](Ptr<bf16> a, Ptr<float> early, Ptr<float> late) {
    auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
    Int r = arange(0, 64);
    local_store(a_s[0], load(a + r.expand_dims(1) * 64 + r.expand_dims(0)));
    Var acc = zeros<float>({64, 64});
    acc = async_dot(a_s[0], local_trans(a_s[0]), acc);
    Float pending = acc;
    store(early + r.expand_dims(1) * 64 + r.expand_dims(0), pending);
    store(late + r.expand_dims(1) * 64 + r.expand_dims(0), async_dot_wait(0, acc));
  });
  WEFT_SEEDED_RNG(rng);
  std::vector<bf16> a = generate<bf16>(rng, 64 * 64, uniform_real<bf16>(-1, 1));
  Output<float> early(64 * 64), late(64 * 64);
  launch(k, Grid(1), Input<bf16>(a), early, late);
  std::vector<float> e = early.read(), l = late.read();
  size_t nan_early = 0, nan_late = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    nan_early += std::isnan(e[i]);
    nan_late += std::isnan(l[i]);
  }
  CHECK(nan_early == e.size());
  CHECK(nan_late == 0);
}

TEST_CASE("the warp-specialized GEMM of examples/gemm_hopper_ws.h at odd sizes, both B layouts", "[async]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (auto [M, N, K] : {std::tuple{72, 264, 200}, std::tuple{257, 64, 64}}) {
    INFO("M " << M << " N " << N << " K " << K);
    std::vector<bf16> a = generate<bf16>(rng, size_t(M) * K, uniform_real<bf16>(-1, 1));
    std::vector<bf16> b = generate<bf16>(rng, size_t(N) * K, uniform_real<bf16>(-1, 1)), bt(b.size());
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) bt[size_t(k) * N + j] = b[size_t(j) * K + k];
    std::vector<double> want(size_t(M) * N), tol(want.size());
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          double p = double(float(a[size_t(i) * K + k])) * double(float(b[size_t(j) * K + k]));
          s += p;
          mag += std::fabs(p);
        }
        want[size_t(i) * N + j] = s;
        tol[size_t(i) * N + j] = 0x1p-8 * std::fabs(s) + 1e-5 * mag + 1e-6;  // bf16 output
      }
    Buffer<bf16> da = dev.upload(a), db = dev.upload(b), dbt = dev.upload(bt);
    for (bool b_is_nk : {true, false}) {
      INFO("B " << (b_is_nk ? "N x K" : "K x N"));
      Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(M) * N, poison_value<bf16>()));
      gemm_hopper_ws(da, b_is_nk ? db : dbt, dc, M, N, K, b_is_nk);
      check_within<bf16>(dc.download(), want, tol, "C");
    }
  }
}

TEST_CASE("gemm_hopper_ws: a bad call through the helper is an Error at the caller's line", "[async][errors]") {
  Device dev = Device::cpu();
  auto at_this_line = [](int line) { return Catch::Contains("test_hopper.cpp:" + std::to_string(line)); };
  Buffer<bf16> a = dev.alloc<bf16>(64 * 12), b = dev.alloc<bf16>(12 * 64), c = dev.alloc<bf16>(64 * 64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 16, true), Catch::Contains("A holds 768 elements") && at_this_line(line));
  // K = 12: rows of 24 bytes, which TMA cannot stride (tma() inside the helper, through Kernel::launch's grid too).
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 12, false), Catch::Contains("multiple of 16") && at_this_line(line));
}

TEST_CASE("a buffer can reuse another's shared memory, and must fit in it", "[async]") {
  WEFT_SEEDED_RNG(rng);
  // Phase 1 uses `first` (2 x 64 f32), phase 2 the same bytes as `second` (128 i32); the reads of each
  // phase see what that phase wrote.
  Kernel k("reuse", [](Ptr<float> x, Ptr<int32_t> y, Ptr<float> out_x, Ptr<int32_t> out_y) {
    auto first = local_alloc<float>({64}, 2, "first");
    auto second = local_alloc<int32_t>({128}, 1, "second", first);
    Int i64 = arange(0, 64), i128 = arange(0, 128);
    local_store(first[1], load(x + i64));
    store(out_x + i64, local_load(first[1]) * 2.0f);
    local_store(second[0], load(y + i128));
    store(out_y + i128, local_load(second[0]) + 1);
  });
  std::vector<float> x = generate<float>(rng, 64, uniform_real<float>(-10, 10));
  std::vector<int32_t> y = generate<int32_t>(rng, 128, uniform_int<int32_t>(-1000, 1000));
  Output<float> out_x(64);
  Output<int32_t> out_y(128);
  launch(k, Grid(2), Input<float>(x), Input<int32_t>(y), out_x, out_y);
  std::vector<float> want_x(x);
  for (float& v : want_x) v *= 2;
  std::vector<int32_t> want_y(y);
  for (int32_t& v : want_y) v += 1;
  check_near<float>(out_x, want_x);
  check_near<int32_t>(out_y, want_y);

  int line = 0;
  Kernel too_big("reuse_too_big", [&](Ptr<float>) {
    auto first = local_alloc<float>({64}, 1, "first");
    line = __LINE__; auto second = local_alloc<float>({128}, 1, "second", first);
  });
  try {
    too_big.ir();
    FAIL("no error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("reuses 'first'") != std::string::npos);
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("async_dot with a in registers: a product fed to the next product, as attention does", "[async]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int M = 64, K = 64, N = 64, N2 = 128;
  // S = A B^T (wgmma from shared memory), P = bf16(S) in registers, O = P V with V stored [N2, N].
  Kernel k("chained_dot", [](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> v, Ptr<float> o) {
    auto a_s = local_alloc<bf16>({M, K}, 1, "a_s");
    auto b_s = local_alloc<bf16>({N, K}, 1, "b_s");
    auto v_s = local_alloc<bf16>({N2, N}, 1, "v_s");
    Int rm = arange(0, M), rn = arange(0, N), rk = arange(0, K), rn2 = arange(0, N2);
    local_store(a_s[0], load(a + rm.expand_dims(1) * K + rk.expand_dims(0)));
    local_store(b_s[0], load(b + rn.expand_dims(1) * K + rk.expand_dims(0)));
    local_store(v_s[0], load(v + rn2.expand_dims(1) * N + rn.expand_dims(0)));
    Float s = async_dot_wait(0, async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({M, N})));
    Tile<bf16> p = cast<bf16>(s * 0.125f);
    Float out = async_dot_wait(0, async_dot(p, local_trans(v_s[0]), zeros<float>({M, N2})));
    store(o + rm.expand_dims(1) * N2 + rn2.expand_dims(0), out);
  }, KernelOptions{4});
  std::vector<bf16> a = generate<bf16>(rng, M * K, uniform_real<bf16>(-1, 1));
  std::vector<bf16> b = generate<bf16>(rng, N * K, uniform_real<bf16>(-1, 1));
  std::vector<bf16> v = generate<bf16>(rng, N2 * N, uniform_real<bf16>(-1, 1));
  Output<float> o(M * N2);
  launch(k, Grid(1), Input<bf16>(a), Input<bf16>(b), Input<bf16>(v), o);
  std::vector<double> want(M * N2), tol(M * N2);
  for (int i = 0; i < M; ++i) {
    std::vector<double> p(N);
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int q = 0; q < K; ++q) s += double(float(a[i * K + q])) * double(float(b[j * K + q]));
      p[j] = double(float(bf16(float(float(s) * 0.125f))));  // f32 product, scaled, rounded to bf16
    }
    for (int c = 0; c < N2; ++c) {
      double s = 0, mag = 0;
      for (int j = 0; j < N; ++j) {
        s += p[j] * double(float(v[c * N + j]));
        mag += std::fabs(p[j] * double(float(v[c * N + j])));
      }
      want[i * N2 + c] = s;
      tol[i * N2 + c] = 0x1p-7 * mag + 1e-5;  // p's bf16 rounding may flip where S is a tie
    }
  }
  check_within<float>(o, want, tol, "O = bf16(A B^T / 8) V^T");
}
