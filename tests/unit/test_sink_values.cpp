// weft-sink (src/codegen/nvptx/sink_values.h): a division by a runtime value that is used only after a
// loop stays before the loop in the PTX (where it overlaps the loop's waits), while the values it feeds
// still compute what the program says.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// out[p] = (loop over x) + 1000 * (a / b) + a % b + (12345a + b), the quotient and remainder used only after the
// loop, in a block of their own (as a GEMM tile's coordinates are used only by the store after its k-loop).
Kernel divide_before_loop_kernel() {
  return Kernel("divide_before_loop", [](Ptr<int32_t> x, Ptr<int32_t> out, Int a, Int b, Int n) {
    Int pid = program_id();
    Int q = (a + pid) / b, r = (a + pid) % b, c = a * 12345 + b;
    Var<int32_t> acc = 0;
    for_range(0, n, [&](Int i) { acc = acc * 3 + load(x + i); });
    if_(pid < n, [&] { store(out + pid, acc + q * 1000 + r + c); });
  });
}

// The index of the first PTX line that holds `text`, or -1.
int first_line(const std::string& ptx, const std::string& text) {
  std::istringstream in(ptx);
  int at = 0;
  for (std::string line; std::getline(in, line); ++at)
    if (line.find(text) != std::string::npos) return at;
  return -1;
}

}  // namespace

TEST_CASE("weft-sink: a division used after a loop is computed before it, a product after it", "[control][ptx]") {
  std::string ptx = divide_before_loop_kernel().ptx();
  int division = first_line(ptx, "div.s32"), loop_load = first_line(ptx, "ld.global");
  int product = first_line(ptx, ", 12345;"), store = first_line(ptx, "st.global");
  INFO(ptx);
  REQUIRE(division >= 0);
  REQUIRE(loop_load >= 0);
  CHECK(division < loop_load);
  check_ptxas_assembles(ptx);
  // a * 12345 is cheap: it still moves down to its one use, the store's block (a shorter live range) — in
  // the pipeline of weft's own emitter (the default); LLVM's code generator gets a pipeline without sinking.
  const char* emitter = std::getenv("WEFT_PTX_EMITTER");
  const char* passes = std::getenv("WEFT_NVPTX_PASSES");
  if ((emitter && std::string(emitter) == "llvm") || (passes && *passes)) return;
  REQUIRE(product >= 0);
  CHECK(product > loop_load);
  CHECK(product < store);
}

TEST_CASE("weft-sink: the values of a division kept before a loop", "[control]") {
  WEFT_SEEDED_RNG(rng);
  const int programs = 5, n = 37;
  std::vector<int32_t> x = generate<int32_t>(rng, n, uniform_int<int32_t>(-50, 50));
  std::uniform_int_distribution<int32_t> pick_a(-100000, 100000), pick_b(1, 97);
  int32_t a = pick_a(rng), b = pick_b(rng) * (pick_a(rng) < 0 ? -1 : 1);  // either sign: C's truncation
  Output<int32_t> out(programs);
  launch(divide_before_loop_kernel(), Grid(programs), Input<int32_t>(x), out, a, b, n);
  std::vector<int32_t> want(programs);
  for (int p = 0; p < programs; ++p) {
    uint32_t acc = 0;  // wraps, as the kernel's 32-bit arithmetic does
    for (int i = 0; i < n; ++i) acc = acc * 3u + uint32_t(x[i]);
    want[p] = int32_t(acc + uint32_t((a + p) / b * 1000 + (a + p) % b) + uint32_t(a) * 12345u + uint32_t(b));
  }
  check_near<int32_t>(out, want);
}
