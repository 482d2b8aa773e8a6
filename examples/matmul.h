// The tiled matmul kernel of examples/matmul.cpp, shared with benchmarks/bench_cpu_compile.cpp.
// C[M,N] (f32) = A[M,K] @ B[K,N] (bf16, row-major), any M, N, K; edge tiles are masked.
#pragma once

#include <weft/weft.h>

inline weft::Kernel make_matmul() {
  using namespace weft;
  return Kernel("matmul", [](Ptr<bf16> a, Ptr<bf16> b, Ptr<float> c, Int M, Int N, Int K, Const<int> BM, Const<int> BN,
                             Const<int> BK) {
    Int rows = program_id(0) * BM + arange(0, BM);  // [BM]
    Int cols = program_id(1) * BN + arange(0, BN);  // [BN]
    Int ks = arange(0, BK);                         // [BK]
    Var acc = zeros<float>({BM, BN});
    for_range(0, K, BK, [&](Int k0) {
      Int ka = k0 + ks;
      // A tile [BM, BK] and B tile [BK, BN], zero outside the matrices.
      Tile<bf16> a_tile = load(a + expand_dims(rows, 1) * K + expand_dims(ka, 0),
                               (expand_dims(rows, 1) < M) & (expand_dims(ka, 0) < K), 0);
      Tile<bf16> b_tile = load(b + expand_dims(ka, 1) * N + expand_dims(cols, 0),
                               (expand_dims(ka, 1) < K) & (expand_dims(cols, 0) < N), 0);
      acc = dot(a_tile, b_tile, acc);
    });
    store(c + expand_dims(rows, 1) * N + expand_dims(cols, 0), acc,
          (expand_dims(rows, 1) < M) & (expand_dims(cols, 0) < N));
  });
}

