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
// there) into a fresh accumulator, waits for it and adds it, scaled, into an f32 accumulator in registers.
//
// One producer warp group (40 registers per thread) issues TMA loads of A and B tiles into a ring of
// `stages` shared-memory stages guarded by `full` / `empty` mbarriers; two consumer warp groups (232
// registers) each multiply their 64 rows of the BM x BN block; C goes out through a small shared-memory
// tile and TMA stores. Blocks are persistent (one per SM) and walk the output tiles in grouped order.
// TMA zero-fills reads past the edges and clips writes: any M; K a multiple of 16 (TMA's 16-byte row
// stride for 1-byte elements), N a multiple of 8 (C's rows).
#pragma once

#include <algorithm>
#include <string>

#include <weft/weft.h>

enum class Fp8Scaling { per_tensor, block };

struct GemmFp8Config {
  int BM = 128, BN = 128, BK = 128;  // block tile; BK = 128 bytes of fp8: the 128-byte swizzle
  int stages = 6;                    // 32 KB each (block scaling: at most 4, see below)
  int group = 8;                     // rows of tiles per group of the tile order
  int epilogue_n = 64;               // columns of C written per TMA store
  int promote_every = 1;             // per_tensor: k-tiles wgmma accumulates before promotion (block: 1)
};

inline weft::Kernel make_gemm_fp8(GemmFp8Config cfg, Fp8Scaling scaling) {
  using namespace weft;
  const bool block = scaling == Fp8Scaling::block;
  if (cfg.BK != 128 || cfg.BM != 128 || cfg.BN % cfg.epilogue_n != 0 || cfg.promote_every < 1 ||
      (block && 128 % cfg.BN != 0))
    throw Error("make_gemm_fp8: BK and BM must be 128, epilogue_n must divide BN, promote_every >= 1, and with block "
                "scales BN must divide 128");
  return Kernel(block ? "gemm_fp8_block_scaled" : "gemm_fp8_tensor_scaled", [cfg, block](
                    TensorDesc<f8e4m3, 2> A, TensorDesc<f8e4m3, 2> B, TensorDesc<bf16, 2> C, Ptr<float> a_scale,
                    Ptr<float> b_scale, Int M, Int N, Int K) {
    // With block scales, the row scales broadcast over the accumulator go through 32 KB of shared memory
    // per consumer (a loaded vector is not in the accumulator's register layout): two stages fewer fit.
    const int BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, HALF = cfg.BM / 2, EN = cfg.epilogue_n;
    const int S = block ? std::min(cfg.stages, 4) : cfg.stages;
    const int P = block ? 1 : cfg.promote_every;
    auto a_s = local_alloc<f8e4m3>({BM, BK}, S, "a_s");
    auto b_s = local_alloc<f8e4m3>({BN, BK}, S, "b_s");
    auto c_s = local_alloc<bf16>({HALF, EN}, 2, "c_s");  // one per consumer
    auto full = alloc_barriers(S, 1, "full");            // the producer's expect_bytes, then TMA bytes
    auto empty = alloc_barriers(S, 2, "empty");          // both consumers release a stage
    TileScheduler tiles(cdiv(M, BM), cdiv(N, BN), cfg.group);
    Int k_tiles = cdiv(K, BK);
    async_tasks(
        task("producer", {.warps = 4, .regs = 40}, [&] {
          Pipeline p(S);
          tiles.for_each([&](Int m, Int n) {
            for_range(0, k_tiles, [&](Int k) {
              p.acquire(empty);
              barrier_expect_bytes(full[p.index()], a_s.stage_bytes() + b_s.stage_bytes());
              async_descriptor_load(A, a_s[p.index()], {m * BM, k * BK}, full[p.index()]);
              async_descriptor_load(B, b_s[p.index()], {n * BN, k * BK}, full[p.index()]);
              p.advance();
            });
          });
        }),
        task("consumer", {.warps = 4, .regs = 232, .replicas = 2}, [&] {
          Int r = task_replica_id();
          Pipeline p(S);
          tiles.for_each([&](Int m, Int n) {
            Var total = zeros<float>({HALF, BN});    // f32, in registers: the promoted sum
            Var partial = zeros<float>({HALF, BN});  // wgmma's running sum between promotions (P > 1)
            Int rows = m * BM + r * HALF + arange(0, HALF);
            for_range(0, k_tiles, [&](Int k) {
              p.wait(full);
              SharedView<f8e4m3> a = a_s[p.index()].rows(r * HALF, HALF);
              SharedView<f8e4m3> b = local_trans(b_s[p.index()]);
              if (P == 1) {
                Tile<float> part = async_dot_wait(0, async_dot(a, b, zeros<float>({HALF, BN})));
                p.release(empty);  // the tensor cores are done with the stage
                if (block) {
                  // 1 x 128 scales of this k-block for our rows, one 128 x 128 scale of B for the tile.
                  Tile<float> sa = load(a_scale + k * M + rows, rows < M, 0.0f);
                  Float sb = load(b_scale + (n * BN / 128) * k_tiles + k);
                  total = total + part * (sa * sb).expand_dims(1);
                } else {
                  total = total + part;
                }
              } else {
                Tile<float> part = async_dot_wait(0, async_dot(a, b, partial));
                p.release(empty);
                if_(
                    (k + 1) % P == 0 || k + 1 == k_tiles,
                    [&] {
                      total = total + part;
                      partial = zeros<float>({HALF, BN});
                    },
                    [&] { partial = part; });
              }
              p.advance();
            });
            Tile<float> result = total;
            if (!block) result = result * (load(a_scale) * load(b_scale));
            for (int j = 0; j < BN / EN; ++j) {
              async_store_wait(0);  // the previous store has read c_s[r]
              local_store(c_s[r], cast<bf16>(result.slice(1, j * EN, EN)));
              async_descriptor_store(C, c_s[r], {m * BM + r * HALF, n * BN + j * EN});
            }
          });
          async_store_wait(0);
        }));
  });
}

// The kernels of the default configuration, built once.
inline const weft::Kernel& gemm_fp8_kernel(Fp8Scaling scaling) {
  static const weft::Kernel tensor = make_gemm_fp8({}, Fp8Scaling::per_tensor),
                            blocks = make_gemm_fp8({}, Fp8Scaling::block);
  return scaling == Fp8Scaling::block ? blocks : tensor;
}

// C (M x N, bf16) = scales * A (M x K, f8e4m3) @ B^T (B stored N x K, f8e4m3); see the top of this file for
// the two scalings and the layouts of their scale buffers. K must be a multiple of 16 and N of 8 (TMA's
// 16-byte row strides). Launches on `stream` (or the default stream of the buffers' device) and returns
// without waiting. `loc` is the caller's line: every Error of the call — buffer sizes here, a TMA rule in
// tma(), a launch argument — names it, not this header.
inline void gemm_fp8(const weft::Stream& stream, const weft::Buffer<weft::f8e4m3>& a,
                     const weft::Buffer<weft::f8e4m3>& b, const weft::Buffer<weft::bf16>& c,
                     const weft::Buffer<float>& a_scale, const weft::Buffer<float>& b_scale, int M, int N, int K,
                     Fp8Scaling scaling, weft::SourceLoc loc = weft::SourceLoc::current()) {
  using namespace weft;
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
  expect("A", a.size(), size_t(M) * K);
  expect("B", b.size(), size_t(N) * K);
  expect("C", c.size(), size_t(M) * N);
  size_t kb = (size_t(K) + 127) / 128, nb = (size_t(N) + 127) / 128;
  expect("a_scale", a_scale.size(), scaling == Fp8Scaling::block ? kb * M : 1);
  expect("b_scale", b_scale.size(), scaling == Fp8Scaling::block ? nb * kb : 1);
  const GemmFp8Config cfg;
  Device dev = Device::from_backend(*a.backend());
  int tiles = ((M + cfg.BM - 1) / cfg.BM) * ((N + cfg.BN - 1) / cfg.BN);
  Grid grid(std::min(tiles, dev.multiprocessors()), 1, 1, loc);  // launch errors name the Grid's line
  gemm_fp8_kernel(scaling).launch(stream, grid, tma(a, {M, K}, {cfg.BM, cfg.BK}, {}, loc),
                                  tma(b, {N, K}, {cfg.BN, cfg.BK}, {}, loc),
                                  tma(c, {M, N}, {cfg.BM / 2, cfg.epilogue_n}, {}, loc), a_scale, b_scale, M, N, K);
}

inline void gemm_fp8(const weft::Buffer<weft::f8e4m3>& a, const weft::Buffer<weft::f8e4m3>& b,
                     const weft::Buffer<weft::bf16>& c, const weft::Buffer<float>& a_scale,
                     const weft::Buffer<float>& b_scale, int M, int N, int K, Fp8Scaling scaling,
                     weft::SourceLoc loc = weft::SourceLoc::current()) {
  weft::Device dev = weft::Device::from_backend(*a.backend());
  gemm_fp8(dev.stream(), a, b, c, a_scale, b_scale, M, N, K, scaling, loc);
}
