// A persistent, warp-specialized bf16 GEMM for Hopper, written only with weft's public API:
//   C (M x N) = A (M x K) @ B, B stored N x K (K contiguous: C = A B^T) or K x N (N contiguous, read by
//   wgmma as a transposed, N-major operand in 64-column panels), f32 accumulation, bf16 out.
//
// One producer warp group (40 registers per thread) issues TMA loads of A and B tiles into a ring of
// `stages` shared-memory stages guarded by `full` / `empty` mbarriers; two consumer warp groups (232
// registers) each multiply their 64 rows of the 128 x 256 block with wgmma, then write C through a small
// shared-memory tile and TMA stores. Blocks are persistent (one per SM) and walk the output tiles in
// grouped order for L2 reuse. TMA zero-fills reads past the edges and clips writes, so any M, N work;
// K must be a multiple of 8 (TMA's 16-byte row stride).
#pragma once

#include <string>

#include <weft/weft.h>

struct GemmConfig {
  int BM = 128, BN = 256, BK = 64;  // block tile; BK * 2 bytes = the 128-byte swizzle
  int stages = 4;
  int group = 8;                     // rows of tiles per group of the tile order
  int epilogue_n = 64;               // columns of C written per TMA store
};

inline weft::Kernel make_gemm_hopper_ws(GemmConfig cfg, bool b_is_nk) {
  using namespace weft;
  return Kernel(b_is_nk ? "gemm_hopper_ws_nk" : "gemm_hopper_ws_kn", [cfg, b_is_nk](TensorDesc<bf16, 2> A,
                                                                                    TensorDesc<bf16, 2> B,
                                                                                    TensorDesc<bf16, 2> C, Int M, Int N,
                                                                                    Int K) {
    const int BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, S = cfg.stages, HALF = cfg.BM / 2, EN = cfg.epilogue_n;
    const int PANEL = 64;  // columns of B (K x N) one TMA box brings: 128 bytes, the swizzle's width
    auto a_s = local_alloc<bf16>({BM, BK}, S, "a_s");
    auto b_s = b_is_nk ? local_alloc<bf16>({BN, BK}, S, "b_s") : local_alloc<bf16>({BK, BN}, S, "b_s");
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
              if (b_is_nk) {
                async_descriptor_load(B, b_s[p.index()], {n * BN, k * BK}, full[p.index()]);
              } else {
                for (int j = 0; j < BN / PANEL; ++j)
                  async_descriptor_load(B, b_s[p.index()].cols(j * PANEL, PANEL), {k * BK, n * BN + j * PANEL},
                                        full[p.index()]);
              }
              p.advance();
            });
          });
        }),
        task("consumer", {.warps = 4, .regs = 232, .replicas = 2}, [&] {
          Int r = task_replica_id();
          // One wgmma group stays in flight: step k waits for step k - 1's group, then releases its stage
          // (`done` trails `p` by one step).
          Pipeline p(S), done(S);
          tiles.for_each([&](Int m, Int n) {
            Var acc = zeros<float>({HALF, BN});
            for_range(0, k_tiles, [&](Int k) {
              p.wait(full);
              SharedView<bf16> b = b_is_nk ? local_trans(b_s[p.index()]) : b_s[p.index()];
              acc = async_dot_wait(1, async_dot(a_s[p.index()].rows(r * HALF, HALF), b, acc));
              if_(k > 0, [&] {
                done.release(empty);
                done.advance();
              });
              p.advance();
            });
            Tile<float> result = async_dot_wait(0, acc);
            if_(k_tiles > 0, [&] {
              done.release(empty);
              done.advance();
            });
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

// C (M x N) = A (M x K) @ B, bf16 row-major, f32 accumulation; B is K x N (b_is_nk false) or N x K (true).
// N and K must be multiples of 8 (TMA's 16-byte row strides). Launches on the default stream of the
// buffers' device and returns without waiting. `loc` is the caller's line: every Error of the call —
// buffer sizes here, a TMA rule in tma(), a launch argument in Kernel::launch — names it, not this header.
inline void gemm_hopper_ws(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                           const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk,
                           weft::SourceLoc loc = weft::SourceLoc::current()) {
  using namespace weft;
  auto expect = [&](const char* name, size_t have, size_t want) {
    if (have != want)
      throw Error(std::string("gemm_hopper_ws: ") + name + " holds " + std::to_string(have) +
                      " elements, the shapes need " + std::to_string(want),
                  loc);
  };
  expect("A", a.size(), size_t(M) * K);
  expect("B", b.size(), size_t(K) * N);
  expect("C", c.size(), size_t(M) * N);
  static const GemmConfig cfg;
  static const Kernel nk = make_gemm_hopper_ws(cfg, true), kn = make_gemm_hopper_ws(cfg, false);
  Device dev = Device::from_backend(*a.backend());
  int tiles = ((M + cfg.BM - 1) / cfg.BM) * ((N + cfg.BN - 1) / cfg.BN);
  Grid grid(std::min(tiles, dev.multiprocessors()), 1, 1, loc);  // launch errors name the Grid's line
  auto c_desc = tma(c, {M, N}, {cfg.BM / 2, cfg.epilogue_n}, {}, loc);
  if (b_is_nk)
    nk.launch(grid, tma(a, {M, K}, {cfg.BM, cfg.BK}, {}, loc), tma(b, {N, K}, {cfg.BN, cfg.BK}, {}, loc), c_desc, M, N, K);
  else
    kn.launch(grid, tma(a, {M, K}, {cfg.BM, cfg.BK}, {}, loc), tma(b, {K, N}, {cfg.BK, 64}, {}, loc), c_desc, M, N, K);
}
