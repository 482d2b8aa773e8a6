// Chains of elementwise tile ops, which the CPU backend computes in one loop per chain (its lowering leaves
// a value with one consumer lazy: codegen/cpu/lower_cpu_fusion.cpp). What that must not change: a Var read
// keeps the value it had where it was read though the Var is written before the read value is used; each
// 16-bit op rounds to its type; a chain read by a reduction; chains longer than the fused depth; a value
// read by two consumers. Checked against plain C++ on fresh random inputs (on a GPU too, against the CPU
// backend's writes, by launch()).
#include "test_util.h"

using namespace weft_test;

namespace {
constexpr int kWidth = 64;
using Floats = std::vector<float>;
}  // namespace

TEST_CASE("fused elementwise chains: a Var read before a write of the Var keeps its value", "[ops][fusion]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("var_read_then_written",
           [](Ptr<float> x, Ptr<float> y, Ptr<float> out1, Ptr<float> out2, Ptr<float> out3, Int flip) {
             Int lanes = arange(0, kWidth);
             Int at = program_id() * kWidth + lanes;
             Var<float> v = load(x + at);
             Float before = v.read() * 2.0f + 1.0f;  // the Var is written before `before` is used
             v = load(y + at);
             Float inner = v.read() - 3.0f;  // and written again, inside an if_, before `inner` is used
             if_(flip > 0, [&] { v = v.read() * 0.5f; });
             store(out1 + at, before + v.read());
             store(out2 + at, inner * 4.0f);
             // Read and written by one statement, each element read before it is written.
             Var<float> w = load(x + at);
             for_range(0, 3, [&](Int) { w = w.read() * load(y + at) + w.read(); });
             store(out3 + at, w.read());
           });
  const int programs = 3, n = programs * kWidth;
  Floats x = generate<float>(rng, n, small_whole<float>(-8, 8)), y = generate<float>(rng, n, small_whole<float>(-3, 3));
  for (int flip : {0, 1}) {
    INFO("flip " << flip);
    Output<float> out1(n), out2(n), out3(n);
    launch(k, Grid(programs), Input<float>(x), Input<float>(y), out1, out2, out3, flip);
    Floats want1(n), want2(n), want3(n);
    for (int i = 0; i < n; ++i) {
      float v = flip ? y[i] * 0.5f : y[i];
      want1[i] = (x[i] * 2.0f + 1.0f) + v;
      want2[i] = (y[i] - 3.0f) * 4.0f;
      float w = x[i];
      for (int r = 0; r < 3; ++r) w = w * y[i] + w;
      want3[i] = w;
    }
    check_near<float>(out1, want1, {}, "before + v");
    check_near<float>(out2, want2, {}, "inner");
    check_near<float>(out3, want3, {}, "w");
  }
}

TEST_CASE("fused elementwise chains: bf16 ops round at each step, a reduction reads a chain", "[ops][fusion]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("bf16_chain", [](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> out, Ptr<float> sums) {
    Int lanes = arange(0, kWidth);
    Int at = program_id() * kWidth + lanes;
    Tile<bf16> x = load(a + at), y = load(b + at);
    Tile<bf16> t = x * y + x;  // two bf16 ops: rounded after each
    store(out + at, t - y * y);
    Float s = sum(cast<float>(x) * cast<float>(y) + 1.0f, 0);
    store(sums + program_id(), s);
  });
  const int programs = 4, n = programs * kWidth;
  std::vector<bf16> a = generate<bf16>(rng, n, uniform_real<bf16>(-2, 2)), b = generate<bf16>(rng, n, uniform_real<bf16>(-2, 2));
  Output<bf16> out(n);
  Output<float> sums(programs);
  launch(k, Grid(programs), Input<bf16>(a), Input<bf16>(b), out, sums);
  std::vector<bf16> want(n);
  Floats want_sums(programs, 0.0f);
  std::vector<double> sums_ref(programs, 0.0);
  for (int i = 0; i < n; ++i) {
    double xa = double(float(a[i])), yb = double(float(b[i]));
    double t = round_bf16(round_bf16(xa * yb) + xa);
    want[i] = bf16(float(round_bf16(t - round_bf16(yb * yb))));
    sums_ref[i / kWidth] += xa * yb + 1.0;
  }
  for (int p = 0; p < programs; ++p) want_sums[p] = float(sums_ref[p]);
  check_near<bf16>(out, want, {}, "x * y + x - y * y, rounded at each op");
  check_near<float>(sums, want_sums, {1e-5, 1e-5}, "sum(x * y + 1)");
}

TEST_CASE("fused elementwise chains: longer than the fused depth, and a value read twice", "[ops][fusion]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kSteps = 50;
  Kernel k("long_chain", [](Ptr<int32_t> x, Ptr<int32_t> out, Ptr<int32_t> out2) {
    Int lanes = arange(0, kWidth);
    Int at = program_id() * kWidth + lanes;
    Int v = load(x + at);
    Int c = v;
    for (int s = 0; s < kSteps; ++s) c = (c * 3 + s) ^ (c >> 2);  // one tile op chain of 150 ops
    Int twice = v * 7 - 1;                                         // read by two consumers
    store(out + at, c);
    store(out2 + at, twice * twice + twice);
  });
  const int programs = 2, n = programs * kWidth;
  std::vector<int32_t> x = generate<int32_t>(rng, n, uniform_int<int32_t>(-100000, 100000));
  Output<int32_t> out(n), out2(n);
  launch(k, Grid(programs), Input<int32_t>(x), out, out2);
  std::vector<int32_t> want(n), want2(n);
  for (int i = 0; i < n; ++i) {
    uint32_t c = uint32_t(x[i]);
    for (int s = 0; s < kSteps; ++s) c = (c * 3u + uint32_t(s)) ^ uint32_t(int32_t(c) >> 2);
    want[i] = int32_t(c);
    int64_t t = int64_t(x[i]) * 7 - 1;
    want2[i] = int32_t(uint32_t(t * t + t));
  }
  check_near<int32_t>(out, want, {}, "chain");
  check_near<int32_t>(out2, want2, {}, "twice * twice + twice");
}
