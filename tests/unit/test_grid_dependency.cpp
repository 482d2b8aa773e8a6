// Programmatic dependent launch: wait_for_prior_grid() and launch_dependent_grids() (ops.h). A kernel that
// waits reads what the kernel queued before it wrote, on any backend; the wait belongs outside tasks; the
// PTX holds griddepcontrol. Run with WEFT_BACKEND=cuda (ctest's gpu-ops), the chains below run on the GPU,
// where the waiting kernel is launched with programmatic stream serialization.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <random>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

constexpr int kBlock = 256;

// y = 2 x + 1, and lets the kernel after it be scheduled early (before or after its own stores).
Kernel make_producer(bool trigger_first) {
  return Kernel(trigger_first ? "pdl_producer_early" : "pdl_producer_late", [trigger_first](Ptr<float> x, Ptr<float> y, Int n) {
    if (trigger_first) launch_dependent_grids();
    Int i = program_id(0) * kBlock + arange(0, kBlock);
    Bool in = i < n;
    store(y + i, load(x + i, in, 0.f) * 2.f + 1.f, in);
    if (!trigger_first) launch_dependent_grids();
  });
}

// z = y (the producer's output, read after the wait) + w (an input the producer does not write, read before).
Kernel make_consumer() {
  return Kernel("pdl_consumer", [](Ptr<float> y, Ptr<float> w, Ptr<float> z, Int n) {
    Int i = program_id(0) * kBlock + arange(0, kBlock);
    Bool in = i < n;
    Tile<float> early = load(w + i, in, 0.f);
    wait_for_prior_grid();
    store(z + i, load(y + i, in, 0.f) + early, in);
  });
}

}  // namespace

TEST_CASE("wait_for_prior_grid: a kernel reads what the kernel queued before it wrote, launch after launch",
          "[ops][pdl]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int n = 300000;  // ~1200 programs: more than one wave, so the two grids overlap on the GPU
  std::vector<float> x = generate<float>(rng, n, uniform_real<float>(-4, 4));
  std::vector<float> w = generate<float>(rng, n, uniform_real<float>(-4, 4));
  // Round r reads x + r: a consumer that read the round before's y would be off by 2.
  std::vector<Buffer<float>> dx;
  for (int round = 0; round < 4; ++round) {
    std::vector<float> xr = x;
    for (float& v : xr) v += float(round);
    dx.push_back(dev.upload(xr));
  }
  Buffer<float> dw = dev.upload(w);
  for (bool trigger_first : {true, false}) {
    INFO("launch_dependent_grids " << (trigger_first ? "first" : "last"));
    Kernel producer = make_producer(trigger_first), consumer = make_consumer();
    Buffer<float> dy = dev.upload(std::vector<float>(n, poison_value<float>()));
    Buffer<float> dz = dev.upload(std::vector<float>(n, poison_value<float>()));
    const Grid grid((n + kBlock - 1) / kBlock);
    // Rounds queued back to back on one stream, y reused: each consumer must see its own round's producer.
    std::vector<float> got;
    for (int round = 0; round < 4; ++round) {
      producer.launch(grid, dx[round], dy, n);
      consumer.launch(grid, dy, dw, dz, n);
    }
    got = dz.download();
    int wrong = 0;
    for (int i = 0; i < n; ++i) {
      const float want = ((x[i] + 3.f) * 2.f + 1.f) + w[i];
      if (got[i] != want && ++wrong <= 5) FAIL_CHECK("z[" << i << "] = " << got[i] << ", want " << want);
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("wait_for_prior_grid: the PTX holds griddepcontrol, the wait after the early loads", "[ops][pdl][ptx]") {
  std::string consumer = make_consumer().ptx();
  CHECK(consumer.find("griddepcontrol.wait;") != std::string::npos);
  CHECK(consumer.find("griddepcontrol.wait;") > consumer.find("ld.global"));
  CHECK(make_producer(true).ptx().find("griddepcontrol.launch_dependents;") != std::string::npos);
}

TEST_CASE("wait_for_prior_grid inside a task is an Error at the caller's line", "[ops][pdl][errors]") {
  int line = 0;
  Kernel k("pdl_in_task", [&](Ptr<float> x) {
    async_tasks(task("a", {.warps = 4}, [&] {
      line = __LINE__; wait_for_prior_grid();
      store(x + arange(0, 128), full<float>({128}, 1.f));
    }));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "wait_for_prior_grid() is inside a task");
  REQUIRE_WEFT_ERROR(k.ir(), line, "call it before async_tasks");
}
