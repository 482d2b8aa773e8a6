// Values of the reductions (sum, max, min, argmax, argmin along every axis) and of dot, against double
// references.
#include <algorithm>

#include "test_util.h"

using namespace weft_test;

namespace {

// Stores t flattened at p (a rank-0 result through the pointer itself).
template <class E> void store_flat(const Ptr<E>& p, const Tile<E>& t) {
  if (t.rank() == 0)
    store(p, t);
  else
    store(p + arange(0, t.numel()), t.reshape({t.numel()}));
}

// ---- reductions ------------------------------------------------------------------------------------------

// The host reference of the five reductions of x (shape s) along `axis`: out[o] for each output element o.
struct ReduceRef {
  std::vector<double> sum, sum_abs, max, min;
  std::vector<int32_t> argmax, argmin;
};

template <class T> ReduceRef reduce_reference(const std::vector<host_t<T>>& x, const Shape& s, int axis) {
  int64_t len = s[axis], inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  int64_t outer = numel_of(s) / (len * inner), n_out = outer * inner;
  ReduceRef r{std::vector<double>(n_out), std::vector<double>(n_out), std::vector<double>(n_out),
              std::vector<double>(n_out), std::vector<int32_t>(n_out), std::vector<int32_t>(n_out)};
  for (int64_t o = 0; o < n_out; ++o) {
    int64_t base = (o / inner) * len * inner + o % inner;
    for (int64_t k = 0; k < len; ++k) {
      double v = static_cast<double>(to_ref<T>(x[base + k * inner]));
      r.sum[o] += v;
      r.sum_abs[o] += std::fabs(v);
      if (k == 0 || v > r.max[o]) r.max[o] = v, r.argmax[o] = int32_t(k);  // first index of the extreme
      if (k == 0 || v < r.min[o]) r.min[o] = v, r.argmin[o] = int32_t(k);
    }
  }
  return r;
}

// Tolerance of a sum of `len` values of T: rounding the result to T plus accumulation in f32 (exact for
// integers, which are compared after wrapping).
template <class T> std::vector<double> sum_tolerance(const ReduceRef& r, int64_t len) {
  std::vector<double> tol(r.sum.size(), 0.0);
  if constexpr (is_float_elem<T>)
    for (size_t o = 0; o < tol.size(); ++o)
      tol[o] = eps<T>() * std::fabs(r.sum[o]) + double(len + 1) * 0x1p-24 * r.sum_abs[o];
  return tol;
}

template <class T> std::vector<host_t<T>> as_host(const std::vector<double>& v) {
  std::vector<host_t<T>> out;
  for (double x : v) out.push_back(from_ref<T>(static_cast<ref_t<T>>(x)));
  return out;
}

// Runs sum, max, min, argmax and argmin of a tile of shape s along `axis` (as written, maybe negative)
// on inputs from `gen`, and checks all five.
template <class T, class G> void check_reductions(Rng& rng, const Shape& s, int axis, G gen) {
  const int64_t n_in = numel_of(s), n_out = n_in / s[axis < 0 ? axis + int(s.size()) : axis];
  Kernel k("reduce", [s, axis, n_in](Ptr<T> x, Ptr<T> sum_out, Ptr<T> max_out, Ptr<T> min_out, Ptr<int32_t> argmax_out,
                                     Ptr<int32_t> argmin_out) {
    Tile<T> t = load(x + arange(0, n_in)).reshape(s);
    store_flat(sum_out, sum(t, axis));
    store_flat(max_out, max(t, axis));
    store_flat(min_out, min(t, axis));
    store_flat(argmax_out, argmax(t, axis));
    store_flat(argmin_out, argmin(t, axis));
  });
  std::vector<host_t<T>> x = generate<T>(rng, n_in, gen);
  Output<T> sums(n_out), maxes(n_out), mins(n_out);
  Output<int32_t> argmaxes(n_out), argmins(n_out);
  launch(k, Grid(1), Input<T>(x), sums, maxes, mins, argmaxes, argmins);

  int positive_axis = axis < 0 ? axis + int(s.size()) : axis;
  ReduceRef r = reduce_reference<T>(x, s, positive_axis);
  std::string shape;
  for (int64_t d : s) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  std::string what = type_name<T>() + "[" + shape + "] axis " + std::to_string(axis) + ": ";
  if constexpr (is_float_elem<T>)
    check_within<T>(sums, r.sum, sum_tolerance<T>(r, s[positive_axis]), what + "sum");
  else  // wraps like the integer type
    check_near<T>(sums, as_host<T>(r.sum), {}, what + "sum");
  check_near<T>(maxes, as_host<T>(r.max), {}, what + "max");
  check_near<T>(mins, as_host<T>(r.min), {}, what + "min");
  check_near<int32_t>(argmaxes, r.argmax, {}, what + "argmax");
  check_near<int32_t>(argmins, r.argmin, {}, what + "argmin");
}

using ReduceTypes = std::tuple<float, int32_t, f16, bf16>;

// Inputs with few ties (random reals, wide integers) and with many (small whole numbers).
template <class T> void check_reductions_all_axes(Rng& rng, const Shape& s) {
  for (int axis = 0; axis < int(s.size()); ++axis) {
    for (int written : {axis, axis - int(s.size())}) {
      if constexpr (is_float_elem<T>)
        check_reductions<T>(rng, s, written, uniform_real<T>(-10, 10));
      else
        check_reductions<T>(rng, s, written, uniform_int<T>(-100000, 100000));
      check_reductions<T>(rng, s, written, small_whole<T>(-2, 2));
    }
  }
}

TEST_CASE("reductions of 1-D tiles", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ReduceTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    for (int64_t n : {1, 2, 64, 1024}) check_reductions_all_axes<T>(rng, {n});
  });
}

TEST_CASE("reductions of 2-D tiles along each axis", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ReduceTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_reductions_all_axes<T>(rng, {8, 16});
    check_reductions_all_axes<T>(rng, {32, 4});
    check_reductions_all_axes<T>(rng, {1, 8});
  });
}

TEST_CASE("reductions of 3-D tiles along each axis", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ReduceTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_reductions_all_axes<T>(rng, {4, 8, 16});
    check_reductions_all_axes<T>(rng, {2, 1, 32});
  });
}

TEST_CASE("argmax and argmin return the first index of the extreme", "[ops][reduce]") {
  // Hand-made rows: ties at the start, the end, everywhere, and an extreme repeated after a smaller one.
  const std::vector<std::vector<float>> rows{{3, 3, 1, 3, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0},
                                             {-1, 5, -2, 5, -2, 5, 4, -2}, {1, 2, 3, 4, 5, 6, 7, 7}};
  Kernel k("arg_ties", [](Ptr<float> x, Ptr<int32_t> amax, Ptr<int32_t> amin) {
    Tile<float> t = load(x + arange(0, 32)).reshape({4, 8});
    store(amax + arange(0, 4), argmax(t, 1));
    store(amin + arange(0, 4), argmin(t, -1));
  });
  std::vector<float> x;
  for (const auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  Output<int32_t> amax(4), amin(4);
  launch(k, Grid(1), Input<float>(x), amax, amin);
  check_near<int32_t>(amax, {0, 0, 1, 6}, {}, "argmax");
  check_near<int32_t>(amin, {4, 0, 2, 0}, {}, "argmin");
}

// NaN: max and min propagate it (like maximum and minimum), and argmax and argmin give the index of the
// first NaN of the row, the element max and min return. Rows of random values with NaNs at random
// places (none, one, several), reduced along each axis, as a whole tile and in rows, on every float type.
template <class T> void check_nan_reductions(Rng& rng, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  Kernel k("nan_reduce", [=](Ptr<T> x, Ptr<T> mx, Ptr<T> mn, Ptr<int32_t> amax, Ptr<int32_t> amin, Ptr<T> all_max,
                              Ptr<int32_t> all_argmin) {
    Tile<T> t = load(x + arange(0, n)).reshape({rows, cols});
    store(mx + arange(0, rows), max(t, 1));
    store(mn + arange(0, rows), min(t, 1));
    store(amax + arange(0, rows), argmax(t, 1));
    store(amin + arange(0, rows), argmin(t, 1));
    Tile<T> flat = t.reshape({n});
    store(all_max, max(flat, 0));
    store(all_argmin, argmin(flat, 0));
  });
  std::vector<host_t<T>> x = generate<T>(rng, n, uniform_real<T>(-10, 10));
  const host_t<T> nan = host_t<T>(std::nanf(""));
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t r = 0; r < rows; ++r)  // row r gets r % 3 NaNs (0, 1 or 2; maybe twice at one place)
    for (int64_t j = 0; j < r % 3; ++j) x[r * cols + col(rng)] = nan;
  Output<T> mx(rows), mn(rows), all_max(1);
  Output<int32_t> amax(rows), amin(rows), all_argmin(1);
  launch(k, Grid(1), Input<T>(x), mx, mn, amax, amin, all_max, all_argmin);
  auto is_nan = [](host_t<T> v) { return std::isnan(static_cast<double>(to_ref<T>(v))); };
  std::vector<int32_t> want_amax(rows), want_amin(rows);
  int64_t first_nan = -1, first_min = 0;
  std::vector<host_t<T>> got_max = mx.read(), got_min = mn.read();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t nan_at = -1, hi = 0, lo = 0;
    for (int64_t c = 0; c < cols; ++c) {
      host_t<T> v = x[r * cols + c];
      if (is_nan(v) && nan_at < 0) nan_at = c;
      if (!is_nan(v) && (is_nan(x[r * cols + hi]) || to_ref<T>(v) > to_ref<T>(x[r * cols + hi]))) hi = c;
      if (!is_nan(v) && (is_nan(x[r * cols + lo]) || to_ref<T>(v) < to_ref<T>(x[r * cols + lo]))) lo = c;
    }
    want_amax[r] = int32_t(nan_at >= 0 ? nan_at : hi);
    want_amin[r] = int32_t(nan_at >= 0 ? nan_at : lo);
    INFO(type_name<T>() << " row " << r << " of " << rows << "x" << cols << ", first NaN at " << nan_at);
    if (nan_at >= 0) {
      CHECK(is_nan(got_max[r]));
      CHECK(is_nan(got_min[r]));
    } else {
      CHECK(to_ref<T>(got_max[r]) == to_ref<T>(x[r * cols + hi]));
      CHECK(to_ref<T>(got_min[r]) == to_ref<T>(x[r * cols + lo]));
    }
    if (nan_at >= 0 && first_nan < 0) first_nan = r * cols + nan_at;
    if (first_nan < 0 && to_ref<T>(x[r * cols + lo]) < to_ref<T>(x[first_min])) first_min = r * cols + lo;
  }
  check_near<int32_t>(amax, want_amax, {}, type_name<T>() + " argmax");
  check_near<int32_t>(amin, want_amin, {}, type_name<T>() + " argmin");
  CHECK(is_nan(all_max.read()[0]) == (first_nan >= 0));
  CHECK(all_argmin.read()[0] == (first_nan >= 0 ? first_nan : first_min));
}

TEST_CASE("max and min propagate NaN, argmax and argmin give the first NaN index", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_nan_reductions<T>(rng, 8, 16);
    check_nan_reductions<T>(rng, 4, 256);  // long rows: several threads per row on the GPU
    check_nan_reductions<T>(rng, 64, 2);
  });
}

// On the GPU a whole-tile reduction ends without a barrier (its warp partials alternate between two
// buffers): one per loop iteration, one in a branch, then a staged reduction and an exchange that reuse
// the same shared memory must all still see their own values.
TEST_CASE("whole-tile reductions in loops and branches, next to other uses of shared memory", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  const int block = 512, programs = 3;
  Kernel k("reduce_mix", [](Ptr<int32_t> x, Ptr<int32_t> out, Int reps, Const<int> block) {
    Int pid = program_id(0), cols = arange(0, block);
    Var<int32_t> acc = 0;
    for_range(0, reps, [&](Int i) {
      Int v = load(x + (pid * reps + i) * block + cols);
      acc = acc + sum(v, 0);
      if_(i % 2 == 0, [&] { acc = acc + max(v, 0); });
    });
    Int v0 = load(x + pid * reps * block + cols);
    Int m = argmax(v0, 0);
    Int row_sums = sum(v0.reshape({16, block / 16}), 1);
    Int spread = trans(v0.reshape({16, block / 16})).reshape({block});  // an exchange
    store(out + pid * 4 + 0, acc + 0);
    store(out + pid * 4 + 1, m);
    store(out + pid * 4 + 2, max(row_sums, 0));
    store(out + pid * 4 + 3, sum(spread * cols, 0));
  }, KernelOptions{.num_warps = 4});
  for (int reps : {1, 2, 5}) {
    INFO("reps " << reps);
    std::vector<int32_t> x = generate<int32_t>(rng, size_t(programs) * reps * block, uniform_int<int32_t>(-1000, 1000));
    Output<int32_t> out(programs * 4);
    launch(k, Grid(programs), Input<int32_t>(x), out, reps, block);
    std::vector<int32_t> want;
    for (int p = 0; p < programs; ++p) {
      int32_t acc = 0;
      for (int i = 0; i < reps; ++i) {
        const int32_t* v = &x[(size_t(p) * reps + i) * block];
        for (int c = 0; c < block; ++c) acc += v[c];
        if (i % 2 == 0) acc += *std::max_element(v, v + block);
      }
      const int32_t* v0 = &x[size_t(p) * reps * block];
      int32_t best_row = INT32_MIN, dot = 0;
      for (int r = 0; r < 16; ++r) {
        int32_t row = 0;
        for (int c = 0; c < block / 16; ++c) row += v0[r * (block / 16) + c];
        best_row = std::max(best_row, row);
      }
      for (int c = 0; c < block; ++c) dot += v0[(c % 16) * (block / 16) + c / 16] * c;  // transposed order
      want.insert(want.end(), {acc, int32_t(std::max_element(v0, v0 + block) - v0), best_row, dot});
    }
    check_near<int32_t>(out.read(), want, {}, "out");
  }
}

TEST_CASE("masked row reductions of odd-sized rows", "[ops][reduce]") {
  WEFT_SEEDED_RNG(rng);
  // One row per program, loaded into a power-of-two tile; masked lanes are filled with the identity.
  Kernel k("row_reduce", [](Ptr<float> x, Ptr<float> sums, Ptr<float> maxes, Ptr<int32_t> argmins, Int n,
                            Const<int> block) {
    Int row = program_id(0), cols = arange(0, block);
    Bool in = cols < n;
    Ptr<float> p = x + row * n + cols;
    store(sums + row, sum(load(p, in, 0), 0));
    store(maxes + row, max(load(p, in, -INFINITY), 0));
    store(argmins + row, argmin(load(p, in, INFINITY), 0));
  });
  const int rows = 5;
  for (int n : {1, 7, 1000}) {
    int block = 1;
    while (block < n) block *= 2;
    std::vector<float> x = generate<float>(rng, rows * n, uniform_real<float>(-5, 5));
    Output<float> sums(rows), maxes(rows);
    Output<int32_t> argmins(rows);
    launch(k, Grid(rows), Input<float>(x), sums, maxes, argmins, n, block);
    std::vector<float> want_max(rows);
    std::vector<double> want_sum(rows), tol(rows);
    std::vector<int32_t> want_argmin(rows);
    for (int r = 0; r < rows; ++r) {
      ReduceRef ref = reduce_reference<float>(std::vector<float>(x.begin() + r * n, x.begin() + (r + 1) * n), {n}, 0);
      want_sum[r] = ref.sum[0], tol[r] = sum_tolerance<float>(ref, n)[0];
      want_max[r] = float(ref.max[0]), want_argmin[r] = ref.argmin[0];
    }
    INFO("n = " << n);
    check_within<float>(sums, want_sum, tol, "row sum");
    check_near<float>(maxes, want_max, {}, "row max");
    check_near<int32_t>(argmins, want_argmin, {}, "row argmin");
  }
}

// ---- dot -------------------------------------------------------------------------------------------------

// a (M x K) @ b (K x N) + c in double, with an error bound for f32 accumulation of exact products.
struct DotRef {
  std::vector<double> value, tol;
};
template <class T>
DotRef dot_reference(const std::vector<host_t<T>>& a, const std::vector<host_t<T>>& b, const std::vector<float>* c,
                     int64_t M, int64_t N, int64_t K) {
  DotRef r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = c ? (*c)[i * N + j] : 0, mag = std::fabs(acc);
      for (int64_t k = 0; k < K; ++k) {
        double p = to_ref<T>(a[i * K + k]) * to_ref<T>(b[k * N + j]);
        acc += p, mag += std::fabs(p);
      }
      r.value[i * N + j] = acc;
      r.tol[i * N + j] = double(K + 2) * 0x1p-24 * mag + 1e-30;
    }
  return r;
}

template <class T> void check_dot(Rng& rng, int64_t M, int64_t N, int64_t K) {
  INFO(type_name<T>() << " dot " << M << " x " << N << " x " << K);
  Kernel k("dot", [M, N, K](Ptr<T> a, Ptr<T> b, Ptr<float> c, Ptr<float> out, Ptr<float> out_acc) {
    Int rows = expand_dims(arange(0, M), 1), cols = expand_dims(arange(0, N), 0);
    Tile<T> at = load(a + rows * K + expand_dims(arange(0, K), 0));
    Tile<T> bt = load(b + expand_dims(arange(0, K), 1) * N + cols);
    store(out + rows * N + cols, dot(at, bt));
    store(out_acc + rows * N + cols, dot(at, bt, load(c + rows * N + cols)));
  });
  auto g = uniform_real<T>(-1, 1);
  std::vector<host_t<T>> a = generate<T>(rng, M * K, g), b = generate<T>(rng, K * N, g);
  std::vector<float> c = generate<float>(rng, M * N, uniform_real<float>(-4, 4));
  Output<float> out(M * N), out_acc(M * N);
  launch(k, Grid(1), Input<T>(a), Input<T>(b), Input<float>(c), out, out_acc);
  DotRef plain = dot_reference<T>(a, b, nullptr, M, N, K), with_acc = dot_reference<T>(a, b, &c, M, N, K);
  check_within<float>(out, plain.value, plain.tol, "dot(a, b)");
  check_within<float>(out_acc, with_acc.value, with_acc.tol, "dot(a, b, c)");
}

using DotTypes = std::tuple<f16, bf16, float>;

TEST_CASE("dot of one tile pair with and without accumulator", "[ops][dot]") {
  WEFT_SEEDED_RNG(rng);
  const int64_t shapes[][3] = {{16, 16, 16}, {32, 64, 16}, {64, 32, 128}, {1, 32, 16},
                               {16, 1, 32},  {8, 8, 1},    {1, 1, 64},    {2, 4, 8}};
  for_each_type<DotTypes>([&](auto t) {
    for (const auto& s : shapes) check_dot<typename decltype(t)::type>(rng, s[0], s[1], s[2]);
  });
}

// C = C0 + A @ B for any M, N, K: a grid of BM x BN tiles, a for_range over K in steps of BK with a Var
// accumulator that starts from C0; edges masked.
template <class T> void check_tiled_matmul(Rng& rng, int M, int N, int K, int BM, int BN, int BK) {
  INFO(type_name<T>() << " matmul " << M << " x " << N << " x " << K << " in " << BM << " x " << BN << " x " << BK
                      << " tiles");
  Kernel k("matmul", [](Ptr<T> a, Ptr<T> b, Ptr<float> c0, Ptr<float> c, Int M, Int N, Int K, Const<int> BM,
                        Const<int> BN, Const<int> BK) {
    Int rows = expand_dims(program_id(0) * BM + arange(0, BM), 1);
    Int cols = expand_dims(program_id(1) * BN + arange(0, BN), 0);
    Bool in_c = (rows < M) & (cols < N);
    Var acc = load(c0 + rows * N + cols, in_c, 0);
    for_range(0, K, BK, [&](Int k0) {
      Int ka = k0 + arange(0, BK);
      Tile<T> at = load(a + rows * K + expand_dims(ka, 0), (rows < M) & (expand_dims(ka, 0) < K), 0);
      Tile<T> bt = load(b + expand_dims(ka, 1) * N + cols, (expand_dims(ka, 1) < K) & (cols < N), 0);
      acc = dot(at, bt, acc);
    });
    store(c + rows * N + cols, acc, in_c);
  });
  auto g = uniform_real<T>(-1, 1);
  std::vector<host_t<T>> a = generate<T>(rng, int64_t(M) * K, g), b = generate<T>(rng, int64_t(K) * N, g);
  std::vector<float> c0 = generate<float>(rng, int64_t(M) * N, uniform_real<float>(-4, 4));
  Output<float> c(int64_t(M) * N);
  launch(k, Grid((M + BM - 1) / BM, (N + BN - 1) / BN), Input<T>(a), Input<T>(b), Input<float>(c0), c, M, N, K, BM, BN,
         BK);
  DotRef want = dot_reference<T>(a, b, &c0, M, N, K);
  check_within<float>(c, want.value, want.tol, "C0 + A @ B");
}

TEST_CASE("dot in a for_range K loop with a Var accumulator", "[ops][dot]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<DotTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_tiled_matmul<T>(rng, 37, 45, 100, 16, 32, 16);  // every edge masked
    check_tiled_matmul<T>(rng, 64, 64, 64, 32, 32, 32);   // exact tiles
    check_tiled_matmul<T>(rng, 5, 3, 1, 16, 16, 16);      // one partial K step
    check_tiled_matmul<T>(rng, 1, 64, 256, 1, 64, 64);    // a single row
    check_tiled_matmul<T>(rng, 33, 1, 17, 64, 1, 8);      // a single column
  });
}

}  // namespace
