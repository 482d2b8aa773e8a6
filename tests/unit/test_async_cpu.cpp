// Shared memory, mbarriers, named barriers and warp-specialized tasks (include/weft/async.h) on the CPU
// backend, where each task replica of a block is a fiber (src/driver/cpu/block_runtime.h): values of
// rings of stages passed between tasks, under several fiber orders (WEFT_CPU_SCHED_SEED), and the
// errors the runtime reports (deadlocks, stages and arrivals out of range) with the user's lines.
//
// Inputs are small whole numbers held in floats, so every result is exact and compared exactly. Tests
// tagged [cpu-only] check what only the CPU backend does (poisoned shared memory, fiber order, deadlock
// reports); the others are meant to pass on the GPU too.
#include <optional>
#include <string>

#include "test_util.h"
#include "error_checks.h"

using namespace weft_test;

namespace {

constexpr int R = 8, C = 16, kTile = R * C;  // one stage: an R x C tile

// Offsets of a row-major R x C tile.
Int tile_offsets() { return expand_dims(arange(0, R), 1) * C + expand_dims(arange(0, C), 0); }
// The row of each element of an R x C tile.
Int tile_rows() { return expand_dims(arange(0, R), 1) + zeros<int32_t>({R, C}); }

// Sets an environment variable (or unsets it, for nullopt) for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_); }

 private:
  void set(const std::optional<std::string>& v) {
    if (v)
      setenv(name_, v->c_str(), 1);
    else
      unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

// The fiber orders each schedule-sensitive test runs under: round-robin, then a few shuffles.
const std::vector<std::optional<std::string>> kSchedules = {std::nullopt, "1", "2", "3", "20240601"};
std::string schedule_name(const std::optional<std::string>& s) { return s ? "WEFT_CPU_SCHED_SEED=" + *s : "round-robin"; }

std::vector<float> whole_floats(Rng& rng, size_t n) { return generate<float>(rng, n, small_whole<float>(-1000, 1000)); }


// A consumer's run of `run` ring stages: each waited for, read, released, and stored at `dst` (tile after
// tile) doubled plus the consumer's replica id `r`.
template <class Run>
void take_run(Pipeline& p, const SharedBuffer<float>& ring, const Barriers& full, const Barriers& empty, Ptr<float> dst,
              Run run, Int r) {
  for_range(0, run, [&](Int i) {
    p.wait(full);
    Tile<float> v = local_load(ring[p.index()]);
    p.release(empty);
    store(dst + i * kTile, v * 2.0f + cast<float>(r));
    p.advance();
  });
}

std::string at(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

}  // namespace

// ---- shared memory ------------------------------------------------------------------------------------

constexpr int S = 4;  // stages of the round trip

TEST_CASE("local_store then local_load of every stage of a shared buffer", "[async]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int programs = 3;
  auto check = [&]<class T>(std::type_identity<T>) {
    INFO(type_name<T>());
    // Each block fills its stages in order, then reads stage (s + 1) % S back into slot s.
    Kernel k("smem_round_trip", [](Ptr<T> x, Ptr<T> out) {
      auto buf = local_alloc<T>({R, C}, S, "buf");
      Int offs = tile_offsets();
      Int base = program_id(0) * (S * kTile);
      for_range(0, S, [&](Int s) { local_store(buf[s], load(x + base + s * kTile + offs)); });
      for_range(0, S, [&](Int s) { store(out + base + s * kTile + offs, local_load(buf[(s + 1) % S]) * 2); });
    });
    std::vector<host_t<T>> x = generate<T>(rng, programs * S * kTile, small_whole<T>(-60, 60));
    Output<T> out(x.size());
    launch(k, Grid(programs), Input<T>(x), out);
    std::vector<host_t<T>> want(x.size());
    for (int p = 0; p < programs; ++p)
      for (int s = 0; s < S; ++s)
        for (int e = 0; e < kTile; ++e)
          want[(p * S + s) * kTile + e] = from_ref<T>(2 * to_ref<T>(x[(p * S + (s + 1) % S) * kTile + e]));
    check_near<T>(out, want);
  };
  check(std::type_identity<float>{});
  check(std::type_identity<int32_t>{});
  check(std::type_identity<bf16>{});
}

TEST_CASE("shared memory is poison (NaN) at the start of every block", "[async][cpu-only]") {
  // Each block reads stage 1 before writing it: every block, including those a host thread runs after
  // another, must see the poison, not the previous block's values.
  Kernel k("smem_poison", [](Ptr<float> out) {
    auto buf = local_alloc<float>({R, C}, 2, "buf");
    Int offs = tile_offsets();
    local_store(buf[0], full<float>({R, C}, 1.0));
    store(out + program_id(0) * kTile + offs, local_load(buf[1]));
    local_store(buf[1], full<float>({R, C}, 2.0));
  });
  const int programs = 16;
  Output<float> out(programs * kTile);
  launch(k, Grid(programs), out);
  std::vector<float> got = out.read();
  size_t not_poison = 0;
  for (float v : got) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    not_poison += bits != 0xFFFFFFFFu;
  }
  CHECK(not_poison == 0);
}

// ---- mbarriers between tasks ----------------------------------------------------------------------------

// A producer task copies tile i of its block's input into stage i % stages of a ring; a consumer task
// waits for it, reads it, releases the stage and writes x * 3 + 1. Raw barrier_wait/arrive with the
// phase computed by hand.
Kernel ring_kernel(int stages) {
  return Kernel("ring_raw", [=](Ptr<float> x, Ptr<float> out, Int iters) {
    auto ring = local_alloc<float>({R, C}, stages, "ring");
    auto full = alloc_barriers(stages, 1, "full");
    auto empty = alloc_barriers(stages, 1, "empty");
    Int offs = tile_offsets();
    Int first = program_id(0) * iters;
    async_tasks(
        task("producer", {.warps = 1}, [&] {
          for_range(0, iters, [&](Int i) {
            Int s = i % stages, phase = (i / stages) % 2;
            barrier_wait(empty[s], phase ^ 1);  // the first pass through the ring goes straight through
            local_store(ring[s], load(x + (first + i) * kTile + offs));
            barrier_arrive(full[s]);
          });
        }),
        task("consumer", {.warps = 4}, [&] {
          for_range(0, iters, [&](Int i) {
            Int s = i % stages, phase = (i / stages) % 2;
            barrier_wait(full[s], phase);
            Tile<float> v = local_load(ring[s]);
            barrier_arrive(empty[s]);
            store(out + (first + i) * kTile + offs, v * 3.0f + 1.0f);
          });
        }));
  });
}

TEST_CASE("a producer and a consumer task pass tiles through a ring of 2 and 3 stages", "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int programs = 3, iters = 24;
  std::vector<float> x = whole_floats(rng, programs * iters * kTile);
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = static_cast<float>(double(x[i]) * 3 + 1);
  for (int stages : {2, 3}) {
    Kernel k = ring_kernel(stages);
    for (const auto& schedule : kSchedules) {
      INFO(stages << " stages, " << schedule_name(schedule));
      ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
      Output<float> out(x.size());
      launch(k, Grid(programs), Input<float>(x), out, iters);
      check_near<float>(out, want);
    }
  }
}

TEST_CASE("Pipeline with two consumer replicas, each storing its half of the rows", "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int programs = 2, iters = 20;
  for (int stages : {2, 3}) {
    // Both consumers read every stage; `empty` needs both releases (arrive count 2). Replica r adds r to
    // the rows it owns, so the result shows which replica stored each row.
    Kernel k("ring_pipeline", [=](Ptr<float> x, Ptr<float> out, Int iters_arg) {
      auto ring = local_alloc<float>({R, C}, stages, "ring");
      auto full = alloc_barriers(stages, 1, "full");
      auto empty = alloc_barriers(stages, 2, "empty");
      Int offs = tile_offsets();
      Int first = program_id(0) * iters_arg;
      async_tasks(
          task("producer", {.warps = 1}, [&] {
            Pipeline p(stages);
            for_range(0, iters_arg, [&](Int i) {
              p.acquire(empty);
              local_store(ring[p.index()], load(x + (first + i) * kTile + offs));
              barrier_arrive(full[p.index()]);
              p.advance();
            });
          }),
          task("consumer", {.warps = 4, .replicas = 2}, [&] {
            Int replica = task_replica_id();
            Bool mine = tile_rows() / (R / 2) == replica;
            Pipeline p(stages);
            for_range(0, iters_arg, [&](Int i) {
              p.wait(full);
              Tile<float> v = local_load(ring[p.index()]);
              p.release(empty);
              store(out + (first + i) * kTile + offs, v * 2.0f + cast<float>(replica), mine);
              p.advance();
            });
          }));
    });
    std::vector<float> x = whole_floats(rng, programs * iters * kTile), want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = static_cast<float>(double(x[i]) * 2 + ((i % kTile) / C >= R / 2));
    for (const auto& schedule : kSchedules) {
      INFO(stages << " stages, " << schedule_name(schedule));
      ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
      Output<float> out(x.size());
      launch(k, Grid(programs), Input<float>(x), out, iters);
      check_near<float>(out, want);
    }
  }
}

TEST_CASE("Pipeline::advance(steps) lands where steps calls of advance() do", "[async]") {
  const int programs = 23;
  for (int stages : {1, 3, 4}) {
    // Program p: (p % 5) single steps, then advance(p); its index and phase go to out[2p], out[2p + 1].
    Kernel k("pipeline_advance_steps", [=](Ptr<int32_t> out) {
      Pipeline p(stages);
      for_range(0, program_id(0) % 5, [&](Int) { p.advance(); });
      p.advance(program_id(0));
      store(out + program_id(0) * 2, p.index());
      store(out + program_id(0) * 2 + 1, p.phase());
    });
    Output<int32_t> out(programs * 2);
    launch(k, Grid(programs), out);
    std::vector<int32_t> want(programs * 2);
    for (int p = 0; p < programs; ++p) {
      int position = p % 5 + p;
      want[p * 2] = position % stages;
      want[p * 2 + 1] = position / stages % 2;
    }
    INFO(stages << " stages");
    CHECK(out.read() == want);
  }
}

TEST_CASE("two consumers take alternate runs of one ring's stages, each passing over the other's with "
          "Pipeline::advance(steps), in turns",
          "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int programs = 2;
  // The ping-pong GEMM's pattern: the producer fills `runs` runs of `run` stages in order; consumer r takes
  // runs r, r + 2, ... and skips the other's with advance(run). Runs longer than the ring need the turns
  // (named barriers 1 and 2): without them a consumer could wait on a stage two fills behind, which a
  // parity wait takes for done. Odd, even, one and zero runs: the turns' arrivals and waits must balance.
  struct Case {
    int stages, run, runs;
  };
  for (Case c : {Case{2, 1, 7}, Case{3, 2, 6}, Case{2, 3, 5}, Case{3, 7, 4}, Case{4, 4, 1}, Case{2, 5, 0}}) {
    Kernel k("ring_alternate_runs", [=](Ptr<float> x, Ptr<float> out, Int run, Int runs) {
      auto ring = local_alloc<float>({R, C}, c.stages, "ring");
      auto full = alloc_barriers(c.stages, 1, "full");
      auto empty = alloc_barriers(c.stages, 1, "empty");  // each stage is read by one consumer
      Int offs = tile_offsets();
      Int first = program_id(0) * run * runs;
      async_tasks(
          task("producer", {.warps = 1}, [&] {
            Pipeline p(c.stages);
            for_range(0, run * runs, [&](Int i) {
              p.acquire(empty);
              local_store(ring[p.index()], load(x + (first + i) * kTile + offs));
              barrier_arrive(full[p.index()]);
              p.advance();
            });
          }),
          task("consumer", {.warps = 4, .replicas = 2}, [&] {
            Int r = task_replica_id();
            Pipeline p(c.stages);
            p.advance(r * run);
            for_range(r, runs, 2, [&](Int j) {
              if_(j > 0, [&] {
                if_(r == 0, [&] { named_barrier_wait(1, 256); }, [&] { named_barrier_wait(2, 256); });
              });
              take_run(p, ring, full, empty, out + (first + j * run) * kTile + offs, run, r);
              if_(j + 1 < runs, [&] {
                if_(r == 0, [&] { named_barrier_arrive(2, 256); }, [&] { named_barrier_arrive(1, 256); });
              });
              p.advance(run);
            });
          }));
    });
    const size_t items = size_t(programs) * c.run * c.runs;
    std::vector<float> x = whole_floats(rng, items * kTile), want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      size_t item = i / kTile % (size_t(c.run) * c.runs);  // within its program
      want[i] = static_cast<float>(double(x[i]) * 2 + double(item / c.run % 2));
    }
    for (const auto& schedule : kSchedules) {
      INFO(c.stages << " stages, runs of " << c.run << " x " << c.runs << ", " << schedule_name(schedule));
      ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
      Output<float> out(std::max<size_t>(x.size(), 1));
      launch(k, Grid(programs), Input<float>(x.empty() ? std::vector<float>{0.f} : x), out, c.run, c.runs);
      std::vector<float> got = out.read();
      got.resize(x.size());
      CHECK(got == want);
    }
  }
}

TEST_CASE("consumers take turns in a ring on named barriers whose ids they compute (1 + task_replica_id())",
          "[async]") {
  WEFT_SEEDED_RNG(rng);
  // As ping-pong consumers pass their turn on (FA3's pattern): consumer r takes runs r, r + n, ... of a ring's
  // stages, waits on barrier 1 + r for its turn and hands it to the next with barrier 1 + (r + 1) % n. Runs
  // longer than the ring need the turns; each barrier id is one bar.sync on a register, not a branch per replica.
  const int programs = 2, stages = 2, run = 3;
  for (int n : {2, 3}) {
    for (int runs : {7, 1, 0}) {
      Kernel k("ring_turns_computed_ids", [=](Ptr<float> x, Ptr<float> out, Int runs_in) {
        auto ring = local_alloc<float>({R, C}, stages, "ring");
        auto full = alloc_barriers(stages, 1, "full");
        auto empty = alloc_barriers(stages, 1, "empty");
        Int offs = tile_offsets();
        Int first = program_id(0) * run * runs_in;
        async_tasks(
            task("producer", {.warps = 1}, [&] {
              Pipeline p(stages);
              for_range(0, run * runs_in, [&](Int i) {
                p.acquire(empty);
                local_store(ring[p.index()], load(x + (first + i) * kTile + offs));
                barrier_arrive(full[p.index()]);
                p.advance();
              });
            }),
            task("consumer", {.warps = 4, .replicas = n}, [&] {
              Int r = task_replica_id();
              Pipeline p(stages);
              p.advance(r * run);
              for_range(r, runs_in, n, [&](Int j) {
                if_(j > 0, [&] { named_barrier_wait(1 + r, 256); });
                take_run(p, ring, full, empty, out + (first + j * run) * kTile + offs, run, r);
                if_(j + 1 < runs_in, [&] { named_barrier_arrive(1 + (r + 1) % n, 256); });
                p.advance((n - 1) * run);
              });
            }));
      });
      const size_t items = size_t(programs) * run * runs;
      std::vector<float> x = whole_floats(rng, std::max<size_t>(items * kTile, 1)), want(items * kTile);
      for (size_t i = 0; i < want.size(); ++i) {
        size_t item = i / kTile % (size_t(run) * runs);  // within its program
        want[i] = static_cast<float>(double(x[i]) * 2 + double(item / run % n));
      }
      for (const auto& schedule : kSchedules) {
        INFO(n << " consumers, " << runs << " runs of " << run << ", " << schedule_name(schedule));
        ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
        Output<float> out(std::max<size_t>(want.size(), 1));
        launch(k, Grid(programs), Input<float>(x), out, runs);
        std::vector<float> got = out.read();
        got.resize(want.size());
        CHECK(got == want);
      }
    }
  }
}

// ---- named barriers -------------------------------------------------------------------------------------

TEST_CASE("named barriers hand one shared buffer back and forth between two tasks", "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int programs = 2, iters = 12;
  // writer (2 warps) and reader (4 warps): 192 threads meet at barrier 1 (written) and 2 (read).
  Kernel k("named_handoff", [](Ptr<float> x, Ptr<float> out, Int iters_arg) {
    auto slot = local_alloc<float>({R, C}, 1, "slot");
    Int offs = tile_offsets();
    Int first = program_id(0) * iters_arg;
    async_tasks(
        task("writer", {.warps = 2}, [&] {
          for_range(0, iters_arg, [&](Int i) {
            local_store(slot[0], load(x + (first + i) * kTile + offs));
            named_barrier_arrive(1, 192);
            named_barrier_wait(2, 192);  // until the reader has read it
          });
        }),
        task("reader", {.warps = 4}, [&] {
          for_range(0, iters_arg, [&](Int i) {
            named_barrier_wait(1, 192);
            Tile<float> v = local_load(slot[0]);
            named_barrier_arrive(2, 192);
            store(out + (first + i) * kTile + offs, v - 7.0f);
          });
        }));
  });
  std::vector<float> x = whole_floats(rng, programs * iters * kTile), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] - 7;
  for (const auto& schedule : kSchedules) {
    INFO(schedule_name(schedule));
    ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
    Output<float> out(x.size());
    launch(k, Grid(programs), Input<float>(x), out, iters);
    check_near<float>(out, want);
  }
}

TEST_CASE("code outside async_tasks runs in every task replica", "[async]") {
  // The block-wide barrier before the tasks completes only if all 1 + 2 * 2 warps (160 threads) reach it;
  // then each replica stores its own element.
  Kernel k("prologue_everywhere", [](Ptr<int32_t> out) {
    named_barrier_wait(1, 160);
    Int base = program_id(0) * 3;
    async_tasks(task("a", {.warps = 1}, [&] { store(out + base, scalar<int32_t>(10)); }),
                task("b", {.warps = 2, .replicas = 2}, [&] {
                  store(out + base + 1 + task_replica_id(), 20 + task_replica_id());
                }));
  });
  const int programs = 4;
  Output<int32_t> out(programs * 3);
  launch(k, Grid(programs), out);
  std::vector<int32_t> want;
  for (int p = 0; p < programs; ++p) want.insert(want.end(), {10, 20, 21});
  check_near<int32_t>(out, want);
}

TEST_CASE("WEFT_CPU_SCHED_SEED shuffles the order fibers resume in, the same way for the same seed", "[async][cpu-only]") {
  // A deliberate race: after the barrier both tasks store to the same element; the one resumed last wins.
  // Round-robin resumes task 'a' first, so 'b' completes the barrier, stores 1 and finishes; then 'a'
  // stores 0.
  Kernel k("last_writer", [](Ptr<int32_t> out) {
    async_tasks(task("a", {.warps = 1}, [&] {
                  named_barrier_wait(1, 64);
                  store(out + program_id(0), scalar<int32_t>(0));
                }),
                task("b", {.warps = 1}, [&] {
                  named_barrier_wait(1, 64);
                  store(out + program_id(0), scalar<int32_t>(1));
                }));
  });
  const int programs = 32;
  auto run = [&](const std::optional<std::string>& seed) {
    ScopedEnv env("WEFT_CPU_SCHED_SEED", seed);
    Output<int32_t> out(programs);
    launch(k, Grid(programs), out);
    return out.read();
  };
  CHECK(run(std::nullopt) == std::vector<int32_t>(programs, 0));
  int winners[2] = {0, 0};
  for (int seed = 1; seed <= 4; ++seed) {
    std::vector<int32_t> first = run(std::to_string(seed));
    CHECK(first == run(std::to_string(seed)));
    for (int32_t w : first) {
      REQUIRE((w == 0 || w == 1));
      ++winners[w];
    }
  }
  // 128 blocks, each a coin flip: both tasks must win some.
  CHECK(winners[0] > 0);
  CHECK(winners[1] > 0);
  require_error([&] { run("not-a-number"); }, {"WEFT_CPU_SCHED_SEED=not-a-number is not a seed"});
}

// A consumer that releases its stage before the async_dot reading it has retired: on the GPU the producer may
// refill the stage under the running wgmma. On the CPU backend the product reads the stage at its
// async_dot_wait, and under a schedule seed a fiber gives way right after an arrival, so the producer can
// refill the stage first and the product reads the next tile. Round-robin (and, before fibers gave way, every
// order) runs the consumer on to its wait and hides the bug.
Kernel release_kernel(bool before_wait) {
  return Kernel(before_wait ? "release_before_wait" : "release_after_wait",
                [=](Ptr<bf16> a, Ptr<bf16> b, Ptr<float> out, Int iters) {
    constexpr int M = 64, K = 16, N = 16;
    auto ring = local_alloc<bf16>({M, K}, 1, "ring");
    auto b_s = local_alloc<bf16>({N, K}, 1, "b_s");
    auto full = alloc_barriers(1, 1, "full");
    auto empty = alloc_barriers(1, 1, "empty");
    auto offsets = [](int rows, int cols) { return expand_dims(arange(0, rows), 1) * cols + expand_dims(arange(0, cols), 0); };
    Int first = program_id(0) * iters;
    async_tasks(task("producer", {.warps = 4}, [&] {
                  for_range(0, iters, [&](Int i) {
                    barrier_wait(empty[0], (i % 2) ^ 1);
                    local_store(ring[0], load(a + (first + i) * (M * K) + offsets(M, K)));
                    barrier_arrive(full[0]);
                  });
                }),
                task("consumer", {.warps = 4}, [&] {
                  local_store(b_s[0], load(b + offsets(N, K)));
                  for_range(0, iters, [&](Int i) {
                    barrier_wait(full[0], i % 2);
                    Tile<float> acc = async_dot(ring[0], local_trans(b_s[0]), zeros<float>({M, N}));
                    if (before_wait) barrier_arrive(empty[0]);
                    acc = async_dot_wait(0, acc);
                    if (!before_wait) barrier_arrive(empty[0]);
                    store(out + (first + i) * (M * N) + offsets(M, N), acc);
                  });
                }));
  });
}

TEST_CASE("a stage released before the async_dot reading it retires gives wrong results under a schedule seed",
          "[async][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int M = 64, K = 16, N = 16, programs = 4, iters = 6;
  std::vector<bf16> a = generate<bf16>(rng, size_t(programs) * iters * M * K, small_whole<bf16>(-8, 8));
  std::vector<bf16> b = generate<bf16>(rng, size_t(N) * K, small_whole<bf16>(-8, 8));
  std::vector<float> want(size_t(programs) * iters * M * N);
  for (size_t t = 0; t < size_t(programs) * iters; ++t)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double d = 0;
        for (int k = 0; k < K; ++k) d += double(float(a[(t * M + m) * K + k])) * double(float(b[size_t(n) * K + k]));
        want[(t * M + m) * N + n] = float(d);
      }
  auto run = [&](bool before_wait, const std::optional<std::string>& seed) {
    ScopedEnv env("WEFT_CPU_SCHED_SEED", seed);
    Output<float> out(want.size());
    launch(release_kernel(before_wait), Grid(programs), Input<bf16>(a), Input<bf16>(b), out, iters);
    return out.read();
  };
  for (const auto& schedule : kSchedules) {
    INFO(schedule_name(schedule));
    CHECK(run(false, schedule) == want);
  }
  CHECK(run(true, std::nullopt) == want);  // round-robin: the consumer reaches its wait before the producer runs
  int wrong = 0;
  for (int seed = 1; seed <= 6; ++seed) wrong += run(true, std::to_string(seed)) != want;
  CHECK(wrong > 0);
}

// ---- errors ---------------------------------------------------------------------------------------------

TEST_CASE("a producer waiting for the wrong phase deadlocks with a report of every fiber", "[async][cpu-only]") {
  int producer_wait = 0, consumer_wait = 0;
  // The producer waits on `empty` for phase 0 instead of 1: a fresh barrier is in phase 0, so it blocks,
  // and the consumers wait for a stage that never fills.
  Kernel k("wrong_phase", [&](Ptr<float> x, Ptr<float> out) {
    auto ring = local_alloc<float>({R, C}, 2, "ring");
    auto full = alloc_barriers(2, 1, "full");
    auto empty = alloc_barriers(2, 2, "empty");
    Int offs = tile_offsets();
    async_tasks(
        task("producer", {.warps = 1}, [&] {
          for_range(0, 4, [&](Int i) {
            Int s = i % 2, phase = (i / 2) % 2;
            producer_wait = __LINE__; barrier_wait(empty[s], phase);
            local_store(ring[s], load(x + offs));
            barrier_arrive(full[s]);
          });
        }),
        task("consumer", {.warps = 4, .replicas = 2}, [&] {
          for_range(0, 4, [&](Int i) {
            Int s = i % 2, phase = (i / 2) % 2;
            consumer_wait = __LINE__; barrier_wait(full[s], phase);
            store(out + offs, local_load(ring[s]));
            barrier_arrive(empty[s]);
          });
        }));
  });
  (void)k.ir();  // traces the body: sets the lines it records
  Input<float> x(std::vector<float>(kTile, 1.0f));
  Output<float> out(kTile);
  for (const auto& schedule : kSchedules) {
    INFO(schedule_name(schedule));
    ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
    require_error([&] { launch(k, Grid(3), x, out); },
                  {"deadlock in kernel 'wrong_phase', block (", "), after 0 barrier phases completed:\n",
                   "\n  task 'producer' replica 0  waits on 'empty[0]' for phase 0   " + at(producer_wait) + "\n",
                   "\n  task 'consumer' replica 0  waits on 'full[0]'  for phase 0   " + at(consumer_wait) + "\n",
                   "\n  task 'consumer' replica 1  waits on 'full[0]'  for phase 0   " + at(consumer_wait) + "\n",
                   "\n  'empty[0]' has 0 of 2 arrivals in phase 0 (no arrival yet)",
                   "\n  'full[0]' has 0 of 1 arrivals in phase 0 (no arrival yet)"});
  }
}

TEST_CASE("a missing release deadlocks after some phases and the report names the last arrival", "[async][cpu-only]") {
  int producer_wait = 0, consumer_wait = 0, release = 0, fill = 0;
  // `empty` counts 2 releases per phase but only one consumer releases: after one pass through the ring
  // the producer waits for good, and so does the consumer for the next stage. A third task finishes.
  Kernel k("missing_release", [&](Ptr<float> x, Ptr<float> out) {
    auto ring = local_alloc<float>({R, C}, 2, "ring");
    auto full = alloc_barriers(2, 1, "full");
    auto empty = alloc_barriers(2, 2, "empty");
    Int offs = tile_offsets();
    async_tasks(
        task("producer", {.warps = 1}, [&] {
          Pipeline p(2);
          for_range(0, 6, [&](Int) {
            producer_wait = __LINE__; p.acquire(empty);
            local_store(ring[p.index()], load(x + offs));
            fill = __LINE__; barrier_arrive(full[p.index()]);
            p.advance();
          });
        }),
        task("consumer", {.warps = 4}, [&] {
          Pipeline p(2);
          for_range(0, 6, [&](Int) {
            consumer_wait = __LINE__; p.wait(full);
            store(out + offs, local_load(ring[p.index()]));
            release = __LINE__; p.release(empty);
            p.advance();
          });
        }),
        task("idle", {.warps = 1}, [&] { store(out + offs, zeros<float>({R, C})); }));
  });
  (void)k.ir();  // traces the body: sets the lines it records
  Input<float> x(std::vector<float>(kTile, 1.0f));
  Output<float> out(kTile);
  for (const auto& schedule : kSchedules) {
    INFO(schedule_name(schedule));
    ScopedEnv env("WEFT_CPU_SCHED_SEED", schedule);
    require_error([&] { launch(k, Grid(1), x, out); },
                  {"deadlock in kernel 'missing_release', block (0, 0, 0), after 2 barrier phases completed:\n",
                   "\n  task 'producer' replica 0  waits on 'empty[0]' for phase 0   " + at(producer_wait) + "\n",
                   "\n  task 'consumer' replica 0  waits on 'full[0]'  for phase 1   " + at(consumer_wait) + "\n",
                   "\n  task 'idle' replica 0      finished\n",
                   "\n  'empty[0]' has 1 of 2 arrivals in phase 0 (last arrival: task 'consumer' replica 0, " +
                       at(release) + ")",
                   "\n  'full[0]' has 0 of 1 arrivals in phase 1 (last arrival: task 'producer' replica 0, " + at(fill) +
                       ")"});
  }
}

TEST_CASE("an arrival on a barrier whose arrivals are all in is an error at its line", "[async][cpu-only]") {
  int line = 0;
  // expect_bytes is the one arrival `full` counts; the phase still waits for 256 bytes that nothing
  // delivers, so the barrier_arrive after it is one too many.
  Kernel k("over_arrival", [&](Ptr<float> out) {
    auto full = alloc_barriers(2, 1, "full");
    barrier_expect_bytes(full[1], 256);
    line = __LINE__; barrier_arrive(full[1]);
    store(out + program_id(0), scalar<float>(1));
  });
  (void)k.ir();
  Output<float> out(4);
  require_error([&] { launch(k, Grid(4), out); },
                {at(line) + ": weft::Error: kernel 'over_arrival', block (", "task 'main' replica 0: ",
                 "barrier_arrive on 'full[1]' is an arrival too many: its arrive count is 1",
                 "waits only for 256 more bytes"});
}

TEST_CASE("a stage or barrier index out of range is an error naming the buffer, the index and the line", "[async][cpu-only]") {
  int line = 0;
  SECTION("a stage past the last") {
    Kernel k("bad_stage", [&](Ptr<float> out, Int stage) {
      auto ring = local_alloc<float>({R, C}, 4, "ring");
      line = __LINE__; local_store(ring[stage], zeros<float>({R, C}));
      store(out + program_id(0), scalar<float>(1));
    });
    (void)k.ir();
    Output<float> out(3);
    require_error([&] { launch(k, Grid(3), out, 4); },
                  {at(line) + ": weft::Error: kernel 'bad_stage', block (",
                   "stage 4 of 'ring' does not exist: it has 4 stages (0 to 3)"});
    require_error([&] { launch(k, Grid(3), out, -1); }, {at(line), "stage -1 of 'ring' does not exist"});
    launch(k, Grid(3), out, 3);  // the last stage is fine, and a launch after an error works
    CHECK(out.read() == std::vector<float>(3, 1.0f));
  }
  SECTION("a barrier index past the last, inside a task") {
    Kernel k("bad_barrier", [&](Ptr<float>, Int index) {
      auto bars = alloc_barriers(3, 1, "bars");
      async_tasks(task("waiter", {.warps = 1, .replicas = 2}, [&] {
        line = __LINE__; barrier_arrive(bars[index]);
      }));
    });
    (void)k.ir();
    Output<float> out(1);
    require_error([&] { launch(k, Grid(2), out, 3); },
                  {at(line) + ": weft::Error: kernel 'bad_barrier', block (", "task 'waiter' replica 0: ",
                   "barrier 3 of 'bars' does not exist: it has 3 barriers (0 to 2)"});
  }
}

TEST_CASE("named barriers: a missing arrival deadlocks, too many threads is an error", "[async][cpu-only]") {
  int wait_line = 0, over_line = 0;
  SECTION("the writer never arrives") {
    Kernel k("named_deadlock", [&](Ptr<float> out) {
      async_tasks(task("writer", {.warps = 2}, [&] { store(out, scalar<float>(1)); }),
                  task("reader", {.warps = 4}, [&] {
                    wait_line = __LINE__; named_barrier_wait(3, 192);
                    store(out, scalar<float>(2));
                  }));
    });
    (void)k.ir();
    Output<float> out(1);
    require_error([&] { launch(k, Grid(1), out); },
                  {"deadlock in kernel 'named_deadlock', block (0, 0, 0), after 0 barrier phases completed:\n",
                   "\n  task 'writer' replica 0  finished\n",
                   "\n  task 'reader' replica 0  waits on named barrier 3    " + at(wait_line) + "\n",
                   "\n  named barrier 3 has 128 of 192 threads"});
  }
  SECTION("a task of 8 warps at a barrier of 128 threads") {
    // On the GPU its warps would complete two generations; the CPU runs a replica as one, so it refuses.
    Kernel k("named_overflow", [&](Ptr<float> out) {
      async_tasks(task("worker", {.warps = 8}, [&] {
        over_line = __LINE__; named_barrier_wait(2, 128);
        store(out, scalar<float>(1));
      }));
    });
    (void)k.ir();
    Output<float> out(1);
    require_error([&] { launch(k, Grid(1), out); },
                  {at(over_line) + ": weft::Error: kernel 'named_overflow', block (0, 0, 0), task 'worker' replica 0: ",
                   "named_barrier_wait(2, 128): 256 threads would arrive at named barrier 2 (0 already, 256 of this "
                   "task replica's 8 warps), more than the 128 it counts"});
  }
}
