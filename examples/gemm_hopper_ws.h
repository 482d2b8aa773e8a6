// PLACEHOLDER of examples/gemm_hopper_ws.h — NOT the warp-specialized Hopper GEMM.
//
// The real gemm_hopper_ws (TMA, wgmma, producer/consumer warp groups) is being written on another branch.
// This stand-in has the same signature so that benchmarks/bench_gemm builds and runs end to end; it is
// the plain tiled `dot` matmul of examples/matmul.h (tensor cores through mma.sync, operands staged in
// shared memory, no pipelining), with bf16 output and both B layouts. It is correct but slow: any figure
// bench_gemm prints for "weft" while this file is in place measures this placeholder, not the Hopper GEMM.
// Replace the whole file when merging the real one.
#pragma once

#include <string>

#include <weft/weft.h>

// Tells bench_gemm to label its "weft" figures as this placeholder's. The real header does not define it.
#define WEFT_GEMM_HOPPER_WS_IS_PLACEHOLDER 1

namespace gemm_placeholder {

// C = A @ B (b_is_nk false: B is K x N) or A @ B^T (true: B is N x K); every matrix bf16, row-major; f32
// accumulation. One program per BM x BN tile of C; edges are masked, so any M, N, K work.
inline weft::Kernel make_tiled_gemm(bool b_is_nk) {
  using namespace weft;
  return Kernel(b_is_nk ? "gemm_placeholder_nk" : "gemm_placeholder_kn",
                [b_is_nk](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> c, Int M, Int N, Int K, Const<int> BM, Const<int> BN,
                          Const<int> BK) {
                  Int rows = program_id(0) * BM + arange(0, BM);  // [BM]
                  Int cols = program_id(1) * BN + arange(0, BN);  // [BN]
                  Int ks = arange(0, BK);                         // [BK]
                  Var acc = zeros<float>({BM, BN});
                  for_range(0, K, BK, [&](Int k0) {
                    Int ka = k0 + ks;
                    Tile<bf16> a_tile = load(a + expand_dims(rows, 1) * K + expand_dims(ka, 0),
                                             (expand_dims(rows, 1) < M) & (expand_dims(ka, 0) < K), 0);
                    // B is N x K: read a [BN, BK] tile along B's rows (coalesced), then transpose it to [BK, BN].
                    Tile<bf16> b_tile =
                        b_is_nk ? trans(load(b + expand_dims(cols, 1) * K + expand_dims(ka, 0),
                                             (expand_dims(cols, 1) < N) & (expand_dims(ka, 0) < K), 0))
                                : load(b + expand_dims(ka, 1) * N + expand_dims(cols, 0),
                                       (expand_dims(ka, 1) < K) & (expand_dims(cols, 0) < N), 0);
                    acc = dot(a_tile, b_tile, acc);
                  });
                  store(c + expand_dims(rows, 1) * N + expand_dims(cols, 0), cast<bf16>(acc),
                        (expand_dims(rows, 1) < M) & (expand_dims(cols, 0) < N));
                });
}

}  // namespace gemm_placeholder

// C (M x N) = A (M x K) @ B, bf16 row-major, f32 accumulation; B is K x N (b_is_nk false) or N x K (true).
// Launches on the device's default stream (the buffers' device); returns without waiting for the result.
inline void gemm_hopper_ws(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                           const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk) {
  // A wrong buffer would otherwise be read or written out of bounds on the GPU: say so here instead.
  auto expect = [](const char* name, size_t have, size_t want) {
    if (have != want)
      throw weft::Error(std::string("gemm_hopper_ws: ") + name + " holds " + std::to_string(have) +
                        " elements, the shapes need " + std::to_string(want));
  };
  expect("A", a.size(), size_t(M) * K);
  expect("B", b.size(), size_t(K) * N);
  expect("C", c.size(), size_t(M) * N);
  // Traced and compiled at the first launch of each; kept for the process's lifetime.
  static const weft::Kernel kn = gemm_placeholder::make_tiled_gemm(false), nk = gemm_placeholder::make_tiled_gemm(true);
  const int BM = 64, BN = 64, BK = 32;  // 64x64 tiles: 4 warps each own 16x8 mma tiles; BK 32 = two k16 steps
  (b_is_nk ? nk : kn).launch(weft::Grid((M + BM - 1) / BM, (N + BN - 1) / BN), a, b, c, M, N, K, BM, BN, BK);
}
