// Tasks that one thread could run (passes::runs_on_one_thread, TaskSlot::one_thread): a producer whose body is
// scalar work around TMA copies, expected bytes and waits runs on the first warp of its warp group alone (an
// elected lane issuing the copies), so its loop has no group bar.sync per step; a producer that also makes
// per-thread data keeps the group. Both compute what the program says, under several fiber orders on the
// CPU backend.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ptxas_check.h"
#include "scratch_cache.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

constexpr int kRows = 16, kCols = 64;  // one TMA box: a ring stage

// A producer task loads box i of x (rows [16 i, 16 i + 16)) into a ring of `stages`; a consumer writes
// each box times 2 plus i to out. With `per_thread_work`, the producer also writes its thread indices to
// `marks` (per-thread data: it needs all of its threads).
Kernel ring_kernel(int steps, int stages, bool per_thread_work) {
  return Kernel(per_thread_work ? "ring_per_thread" : "ring_one_thread",
                [=](TensorDesc<bf16, 2> x, Ptr<float> out, Ptr<int32_t> marks) {
    auto ring = local_alloc<bf16>({kRows, kCols}, stages, "ring");
    auto full = alloc_barriers(stages, 1, "full");
    auto empty = alloc_barriers(stages, 1, "empty");
    async_tasks(
        task("producer", {.warps = 4, .regs = 40}, [&] {
          prefetch_descriptor(x);
          Pipeline p(stages);
          for_range(0, steps, [&](Int i) {
            p.acquire(empty);
            barrier_expect_bytes(full[p.index()], ring.stage_bytes());
            async_descriptor_load(x, ring[p.index()], {i * kRows, 0}, full[p.index()]);
            p.advance();
          });
          if (per_thread_work) store(marks + arange(0, 128), arange(0, 128) * 3);
        }),
        task("consumer", {.warps = 4, .regs = 232}, [&] {
          Int rows = expand_dims(arange(0, kRows), 1), cols = expand_dims(arange(0, kCols), 0);
          Pipeline p(stages);
          for_range(0, steps, [&](Int i) {
            p.wait(full);
            Tile<float> v = cast<float>(local_load(ring[p.index()]));
            p.release(empty);
            store(out + (i * kRows + rows) * kCols + cols, v * 2.0f + cast<float>(i));
            p.advance();
          });
        }));
  });
}

}  // namespace

TEST_CASE("a producer of scalar work and TMA copies runs on its first warp: no group bar.sync in its loop",
          "[async][ptx][tma]") {
  Device dev = Device::current();
  auto x = dev.alloc<bf16>(8 * kRows * kCols);
  auto desc = tma(x, {8 * kRows, kCols}, {kRows, kCols});
  // The producer is task replica 0: its group's named barrier is 15 (the consumer's 14).
  std::string one = ring_kernel(8, 2, false).ptx(desc);
  std::string all = ring_kernel(8, 2, true).ptx(desc);
  {
    INFO(one);
    CHECK(count_lines_containing(one, "bar.sync \t15") + count_lines_containing(one, "bar.sync 15") == 0);
    CHECK(count_lines_containing(one, "cp.async.bulk.tensor") == 1);
    CHECK(count_lines_containing(one, "elect.sync") >= 1);
    check_ptxas_assembles(one);
  }
  {
    INFO(all);  // per-thread data in the producer: its threads sync before the elected expect-bytes
    CHECK(count_lines_containing(all, "bar.sync \t15") + count_lines_containing(all, "bar.sync 15") >= 1);
    check_ptxas_assembles(all);
  }
}

TEST_CASE("a producer run by one thread and one run by its group: the values, under several fiber orders",
          "[async][tma]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (bool per_thread_work : {false, true})
    for (int stages : {1, 3})
      for (std::optional<std::string> schedule : {std::optional<std::string>(), std::optional<std::string>("7"),
                                                  std::optional<std::string>("12345")}) {
        weft::test::ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);  // (fiber orders: the CPU backend's)
        const int steps = 7;
        INFO("per-thread work " << per_thread_work << ", stages " << stages << ", schedule " << schedule.value_or("-"));
        std::vector<bf16> x = generate<bf16>(rng, size_t(steps) * kRows * kCols, uniform_real<bf16>(-8.0, 8.0));
        auto dx = dev.upload(x);
        auto out = dev.upload(std::vector<float>(x.size(), std::nanf("")));  // poisoned
        auto marks = dev.upload(std::vector<int32_t>(128, -1));
        ring_kernel(steps, stages, per_thread_work).launch(Grid(1), tma(dx, {steps * kRows, kCols}, {kRows, kCols}), out,
                                                           marks);
        std::vector<float> got = out.download();
        for (size_t e = 0; e < x.size(); ++e) {
          INFO("element " << e);
          REQUIRE(got[e] == float(x[e]) * 2.0f + float(e / (kRows * kCols)));
        }
        std::vector<int32_t> m = marks.download();
        for (int t = 0; t < 128; ++t) REQUIRE(m[t] == (per_thread_work ? 3 * t : -1));
      }
}
