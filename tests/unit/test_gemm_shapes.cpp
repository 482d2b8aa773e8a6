// The bf16 GEMM family of examples/gemm_hopper_ws.h and its entry point examples/gemm.h across shapes:
// every configuration path (tile shapes, one or two consumers, split-K, swapped operands for small M, K
// tails, both B layouts, operands copied to padded buffers where TMA cannot describe them) against a double-precision reference, C poisoned before
// each call. The shapes are small: the CPU backend runs the same tasks as fibers. Run with WEFT_BACKEND=cuda
// (ctest's gpu-ops: copies) the same checks run on the GPU; [gpu] cases use GPU-sized shapes.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../examples/gemm.h"
#include "error_checks.h"
#include "gemm_problems.h"
#include "scratch_cache.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;
using namespace weft_test::gemm_test;

TEST_CASE("GEMM configurations: tile shapes, consumers, BK, both B layouts, K tails", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  Problem p = make_problem(rng, 136, 200, 200);  // no dimension a multiple of any tile; K = 3 * 64 + 8
  const std::vector<GemmConfig> configs{
      {.BM = 64, .BN = 128, .stages = 3, .consumers = 1},   // one consumer of 64 rows
      {.BM = 128, .BN = 128, .stages = 2, .consumers = 1},  // one consumer of 128 rows (two wgmma blocks)
      {.BM = 256, .BN = 64, .stages = 2, .group = 2},       // two consumers of 128 rows
      {.BM = 128, .BN = 64, .BK = 32, .stages = 5},         // BK 32: 64-byte swizzle
  };
  for (const GemmConfig& cfg : configs)
    for (bool b_is_nk : {true, false}) {
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg); });
    }
  // Narrow tiles (wgmma N of 16 and 32), both B layouts: with B K x N a stage is one box of 32- or 64-byte
  // rows (32- and 64-byte swizzles, wgmma's N-major B).
  for (int bn : {16, 32})
    for (bool b_is_nk : {true, false}) {
      GemmConfig cfg{.BM = 64, .BN = bn, .consumers = 1};
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg); });
    }
}

TEST_CASE("GEMM in clusters of two along M: each block multicasts half of the B tile", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // 136 rows: 3 tile rows of 64 (the second block of the last cluster has no rows; 2 of 128, both real).
  Problem p = make_problem(rng, 136, 264, 200);
  for (GemmConfig cfg : {GemmConfig{.BM = 64, .BN = 128, .stages = 3, .consumers = 1, .cluster_m = 2},
                         GemmConfig{.BM = 128, .BN = 128, .stages = 3, .cluster_m = 2}})
    for (bool b_is_nk : {true, false}) {
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg); });
    }
}

TEST_CASE("GEMM split-K: f32 partial sums and a deterministic reduction, empty slices included", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // K = 328: 6 k-tiles of 64; split 4 takes 2, 2, 2, 0 of them (the last slice writes zeros).
  Problem p = make_problem(rng, 72, 136, 328);
  for (int split : {2, 4})
    for (bool b_is_nk : {true, false}) {
      GemmConfig cfg{.BM = 64, .BN = 128, .consumers = 1, .split_k = split};
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      std::vector<bf16> first;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
        gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg);
        first = c.download();
        // Deterministic: a second call gives the same bits.
        c.upload(std::vector<bf16>(c.size(), poison_value<bf16>()));
        gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg);
      });
      Device dev = Device::current();
      (void)dev;
    }
}

TEST_CASE("split-K's reduce kernel: the slices summed in order, any slice count and row length", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  // Slice counts below, at and past the kernel's chunk of slices loaded at once; N not a multiple of a
  // program's columns; m_pad (the rows a slice holds) above M.
  for (int slices : {1, 2, 15, 16, 17, 37, 94})
    for (auto [M, N, m_pad] : {std::tuple{1, 4095, 1}, {3, 130, 5}}) {
      INFO("slices " << slices << " M " << M << " N " << N << " m_pad " << m_pad);
      std::vector<float> w = generate<float>(rng, size_t(slices) * m_pad * N, uniform_real<float>(-4, 4));
      Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(M) * N, poison_value<bf16>()));
      gemm_detail::splitk_reduce_kernel().launch(dev.stream(), splitk_reduce_grid(M, N, SourceLoc::current()),
                                                 dev.upload(w), dc, M, N, m_pad, slices);
      std::vector<bf16> got = dc.download();
      int wrong = 0;
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          float sum = 0;  // in order, in f32: the same bits as the kernel's
          for (int s = 0; s < slices; ++s) sum += w[(size_t(s) * m_pad + i) * N + j];
          if (float(got[size_t(i) * N + j]) != float(bf16(sum)) && ++wrong <= 5)
            FAIL_CHECK("C[" << i << ", " << j << "] = " << float(got[size_t(i) * N + j]) << ", want " << float(bf16(sum)));
        }
      CHECK(wrong == 0);
    }
}

// The last slice of each tile sums the slices in order, as the reduction kernel does: the same bits; the
// tile counters are back at zero after each launch, so a second launch is right too.
TEST_CASE("GEMM split-K reduced in the kernel: the same C as the two-kernel reduction, launch after launch",
          "[async][gemm][atomics]") {
  WEFT_SEEDED_RNG(rng);
  struct Case {
    int M, N, K;
    GemmConfig cfg;
  };
  const std::vector<Case> cases{
      {72, 136, 328, {.BM = 64, .BN = 128, .consumers = 1, .split_k = 4}},  // 6 k-tiles: the last slice empty
      {72, 136, 328, {.BM = 128, .BN = 64, .consumers = 2, .split_k = 2}},  // two consumers, a counter each
      {13, 200, 392, {.BM = 64, .BN = 16, .consumers = 1, .split_k = 3, .swap_ab = true}},
      {40, 200, 264, {.BM = 128, .BN = 64, .BK = 32, .consumers = 2, .split_k = 2, .swap_ab = true}},
  };
  for (const Case& k : cases) {
    Problem p = make_problem(rng, k.M, k.N, k.K);
    for (bool b_is_nk : {true, false}) {
      GemmConfig two = k.cfg, one = k.cfg;
      one.reduce_in_kernel = true;
      if (!two.problems(b_is_nk).empty() || !one.problems(b_is_nk).empty()) continue;
      INFO(one.name() << " B " << (b_is_nk ? "N x K" : "K x N") << ", " << k.M << " x " << k.N << " x " << k.K);
      std::vector<bf16> reference;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
        gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, two);
        reference = c.download();
      });
      for (int launch = 0; launch < 2; ++launch)
        check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
          gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, one);
          std::vector<bf16> got = c.download();
          int differ = 0;
          for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != reference[i].bits;
          CHECK(differ == 0);
        });
    }
  }
}

TEST_CASE("GEMM with swapped operands for small M (C^T = B A^T), with and without split-K", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  for (int M : {1, 13, 40}) {
    Problem p = make_problem(rng, M, 200, 136);
    for (GemmConfig cfg : {GemmConfig{.BM = 64, .BN = 16, .consumers = 1, .swap_ab = true},
                           GemmConfig{.BM = 128, .BN = 32, .stages = 3, .swap_ab = true},
                           GemmConfig{.BM = 64, .BN = 64, .BK = 32, .consumers = 1, .split_k = 3, .swap_ab = true},
                           GemmConfig{.BM = 64, .BN = 8, .consumers = 1, .swap_ab = true}}) {
      INFO("M " << M << " " << cfg.name());
      check_gemm(p, true, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, true, cfg); });
    }
  }
}

TEST_CASE("GEMM with swapped operands for small M and B stored K x N (wgmma's M-major A), with and without split-K",
          "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // B K x N is wgmma's transposed A: each consumer's 64 or 128 columns of B's [BK, BM] box in a stage of its
  // own (two panels at 128), read through local_trans. N 200 and K 136 (multiples of 8, no tile's): partial
  // boxes of B in N and K, zero-filled by TMA. Every M meets two of the configurations.
  const std::vector<GemmConfig> configs{
      {.BM = 64, .BN = 16, .consumers = 1, .swap_ab = true},                 // one panel
      {.BM = 128, .BN = 32, .stages = 3, .swap_ab = true},                   // two consumers, a panel each
      {.BM = 128, .BN = 8, .consumers = 1, .swap_ab = true},                 // one consumer, two panels
      {.BM = 64, .BN = 64, .BK = 32, .consumers = 1, .split_k = 3, .swap_ab = true},  // BK 32, split-K
      {.BM = 256, .BN = 64, .stages = 2, .swap_ab = true},                   // two consumers of two panels
  };
  int next = 0;
  for (int M : {1, 7, 16, 33, 64}) {
    Problem p = make_problem(rng, M, 200, 136);
    for (int t = 0; t < 2; ++t) {
      const GemmConfig& cfg = configs[next++ % configs.size()];
      INFO("M " << M << " " << cfg.name());
      REQUIRE(cfg.problems(false).empty());
      check_gemm(p, false, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, false, cfg); });
    }
  }
}

TEST_CASE("GEMM with two C staging buffers per consumer (epilogue_buffers = 2)", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // 264 x 520: 3 x 3 tiles of 128 x 256, 5 x 5 of 64 x 128, none full at the edges; more tiles than the CPU
  // backend's blocks (one per core), so that a block's next tile reuses the buffers its last stores read.
  // K = 136: 2 k-tiles and a tail.
  Problem p = make_problem(rng, 264, 520, 136);
  const std::vector<GemmConfig> configs{
      {.epilogue_buffers = 2},                                                         // the default tile: 4 stores
      {.BM = 64, .BN = 128, .stages = 3, .consumers = 1, .epilogue_buffers = 2},     // 2 stores per tile
      {.BM = 128, .BN = 128, .stages = 3, .epilogue_n = 32, .epilogue_buffers = 2},  // 4 stores of 32 columns
      {.BM = 64, .BN = 128, .consumers = 1, .split_k = 2, .epilogue_buffers = 2},    // f32 partials: 4 stores
      {.BM = 128, .BN = 128, .stages = 3, .cluster_m = 2, .epilogue_buffers = 2},
  };
  for (const GemmConfig& cfg : configs)
    for (bool b_is_nk : {true, false}) {
      INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, p.M, p.N, p.K, b_is_nk, cfg); });
    }
  // Swapped (small M): C^T's rows in stores of epilogue_n columns of C, with and without split-K.
  for (int M : {13, 40}) {
    Problem q = make_problem(rng, M, 520, 136);
    for (GemmConfig cfg :
         {GemmConfig{.BM = 64, .BN = 16, .epilogue_n = 32, .consumers = 1, .swap_ab = true, .epilogue_buffers = 2},
          GemmConfig{.BM = 128, .BN = 64, .consumers = 1, .swap_ab = true, .epilogue_buffers = 2},
          GemmConfig{.BM = 128, .BN = 32, .consumers = 1, .split_k = 2, .swap_ab = true, .epilogue_buffers = 2}}) {
      INFO("M " << M << " " << cfg.name());
      check_gemm(q, true, [&](auto& a, auto& b, auto& c) { gemm_hopper_ws(a, b, c, q.M, q.N, q.K, true, cfg); });
    }
  }
}

TEST_CASE("GEMM ping-pong: two consumers take alternate whole tiles, their main loops in turn", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  // 264 x 520: 3 x 5 tiles of 128 x 128, 5 x 3 of 64 x 256, 5 x 5 of 64 x 128, none full at the edges.
  // K = 200: 4 k-tiles of 64 (7 of 32) and a tail, more than the ring's stages, so that a consumer's
  // tile spans the ring and the other's stages are skipped by more than a lap.
  Problem p = make_problem(rng, 264, 520, 200);
  Device dev = Device::current();
  // With `grid` blocks (0: the plan's, one per multiprocessor at most): 15 tiles on 2 blocks are 8 and 7
  // per block (even and odd), on 4 blocks 4, 4, 4 and 3, on 15 one each; on 17 two blocks have none.
  auto run = [&](const GemmConfig& cfg, bool b_is_nk, int grid) {
    check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
      gemm_detail::GemmLaunch l = gemm_detail::plan_gemm(cfg, a, b, c, p.M, p.N, p.K, b_is_nk, SourceLoc::current());
      if (grid > 0) l.grid = grid;
      l.run(dev.stream(), SourceLoc::current());
    });
  };
  const std::vector<GemmConfig> configs{
      {.BM = 128, .BN = 128, .stages = 3, .pingpong = true},
      {.BM = 64, .BN = 256, .stages = 2, .pingpong = true},
      {.BM = 128, .BN = 128, .stages = 4, .epilogue_buffers = 2, .pingpong = true},
      {.BM = 64, .BN = 128, .BK = 32, .stages = 5, .pingpong = true},
  };
  for (const GemmConfig& cfg : configs)
    for (bool b_is_nk : {true, false})
      for (int grid : {0, 2, 15, 17}) {
        INFO(cfg.name() << " B " << (b_is_nk ? "N x K" : "K x N") << " grid " << grid);
        run(cfg, b_is_nk, grid);
      }
  // Fiber orders shuffled (the CPU backend's WEFT_CPU_SCHED_SEED), 4 tiles or 3 per block.
  for (const char* seed : {"1", "2", "7"}) {
    setenv("WEFT_CPU_SCHED_SEED", seed, 1);
    for (bool b_is_nk : {true, false}) {
      INFO("WEFT_CPU_SCHED_SEED=" << seed << " B " << (b_is_nk ? "N x K" : "K x N"));
      run(configs[0], b_is_nk, 4);
    }
    unsetenv("WEFT_CPU_SCHED_SEED");
  }
}

TEST_CASE("GEMM ping-pong: configuration rules, name and shared memory", "[async][gemm][errors]") {
  GemmConfig pp{.BM = 128, .BN = 128, .pingpong = true};
  CHECK(pp.name() == "128x128x64_s4_g8_c2_pp");
  CHECK(pp.rows_per_consumer() == 128);
  // 4 stages of 128 x 64 A and 64 x 128 B, and a 128 x 64 C staging tile per consumer.
  CHECK(pp.shared_bytes() == 4 * 256 * 64 * 2 + 2 * 128 * 64 * 2);
  CHECK(pp.problems(true).empty());
  CHECK(GemmConfig{.BM = 128, .BN = 128, .stages = 6, .pingpong = true}.problems(false).empty());
  CHECK(GemmConfig{.BM = 64, .BN = 256, .stages = 5, .pingpong = true}.problems(false).empty());
  auto broken = [](GemmConfig c, const char* why) {
    INFO(c.name());
    CHECK_THAT(c.problems(true), Catch::Contains(why));
  };
  broken({.BM = 128, .BN = 128, .consumers = 1, .pingpong = true}, "pingpong needs consumers = 2");
  broken({.BM = 128, .BN = 128, .split_k = 2, .pingpong = true}, "pingpong needs split_k = 1");
  broken({.BM = 128, .BN = 128, .swap_ab = true, .pingpong = true}, "pingpong needs split_k = 1, swap_ab off");
  broken({.BM = 128, .BN = 128, .cluster_m = 2, .pingpong = true}, "cluster_m = 1");
  broken({.BM = 256, .BN = 64, .pingpong = true}, "BM must be 64 or 128");
  broken({.BM = 128, .BN = 256, .stages = 2, .pingpong = true}, "the f32 accumulator: 128 registers per thread");
  Device dev = Device::cpu();
  Buffer<bf16> a = dev.alloc<bf16>(64 * 64), b = dev.alloc<bf16>(64 * 64), c = dev.alloc<bf16>(64 * 64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.BN = 64, .consumers = 1, .pingpong = true}),
                    Catch::Contains("pingpong needs consumers = 2") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
}

TEST_CASE("GEMM configuration errors name the caller's line", "[async][gemm][errors]") {
  Device dev = Device::cpu();
  Buffer<bf16> a = dev.alloc<bf16>(64 * 64), b = dev.alloc<bf16>(64 * 64), c = dev.alloc<bf16>(64 * 64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, false, GemmConfig{.BN = 64, .swap_ab = true, .cluster_m = 2}),
                    Catch::Contains("cluster_m = 2 needs split_k = 1 and swap_ab off") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.BM = 96}),
                    Catch::Contains("BM / consumers must be 64 or 128") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, false, GemmConfig{.BN = 64, .cluster_m = 2}),
                    Catch::Contains("BN a multiple of 128") && Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.stages = 8}),
                    Catch::Contains("bytes of shared memory") && Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_hopper_ws(a, b, c, 64, 64, 64, true, GemmConfig{.BN = 64, .epilogue_buffers = 2}),
                    Catch::Contains("epilogue_buffers = 2 needs at least two stores per tile") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
}

TEST_CASE("gemm(): the model's configuration per shape (WEFT_AUTOTUNE=0), and padded copies where TMA cannot go", "[async][gemm]") {
  EnvAutotune off("0");
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  struct Case {
    int M, N, K;
  };
  // Small M (swapped operands, either B layout), a long K (split-K), ragged tiles, and N or K not a multiple of
  // 8 (TMA cannot stride such rows): up to small_m_limit rows read them in place (the plain-load kernel,
  // with one K slice or several), up to 64 the plain-load tensor-core kernel reads them where N > 128 (M 7
  // with B K x N), larger M or narrower N copies them with K and N rounded up to multiples of 8 (M 37 and
  // M 16 at N 100, M 70).
  for (Case s : {Case{1, 200, 136}, Case{16, 64, 1024}, Case{136, 200, 200}, Case{37, 100, 30}, Case{70, 33, 64},
                 Case{16, 100, 30}, Case{1, 33, 1031}, Case{7, 200, 1030}}) {
    Problem p = make_problem(rng, s.M, s.N, s.K);
    for (bool b_is_nk : {true, false}) {
      INFO("M " << s.M << " N " << s.N << " K " << s.K << " B " << (b_is_nk ? "N x K" : "K x N"));
      const bool fits = s.N % 8 == 0 && s.K % 8 == 0;
      const bool small_m = !fits && s.M <= gemm_detail::small_m_limit(b_is_nk);
      const bool rows_mma = !fits && !small_m && s.M <= 64 && s.N > 128;
      GemmChoice choice;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { choice = gemm(a, b, c, s.M, s.N, s.K, b_is_nk); });
      CHECK(choice.padded == (!fits && !small_m && !rows_mma));
      CHECK(choice.small_m == small_m);
      CHECK((choice.rows_mma_bn == (s.M <= 16 ? 64 : 128)) == rows_mma);
      if (!small_m && !rows_mma) {
        GemmConfig first = gemm_candidates(gemm_detail::bucket_m(s.M), gemm_detail::bucket_nk((s.N + 7) / 8 * 8),
                                           gemm_detail::bucket_nk((s.K + 7) / 8 * 8), b_is_nk, dev.multiprocessors())[0];
        CHECK(choice.config.name() == first.name());
        INFO(choice.config.name());
        if (s.M == 1 || s.M == 16) CHECK(choice.config.swap_ab);
      }
    }
  }
}

TEST_CASE("gemm(): a buffer TMA cannot address (not 16-byte aligned) is copied first or read in place", "[async][gemm][cpu-only]") {
  EnvAutotune off("0");
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::cpu();
  // M 16 and 24: read in place by the tensor-core plain-load kernel (64 and 128 columns a program); M 8: by
  // the small-M kernel; M 80: copied.
  for (int M : {16, 8, 24, 80}) {
    Problem p = make_problem(rng, M, 200, 64);
    std::vector<bf16> storage(p.a.size() + 8);
    std::copy(p.a.begin(), p.a.end(), storage.begin() + 1);  // 2 bytes past an aligned start
    Buffer<bf16> a = dev.wrap(storage.data() + 1, p.a.size()), b = dev.upload(p.b_nk);
    Buffer<bf16> c = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
    GemmChoice choice = gemm(a, b, c, p.M, p.N, p.K, true);
    CHECK(choice.rows_mma_bn == (M == 16 ? 64 : M == 24 ? 128 : 0));
    CHECK(choice.small_m == (M <= gemm_detail::small_m_limit(true)));
    CHECK(choice.padded == (M == 80));
    check_within<bf16>(c.download(), p.want, p.tol, "C");
  }
}

TEST_CASE("gemm(): tunes a shape's bucket once, then reuses the winner", "[async][gemm][autotune]") {
  unsetenv("WEFT_AUTOTUNE");
  weft::test::ScratchCache cache;  // no winner from an earlier run: this one tunes
  WEFT_SEEDED_RNG(rng);
  // A shape of its own (M 24, bucket 32) so that this test's tuning is not found from an earlier run's cache.
  const int M = 24, N = 72, K = 200 + 8 * int(rng() % 16);
  Problem p = make_problem(rng, M, N, K);
  GemmChoice first, second, same_bucket;
  check_gemm(p, true, [&](auto& a, auto& b, auto& c) { first = gemm(a, b, c, M, N, K, true); });
  check_gemm(p, true, [&](auto& a, auto& b, auto& c) { second = gemm(a, b, c, M, N, K, true); });
  CHECK_FALSE(first.report.from_cache);
  CHECK(first.report.tried + first.report.dropped == 8);
  CHECK(first.report.tried >= 1);
  CHECK(second.config.name() == first.config.name());
  CHECK(first.report.winner == first.config.name());
  // Another M of the same bucket: no new tuning (the Autotuner remembers the bucket's winner).
  Problem q = make_problem(rng, 30, N, K);
  check_gemm(q, true, [&](auto& a, auto& b, auto& c) { same_bucket = gemm(a, b, c, 30, N, K, true); });
  CHECK(same_bucket.report.from_cache);
  CHECK(same_bucket.config.name() == first.config.name());
  CHECK(same_bucket.problem == first.problem);
}

TEST_CASE("gemm(): at M <= small_m_limit with rows TMA can stride, the tuner also tries the small-M kernel",
          "[async][gemm][autotune]") {
  unsetenv("WEFT_AUTOTUNE");
  weft::test::ScratchCache cache;
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int N = 64, K = 136 + 8 * int(rng() % 8);
  // M 1 (bucket 1: the small-M kernel is a candidate with either layout) and M 16 (bucket 16: it is not).
  for (int M : {1, 16})
    for (bool b_is_nk : {true, false}) {
      INFO("M " << M << " B " << (b_is_nk ? "N x K" : "K x N"));
      Problem p = make_problem(rng, M, N, K);
      GemmChoice choice;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { choice = gemm(a, b, c, M, N, K, b_is_nk); });
      const size_t configs = gemm_candidates(gemm_detail::bucket_m(M), gemm_detail::bucket_nk(N),
                                             gemm_detail::bucket_nk(K), b_is_nk, dev.multiprocessors())
                                 .size();
      const bool offered = M <= gemm_detail::small_m_limit(b_is_nk);
      CHECK(size_t(choice.report.tried + choice.report.dropped) == configs + (offered ? 1 : 0));
      CHECK(choice.report.winner == (choice.small_m ? std::string("small_m") : choice.config.name()));
      if (!offered) CHECK_FALSE(choice.small_m);
      // The winner again, from the process's memo: the same kernel, the same result.
      GemmChoice again;
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { again = gemm(a, b, c, M, N, K, b_is_nk); });
      CHECK(again.small_m == choice.small_m);
    }
}

TEST_CASE("gemm_candidates: thin products on few tiles also get the split-K that makes one full wave", "[gemm]") {
  const int sms = 132;
  struct Shape {
    int M, N, K, tiles_at_least;  // the one-wave configuration's blocks: at least this many, at most sms
  };
  // 16 x 1024 x 8192: 64 x 16 swapped tiles are 16 blocks (8 slices: 128); 1 x 4096 x 14336: 64 x 8 tiles are
  // 64 blocks (2 slices: 128, where the ranked list had 3: 192, a second partial wave).
  for (Shape s : {Shape{16, 1024, 8192, 128}, Shape{1, 4096, 14336, 128}, Shape{1, 1024, 8192, 128}}) {
    INFO(s.M << " x " << s.N << " x " << s.K);
    int best_wave = 0;
    for (const GemmConfig& c : gemm_candidates(s.M, s.N, s.K, false, sms)) {
      const int64_t R = c.swap_ab ? s.N : s.M, Q = c.swap_ab ? s.M : s.N;
      const int64_t blocks = (R + c.BM - 1) / c.BM * ((Q + c.BN - 1) / c.BN) * c.split_k;
      CHECK(c.problems(false).empty());
      if (c.split_k > 1 && blocks <= sms) best_wave = std::max<int>(best_wave, int(blocks));
    }
    CHECK(best_wave >= s.tiles_at_least);
  }
  // A product that fills the machine already gets none: every split-K candidate of 4096^3 is absent.
  for (const GemmConfig& c : gemm_candidates(4096, 4096, 4096, false, sms)) CHECK(c.split_k == 1);
}

TEST_CASE("GemmConfig::from_name reads back what name() writes, and nothing else", "[gemm]") {
  // Every candidate the tuner has for a spread of shapes (split-K, swapped, clusters, eb2, e32, pp, rk among them).
  std::set<std::string> seen;
  for (int M : {1, 16, 64, 256, 4096})
    for (auto [N, K] : {std::pair{4096, 4096}, std::pair{1024, 8192}, std::pair{14336, 4096}})
      for (bool nk : {false, true})
        for (const GemmConfig& c : gemm_candidates(M, N, K, nk, 132)) {
          INFO(c.name());
          std::optional<GemmConfig> back = GemmConfig::from_name(c.name());
          REQUIRE(back);
          CHECK(*back == c);
          seen.insert(c.name());
        }
  CHECK(seen.size() > 20);
  GemmConfig every{.BM = 64, .BN = 32, .BK = 32, .stages = 7, .group = 3, .epilogue_n = 32, .consumers = 1,
                   .split_k = 5, .swap_ab = true, .cluster_m = 2, .epilogue_buffers = 2, .pingpong = true,
                   .reduce_in_kernel = true};
  REQUIRE(GemmConfig::from_name(every.name()));
  CHECK(*GemmConfig::from_name(every.name()) == every);
  for (const char* bad : {"", "128x128", "128x128x64_s6_g8", "128x128x64_s6_g8_c2_", "128x128x64_s6_g8_c2_pq",
                          "128x128x64_s6_g8_c2_k1", "128x128x64_s6_g8_c2_pp_swap", "128x128x64_s6_g8_c2_cl",
                          "128x128x64_s6_g8_c2_e", "128x128x64_s6_g8_c2_ebx", "128x128x64_s6_g8_c2 ",
                          "128x128x64_s6_g8_c2_pp_pp"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(GemmConfig::from_name(bad));
  }
}

TEST_CASE("gemm(): bad sizes are Errors at the caller's line", "[async][gemm][errors]") {
  Device dev = Device::cpu();
  Buffer<bf16> a = dev.alloc<bf16>(64 * 64), b = dev.alloc<bf16>(64 * 64), c = dev.alloc<bf16>(64 * 64);
  int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm(a, b, c, 64, 64, 32, true),
                    Catch::Contains("gemm: A holds 4096 elements, the shapes need 2048") &&
                        Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
  line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm(a, b, c, 0, 64, 64, true), Catch::Contains("at least 1") &&
                                                     Catch::Contains("test_gemm_shapes.cpp:" + std::to_string(line)));
}

// ---- on the GPU: every candidate configuration of the sweep's kinds of shapes, then gemm() with tuning ----

namespace {

// C against a double-precision reference at `samples` random elements, and no element left unwritten.
void check_sampled(const Problem& p, const std::vector<bf16>& c, std::mt19937_64& rng, int samples) {
  size_t not_finite = 0;
  for (bf16 v : c) not_finite += !std::isfinite(float(v));
  CHECK(not_finite == 0);
  int wrong = 0;
  for (int t = 0; t < samples; ++t) {
    size_t i = rng() % p.M, j = rng() % p.N;
    double s = 0, mag = 0;
    for (int k = 0; k < p.K; ++k) {
      double x = double(float(p.a[i * p.K + k])) * double(float(p.b_nk[j * p.K + k]));
      s += x;
      mag += std::fabs(x);
    }
    double got = float(c[i * p.N + j]);
    if (!(std::fabs(got - s) <= 0x1p-8 * std::fabs(s) + 1e-5 * mag + 1e-6) && ++wrong <= 5)
      UNSCOPED_INFO("C[" << i << "][" << j << "] = " << got << ", want " << s);
  }
  CHECK(wrong == 0);
}

// A problem without the reference (computed at sampled elements instead).
Problem make_inputs_only(std::mt19937_64& rng, int M, int N, int K) {
  Problem p{M, N, K, generate<bf16>(rng, size_t(M) * K, uniform_real<bf16>(-1, 1)),
            generate<bf16>(rng, size_t(N) * K, uniform_real<bf16>(-1, 1)), {}, {}, {}};
  p.b_kn.resize(p.b_nk.size());
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) p.b_kn[size_t(k) * N + j] = p.b_nk[size_t(j) * K + k];
  return p;
}

}  // namespace

TEST_CASE("GEMM on the GPU: every candidate configuration of small-M, long-K, ragged and square shapes", "[gemm][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  WEFT_SEEDED_RNG(rng);
  struct Shape {
    int M, N, K;
  };
  for (Shape s : {Shape{1, 4096, 4096}, Shape{16, 1024, 8192}, Shape{64, 4096, 4096}, Shape{256, 4096, 14336},
                  Shape{1000, 1000, 1000}, Shape{4095, 4096, 4096}}) {  // (N, K multiples of 8: TMA's strides)
    Problem p = make_inputs_only(rng, s.M, s.N, s.K);
    Buffer<bf16> da = dev.upload(p.a), db_nk = dev.upload(p.b_nk), db_kn = dev.upload(p.b_kn);
    for (bool b_is_nk : {true, false})
      for (const GemmConfig& cfg : gemm_candidates(s.M, s.N, s.K, b_is_nk, dev.multiprocessors())) {
        INFO(s.M << " x " << s.N << " x " << s.K << " B " << (b_is_nk ? "N x K" : "K x N") << " " << cfg.name());
        Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(s.M) * s.N, poison_value<bf16>()));
        gemm_hopper_ws(da, b_is_nk ? db_nk : db_kn, dc, s.M, s.N, s.K, b_is_nk, cfg);
        check_sampled(p, dc.download(), rng, 256);
      }
  }
}

TEST_CASE("GEMM swap_ab with B stored K x N on the GPU: the same C as the CPU backend, for M 1, 16, 64", "[gemm][gpu]") {
  Device gpu = Device::current();
  if (gpu.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  Device cpu = Device::cpu();
  WEFT_SEEDED_RNG(rng);
  // N 1000 and K 520: partial boxes of B in both dimensions; the swapped candidates gemm() would tune for
  // the shape, and the fixed configurations of the CPU case.
  const int N = 1000, K = 520;
  for (int M : {1, 16, 64}) {
    Problem p = make_problem(rng, M, N, K);
    std::vector<GemmConfig> configs{{.BM = 128, .BN = 32, .stages = 3, .swap_ab = true},
                                    {.BM = 256, .BN = 64, .stages = 2, .swap_ab = true}};
    for (const GemmConfig& c : gemm_candidates(M, N, K, false, gpu.multiprocessors()))
      if (c.swap_ab && std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(c);
    for (const GemmConfig& cfg : configs) {
      INFO("M " << M << " " << cfg.name());
      REQUIRE(cfg.problems(false).empty());
      std::vector<bf16> results[2];
      for (int on_gpu : {0, 1}) {
        Device dev = on_gpu ? gpu : cpu;
        Buffer<bf16> da = dev.upload(p.a), db = dev.upload(p.b_kn);
        Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(M) * N, poison_value<bf16>()));
        gemm_hopper_ws(da, db, dc, M, N, K, false, cfg);
        results[on_gpu] = dc.download();
        check_within<bf16>(results[on_gpu], p.want, p.tol, on_gpu ? "C (GPU)" : "C (CPU backend)");
      }
      int differ = 0;
      for (size_t i = 0; i < results[0].size(); ++i) {
        double g = float(results[1][i]), c = float(results[0][i]);
        if (!(std::fabs(g - c) <= 2 * p.tol[i]) && ++differ <= 5)
          UNSCOPED_INFO("C[" << i / N << "][" << i % N << "]: GPU " << g << ", CPU backend " << c);
      }
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("gemm() on the GPU: tuned per shape, a second call reuses the winner, results checked", "[gemm][gpu][autotune]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  unsetenv("WEFT_AUTOTUNE");
  weft::test::ScratchCache cache;
  WEFT_SEEDED_RNG(rng);
  struct Shape {
    int M, N, K;
  };
  for (Shape s : {Shape{1, 14336, 4096}, Shape{64, 8192, 1024}, Shape{4096, 4096, 4096}, Shape{300, 1001, 517},
                  Shape{48, 4095, 4095}}) {
    Problem p = make_inputs_only(rng, s.M, s.N, s.K);
    Buffer<bf16> da = dev.upload(p.a), db_nk = dev.upload(p.b_nk), db_kn = dev.upload(p.b_kn);
    for (bool b_is_nk : {true, false}) {
      INFO(s.M << " x " << s.N << " x " << s.K << " B " << (b_is_nk ? "N x K" : "K x N"));
      Buffer<bf16> dc = dev.upload(std::vector<bf16>(size_t(s.M) * s.N, poison_value<bf16>()));
      auto t0 = std::chrono::steady_clock::now();
      GemmChoice first = gemm(da, b_is_nk ? db_nk : db_kn, dc, s.M, s.N, s.K, b_is_nk);
      dev.synchronize();
      double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      INFO("config " << first.config.name() << (first.padded ? " (padded)" : "") << ", rows_mma_bn "
                     << first.rows_mma_bn << ", first call " << first_s << " s");
      // Rows TMA cannot stride: copied (M > 64), or the tuner's pick between copies and reading in place.
      const bool unaligned = s.N % 8 != 0 || s.K % 8 != 0;
      if (s.M > 64) CHECK(first.padded == unaligned);
      else CHECK((first.padded || first.rows_mma_bn > 0 || first.small_m || first.rows_bulk) == unaligned);
      // (How long tuning takes is measured by bench_gemm --tune, not asserted here.)
      dc.upload(std::vector<bf16>(size_t(s.M) * s.N, poison_value<bf16>()));
      GemmChoice second = gemm(da, b_is_nk ? db_nk : db_kn, dc, s.M, s.N, s.K, b_is_nk);
      CHECK(second.config.name() == first.config.name());
      CHECK(second.rows_mma_bn == first.rows_mma_bn);
      CHECK(second.rows_bulk == first.rows_bulk);
      CHECK(second.padded == first.padded);
      check_sampled(p, dc.download(), rng, 256);
    }
  }
}

TEST_CASE("gemm() from two host threads at once on one device: scratch and split-K workspace are not shared mid-call", "[async][gemm][threads]") {
  // Each thread multiplies its own operands many times: small M with a K TMA cannot stride (K sliced over
  // the grid: the split-K workspace between two launches), a larger M with it (padded copies in scratch
  // between launches), and a long K on few tiles (the WS kernel's split-K). A call's launches must not
  // interleave with another's use of the same scratch.
  EnvAutotune off("0");
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  struct Shape {
    int M, N, K;
  };
  const std::vector<Shape> shapes = {{1, 40, 1031}, {24, 40, 135}, {16, 64, 1024}};
  std::vector<Problem> problems[2];
  for (auto& list : problems)
    for (Shape s : shapes) list.push_back(make_problem(rng, s.M, s.N, s.K));
  std::vector<std::string> failures[2];
  auto work = [&](int t) {
    try {
      for (int round = 0; round < 6; ++round)
        for (const Problem& p : problems[t]) {
          Buffer<bf16> a = dev.upload(p.a), b = dev.upload(p.b_nk);
          Buffer<bf16> c = dev.upload(std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()));
          gemm(a, b, c, p.M, p.N, p.K, true);
          std::vector<bf16> got = c.download();
          size_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) bad += !(std::fabs(double(float(got[i])) - p.want[i]) <= p.tol[i]);
          if (bad)
            failures[t].push_back("thread " + std::to_string(t) + " round " + std::to_string(round) + " M " +
                                  std::to_string(p.M) + " K " + std::to_string(p.K) + ": " + std::to_string(bad) +
                                  " wrong");
        }
    } catch (const std::exception& e) {
      failures[t].push_back(e.what());
    }
  };
  std::thread first(work, 0), second(work, 1);
  first.join();
  second.join();
  for (auto& list : failures) {
    for (const std::string& f : list) UNSCOPED_INFO(f);
    CHECK(list.empty());
  }
}
