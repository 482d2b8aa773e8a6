// The group syncs one op closes with and the next opens with (remove_redundant_syncs, src/codegen/nvptx): a
// staging tile written, then stored by TMA, leaves one bar.sync and one fence in the PTX, not two of each;
// a user's named barriers are never merged.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <sstream>
#include <string>
#include <vector>

#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// The PTX's instruction lines, comments and blank lines dropped, whitespace trimmed.
std::vector<std::string> instructions(const std::string& ptx) {
  std::vector<std::string> out;
  std::istringstream in(ptx);
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find_first_not_of(" \t"), b = line.find_last_not_of(" \t\r");
    if (a == std::string::npos || line.compare(a, 2, "//") == 0) continue;
    out.push_back(line.substr(a, b - a + 1));
  }
  return out;
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A consumer writes two 64 x 64 bf16 chunks of x * 2 through one staging tile and TMA stores.
Kernel staged_store_kernel() {
  return Kernel("staged_store", [](TensorDesc<bf16, 2> out, Ptr<bf16> x) {
    auto stage = local_alloc<bf16>({64, 64}, 1, "stage");
    async_tasks(task("idle", {.warps = 4}, [] {}), task("consumer", {.warps = 4}, [&] {
                  for (int j = 0; j < 2; ++j) {
                    Int rows = expand_dims(arange(0, 64), 1), cols = expand_dims(arange(0, 64), 0);
                    Tile<bf16> v = load(x + rows * 128 + cols + j * 64);
                    async_store_wait(0);
                    local_store(stage[0], cast<bf16>(cast<float>(v) * 2.0f));
                    async_descriptor_store(out, stage[0], {0, j * 64});
                  }
                  async_store_wait(0);
                }));
  });
}

}  // namespace

TEST_CASE("a staging tile written then stored by TMA: one bar.sync and one fence between, not two", "[async][ptx][tma]") {
  Device dev = Device::current();
  auto out = dev.alloc<bf16>(64 * 128);
  std::string ptx = staged_store_kernel().ptx(tma(out, {64, 128}, {64, 64}));
  std::vector<std::string> lines = instructions(ptx);
  int fences = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    INFO("line " << i << ": " << lines[i - 1] << " / " << lines[i]);
    if (starts(lines[i], "bar.sync")) CHECK(lines[i] != lines[i - 1]);
    if (starts(lines[i], "fence.proxy.async")) {
      ++fences;
      CHECK_FALSE((i >= 2 && starts(lines[i - 1], "bar.sync") && lines[i - 2] == lines[i]));
    }
  }
  CHECK(fences >= 2);  // one per chunk: the writes are fenced before each store
  check_ptxas_assembles(ptx);
}

TEST_CASE("a staging tile written then stored by TMA: the values", "[async][tma]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<bf16> x = generate<bf16>(rng, 64 * 128, uniform_real<bf16>(-4.0, 4.0));
  auto dx = dev.upload(x);
  auto out = dev.upload(std::vector<bf16>(64 * 128, bf16::from_bits(0x7fc0)));  // poisoned
  staged_store_kernel().launch(Grid(1), tma(out, {64, 128}, {64, 64}), dx);
  std::vector<bf16> got = out.download();
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 128; ++c) {
      INFO(r << ", " << c);
      REQUIRE(float(got[r * 128 + c]) == float(bf16(float(x[r * 128 + c]) * 2.0f)));
    }
}

TEST_CASE("a user's named barrier twice in a row stays twice: each may meet another group's arrivals", "[async][ptx]") {
  Kernel k("named_twice", [](Ptr<float> out) {
    async_tasks(task("producer", {.warps = 4}, [&] {
                  named_barrier_arrive(1, 256);
                  named_barrier_arrive(1, 256);
                }),
                task("consumer", {.warps = 4}, [&] {
                  named_barrier_wait(1, 256);
                  named_barrier_wait(1, 256);
                  store(out + arange(0, 128), full<float>({128}, 1.0f));
                }));
  });
  std::vector<std::string> lines = instructions(k.ptx());
  int waits = 0;
  for (const std::string& l : lines) waits += starts(l, "bar.sync") && l.find("1, 256") != std::string::npos;
  CHECK(waits == 2);
}
