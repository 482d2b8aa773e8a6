// Tiles in the wgmma accumulator layout on the GPU (and their meaning on every backend): row reductions and
// row broadcasts of an async_dot result, index tiles (aranges, masks) combined with it, Vars of row
// vectors carried through a loop, and fast::exp2. On the GPU these stay in registers (the PTX checks
// below); the values must be those of the double reference everywhere.
#include "test_util.h"

#include <cstring>

#include "driver/backend.h"
#include "ptxas_check.h"

namespace {

using namespace weft;
using namespace weft_test;

// A's and B's first tiles into stage 0 of a_s and b_s by TMA, waited for on `ready`.
template <class T>
void load_both(const TensorDesc<T, 2>& A, const SharedBuffer<T>& a_s, const TensorDesc<T, 2>& B, const SharedBuffer<T>& b_s,
               const Barrier& ready) {
  barrier_expect_bytes(ready, a_s.stage_bytes() + b_s.stage_bytes());
  async_descriptor_load(A, a_s[0], {0, 0}, ready);
  async_descriptor_load(B, b_s[0], {0, 0}, ready);
  barrier_wait(ready, 0);
}

// Q [64, 64] @ K^T with K [64, 64] on one warp group; then an online-softmax step: row max, exp2 of the
// shifted scores, row sums, and a row-masked, column-masked result, written out as f32.
void softmax_rows_body(TensorDesc<bf16, 2> A, TensorDesc<bf16, 2> B, Ptr<float> out, Ptr<float> row_out, Int valid_cols) {
  auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
  auto b_s = local_alloc<bf16>({64, 64}, 1, "b_s");
  auto ready = alloc_barriers(1, 1, "ready");
  async_tasks(task("mma", {.warps = 4}, [&] {
    load_both(A, a_s, B, b_s, ready[0]);
    Var<float> s = async_dot_wait(0, async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({64, 64})));
    Int cols = expand_dims(arange(0, 64), 0);                       // [1, 64]
    Int rows = expand_dims(arange(0, 64), 1);                       // [64, 1]
    s = where(cols < valid_cols && cols <= rows + 40, s, -INFINITY);  // an index mask, lazily in any layout
    Var<float> m = full<float>({64}, -INFINITY);
    Var<float> l = zeros<float>({64});
    for_range(0, 2, [&](Int) {  // the same row vectors carried through a loop, twice
      Tile<float> m_new = maximum(m, max(s, 1));
      Tile<float> p = fast::exp2(s - expand_dims(m_new, 1));
      l = l * fast::exp2(m - m_new) + sum(p, 1);
      m = m_new;
    });
    Tile<float> p = fast::exp2(s - expand_dims(m, 1)) / expand_dims(l, 1);
    Int r = expand_dims(arange(0, 64), 1), c = expand_dims(arange(0, 64), 0);
    store(out + r * 64 + c, p);
    store(row_out + arange(0, 64), m + log2(l));
  }));
}

}  // namespace

TEST_CASE("accumulator layout: row max / sum, row broadcasts, index masks and fast::exp2 on an async_dot result",
          "[async][accumulator]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<bf16> a(64 * 64), b(64 * 64);
  for (bf16& x : a) x = bf16(dist(rng));
  for (bf16& x : b) x = bf16(dist(rng));
  int valid = 50;
  Kernel k("softmax_rows", softmax_rows_body);
  Buffer<bf16> da = dev.upload(a), db = dev.upload(b);
  Buffer<float> out = dev.upload(std::vector<float>(64 * 64, std::nanf(""))), rows = dev.upload(std::vector<float>(64, std::nanf("")));
  k.launch(Grid(1), tma(da, {64, 64}, {64, 64}), tma(db, {64, 64}, {64, 64}), out, rows, valid);
  std::vector<float> got = out.download(), got_rows = rows.download();
  int wrong = 0;
  for (int i = 0; i < 64; ++i) {
    std::vector<double> s(64);
    double m = -INFINITY;
    for (int j = 0; j < 64; ++j) {
      double dot = 0;
      for (int t = 0; t < 64; ++t) dot += double(float(a[i * 64 + t])) * double(float(b[j * 64 + t]));
      s[j] = j < valid && j <= i + 40 ? dot : -INFINITY;
      m = std::max(m, s[j]);
    }
    double l = 0;  // the loop adds the row's sum twice (the maximum does not change the second time)
    for (int j = 0; j < 64; ++j) l += 2 * std::exp2(s[j] - m);
    for (int j = 0; j < 64; ++j) {
      double want = std::exp2(s[j] - m) / l;
      if (!(std::abs(got[i * 64 + j] - want) <= 1e-5 + 1e-5 * want) && ++wrong <= 5)
        UNSCOPED_INFO("p[" << i << "][" << j << "] = " << got[i * 64 + j] << ", want " << want);
    }
    double want_row = m + std::log2(l);
    if (!(std::abs(got_rows[i] - want_row) <= 1e-4 * (1 + std::abs(want_row))) && ++wrong <= 5)
      UNSCOPED_INFO("row " << i << " = " << got_rows[i] << ", want " << want_row);
  }
  CHECK(wrong == 0);
}

TEST_CASE("accumulator layout: the online-softmax step stays in registers on sm_90a", "[async][accumulator]") {
  Device gpu_less = Device::from_backend(detail::compile_only_backend("sm_90a", "no GPU in this test"));
  Kernel k("softmax_rows", softmax_rows_body);
  Buffer<bf16> a = gpu_less.alloc<bf16>(64 * 64);
  std::string ptx = k.ptx(tma(a, {64, 64}, {64, 64}), tma(a, {64, 64}, {64, 64}));
  INFO(ptx);
  // 32 elements and 2 rows a thread per loop step (LLVM may unroll the two steps; the last one's p is
  // then the final p).
  size_t ex2 = count_occurrences(ptx, "ex2.approx.ftz.f32"), shuffles = count_occurrences(ptx, "shfl.sync.bfly.b32");
  CHECK(ex2 >= 2 * 32 + 2);
  CHECK(ex2 <= 3 * 32 + 2 * 2);
  CHECK(shuffles >= 2 * 2 * 2);  // row max and row sum, 2 rows, 2 shuffles each, per step
  CHECK(shuffles <= 2 * 2 * 2 * 2);
  // Shared memory and barriers only where the store of p moves it (32 registers a thread) into the blocked
  // layout of its pointers: none for the reductions, broadcasts, masks and Vars, and none for the row vector,
  // which each thread stores from its own two rows' registers. Barriers: the mbarrier init, the task's
  // expect_bytes arrival, and 2 for p's conversion.
  CHECK(count_occurrences(ptx, "st.shared") <= 32);
  CHECK(count_occurrences(ptx, "bar.sync") <= 1 + 1 + 2);
}

TEST_CASE("fast::exp2: within a relative 2^-21 of 2^x, subnormal results flushed to zero, on every backend",
          "[ops][math]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  Kernel k("fast_exp2", [](Ptr<float> x, Ptr<float> y, Ptr<bf16> yb, Int n) {
    Int i = program_id(0) * 1024 + arange(0, 1024);
    Bool ok = i < n;
    Tile<float> v = load(x + i, ok);
    store(y + i, fast::exp2(v), ok);
    store(yb + i, fast::exp2(cast<bf16>(v)), ok);
  });
  std::vector<float> x = generate<float>(rng, 20000, uniform_real<float>(-160.0, 130.0));
  for (float special : {0.f, -0.f, 1.f, -1.f, 127.9f, 128.f, -126.f, -149.f, -150.f, INFINITY, -INFINITY, std::nanf("")})
    x.push_back(special);
  int n = static_cast<int>(x.size());
  Buffer<float> dx = dev.upload(x), dy = dev.upload(std::vector<float>(n, 7.f));
  Buffer<bf16> dyb = dev.upload(std::vector<bf16>(n, bf16(7.f)));
  k.launch(Grid((n + 1023) / 1024), dx, dy, dyb, n);
  std::vector<float> y = dy.download();
  std::vector<bf16> yb = dyb.download();
  int wrong = 0;
  double worst = 0;  // the largest relative error seen on normal results
  for (int i = 0; i < n; ++i) {
    double want = std::exp2(double(x[i]));
    double got = y[i];
    bool ok;
    if (std::isnan(x[i])) {
      ok = std::isnan(got);
    } else if (want < 0x1p-126) {  // subnormal or zero: flushed (the GPU's .ftz); a result of 2^-126 is allowed too
      ok = got == 0 || got == 0x1p-126;
    } else if (want > 0x1.fffffep127) {
      ok = std::isinf(got);
    } else {
      double rel = std::abs(got - want) / want;
      worst = std::max(worst, rel);
      ok = rel <= 0x1p-21;
    }
    double wb = double(float(bf16(float(std::exp2(double(float(bf16(x[i]))))))));
    double gb = float(yb[i]);
    // bf16: the f32 result rounded once more, so within one bf16 unit of the correctly rounded one.
    bool ok_b = std::isnan(x[i]) ? std::isnan(gb)
                : wb < 0x1p-126  ? gb == 0 || gb == 0x1p-126
                                 : std::abs(gb - wb) <= std::ldexp(1.0, std::ilogb(wb) - 7) || (std::isinf(wb) && gb == wb);
    if ((!ok || !ok_b) && ++wrong <= 8)
      UNSCOPED_INFO("fast::exp2(" << std::hexfloat << x[i] << ") = " << got << " (bf16: " << gb << "), want " << want
                                   << " (bf16: " << wb << ")" << std::defaultfloat);
  }
  WARN("fast::exp2 on " << dev.name() << ": largest relative error " << worst << " = 2^" << std::log2(worst));
  CHECK(wrong == 0);
}

TEST_CASE("fast::exp2 of f64 is an Error: the fast flavour computes in f32", "[errors][math]") {
  Kernel k("fast_exp2_f64", [](Ptr<double> x) { store(x + arange(0, 32), fast::exp2(load(x + arange(0, 32)))); });
  CHECK_THROWS_WITH(k.ir(), Catch::Contains("fast::exp2 computes in f32") && Catch::Contains("cast<float>"));
}

TEST_CASE("rows() of a buffer kept in 128-byte column panels is an Error", "[errors][async]") {
  Kernel k("rows_of_panels", [](TensorDesc<bf16, 2> A, Ptr<float> out) {
    auto a_s = local_alloc<bf16>({128, 128}, 1, "a_s");
    auto bar = alloc_barriers(1, 1, "bar");
    async_tasks(task("t", {.warps = 4}, [&] {
      barrier_expect_bytes(bar[0], a_s.stage_bytes());
      async_descriptor_load(A, a_s[0].cols(0, 64), {0, 0}, bar[0]);
      async_descriptor_load(A, a_s[0].cols(64, 64), {0, 64}, bar[0]);
      barrier_wait(bar[0], 0);
      store(out + arange(0, 64 * 128), cast<float>(reshape(local_load(a_s[0].rows(64, 64)), {64 * 128})));
    }));
  });
  Device dev = Device::cpu();
  Buffer<bf16> a = dev.alloc<bf16>(128 * 128);
  Buffer<float> out = dev.alloc<float>(64 * 128);
  CHECK_THROWS_WITH(k.launch(dev.stream(), Grid(1), tma(a, {128, 128}, {128, 64}), out),
                    Catch::Contains("rows() of buffer 'a_s'") && Catch::Contains("panels of 64"));
}

TEST_CASE("index tiles that reuse a subexpression many times compile in linear time", "[ops][accumulator]") {
  // Each step uses t twice: recomputing index tiles per use without sharing would take 2^40 steps.
  Kernel k("shared_index_subtrees", [](Ptr<int32_t> out) {
    Int t = expand_dims(arange(0, 32), 1) * 32 + expand_dims(arange(0, 32), 0);  // a broadcast: computed lazily
    for (int step = 0; step < 40; ++step) t = (t + t) ^ 5;
    Int row = expand_dims(arange(0, 32), 1), col = expand_dims(arange(0, 32), 0);
    store(out + row * 32 + col, t);
  });
  Device dev = Device::current();
  Buffer<int32_t> out = dev.upload(std::vector<int32_t>(32 * 32, -1));
  k.launch(dev.stream(), Grid(1), out);
  std::vector<int32_t> got = out.download();
  int wrong = 0;
  for (uint32_t i = 0; i < 32 * 32; ++i) {
    uint32_t t = i;
    for (int step = 0; step < 40; ++step) t = (t + t) ^ 5u;
    if (got[i] != static_cast<int32_t>(t)) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(!k.ptx().empty());  // and on sm_90a, where the tiles are recomputed per register
}

namespace {

// C = cast<T>(A @ B^T) on one warp group (A [64, 64], B [N, 64]), written to shared memory from the
// accumulator layout (stmatrix on sm_90a) and read back three ways: by a TMA store (a swizzled buffer; N <= 64),
// by local_load into the blocked layout, and as wgmma's A operand of D = C @ B (K = N, a multiple of 16;
// N = 128 in two swizzled 64-column panels).
template <class T, int N>
void acc_store_body(TensorDesc<T, 2> A, TensorDesc<T, 2> B, TensorDesc<T, 2> c_desc, Ptr<T> c_out, Ptr<float> d_out) {
  constexpr bool by_tma = N <= 64, as_operand = N % 16 == 0;
  auto a_s = local_alloc<T>({64, 64}, 1, "a_s");
  auto b_s = local_alloc<T>({N, 64}, 1, "b_s");
  auto c_s = local_alloc<T>({64, N}, 1, "c_s");  // TMA-stored
  auto p_s = local_alloc<T>({64, N}, 1, "p_s");  // read back, and wgmma's A
  auto ready = alloc_barriers(1, 1, "ready");
  async_tasks(task("mma", {.warps = 4}, [&] {
    load_both(A, a_s, B, b_s, ready[0]);
    Tile<T> c = cast<T>(async_dot_wait(0, async_dot(a_s[0], local_trans(b_s[0]), zeros<float>({64, N}))));
    if constexpr (by_tma) {
      local_store(c_s[0], c);
      async_descriptor_store(c_desc, c_s[0], {0, 0});
      async_store_wait(0);
    }
    local_store(p_s[0], c);
    Int r = expand_dims(arange(0, 64), 1);
    store(c_out + r * N + expand_dims(arange(0, N), 0), local_load(p_s[0]));
    if constexpr (as_operand) {
      Tile<float> d = async_dot_wait(0, async_dot(p_s[0], b_s[0], zeros<float>({64, 64})));
      store(d_out + r * 64 + expand_dims(arange(0, 64), 0), d);
    }
  }));
}

template <class T, int N> void check_acc_store() {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  constexpr bool by_tma = N <= 64, as_operand = N % 16 == 0;
  std::vector<T> a = generate<T>(rng, 64 * 64, uniform_real<T>(-1, 1));
  std::vector<T> b = generate<T>(rng, N * 64, uniform_real<T>(-1, 1));
  Kernel k("acc_store", acc_store_body<T, N>);
  Buffer<T> da = dev.upload(a), db = dev.upload(b);
  Buffer<T> c_tma = dev.upload(std::vector<T>(64 * N, T(std::nanf("")))), c_back = dev.upload(std::vector<T>(64 * N, T(std::nanf(""))));
  Buffer<float> d = dev.upload(std::vector<float>(64 * 64, std::nanf("")));
  k.launch(Grid(1), tma(da, {64, 64}, {64, 64}), tma(db, {N, 64}, {N, 64}), tma(c_tma, {64, N}, {64, N}), c_back, d);
  std::vector<T> got_tma = c_tma.download(), got_back = c_back.download();
  std::vector<float> got_d = d.download();
  // C in double, then rounded to T as the kernel rounds its f32 sum (which may differ from the double's
  // rounding by one unit where the sum lies near a tie: allowed below).
  std::vector<double> c(64 * N);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int t = 0; t < 64; ++t) s += double(float(a[i * 64 + t])) * double(float(b[j * 64 + t]));
      c[i * N + j] = s;
    }
  const double unit = std::is_same_v<T, bf16> ? 0x1p-7 : 0x1p-10;
  int wrong = 0;
  for (int e = 0; e < 64 * N; ++e) {
    double tol = unit * std::abs(c[e]) + 1e-6;
    if (!(std::abs(double(float(got_back[e])) - c[e]) <= tol) && ++wrong <= 5)
      UNSCOPED_INFO("read back C[" << e / N << "][" << e % N << "] = " << float(got_back[e]) << ", want " << c[e]);
    if (by_tma && !(std::abs(double(float(got_tma[e])) - c[e]) <= tol) && ++wrong <= 5)
      UNSCOPED_INFO("TMA-stored C[" << e / N << "][" << e % N << "] = " << float(got_tma[e]) << ", want " << c[e]);
  }
  if (as_operand)  // D = C @ B from the kernel's own C (its rounding), B [N, 64] as [K, N]
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) {
        double want = 0, scale = 0;
        for (int t = 0; t < N; ++t) {
          want += double(float(got_back[i * N + t])) * double(float(b[t * 64 + j]));
          scale += std::abs(double(float(got_back[i * N + t])) * double(float(b[t * 64 + j])));
        }
        if (!(std::abs(got_d[i * 64 + j] - want) <= 1e-5 * scale + 1e-6) && ++wrong <= 5)
          UNSCOPED_INFO("D[" << i << "][" << j << "] = " << got_d[i * 64 + j] << ", want " << want);
      }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("accumulator layout: 16-bit tiles into shared memory (stmatrix), read by TMA, local_load and wgmma",
          "[async][accumulator]") {
  SECTION("bf16, 64 columns (swizzled 128-byte rows)") { check_acc_store<bf16, 64>(); }
  SECTION("f16, 8 columns (.x2)") { check_acc_store<f16, 8>(); }
  SECTION("bf16, 128 columns (two 64-column panels)") { check_acc_store<bf16, 128>(); }
}

namespace {
template <class T, int N> std::string acc_store_ptx() {
  Device gpu_less = Device::from_backend(detail::compile_only_backend("sm_90a", "no GPU in this test"));
  Kernel k("acc_store", acc_store_body<T, N>);
  Buffer<T> a = gpu_less.alloc<T>(64 * 128);
  return k.ptx(tma(a, {64, 64}, {64, 64}), tma(a, {N, 64}, {N, 64}), tma(a, {64, N}, {64, N}));
}
}  // namespace

TEST_CASE("accumulator layout: 16-bit tiles go to shared memory with stmatrix on sm_90a", "[async][accumulator]") {
  // A thread holds N / 2 elements of a 64 x N tile: N / 16 .x4 (one .x2 for N = 8) per store of C (TMA-stored
  // and read back). Other shared-memory stores: only D's conversion to the blocked layout for its global store
  // (N = 64, 128: 32 f32 a thread, at most one st.shared each, fewer where an emitter vectorizes them); the
  // per-pair stores of C would add N / 4 or more per store of C.
  std::string ptx64 = acc_store_ptx<bf16, 64>(), ptx8 = acc_store_ptx<f16, 8>(), ptx128 = acc_store_ptx<bf16, 128>();
  CHECK(count_occurrences(ptx64, "stmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * 4);
  CHECK(count_occurrences(ptx8, "stmatrix.sync.aligned.m8n8.x2.shared.b16") == 2 * 1);
  CHECK(count_occurrences(ptx128, "stmatrix.sync.aligned.m8n8.x4.shared.b16") == 8);
  CHECK(count_occurrences(ptx8, "st.shared") == 0);
  CHECK(count_occurrences(ptx64, "st.shared") <= 32);
  CHECK(count_occurrences(ptx128, "st.shared") <= 32);
  for (const std::string* ptx : {&ptx64, &ptx8, &ptx128}) check_ptxas_assembles(*ptx);
}
