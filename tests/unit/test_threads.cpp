// Thread identity and time (weft/threads.h): per-thread tiles of ids and clock readings, and nanosleep —
// their values on every backend, their PTX, and the errors for misplaced calls.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cstdint>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// Writes each thread's (thread, lane, warp, warp group) ids of program p at out[p][kind][t], and its clock
// readings around a loop of `spin` sleeps: cycles[p][t] = clock64 after - before, and the global timer
// before and after.
Kernel identity_kernel(int warps) {
  return Kernel("thread_identity", [warps](Ptr<int32_t> ids, Ptr<int64_t> cycles, Ptr<int64_t> timer, Int spin) {
    const int T = warps * 32;
    Int t = thread_id();
    Int base = program_id(0) * (4 * T) + t;
    Long c0 = clock64(), g0 = global_timer();
    for_range(0, spin, [&](Int) { nanosleep(warp_id() * 20 + 10); });
    nanosleep(100);
    store(ids + base, t);
    store(ids + base + T, lane_id());
    store(ids + base + 2 * T, warp_id());
    store(ids + base + 3 * T, warp_group_id());
    Long c1 = clock64(), g1 = global_timer();
    store(cycles + program_id(0) * T + t, c1 - c0);
    store(timer + program_id(0) * (2 * T) + t, g0);
    store(timer + program_id(0) * (2 * T) + T + t, g1);
  }, KernelOptions{.num_warps = warps});
}

void check_identity(Device dev, int warps, std::mt19937_64& rng) {
  const int T = warps * 32, programs = 3;
  int spin = std::uniform_int_distribution<int>(1, 8)(rng);
  Kernel k = identity_kernel(warps);
  Buffer<int32_t> ids = dev.upload(std::vector<int32_t>(programs * 4 * T, -7));
  Buffer<int64_t> cycles = dev.upload(std::vector<int64_t>(programs * T, -7));
  Buffer<int64_t> timer = dev.upload(std::vector<int64_t>(programs * 2 * T, -7));
  k.launch(Grid(programs), ids, cycles, timer, spin);
  std::vector<int32_t> got = ids.download();
  std::vector<int64_t> c = cycles.download(), g = timer.download();
  int wrong = 0;
  for (int p = 0; p < programs; ++p)
    for (int t = 0; t < T; ++t) {
      const int want[4] = {t, t % 32, t / 32, t / 128};
      for (int kind = 0; kind < 4; ++kind) {
        int32_t v = got[p * 4 * T + kind * T + t];
        if (v != want[kind] && ++wrong <= 8)
          UNSCOPED_INFO("program " << p << " thread " << t << " id kind " << kind << ": " << v << ", want " << want[kind]);
      }
      int64_t cyc = c[p * T + t], g0 = g[p * 2 * T + t], g1 = g[p * 2 * T + T + t];
      if ((cyc < 0 || g0 <= 0 || g1 < g0) && ++wrong <= 8)
        UNSCOPED_INFO("program " << p << " thread " << t << ": cycles " << cyc << ", timer " << g0 << " -> " << g1);
    }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("thread_id, lane_id, warp_id, warp_group_id, clock64, global_timer and nanosleep per thread", "[ops][threads]") {
  WEFT_SEEDED_RNG(rng);
  for (int warps : {4, 8}) check_identity(Device::current(), warps, rng);
}

// Ids inside a task of 8 warps and a task of 4 warps with 2 replicas: each counts its replica's threads.
static void check_task_identity(Device dev) {
  Kernel k("task_identity", [](Ptr<int32_t> out, Ptr<int64_t> timer) {
    async_tasks(task("wide", {.warps = 8}, [&] {
                  store(out + thread_id(), thread_id() * 1000 + warp_group_id());
                  store(timer + thread_id(), global_timer());
                }),
                task("narrow", {.warps = 4, .replicas = 2}, [&] {
                  nanosleep(lane_id() * 3);
                  store(out + 256 + task_replica_id() * 128 + thread_id(), lane_id() + 100 * warp_id());
                }));
  });
  Buffer<int32_t> out = dev.upload(std::vector<int32_t>(512, -1));
  Buffer<int64_t> timer = dev.upload(std::vector<int64_t>(256, -1));
  k.launch(Grid(1), out, timer);
  std::vector<int32_t> got = out.download();
  std::vector<int64_t> g = timer.download();
  std::vector<int32_t> want(512);
  for (int t = 0; t < 256; ++t) want[t] = t * 1000 + t / 128;
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 128; ++t) want[256 + r * 128 + t] = t % 32 + 100 * (t / 32);
  CHECK(got == want);
  for (int64_t v : g) CHECK(v > 0);
}

TEST_CASE("thread identity inside tasks counts the task replica's threads", "[async][threads]") {
  check_task_identity(Device::current());
}

// vote_ballot_sync: TLX's test (one warp, lanes 0-15 vote true: 0x0000ffff in thread 0), then random votes in
// groups of 1, 4 and 8 warps with a random member mask, a scalar vote, and a task of 4 warps with 2 replicas;
// every thread's result against a host loop over its warp's lanes.
TEST_CASE("vote_ballot_sync: each thread gets its warp's ballot of one bool per thread", "[ops][threads]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  {
    Kernel k("vote_ballot_tlx", [](Ptr<int32_t> out) {
      Int tid = thread_id();
      Int ballot = vote_ballot_sync(0xffffffffu, tid < 16);
      store(out + tid * 0, ballot, tid == 0);
    }, KernelOptions{.num_warps = 1});
    Buffer<int32_t> out = dev.upload(std::vector<int32_t>{-7});
    k.launch(Grid(1), out);
    CHECK(out.download()[0] == 0x0000ffff);
  }
  for (int warps : {1, 4, 8}) {
    const int T = warps * 32, programs = 3;
    const uint32_t mask = uint32_t(rng()) | 1u;
    INFO(warps << " warps, mask " << mask);
    std::vector<int32_t> votes(programs * T);
    for (int32_t& v : votes) v = std::uniform_int_distribution<int32_t>(0, 2)(rng);
    Kernel k("vote_ballot_random", [T, mask](Ptr<int32_t> votes, Ptr<int32_t> out, Ptr<int32_t> uniform, Int flag) {
      Int at = program_id(0) * T + thread_id();
      store(out + at, vote_ballot_sync(mask, load(votes + at) == 1));
      Int all = vote_ballot_sync(mask, flag + program_id(0) > 1);  // a scalar: the mask or 0 in every lane
      store(uniform + program_id(0), all);
    }, KernelOptions{.num_warps = warps});
    Buffer<int32_t> out = dev.upload(std::vector<int32_t>(programs * T, -7));
    Buffer<int32_t> uniform = dev.upload(std::vector<int32_t>(programs, -7));
    k.launch(Grid(programs), dev.upload(votes), out, uniform, 0);
    std::vector<int32_t> got = out.download(), u = uniform.download();
    int wrong = 0;
    for (int i = 0; i < programs * T; ++i) {
      uint32_t want = 0;
      for (int lane = 0; lane < 32; ++lane) want |= uint32_t(votes[i - i % 32 + lane] == 1) << lane;
      want &= mask;
      if (uint32_t(got[i]) != want && ++wrong <= 8) UNSCOPED_INFO("element " << i << ": " << got[i] << ", want " << want);
    }
    CHECK(wrong == 0);
    for (int p = 0; p < programs; ++p) CHECK(uint32_t(u[p]) == (p > 1 ? mask : 0u));
  }
  Kernel in_task("vote_ballot_task", [](Ptr<int32_t> out) {
    async_tasks(task("voters", {.warps = 4, .replicas = 2}, [&] {
      Int t = thread_id();
      store(out + task_replica_id() * 128 + t, vote_ballot_sync(0xffffffffu, (t + task_replica_id()) % 3 == 0));
    }));
  });
  Buffer<int32_t> out = dev.upload(std::vector<int32_t>(256, -7));
  in_task.launch(Grid(1), out);
  std::vector<int32_t> got = out.download();
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 128; ++t) {
      uint32_t want = 0;
      for (int lane = 0; lane < 32; ++lane) want |= uint32_t((t - t % 32 + lane + r) % 3 == 0) << lane;
      CHECK(uint32_t(got[r * 128 + t]) == want);
    }
}

TEST_CASE("thread identity and time: the PTX reads %tid.x, %clock64 and %globaltimer and sleeps with nanosleep.u32",
          "[threads][ptx]") {
  Kernel k("identity_ptx", [](Ptr<int32_t> ids, Ptr<int64_t> times) {
    store(ids + thread_id(), lane_id() + warp_id() + warp_group_id());
    nanosleep(thread_id());
    store(times + thread_id(), clock64() + global_timer());
  });
  std::string ptx = k.ptx();
  CHECK(ptx.find("%tid.x") != std::string::npos);
  CHECK(ptx.find("%clock64") != std::string::npos);
  CHECK(ptx.find("%globaltimer") != std::string::npos);
  CHECK(ptx.find("nanosleep.u32") != std::string::npos);
  Kernel vote("vote_ptx", [](Ptr<int32_t> out) { store(out + thread_id(), vote_ballot_sync(0xffu, thread_id() < 5)); });
  CHECK(vote.ptx().find("vote.sync.ballot.b32") != std::string::npos);
}

TEST_CASE("thread identity: misplaced calls are Errors at the caller's line", "[threads][errors]") {
  int line = 0;
  require_weft_error([&] {
    Kernel k("id_outside_tasks", [&](Ptr<int32_t> out) {
      line = __LINE__ + 1;
      Int t = thread_id();
      async_tasks(task("a", {.warps = 4}, [&] { store(out + arange(0, 128), arange(0, 128)); }));
      (void)t;
    });
    k.ir();
  }, __FILE__, line, "outside every task body");
  require_weft_error([&] {
    Kernel k("id_in_three_warps", [&](Ptr<int64_t> out) {
      async_tasks(task("odd", {.warps = 3}, [&] {
        line = __LINE__ + 1;
        store(out + arange(0, 128), cast<int64_t>(arange(0, 128)) + max(clock64(), 0));
      }));
    });
    k.ir();
  }, __FILE__, line, "96 threads");
  require_weft_error([&] {
    Kernel k("vote_wrong_shape", [&](Ptr<int32_t> out) {
      line = __LINE__ + 1;
      store(out + arange(0, 64), vote_ballot_sync(0xffffffffu, arange(0, 64) < 3));
    }, KernelOptions{.num_warps = 4});
    k.ir();
  }, __FILE__, line, "a tile of shape [128]");
  require_weft_error([&] {
    Kernel k("vote_outside_tasks", [&](Ptr<int32_t> out) {
      line = __LINE__ + 1;
      Int b = vote_ballot_sync(1u, program_id(0) == 0);
      async_tasks(task("a", {.warps = 4}, [&] { store(out, b); }));
    });
    k.ir();
  }, __FILE__, line, "vote_ballot_sync() is outside every task body");
  require_weft_error([&] {
    Kernel k("sleep_float", [&](Float x) {
      line = __LINE__ + 1;
      nanosleep(x);
    });
    k.ir();
  }, __FILE__, line, "cast<int32_t>");
}

TEST_CASE("thread identity on the GPU: ids and per-thread clocks in groups of 1 to 16 warps and in tasks", "[threads][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  WEFT_SEEDED_RNG(rng);
  for (int warps : {1, 2, 4, 8, 16}) check_identity(dev, warps, rng);
  check_task_identity(dev);
}
