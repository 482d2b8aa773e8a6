// Per-thread (warp) arrive barriers (alloc_warp_barriers, TLX's alloc_warp_barrier): every thread of a task
// replica arrives on its own, and the arrive count counts threads.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <string>
#include <vector>

#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// Two producer replicas of 4 warps each write their stage, then all of their 256 threads arrive on one
// warp barrier; the consumer waits for the phase and copies both stages out.
Kernel warp_barrier_kernel(int arrive_threads, int producers) {
  return Kernel("warp_barrier", [=](Ptr<float> x, Ptr<float> out) {
    auto buf = local_alloc<float>({128}, 2, "buf");
    auto ready = alloc_warp_barriers(1, arrive_threads, "ready");
    Int i = arange(0, 128);
    async_tasks(task("producer", {.warps = 4, .replicas = producers}, [&] {
                  Int r = task_replica_id();
                  local_store(buf[r], load(x + r * 128 + i) * 3.0f);
                  barrier_arrive(ready[0]);
                }),
                task("consumer", {.warps = 4}, [&] {
                  barrier_wait(ready[0], 0);
                  store(out + i, local_load(buf[0]));
                  store(out + 128 + i, local_load(buf[1]));
                }));
  });
}

void check_warp_barrier(Device dev) {
  WEFT_SEEDED_RNG(rng);
  std::vector<float> x = generate<float>(rng, 256, uniform_real<float>(-100, 100));
  Buffer<float> dx = dev.upload(x), dout = dev.upload(std::vector<float>(256, 7.f));
  warp_barrier_kernel(256, 2).launch(Grid(3), dx, dout);
  std::vector<float> got = dout.download(), want(256);
  for (int k = 0; k < 256; ++k) want[k] = x[k] * 3.0f;
  CHECK(got == want);
}

}  // namespace

TEST_CASE("alloc_warp_barriers: every thread of two producer replicas arrives and the consumer sees both stages",
          "[async][warp_barriers]") {
  check_warp_barrier(Device::current());
}

TEST_CASE("alloc_warp_barriers: too few threads arriving is a deadlock report, too many an Error", "[async][cpu-only][warp_barriers]") {
  Device dev = Device::cpu();
  Buffer<float> x = dev.upload(std::vector<float>(256, 1.f)), out = dev.alloc<float>(256);
  // 128 threads arrive, 256 are awaited.
  CHECK_THROWS_WITH(warp_barrier_kernel(256, 1).launch(Grid(1), x, out),
                    Catch::Contains("deadlock") && Catch::Contains("'ready[0]' has 128 of 256 arrivals"));
  // 256 threads arrive at a barrier awaiting 200.
  CHECK_THROWS_WITH(warp_barrier_kernel(200, 2).launch(Grid(1), x, out),
                    Catch::Contains("only 72 of its 200 arrivals are missing") && Catch::Contains("counts threads"));
}

TEST_CASE("alloc_warp_barriers: each thread arrives with mbarrier.arrive, without the group's bar.sync", "[async][ptx][warp_barriers]") {
  auto ptx_of = [](bool per_thread) {
    Kernel k("arrive_ptx", [per_thread](Ptr<float> x) {
      auto bars = per_thread ? alloc_warp_barriers(1, 128, "bars") : alloc_barriers(1, 1, "bars");
      async_tasks(task("producer", {.warps = 4}, [&] {
                    store(x + arange(0, 128), 1.0f);
                    barrier_arrive(bars[0]);
                  }),
                  task("consumer", {.warps = 4}, [&] { barrier_wait(bars[0], 0); }));
    });
    return k.ptx();
  };
  std::string per_thread = ptx_of(true), per_replica = ptx_of(false);
  CHECK(count_occurrences(per_thread, "mbarrier.arrive.shared::cta.b64") == 1);
  CHECK(count_occurrences(per_thread, "mbarrier.init.shared::cta.b64") == 1);
  CHECK(per_thread.find("bar.warp.sync") == std::string::npos);
  // The per-replica barrier (counted per warp here) syncs each warp before its lane 0 arrives; the
  // per-thread one syncs nothing: no more syncs than the per-replica kernel minus its warp syncs.
  auto syncs = [&](const std::string& p) { return count_occurrences(p, "bar.sync") + count_occurrences(p, "barrier.sync"); };
  CHECK(per_replica.find("bar.warp.sync") != std::string::npos);
  CHECK(syncs(per_thread) <= syncs(per_replica));
}

TEST_CASE("alloc_warp_barriers on the GPU", "[warp_barriers][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  for (int round = 0; round < 20; ++round) check_warp_barrier(dev);
}
