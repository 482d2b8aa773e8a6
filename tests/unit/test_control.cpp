// Values of structured control flow (for_range, if_), variables (Var), the launch grid as each program
// instance sees it, Const specialization and the default device. Inputs are fresh random integers (or
// floats holding small whole numbers, so that every operation is exact) checked exactly against C++.
#include <algorithm>
#include <cstdlib>

#include "driver/backend.h"  // cuda_backend_or_null: is there a GPU backend?
#include "test_util.h"

using namespace weft_test;

namespace {

using Ints = std::vector<int32_t>;

int32_t pick(Rng& rng, int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); }
Ints random_ints(Rng& rng, size_t n, int32_t lo, int32_t hi) { return generate<int32_t>(rng, n, uniform_int<int32_t>(lo, hi)); }

// A reference per program instance: want[p] = f(p) for p in [0, n).
template <class F> Ints per_program(int n, F f) {
  Ints want(n);
  for (int p = 0; p < n; ++p) want[p] = f(p);
  return want;
}

// The C++ loop that `for_range(lo, hi, step, body)` means (no iteration unless step > 0).
template <class F> void cpp_range(int32_t lo, int32_t hi, int32_t step, F body) {
  if (step <= 0) return;
  for (int64_t i = lo; i < hi; i += step) body(static_cast<int32_t>(i));
}

}  // namespace

// ---- for_range ----------------------------------------------------------------------------------------

TEST_CASE("for_range with bounds and step from kernel arguments carries a Var", "[control]") {
  WEFT_SEEDED_RNG(rng);
  // Each program starts from its own id and adds weighted elements of x[lo, hi) with the given step.
  Kernel k("range_sum", [](Ptr<int32_t> x, Ptr<int32_t> out, Int lo, Int hi, Int step) {
    Int pid = program_id();
    Var<int32_t> acc = pid;
    for_range(lo, hi, step, [&](Int i) { acc += load(x + i) * (i % 3 + pid); });
    store(out + pid, acc);
  });
  const int programs = 5, n = 300;
  Ints x = random_ints(rng, n, -1000, 1000);
  Input<int32_t> dx(x);
  Output<int32_t> out(programs);
  struct Case {
    int32_t lo, hi, step;
  };
  std::vector<Case> cases = {{0, n, 1}, {pick(rng, 0, 50), pick(rng, 100, n), pick(rng, 2, 9)}, {7, 8, 1},
                             {3, n, n},  // one iteration: step past the end
                             {40, 40, 1}, {90, 10, 1}, {90, 10, -1},  // zero-trip loops
                             {0, n, 0}, {0, n, -3}};                // a non-positive step runs nothing
  for (int r = 0; r < 4; ++r) cases.push_back({pick(rng, 0, n - 1), pick(rng, 0, n), pick(rng, -2, 40)});
  for (const Case& c : cases) {
    INFO("for_range(" << c.lo << ", " << c.hi << ", " << c.step << ")");
    launch(k, Grid(programs), dx, out, c.lo, c.hi, c.step);
    Ints want = per_program(programs, [&](int p) {
      int32_t acc = p;
      cpp_range(c.lo, c.hi, c.step, [&](int32_t i) { acc += x[i] * (i % 3 + p); });
      return acc;
    });
    check_near<int32_t>(out, want);
  }
}

TEST_CASE("for_range near the limits of i32: the index neither overflows nor wraps", "[control]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("edge_ranges", [](Ptr<int32_t> out, Int lo, Int hi, Int step) {
    Var<int32_t> count = 0, last = -1;
    for_range(lo, hi, step, [&](Int i) {
      count += 1;
      last = i;
    });
    store(out, count);
    store(out + 1, last);
  });
  const int32_t max = INT32_MAX, min = INT32_MIN;
  int32_t near_top = max - pick(rng, 0, 100), near_bottom = min + pick(rng, 0, 100), big_step = pick(rng, 1 << 29, max);
  Output<int32_t> out(2);
  for (auto [lo, hi, step] : {std::tuple{max - 10, max, 3}, std::tuple{min, min + 7, 2}, std::tuple{0, max, 1 << 30},
                              std::tuple{-5, 5, max}, std::tuple{near_top, max, pick(rng, 1, 50)},
                              std::tuple{near_bottom, min + 200, pick(rng, 1, 50)}, std::tuple{min, max, big_step}}) {
    INFO("for_range(" << lo << ", " << hi << ", " << step << ")");
    launch(k, Grid(1), out, lo, hi, step);
    Ints want = {0, -1};
    cpp_range(lo, hi, step, [&](int32_t i) { ++want[0], want[1] = i; });
    check_near<int32_t>(out, want);
  }
}

TEST_CASE("for_range with literal bounds: step > 1 and bodies that never run", "[control]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("literal_ranges", [](Ptr<int32_t> x, Ptr<int32_t> out, Ptr<int32_t> never) {
    Int pid = program_id();
    Var<int32_t> acc = 0;
    for_range(3, 40, 4, [&](Int i) { acc = acc * 2 + load(x + i) - pid; });
    for_range(5, 5, [&](Int i) { store(never + pid, i); });
    for_range(10, 0, [&](Int i) { store(never + pid, i); });
    store(out + pid, acc);
  });
  const int programs = 3;
  Ints x = random_ints(rng, 40, -50, 50);
  Output<int32_t> out(programs), never(programs);
  launch(k, Grid(programs), Input<int32_t>(x), out, never);
  check_near<int32_t>(out, per_program(programs, [&](int p) {
                        int32_t acc = 0;
                        cpp_range(3, 40, 4, [&](int32_t i) { acc = acc * 2 + x[i] - p; });
                        return acc;
                      }));
  check_untouched<int32_t>(never.read(), 0, programs, "stores in zero-trip loops");
}

TEST_CASE("nested for_range: a bound from the outer index, a Var declared in the outer body", "[control]") {
  WEFT_SEEDED_RNG(rng);
  // out[p] = sum over rows i of (i + 1) * (sum of row i's first i + 1 + p elements, as far as they go).
  Kernel k("triangle", [](Ptr<int32_t> x, Ptr<int32_t> out, Int rows, Int cols) {
    Int pid = program_id();
    Var<int32_t> total = 0;
    for_range(0, rows, [&](Int i) {
      Var<int32_t> row_sum = 0;
      for_range(0, minimum(i + 1 + pid, cols), [&](Int j) { row_sum += load(x + i * cols + j); });
      total += row_sum * (i + 1);
    });
    store(out + pid, total);
  });
  const int programs = 4;
  int32_t rows = pick(rng, 1, 20), cols = pick(rng, 1, 20);
  INFO("rows " << rows << ", cols " << cols);
  Ints x = random_ints(rng, size_t(rows) * cols, -100, 100);
  Output<int32_t> out(programs);
  launch(k, Grid(programs), Input<int32_t>(x), out, rows, cols);
  check_near<int32_t>(out, per_program(programs, [&](int p) {
                        int32_t total = 0;
                        for (int i = 0; i < rows; ++i) {
                          int32_t row_sum = 0;
                          for (int j = 0; j < std::min(i + 1 + p, cols); ++j) row_sum += x[i * cols + j];
                          total += row_sum * (i + 1);
                        }
                        return total;
                      }));
}

TEST_CASE("tile Vars carried through for_range: running sum and maximum of blocks", "[control]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kWidth = 16;
  Kernel k("block_scan", [](Ptr<int32_t> x, Ptr<int32_t> sums, Ptr<int32_t> maxima, Int blocks) {
    Int pid = program_id();
    Int lanes = arange(0, kWidth);
    Var<int32_t> sum = zeros<int32_t>({kWidth});
    Var<int32_t> best = full<int32_t>({kWidth}, INT32_MIN);
    for_range(0, blocks, [&](Int b) {
      Int v = load(x + (pid * blocks + b) * kWidth + lanes);
      sum += v;
      best = maximum(best, v);
    });
    store(sums + pid * kWidth + lanes, sum);
    store(maxima + pid * kWidth + lanes, best);
  });
  const int programs = 3;
  int32_t blocks = pick(rng, 1, 12);
  INFO("blocks " << blocks);
  Ints x = random_ints(rng, size_t(programs) * blocks * kWidth, -100000, 100000);
  Output<int32_t> sums(programs * kWidth), maxima(programs * kWidth);
  launch(k, Grid(programs), Input<int32_t>(x), sums, maxima, blocks);
  Ints want_sum(programs * kWidth, 0), want_max(programs * kWidth, INT32_MIN);
  for (int p = 0; p < programs; ++p)
    for (int b = 0; b < blocks; ++b)
      for (int l = 0; l < kWidth; ++l) {
        int32_t v = x[(p * blocks + b) * kWidth + l];
        want_sum[p * kWidth + l] += v;
        want_max[p * kWidth + l] = std::max(want_max[p * kWidth + l], v);
      }
  check_near<int32_t>(sums, want_sum, {}, "sums");
  check_near<int32_t>(maxima, want_max, {}, "maxima");
}

// The GPU lowering writes index arithmetic by the bits it proves (a constant added to a value whose low bits are
// zero becomes an `or`). A Var carried through a loop must count as unknown there: while the body is lowered its
// phi has only its first value (0 here, every bit zero), not the ones the back edge brings later.
TEST_CASE("index arithmetic on a Var carried through for_range sees its later values", "[control]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kWidth = 8;
  Kernel k("loop_carried_index", [](Ptr<int32_t> out, Int steps, Int wrap) {
    Int lanes = arange(0, kWidth) * 4;  // low two bits zero
    Var<int32_t> stage = 0;
    for_range(0, steps, [&](Int i) {
      store(out + i * kWidth + arange(0, kWidth), lanes + stage + 1);
      stage = where(stage == wrap - 1, 0, stage + 1);
    });
  });
  int32_t steps = pick(rng, 5, 12), wrap = pick(rng, 2, 3);
  INFO("steps " << steps << ", wrap " << wrap);
  Output<int32_t> out(steps * kWidth);
  launch(k, Grid(1), out, steps, wrap);
  Ints want(steps * kWidth);
  for (int i = 0; i < steps; ++i)
    for (int l = 0; l < kWidth; ++l) want[i * kWidth + l] = l * 4 + i % wrap + 1;
  check_near<int32_t>(out, want, {}, "out");
}

// ---- if_ ----------------------------------------------------------------------------------------------

TEST_CASE("if_ with and without else: program instances take different branches", "[control]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("branches", [](Ptr<int32_t> x, Ptr<int32_t> a, Ptr<int32_t> b, Ptr<int32_t> c, Int threshold) {
    Int pid = program_id();
    Int v = load(x + pid);
    if_(v > threshold, [&] { store(a + pid, v * 2); }, [&] { store(a + pid, -v); });
    if_(pid % 3 == 0, [&] { store(b + pid, pid + v); });
    Var<int32_t> r = 0;  // assigned in both branches, read after the if_
    if_((pid & 1) == 1, [&] { r = v - threshold; }, [&] { r = 7; });
    store(c + pid, r * 10);
  });
  const int programs = 64;
  Ints x = random_ints(rng, programs, -1000, 1000);
  int32_t threshold = pick(rng, -500, 500);
  INFO("threshold " << threshold);
  Output<int32_t> a(programs), b(programs), c(programs);
  launch(k, Grid(programs), Input<int32_t>(x), a, b, c, threshold);
  check_near<int32_t>(a, per_program(programs, [&](int p) { return x[p] > threshold ? x[p] * 2 : -x[p]; }), {}, "a");
  check_near<int32_t>(c, per_program(programs, [&](int p) { return (p & 1 ? x[p] - threshold : 7) * 10; }), {}, "c");
  Ints got_b = b.read();
  for (int p = 0; p < programs; ++p) {
    INFO("b[" << p << "]");
    if (p % 3 == 0)
      CHECK(got_b[p] == p + x[p]);
    else
      CHECK(is_poison<int32_t>(got_b[p]));
  }
}

TEST_CASE("if_ inside for_range updates Vars conditionally", "[control]") {
  WEFT_SEEDED_RNG(rng);
  // Per row: how many elements exceed the threshold and their sum.
  Kernel k("count_above", [](Ptr<int32_t> x, Ptr<int32_t> counts, Ptr<int32_t> sums, Int cols, Int threshold) {
    Int row = program_id();
    Var<int32_t> count = 0, sum = 0;
    for_range(0, cols, [&](Int j) {
      Int v = load(x + row * cols + j);
      if_(v > threshold, [&] {
        count += 1;
        sum += v;
      });
    });
    store(counts + row, count);
    store(sums + row, sum);
  });
  const int rows = 9;
  int32_t cols = pick(rng, 1, 50), threshold = pick(rng, -50, 50);
  INFO("cols " << cols << ", threshold " << threshold);
  Ints x = random_ints(rng, size_t(rows) * cols, -100, 100);
  Output<int32_t> counts(rows), sums(rows);
  launch(k, Grid(rows), Input<int32_t>(x), counts, sums, cols, threshold);
  Ints want_count(rows, 0), want_sum(rows, 0);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j)
      if (int32_t v = x[r * cols + j]; v > threshold) ++want_count[r], want_sum[r] += v;
  check_near<int32_t>(counts, want_count, {}, "counts");
  check_near<int32_t>(sums, want_sum, {}, "sums");
}

// ---- Var ----------------------------------------------------------------------------------------------

TEST_CASE("Vars of rank 0 and of tiles: compound and plain assignment", "[control]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kWidth = 8;
  Kernel k("vars", [](Ptr<int32_t> x, Ptr<int32_t> y, Ptr<float> f, Ptr<int32_t> out_s, Ptr<int32_t> out_u,
                      Ptr<int32_t> out_w, Ptr<float> out_t) {
    Int pid = program_id();
    Var<int32_t> s = load(x + pid);  // rank 0
    s += 7;
    s *= 3;
    s -= load(y + pid);
    s /= 4;  // truncates toward zero, like C++
    Var<int32_t> u = 0;
    u = s;  // from another Var
    u += s;
    Int lanes = arange(0, kWidth);
    Var<int32_t> w = zeros<int32_t>({kWidth});
    w = 5;  // a scalar assigned to a tile Var fills it
    w += lanes * pid;
    Var<float> t = load(f + pid * kWidth + lanes);  // small whole numbers: every step below is exact
    t *= 0.5f;
    t += 1;
    t /= 4.f;
    t -= cast<float>(lanes);
    store(out_s + pid, s);
    store(out_u + pid, u);
    store(out_w + pid * kWidth + lanes, w);
    store(out_t + pid * kWidth + lanes, t);
  });
  const int programs = 6;
  Ints x = random_ints(rng, programs, -10000, 10000), y = random_ints(rng, programs, -10000, 10000);
  std::vector<float> f = generate<float>(rng, programs * kWidth, small_whole<float>(-1000, 1000));
  Output<int32_t> out_s(programs), out_u(programs), out_w(programs * kWidth);
  Output<float> out_t(programs * kWidth);
  launch(k, Grid(programs), Input<int32_t>(x), Input<int32_t>(y), Input<float>(f), out_s, out_u, out_w, out_t);
  Ints want_s = per_program(programs, [&](int p) { return ((x[p] + 7) * 3 - y[p]) / 4; });
  Ints want_u(programs), want_w(programs * kWidth);
  std::vector<float> want_t(programs * kWidth);
  for (int p = 0; p < programs; ++p) {
    want_u[p] = 2 * want_s[p];
    for (int l = 0; l < kWidth; ++l) {
      want_w[p * kWidth + l] = 5 + l * p;
      want_t[p * kWidth + l] = (f[p * kWidth + l] * 0.5f + 1) / 4.f - float(l);
    }
  }
  check_near<int32_t>(out_s, want_s, {}, "s");
  check_near<int32_t>(out_u, want_u, {}, "u");
  check_near<int32_t>(out_w, want_w, {}, "w");
  check_near<float>(out_t, want_t, {}, "t");
}

// ---- the launch grid ----------------------------------------------------------------------------------

TEST_CASE("3-D grid: every program instance sees its own program_id and the grid's num_programs", "[control]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("grid3d", [](Ptr<int32_t> ids, Ptr<int32_t> sizes, Int salt) {
    Int x = program_id(0), y = program_id(1), z = program_id(2);
    Int nx = num_programs(0), ny = num_programs(1), nz = num_programs(2);
    Int linear = (z * ny + y) * nx + x;
    store(ids + linear, x + 100 * y + 10000 * z + salt);
    store(sizes + linear, nx + 100 * ny + 10000 * nz);
  });
  const int nx = 7, ny = 5, nz = 3, total = nx * ny * nz;
  int32_t salt = pick(rng, 0, 1 << 20);
  INFO("salt " << salt);
  Output<int32_t> ids(total), sizes(total);
  launch(k, Grid(nx, ny, nz), ids, sizes, salt);
  check_near<int32_t>(ids, per_program(total, [&](int l) {
                        return l % nx + 100 * (l / nx % ny) + 10000 * (l / (nx * ny)) + salt;
                      }), {}, "ids");
  check_near<int32_t>(sizes, Ints(total, nx + 100 * ny + 10000 * nz), {}, "sizes");
}

TEST_CASE("1-D grid of 10000 program instances", "[control]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kWidth = 4;
  Kernel k("many_programs", [](Ptr<int32_t> x, Ptr<int32_t> out) {
    Int pid = program_id();
    Int offs = pid * kWidth + arange(0, kWidth);
    store(out + offs, load(x + offs) * 3 + pid - num_programs());
  });
  const int programs = 10000;
  Ints x = random_ints(rng, size_t(programs) * kWidth, -100000, 100000);
  Output<int32_t> out(programs * kWidth);
  launch(k, Grid(programs), Input<int32_t>(x), out);
  check_near<int32_t>(out, per_program(programs * kWidth, [&](int i) { return x[i] * 3 + i / kWidth - programs; }));
}

// ---- Const specialization and the device ---------------------------------------------------------------

TEST_CASE("one Kernel launched with different Const values computes each correctly", "[control]") {
  WEFT_SEEDED_RNG(rng);
  // Each program scales a block of `block` elements by `scale`, with a loop of `repeat` unrolled at trace time.
  Kernel k("scaled", [](Ptr<float> x, Ptr<float> out, Int n, Const<int> block, Const<float> scale, Const<int> repeat) {
    Int offs = program_id() * block + arange(0, block);
    Bool in = offs < n;
    Tile<float> v = load(x + offs, in);
    for (int r = 0; r < repeat; ++r) v = v * scale;
    store(out + offs, v, in);
  });
  const int n = pick(rng, 100, 3000);
  INFO("n " << n);
  std::vector<float> x = generate<float>(rng, n, small_whole<float>(-1000, 1000));
  Input<float> dx(x);
  Output<float> out(n);
  struct Spec {
    int block;
    float scale;
    int repeat;
  };
  // The last repeats the first: the memoized specialization must still be the right one.
  for (Spec s : {Spec{64, 2.f, 1}, Spec{256, -0.5f, 3}, Spec{16, 4.f, 0}, Spec{64, 2.f, 1}}) {
    INFO("block " << s.block << ", scale " << s.scale << ", repeat " << s.repeat);
    launch(k, Grid((n + s.block - 1) / s.block), dx, out, n, s.block, s.scale, s.repeat);
    std::vector<float> want(x);
    for (float& v : want)
      for (int r = 0; r < s.repeat; ++r) v *= s.scale;
    check_near<float>(out, want);
  }
}

TEST_CASE("the default device is the CPU backend when there is no GPU backend", "[control]") {
  for (const char* knob : {"WEFT_BACKEND", "WEFT_TARGET"})
    if (const char* v = std::getenv(knob); v && *v) {
      WARN(knob << "=" << v << " is set: the default choice is not under test");
      return;
    }
  std::string why_no_gpu;
  const bool gpu = detail::cuda_backend_or_null(&why_no_gpu) != nullptr;
  INFO("CUDA backend: " << (gpu ? "usable" : "none (" + why_no_gpu + ")"));
  CHECK(Device::current().kind() == (gpu ? BackendKind::cuda : BackendKind::cpu));
  CHECK(Device::best() == Device::current());
  CHECK(Device::cpu().kind() == BackendKind::cpu);
  CHECK(to_string(Device::cpu().kind()) == "cpu");
  if (!gpu) CHECK(Device::current() == Device::cpu());
}
