// weft-divisions (src/codegen/nvptx/divisions_by_constants.h): divisions by constants in their cheaper forms in
// the PTX — a non-negative value's quotient and remainder by a power of two as a shift and a mask, by another
// constant unsigned, a float's quotient by a power of two as a product — while every value, negative
// dividends included, stays what C++ computes. weft's own pipeline gets the same forms from instcombine; ctest runs
// this case again under a pipeline without it, where the pass makes them (tests/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

TEST_CASE("divisions by constants: cheaper forms in the PTX, the same values", "[ops][ptx]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int kN = 128;
  // out: [i / 8, i % 8, i / 3, i % 3] for i = arange + pid * kN (non-negative), then [v / 8, v % 8, v / 3,
  // v % 3] for loaded v of either sign, and the quotient count / ((m + 191) / 192) of a run-time divisor
  // (its tests for 0 and -1 become range checks of m); f: f / 4 and f / 0.5.
  Kernel k("divisions_by_constants", [](Ptr<int32_t> x, Ptr<int32_t> out, Ptr<float> f, Ptr<float> g, Int m) {
    Int pid = program_id();
    Int i = arange(0, kN) + (pid & 1023) * kN;  // provably non-negative (pid * kN alone could wrap)
    Int v = load(x + i);
    Int row = pid * 9 * kN + arange(0, kN);
    store(out + row, i / 8);
    store(out + row + kN, i % 8);
    store(out + row + 2 * kN, i / 3);
    store(out + row + 3 * kN, i % 3);
    store(out + row + 4 * kN, v / 8);
    store(out + row + 5 * kN, v % 8);
    store(out + row + 6 * kN, v / 3);
    store(out + row + 7 * kN, v % 3);
    store(out + row + 8 * kN, i / ((m + 191) / 192));
    Float a = load(f + i);
    store(g + i * 2 + 0, a / 4.0f);  // (two stores a row apart: each half of g)
    store(g + i * 2 + 1, a / 0.5f);
  });
  const int programs = 3;
  std::vector<int32_t> x = generate<int32_t>(rng, programs * kN, uniform_int<int32_t>(-100000, 100000));
  std::vector<float> f = generate<float>(rng, programs * kN, uniform_real<float>(-1e3f, 1e3f));
  f[0] = 1e-38f;  // a subnormal quotient: the product rounds it as the division does
  int32_t m = std::uniform_int_distribution<int32_t>(-300, 3000)(rng);
  INFO("m " << m);
  Output<int32_t> out(programs * 9 * kN);
  Output<float> g(programs * kN * 2);
  launch(k, Grid(programs), Input<int32_t>(x), out, Input<float>(f), g, m);
  std::vector<int32_t> want(programs * 9 * kN);
  std::vector<float> want_g(programs * kN * 2);
  int32_t blocks = (m + 191) / 192;
  for (int p = 0; p < programs; ++p)
    for (int l = 0; l < kN; ++l) {
      int32_t i = p * kN + l, v = x[i];
      int32_t* w = &want[p * 9 * kN + l];
      int32_t got[] = {i / 8, i % 8, i / 3, i % 3, v / 8, v % 8, v / 3, v % 3, blocks == 0 ? 0 : blocks == -1 ? -i : i / blocks};
      for (int s = 0; s < 9; ++s) w[s * kN] = got[s];
      want_g[i * 2] = f[i] / 4.0f;
      want_g[i * 2 + 1] = f[i] / 0.5f;
    }
  check_near<int32_t>(out, want, {}, "out");
  check_near<float>(g, want_g, {}, "g");

  std::string ptx = k.ptx();
  INFO(ptx);
  CHECK(count_occurrences(ptx, "div.rn.f32") == 0);  // products by 0.25 and 2
  CHECK(count_occurrences(ptx, "rem.s32") == 0);     // v % 8 and v % 3 become v - (v / c) c
  CHECK(count_occurrences(ptx, "mul.hi.u32") >= 1);  // i / 3 (and i % 3 from it): unsigned
  CHECK(count_occurrences(ptx, "mul.hi.s32") >= 1);  // v / 3 keeps its sign
  CHECK(count_occurrences(ptx, "div.s32") == 1);     // the run-time divisor
  check_ptxas_assembles(ptx);
}
