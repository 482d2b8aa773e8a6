// A persistent, warp-specialized fp8 GEMM for Hopper, written only with weft's public API:
//   C (M x N, bf16) = scales * (A (M x K, f8e4m3) @ B^T), B stored N x K (K contiguous: fp8 wgmma reads
//   both operands K-major), f32 accumulation with periodic promotion, bf16 out.
//
// Scaling (Fp8Scaling):
//   - per_tensor: C = a_scale[0] * b_scale[0] * (A B^T); the scales are f32 in device memory (as cuBLASLt's
//     scale pointers), read once per tile.
//   - block (DeepGEMM's layout): A has one f32 scale per row and 128 columns (1 x 128 blocks), stored
//     [ceil(K / 128), M] (M contiguous); B one per 128 x 128 block, stored [ceil(N / 128), ceil(K / 128)].
//     C[m, n] = sum over k-blocks kb of a_scale[kb, m] * b_scale[n / 128, kb] * (A B^T restricted to kb).
//
// Two-level accumulation: fp8 wgmma adds its products with less precision than f32 (about 14 bits kept), so
// a consumer lets wgmma accumulate `promote_every` k-tiles of 128 (block scaling: one, the scales change
// there) into a fresh accumulator ("partial"), waits for it and adds it, scaled, into an f32 accumulator in
// registers ("promotion").
//
// One producer warp group issues TMA loads of A and B tiles into a ring of `stages` shared-memory stages
// guarded by `full` / `empty` mbarriers; two consumer warp groups each multiply their 64 rows of the
// BM x BN block; C goes out through small shared-memory tiles and TMA stores. Blocks are persistent (one
// per SM) and walk the output tiles in grouped order. TMA zero-fills reads past the edges and clips
// writes: any M; K a multiple of 16 (TMA's 16-byte row stride for 1-byte elements), N a multiple of 8
// (C's rows).
//
// The schedule's options (GemmFp8Config):
// - partials = 1: each k-tile's wgmmas go into a fresh partial, the consumer waits for all of them
//   (wgmma.wait_group 0), then promotes. The tensor cores see this consumer's next wgmmas only after the
//   promotion; the other consumer's fill the gap if they happen to be queued then.
// - partials = 2: two partial accumulators used alternately: k-tile k + 1's wgmmas are issued into one
//   before the consumer waits (wait_group 1) for k-tile k's in the other and promotes it, so that one group
//   of this consumer's wgmmas is always queued on the tensor cores while it promotes. Three 64 x BN f32
//   accumulators per thread (BN 128: 192 registers of the consumer's 240). The k-loop is unrolled by two so
//   that each partial stays in its own registers (a loop-carried swap would copy an accumulator that is
//   still being written).
// - cluster_m = 2: blocks in clusters of two along M; both blocks of a cluster compute the same column of
//   tiles in tile rows 2 p and 2 p + 1, so their B tile is the same: each block loads half of it and TMA
//   multicasts it to both (L2 -> SM traffic per FLOP down by a quarter at BM = BN), and each consumer
//   releases a stage to both blocks' producers. An odd last tile row pairs with a row past the end, whose
//   loads read zeros and whose stores are clipped.
// - continuous (with partials = 2): the k-tiles of all of a block's tiles are one stream for the two-partial
//   schedule, so that the next tile's first k-tile is already queued on the tensor cores while the consumer
//   promotes the last k-tile of a tile and writes the tile out (per tile, the consumer would wait for its
//   last wgmmas, and the tensor cores would see none of its work until the next tile's first issue).
// - epilogue_buffers = 2: two C staging tiles per consumer, so that the TMA store of a tile's first half
//   reads shared memory while the consumer converts and writes the second half.
// gemm_fp8_default_config() says which of these gemm_fp8() runs; the struct's defaults are the plain kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <weft/weft.h>

enum class Fp8Scaling { per_tensor, block };

struct GemmFp8Config {
  int BM = 128, BN = 128, BK = 128;  // block tile; BM: two consumers of 64 rows; BK = 128 bytes of fp8 (the
                                     // 128-byte swizzle); BN 64 or 128 (256: its accumulators do not fit)
  int stages = 6;                    // ring depth (BN 128: 32 KB a stage; block scaling takes what fits, 4)
  int group = 8;                     // rows of tiles (cluster_m = 2: pairs of rows) per group of the tile order
  int epilogue_n = 64;               // columns of C written per TMA store (32 or 64; divides BN)
  int promote_every = 1;             // per_tensor, partials = 1: k-tiles wgmma accumulates before promotion
  int partials = 1;                  // partial accumulators per consumer: 1 waits for each k-tile before
                                     // promoting it; 2 keeps the next k-tile's wgmmas queued meanwhile
  int cluster_m = 1;                 // 2: clusters of two blocks along M sharing the B tile (TMA multicast)
  int consumer_regs = 232;           // registers per consumer thread: 232 (producer 40) or 240 (producer 24)
  bool continuous = false;           // partials = 2: the k-tiles of all of a block's tiles as one stream, the
                                     // next tile's first k-tile queued while a tile is promoted and written
  int epilogue_buffers = 1;          // C staging tiles per consumer: 2 lets a tile's second store proceed
                                     // while the first one still reads shared memory

  friend bool operator==(const GemmFp8Config&, const GemmFp8Config&) = default;

  // A stable, distinct name: "128x128x128_s6_g8", then "_e<epilogue_n>", "_pe<promote_every>", "_p2",
  // "_cl2", "_r240", "_cont", "_eb2" where they differ from 64, 1, 1, 1, 232, false, 1.
  std::string name() const {
    std::string s = std::to_string(BM) + "x" + std::to_string(BN) + "x" + std::to_string(BK) + "_s" +
                    std::to_string(stages) + "_g" + std::to_string(group);
    if (epilogue_n != 64) s += "_e" + std::to_string(epilogue_n);
    if (promote_every != 1) s += "_pe" + std::to_string(promote_every);
    if (partials != 1) s += "_p" + std::to_string(partials);
    if (cluster_m != 1) s += "_cl" + std::to_string(cluster_m);
    if (consumer_regs != 232) s += "_r" + std::to_string(consumer_regs);
    if (continuous) s += "_cont";
    if (epilogue_buffers != 1) s += "_eb" + std::to_string(epilogue_buffers);
    return s;
  }

  // Shared memory besides the ring (bytes): the C staging tiles (epilogue_buffers per consumer) and, with
  // block scales, weft's exchange space for broadcasting each consumer's row scales over its accumulator
  // (a 64 x BN f32 tile each: a loaded vector is not in the accumulator's register layout).
  int64_t fixed_shared_bytes(Fp8Scaling scaling) const {
    int64_t c_tiles = 2 * epilogue_buffers * int64_t(BM / 2) * epilogue_n * 2;
    return c_tiles + (scaling == Fp8Scaling::block ? 2 * int64_t(BM / 2) * BN * 4 : 0);
  }
  int64_t stage_bytes() const { return int64_t(BM + BN) * BK; }
  // The stages the kernel uses: `stages`, or with block scales as many of them as fit next to the exchange.
  int stages_for(Fp8Scaling scaling) const {
    if (scaling != Fp8Scaling::block) return stages;
    return int(std::min<int64_t>(stages, (kSharedLimit - fixed_shared_bytes(scaling)) / stage_bytes()));
  }
  // k-tiles wgmma accumulates into a partial before its promotion: promote_every (block scales: 1).
  int promote_k_tiles(Fp8Scaling scaling) const { return scaling == Fp8Scaling::block ? 1 : promote_every; }

  // Empty when the kernel supports this configuration with `scaling`, else every broken rule.
  std::string problems(Fp8Scaling scaling) const {
    std::string out;
    auto rule = [&](bool ok, const std::string& what) {
      if (!ok) out += (out.empty() ? "" : "; ") + what;
    };
    const bool block = scaling == Fp8Scaling::block;
    rule(BM == 128, "BM must be 128 (two consumer warp groups of 64 rows)");
    rule(BK == 128, "BK must be 128 (one 128-byte swizzled row of fp8)");
    rule(BN == 64 || BN == 128 || BN == 256, "BN must be 64, 128 or 256 (tiles have power-of-two sides)");
    if (block) rule(BN == 64 || BN == 128, "with block scales BN must divide 128 (one scale of B per tile)");
    rule(epilogue_n == 32 || epilogue_n == 64, "epilogue_n must be 32 or 64");
    rule(BN % epilogue_n == 0, "epilogue_n must divide BN");
    rule(group >= 1, "group must be at least 1");
    rule(promote_every >= 1, "promote_every must be at least 1");
    rule(partials == 1 || partials == 2, "partials must be 1 or 2");
    rule(partials == 1 || promote_k_tiles(scaling) == 1, "partials = 2 needs promote_every = 1");
    rule(cluster_m == 1 || cluster_m == 2, "cluster_m must be 1 or 2");
    rule(consumer_regs == 232 || consumer_regs == 240,
         "consumer_regs must be 232 (with a 40-register producer) or 240 (24)");
    rule(!continuous || partials == 2, "continuous needs partials = 2");
    rule(epilogue_buffers == 1 || epilogue_buffers == 2, "epilogue_buffers must be 1 or 2");
    rule(epilogue_buffers == 1 || BN >= 2 * epilogue_n,
         "epilogue_buffers = 2 needs at least two stores per tile: BN >= 2 * epilogue_n");
    // The total and the partials, BN / 2 f32 registers each per thread, and about 40 for the rest (addresses,
    // descriptors, counters), 80 with block scales (their loads and broadcast). An estimate: the tests run
    // ptxas on every candidate and require no spills.
    int accumulators = (1 + partials) * BN / 2, rest = block ? 80 : 40;
    rule(accumulators + rest <= consumer_regs,
         "the f32 total and " + std::to_string(partials) + " partial(s) of 64 x " + std::to_string(BN) + " need " +
             std::to_string(accumulators) + " registers per consumer thread, at most " +
             std::to_string(consumer_regs - rest) + " fit" + (block ? " with block scales" : "") +
             ": a smaller BN or partials = 1");
    int s = stages_for(scaling);
    rule(s >= 2 && stages <= 16, "stages must be 2 to 16 (with block scales at least 2 must fit)");
    int64_t bytes = int64_t(s) * stage_bytes() + fixed_shared_bytes(scaling);
    rule(bytes <= kSharedLimit, "the stages and C tiles need " + std::to_string(bytes) +
                                    " bytes of shared memory; at most " + std::to_string(kSharedLimit) +
                                    ": fewer stages or a smaller BN");
    return out;
  }

  // 227 KB per block (sm_90) less 2 KB for the mbarriers and the 1024-byte alignment of the buffers.
  static constexpr int64_t kSharedLimit = 225 * 1024;
};

// The configuration gemm_fp8() runs for an M x N problem on a GPU of `multiprocessors` (benchmarks/NOTES.md,
// "fp8 GEMM, round 2" and session 8); the struct's own defaults are round 1's kernel.
// - Per-tensor scales: two partials, the continuous stream, two staging buffers, 240-register consumers.
//   On the H200: 0.994x cuBLASLt at 4096^3 and 0.958x at 8192^3 in session 8; in session 9 1.060x / 1.001x
//   (throttled) and 1.006x / 0.921x (full clocks) (round 1: 0.923x / 0.877x and 0.930x / 0.883x).
// - Block scales: one partial (with two, the scales' loads and broadcast next to three accumulators spill),
//   two staging buffers, 232 registers.
// - No clusters: until session 9 every cluster_m = 2 candidate ran 2.7-3x slower than its single-block twin
//   (each stage release was a cluster-scope arrival, a MEMBAR.GPU in the SASS, twice per k-tile and
//   consumer); with CTA-scope releases they run within 3-7% of their twins, and still below them
//   (`_p2_cl2_r240_cont_eb2` 1.000x / 0.933x in session 9's run). They stay candidates.
// `M`, `N` and `multiprocessors` are not used yet; they are the inputs a per-shape choice will need.
inline GemmFp8Config gemm_fp8_default_config(Fp8Scaling scaling, int /*M*/, int /*N*/, int /*multiprocessors*/) {
  return scaling == Fp8Scaling::block
             ? GemmFp8Config{.partials = 1, .epilogue_buffers = 2}
             : GemmFp8Config{.partials = 2, .consumer_regs = 240, .continuous = true, .epilogue_buffers = 2};
}

// Configurations worth timing against each other (bench_gemm_fp8 --configs), in the order of the changes:
// round 1's kernel (the struct's defaults); two partials; clusters; both; the continuous stream with one
// and two staging buffers (the default); the same without clusters (the default with one tile row); block
// scales' default with and without clusters; and promotion every 256 of K (less precise: what the
// promotions cost with one partial).
inline std::vector<GemmFp8Config> gemm_fp8_candidates() {
  auto one_partial = [](int cluster_m, int epilogue_buffers, int promote_every) {
    return GemmFp8Config{.promote_every = promote_every, .cluster_m = cluster_m, .epilogue_buffers = epilogue_buffers};
  };
  auto two_partials = [](int cluster_m, bool continuous, int epilogue_buffers) {
    return GemmFp8Config{.partials = 2, .cluster_m = cluster_m, .consumer_regs = 240, .continuous = continuous,
                         .epilogue_buffers = epilogue_buffers};
  };
  return {one_partial(1, 1, 1),     two_partials(1, false, 1), one_partial(2, 1, 1),
          two_partials(2, false, 1), two_partials(2, true, 1),  two_partials(2, true, 2),
          two_partials(1, true, 2),  one_partial(2, 2, 1),      one_partial(1, 2, 1),
          one_partial(2, 1, 2)};
}

namespace gemm_fp8_detail {

inline weft::Kernel make_kernel(const GemmFp8Config& cfg, Fp8Scaling scaling) {
  using namespace weft;
  const bool block = scaling == Fp8Scaling::block;
  if (std::string why = cfg.problems(scaling); !why.empty())
    throw Error("make_gemm_fp8: configuration " + cfg.name() + " is not supported: " + why);
  std::string name = block ? "gemm_fp8_block_scaled" : "gemm_fp8_tensor_scaled";
  if (!(cfg == GemmFp8Config{})) name += "_" + cfg.name();
  KernelOptions options;
  options.cluster = {cfg.cluster_m, 1, 1};
  return Kernel(name, [cfg, block, scaling](TensorDesc<f8e4m3, 2> A, TensorDesc<f8e4m3, 2> B, TensorDesc<bf16, 2> C,
                                            Ptr<float> a_scale, Ptr<float> b_scale, Int M, Int N, Int K) {
    const int BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, HALF = cfg.BM / 2, EN = cfg.epilogue_n;
    const int S = cfg.stages_for(scaling), P = cfg.promote_k_tiles(scaling), CL = cfg.cluster_m;
    auto a_s = local_alloc<f8e4m3>({BM, BK}, S, "a_s");
    auto b_s = local_alloc<f8e4m3>({BN, BK}, S, "b_s");
    const int EB = cfg.epilogue_buffers;
    auto c_s = local_alloc<bf16>({HALF, EN}, 2 * EB, "c_s");  // consumer r's buffer b: stage r * EB + b
    auto full = alloc_barriers(S, 1, "full");                 // the producer's expect_bytes, then TMA bytes
    // Both consumers of every block of the cluster release a stage: each block's stage is written by the
    // multicasts of all of them.
    auto empty = alloc_barriers(S, 2 * CL, "empty");
    Int tiles_n = cdiv(N, BN), tiles_m = cdiv(M, BM);
    TileScheduler tiles(tiles_m, tiles_n, cfg.group);
    Int k_tiles = cdiv(K, BK);
    // The block's work: units t = first, first + stride, ... below `units`, unit t being tile at(t). Without
    // clusters a unit is a tile in grouped order. In clusters of two, a unit is a pair of tile rows and a
    // column, the pairs in grouped order: both blocks of a cluster walk the same units, block r taking row
    // 2 * pair + r, so that their B tile is the same.
    Int pairs = cdiv(tiles_m, CL);
    Int units = CL == 1 ? tiles.count() : pairs * tiles_n;
    Int first = program_id(0) / CL, stride = num_programs(0) / CL;
    auto at = [&](const Int& t) -> std::pair<Int, Int> {
      if (CL == 1) return tiles.tile(t);
      Int per_group = tiles_n * cfg.group;
      Int first_pair = (t / per_group) * cfg.group;
      Int rows = minimum(pairs - first_pair, Int(scalar<int32_t>(cfg.group)));
      Int within = t % per_group;
      return {(first_pair + within % rows) * CL + cluster_cta_rank(), within / rows};
    };
    auto for_each_tile = [&](auto&& body) {
      for_range(first, units, stride, [&](Int t) {
        auto [m, n] = at(t);
        body(m, n);
      });
    };
    // A consumer's release of a stage: to its own producer, or to the producers of both blocks (each
    // multicast into this block's stage).
    auto release = [&](const Pipeline& stage) {
      if (CL == 1) stage.release(empty);
      else
        for (int rank = 0; rank < CL; ++rank) stage.release(empty, Int(scalar<int32_t>(rank)));
    };
    const int producer_regs = cfg.consumer_regs == 240 ? 24 : 40;
    async_tasks(
        task("producer", {.warps = 4, .regs = producer_regs}, [&] {
          Pipeline p(S);
          for_each_tile([&](Int m, Int n) {
            for_range(0, k_tiles, [&](Int k) {
              p.acquire(empty);
              barrier_expect_bytes(full[p.index()], a_s.stage_bytes() + b_s.stage_bytes());
              async_descriptor_load(A, a_s[p.index()], {m * BM, k * BK}, full[p.index()]);
              if (CL == 1) {
                async_descriptor_load(B, b_s[p.index()], {n * BN, k * BK}, full[p.index()]);
              } else {
                // This block's share of B's rows, multicast to both blocks (mask 0b11).
                Int rank = cluster_cta_rank();
                async_descriptor_load(B, b_s[p.index()].rows(rank * (BN / CL), BN / CL),
                                      {n * BN + rank * (BN / CL), k * BK}, full[p.index()],
                                      Int(scalar<int32_t>((1 << CL) - 1)));
              }
              p.advance();
            });
          });
        }),
        task("consumer", {.warps = 4, .regs = cfg.consumer_regs, .replicas = 2}, [&] {
          Int r = task_replica_id();
          // `p`: the next stage to wait for and read; `done`: the oldest stage not yet released (the two
          // differ by the k-tiles whose wgmmas may still be running: none or one).
          Pipeline p(S), done(S);
          // Waits for the next stage and issues its wgmmas into `acc` (pending until waited for).
          auto issue = [&](const Tile<float>& acc) {
            p.wait(full);
            SharedView<f8e4m3> a = a_s[p.index()].rows(r * HALF, HALF);
            SharedView<f8e4m3> b = local_trans(b_s[p.index()]);
            Tile<float> out = async_dot(a, b, acc);
            p.advance();
            return out;
          };
          // The oldest stage's wgmmas are done: release it.
          auto retire = [&] {
            release(done);
            done.advance();
          };
          // total += the finished partial of k-tile k of tile (m, n), scaled.
          auto promote = [&](Var<float>& total, const Tile<float>& part, const Int& k, const Int& m, const Int& n) {
            if (block) {
              // 1 x 128 scales of this k-block for our rows, one 128 x 128 scale of B for the tile.
              Int rows = m * BM + r * HALF + arange(0, HALF);
              Tile<float> sa = load(a_scale + k * M + rows, rows < M, 0.0f);
              Float sb = load(b_scale + (n * BN / 128) * k_tiles + k);
              total = total + part * (sa * sb).expand_dims(1);
            } else {
              total = total + part;
            }
          };
          // Writes this consumer's rows of tile (m, n): BN / EN chunks through the staging buffers. Chunk j
          // takes buffer j % EB, free once at most EB - 1 newer stores still read shared memory (the next
          // tile's chunk 0 takes buffer 0 again: the older one when a tile has an even number of chunks).
          auto write_tile = [&](const Tile<float>& total, const Int& m, const Int& n) {
            Tile<float> result = total;
            if (!block) result = result * (load(a_scale) * load(b_scale));
            const int chunks = BN / EN;
            for (int j = 0; j < chunks; ++j) {
              async_store_wait(EB == 1 || (j == 0 && chunks % 2 != 0) ? 0 : EB - 1);
              SharedView<bf16> staging = c_s[r * EB + j % EB];
              local_store(staging, cast<bf16>(result.slice(1, j * EN, EN)));
              async_descriptor_store(C, staging, {m * BM + r * HALF, n * BN + j * EN});
            }
          };
          // The two-partial schedule over a stream of `count` >= 1 k-tiles: k-tile 0 goes into x, then pairs
          // (2i + 1 into y, 2i + 2 into x), each issued before the other partial's k-tile is waited for
          // (wait_group 1), released and handed to finish(partial, index). The last one or two after the
          // loop, so that nothing pending crosses an if_ (the k-loop is unrolled by two: a loop-carried swap
          // of the partials would copy an accumulator still being written).
          auto two_partials = [&](const Int& count, auto&& finish) {
            Var x = zeros<float>({HALF, BN});
            x = issue(zeros<float>({HALF, BN}));
            for_range(0, (count - 1) / 2, [&](Int i) {
              Tile<float> y = issue(zeros<float>({HALF, BN}));
              Tile<float> x_done = async_dot_wait(1, x);
              retire();
              finish(x_done, 2 * i);
              x = issue(zeros<float>({HALF, BN}));
              Tile<float> y_done = async_dot_wait(1, y);
              retire();
              finish(y_done, 2 * i + 1);
            });
            if_(
                count % 2 == 0,
                [&] {
                  Tile<float> y = issue(zeros<float>({HALF, BN}));
                  Tile<float> x_done = async_dot_wait(1, x);
                  retire();
                  finish(x_done, count - 2);
                  Tile<float> y_done = async_dot_wait(0, y);
                  retire();
                  finish(y_done, count - 1);
                },
                [&] {
                  Tile<float> x_done = async_dot_wait(0, x);
                  retire();
                  finish(x_done, count - 1);
                });
          };
          if (cfg.continuous) {
            // All k-tiles of the block's tiles as one stream: the next tile's first k-tile is queued on the
            // tensor cores while this consumer promotes the last one of a tile and writes the tile.
            Int count = maximum(cdiv(units - first, stride), Int(scalar<int32_t>(0)));
            if_(count > 0, [&] {
              Var total = zeros<float>({HALF, BN});
              Var<int32_t> k(0), tile(0);  // the next k-tile to finish: k-tile k of the block's tile `tile`
              two_partials(count * k_tiles, [&](const Tile<float>& part, const Int&) {
                auto coords = [&] { return at(first + tile * stride); };
                if (block) {
                  auto [m, n] = coords();
                  promote(total, part, k, m, n);
                } else {
                  total = total + part;
                }
                if_(
                    k == k_tiles - 1,
                    [&] {
                      auto [m, n] = coords();
                      write_tile(total, m, n);
                      total = zeros<float>({HALF, BN});
                      k = 0;
                      tile = tile + 1;
                    },
                    [&] { k = k + 1; });
              });
            });
          } else {
            for_each_tile([&](Int m, Int n) {
              Var total = zeros<float>({HALF, BN});  // f32, in registers: the promoted sum
              if (cfg.partials == 1) {
                Var partial = zeros<float>({HALF, BN});  // wgmma's running sum between promotions (P > 1)
                for_range(0, k_tiles, [&](Int k) {
                  if (P == 1) {
                    Tile<float> part = async_dot_wait(0, issue(zeros<float>({HALF, BN})));
                    retire();  // the tensor cores are done with the stage
                    promote(total, part, k, m, n);
                  } else {
                    Tile<float> part = async_dot_wait(0, issue(partial));
                    retire();
                    if_(
                        (k + 1) % P == 0 || k + 1 == k_tiles,
                        [&] {
                          promote(total, part, k, m, n);
                          partial = zeros<float>({HALF, BN});
                        },
                        [&] { partial = part; });
                  }
                });
              } else {
                two_partials(k_tiles, [&](const Tile<float>& part, const Int& k) { promote(total, part, k, m, n); });
              }
              write_tile(total, m, n);
            });
          }
          async_store_wait(0);
        }));
  }, options);
}

// Kernels by configuration and scaling, built once per process.
inline const weft::Kernel& kernel(const GemmFp8Config& cfg, Fp8Scaling scaling) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<weft::Kernel>> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<weft::Kernel>& k = kernels[cfg.name() + (scaling == Fp8Scaling::block ? "/block" : "/tensor")];
  if (!k) k = std::make_unique<weft::Kernel>(make_kernel(cfg, scaling));
  return *k;
}

// Persistent blocks: one per SM at most, a multiple of the cluster's size.
inline int grid_size(const GemmFp8Config& cfg, int M, int N, int multiprocessors) {
  int tiles_m = (M + cfg.BM - 1) / cfg.BM, tiles_n = (N + cfg.BN - 1) / cfg.BN, CL = cfg.cluster_m;
  return CL * std::min((tiles_m + CL - 1) / CL * tiles_n, std::max(1, multiprocessors / CL));
}

}  // namespace gemm_fp8_detail

// The kernel of configuration `cfg` (an Error when cfg.problems(scaling) is not empty). Parameters (A, B, C,
// a_scale, b_scale, M, N, K) with TMA descriptors of A [M, K] (box BM x BK), B [N, K] (box BN / cluster_m x BK)
// and C [M, N] (box BM / 2 x epilogue_n); launch it on gemm_fp8_detail::grid_size blocks.
inline weft::Kernel make_gemm_fp8(GemmFp8Config cfg, Fp8Scaling scaling) {
  return gemm_fp8_detail::make_kernel(cfg, scaling);
}

// C (M x N, bf16) = scales * A (M x K, f8e4m3) @ B^T (B stored N x K, f8e4m3); see the top of this file for
// the two scalings and the layouts of their scale buffers. K must be a multiple of 16 and N of 8 (TMA's
// 16-byte row strides). Runs `config` (default: gemm_fp8_default_config(scaling, M, N, the device's
// multiprocessors)). Launches on `stream` (or the default stream of the buffers' device) and returns
// without waiting. `loc` is the caller's line:
// every Error of the call — buffer sizes and the configuration here, a TMA rule in tma(), a launch argument
// — names it, not this header.
inline void gemm_fp8(const weft::Stream& stream, const weft::Buffer<weft::f8e4m3>& a,
                     const weft::Buffer<weft::f8e4m3>& b, const weft::Buffer<weft::bf16>& c,
                     const weft::Buffer<float>& a_scale, const weft::Buffer<float>& b_scale, int M, int N, int K,
                     Fp8Scaling scaling, std::optional<GemmFp8Config> config = std::nullopt,
                     weft::SourceLoc loc = weft::SourceLoc::current()) {
  using namespace weft;
  Device dev = Device::from_backend(*a.backend());
  const GemmFp8Config cfg = config ? *config : gemm_fp8_default_config(scaling, M, N, dev.multiprocessors());
  auto expect = [&](const char* name, size_t have, size_t want) {
    if (have != want)
      throw Error(std::string("gemm_fp8: ") + name + " holds " + std::to_string(have) + " elements, the shapes need " +
                      std::to_string(want),
                  loc);
  };
  if (M < 1 || N < 1 || K < 1)
    throw Error("gemm_fp8: M, N and K must be positive, got " + std::to_string(M) + ", " + std::to_string(N) + ", " +
                    std::to_string(K),
                loc);
  if (std::string why = cfg.problems(scaling); !why.empty())
    throw Error("gemm_fp8: configuration " + cfg.name() + " is not supported: " + why, loc);
  expect("A", a.size(), size_t(M) * K);
  expect("B", b.size(), size_t(N) * K);
  expect("C", c.size(), size_t(M) * N);
  size_t kb = (size_t(K) + 127) / 128, nb = (size_t(N) + 127) / 128;
  expect("a_scale", a_scale.size(), scaling == Fp8Scaling::block ? kb * M : 1);
  expect("b_scale", b_scale.size(), scaling == Fp8Scaling::block ? nb * kb : 1);
  Grid grid(gemm_fp8_detail::grid_size(cfg, M, N, dev.multiprocessors()), 1, 1, loc);  // launch errors name it
  gemm_fp8_detail::kernel(cfg, scaling)
      .launch(stream, grid, tma(a, {M, K}, {cfg.BM, cfg.BK}, {}, loc),
              tma(b, {N, K}, {cfg.BN / cfg.cluster_m, cfg.BK}, {}, loc),
              tma(c, {M, N}, {cfg.BM / 2, cfg.epilogue_n}, {}, loc), a_scale, b_scale, M, N, K);
}

inline void gemm_fp8(const weft::Buffer<weft::f8e4m3>& a, const weft::Buffer<weft::f8e4m3>& b,
                     const weft::Buffer<weft::bf16>& c, const weft::Buffer<float>& a_scale,
                     const weft::Buffer<float>& b_scale, int M, int N, int K, Fp8Scaling scaling,
                     std::optional<GemmFp8Config> config = std::nullopt,
                     weft::SourceLoc loc = weft::SourceLoc::current()) {
  weft::Device dev = weft::Device::from_backend(*a.backend());
  gemm_fp8(dev.stream(), a, b, c, a_scale, b_scale, M, N, K, scaling, config, loc);
}
