// The GEMM's plain-load kernels, for products too thin for the warp-specialized kernel's tiles or with rows
// TMA cannot stride (N or K not a multiple of 8, buffers not 16-byte aligned): the small-M FMA kernel
// (make_gemm_small_m), the tensor-core kernel with plain loads (make_gemm_rows_mma) and the bulk-copy FMA
// kernel (make_gemm_rows_bulk), each with its plan (columns over the grid, K split over it where there are
// few column blocks) and its launch (gemm_small_m, gemm_rows_mma, gemm_rows_bulk). gemm() (gemm.h) tunes
// among them and the warp-specialized configurations.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "gemm_hopper_ws.h"

namespace gemm_detail {

inline int64_t cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// M rounded up to a power of two, at least `least`: the rows of A a plain-load kernel is specialized for.
inline int padded_rows(int M, int least) {
  int mp = least;
  while (mp < M) mp *= 2;
  return mp;
}

// The plain-load kernels' split K. In a kernel: element `at` (m N + n) of a program's result, into C (one
// slice) or into slice `slice` of the f32 partial sums in `w` (slices x M x N).
inline void store_result(bool sliced, weft::Ptr<float> w, weft::Ptr<weft::bf16> c, weft::Long slice, weft::Int M,
                         weft::Long Nl, const weft::Long& at, const weft::Tile<float>& value, const weft::Bool& keep) {
  using namespace weft;
  if (sliced) store(w + slice * cast<int64_t>(M) * Nl + at, value, keep);
  else store(c + at, cast<bf16>(value), keep);
}

// On the host: the partial sums' workspace for `slices` slices (with one, the kernel writes C and the
// workspace is not touched: an element is passed for the signature's sake).
inline weft::Buffer<float> slices_workspace(const weft::Device& dev, int64_t slices, int M, int N,
                                            weft::SourceLoc loc) {
  return workspace(dev, slices == 1 ? 1 : size_t(slices) * M * N, loc);
}

// Then, with several slices, C = the sum of the partial sums in order (make_gemm_splitk_reduce); with one,
// the kernel wrote C itself.
inline void sum_slices(const weft::Stream& stream, const weft::Buffer<float>& w, const weft::Buffer<weft::bf16>& c,
                       int M, int N, int64_t slices, weft::SourceLoc loc) {
  if (slices > 1)
    splitk_reduce_kernel().launch(stream, splitk_reduce_grid(M, N, loc), w, c, M, N, M, int(slices));
}

// M <= 16 rows of C with the rows of A and B wherever they are (any N, K, alignment). A product this thin
// is bound by reading B once, so the kernel is built for bandwidth: no tensor cores and no shared memory in
// its loop, B streamed with coalesced 2-byte loads (rows that need not be 4-byte aligned), products summed
// with FMA in f32. Each thread keeps R slots of B (separate one-register tiles, so that a warp's lanes read
// consecutive elements and no load sits behind an alignment check), U k-steps of them loaded before any is
// used, and MP x R accumulators; A's elements (tiny, cached) are read where they are needed and each one
// serves the R slots. Rows of A past M and columns of B past N are clamped to the last real ones, so that
// the main loop needs no masks: their sums are computed and never stored.
// - B K x N (rows N-contiguous): a program owns 32 R columns (slot r: columns 32 r .. 32 r + 31) and its
//   K slice; its kSmallMWarps warps take turns over the rows of B (warp w: rows k + w, k + w + W, ...), and
//   the warps' sums are added once at the end.
// - B N x K (columns of C are rows of B): a program of one warp owns R rows of B (slot r: row n0 + r) and
//   its K slice, 32 U elements of each row per step (lane l: k + 32 u + l); a sum over the warp (shuffles)
//   gives each output at the end.
// Program (j, s) covers K slice s ([s k_slice, s k_slice + k_slice)); k_slice is a multiple of the step.
// With one slice it writes C; with several, f32 partial sums into the split-K workspace [slices * M, N],
// which make_gemm_splitk_reduce sums in order.
inline constexpr int kSmallM = 16;  // the most rows the small-M kernel takes

// The rows of C up to which gemm() reads rows TMA cannot stride in place (the small-M kernel) instead of
// copying them: on the H200 (benchmarks/NOTES.md, session 7) the kernel is 1.8-2.2x faster than the
// padded copies at M 1, but 1.2-2x slower at M 16 (each thread's FMAs and re-reads of A), with the
// crossover near M 8 for B N x K and near M 4 for B K x N.
inline int small_m_limit(bool b_is_nk) { return b_is_nk ? 8 : 4; }
inline constexpr int kSmallMWarps = 8;  // of the K x N kernel (the N x K one has one warp)

struct SmallMShape {
  int mp;  // M rounded up to 1, 2, 4, 8 or 16
  int r;   // slots of B per thread
  int u;   // k-steps per loop iteration
  int columns_per_program(bool b_is_nk) const { return b_is_nk ? r : 32 * r; }
  int k_step(bool b_is_nk) const { return b_is_nk ? 32 * u : kSmallMWarps * u; }
};

// Slots and steps per padded M: enough loads in flight per thread (R U of them), A's reads shared by R
// slots, and MP R accumulators that leave room for the rest (ptxas -v of each specialization: README).
inline SmallMShape small_m_shape(int M, bool b_is_nk) {
  const int mp = padded_rows(M, 1);
  if (b_is_nk) return mp <= 4 ? SmallMShape{mp, 8, 2} : SmallMShape{mp, 4, 2};
  return mp <= 2 ? SmallMShape{mp, 2, 4} : SmallMShape{mp, 4, 2};
}

inline weft::Kernel make_gemm_small_m(bool b_is_nk, bool sliced) {
  using namespace weft;
  std::string name = std::string("gemm_small_m_") + (b_is_nk ? "nk" : "kn") + (sliced ? "_sliced" : "");
  KernelOptions options;
  options.num_warps = b_is_nk ? 1 : kSmallMWarps;
  return Kernel(name, [b_is_nk, sliced](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> c, Ptr<float> w, Int M, Int N, Int K,
                                        Int k_slice, Const<int> MP, Const<int> R, Const<int> U) {
    const int W = b_is_nk ? 1 : kSmallMWarps;
    const int step = b_is_nk ? 32 * U : W * U;
    // The split-K reduce (which waits for this grid) may be scheduled now: a grid of about one wave, so its
    // programs take no slot from this one's and start the moment it ends.
    if (sliced) launch_dependent_grids();
    Int k_begin = program_id(1) * k_slice;
    Int k_end = minimum(K, k_begin + k_slice);
    Int k_main = k_begin + (k_end - k_begin) / step * step;  // whole steps; the rest, one row at a time
    Long Kl = cast<int64_t>(K), Nl = cast<int64_t>(N);
    // Row m of A (the last real row for padding rows).
    std::vector<Ptr<bf16>> a_row;
    for (int m = 0; m < MP; ++m) a_row.push_back(a + cast<int64_t>(minimum(M - 1, m)) * Kl);
    // A tile of the program's shape: [W, 32], warp by lane (one element per thread).
    const Shape tile = b_is_nk ? Shape{32} : Shape{W, 32};
    Int lane = b_is_nk ? arange(0, 32) : expand_dims(arange(0, 32), 0);
    Int warp = b_is_nk ? Int() : expand_dims(arange(0, W), 1);
    std::deque<Var<float>> acc;  // acc[m * R + r]
    for (int i = 0; i < MP * R; ++i) acc.emplace_back(zeros<float>(tile));

    // The B elements of slot r at k-step k (K x N: row k of this warp; N x K: element k of row r), and
    // the A element of row m that multiplies them.
    std::vector<Long> slot_base;  // per slot: offset of its first element in B
    Int n0 = program_id(0) * (b_is_nk ? int(R) : 32 * R);
    for (int r = 0; r < R; ++r) {
      if (b_is_nk) slot_base.push_back(cast<int64_t>(minimum(N - 1, n0 + r)) * Kl);
      else slot_base.push_back(cast<int64_t>(minimum(N - 1, n0 + 32 * r + lane)));
    }
    // (K x N: one 64-bit product per loop iteration, the step's rows at offsets that stay out of the loop.)
    auto b_at = [&](int r, Int k, int u) {
      return b_is_nk ? b + slot_base[r] + cast<int64_t>(k + u * 32 + lane)
                     : b + slot_base[r] + cast<int64_t>(k + warp) * Nl + Nl * int64_t(u * W);
    };
    auto a_at = [&](int m, Int k) {  // K x N: one element per warp, in every lane
      return b_is_nk ? a_row[m] + (k + lane) : a_row[m] + broadcast_to(k + warp, tile);
    };
    // `rows` k-steps from k, their B elements `bv` (slot r of step u at u * R + r) already loaded.
    auto in_k = [&](Int kk) { return b_is_nk ? kk + lane < k_end : broadcast_to(kk + warp < k_end, tile); };
    auto multiply = [&](Int k, int rows, bool masked, const std::vector<Tile<bf16>>& bv) {
      for (int u = 0; u < rows; ++u) {
        Int kk = k + u * (b_is_nk ? 32 : W);
        for (int m = 0; m < MP; ++m) {
          Float av = cast<float>(masked ? load(a_at(m, kk), in_k(kk), 0) : load(a_at(m, kk)));
          for (int r = 0; r < R; ++r) acc[m * R + r] = fma(av, cast<float>(bv[u * R + r]), acc[m * R + r]);
        }
      }
    };
    // The whole steps, software-pipelined: each iteration loads the next step's B (the last one loads its
    // own step again, so that no address leaves the slice) before it multiplies the current one, so that a
    // thread has a step of loads in flight while it computes.
    std::deque<Var<bf16>> next;
    for (int i = 0; i < U * R; ++i) next.emplace_back(zeros<bf16>(tile));
    auto load_step = [&](Int k) {
      for (int u = 0; u < U; ++u)
        for (int r = 0; r < R; ++r) next[u * R + r] = load(b_at(r, k, u));
    };
    if_(k_main > k_begin, [&] { load_step(k_begin); });
    for_range(k_begin, k_main, step, [&](Int k) {
      std::vector<Tile<bf16>> bv;
      for (int i = 0; i < U * R; ++i) bv.push_back(next[i].read());
      load_step(minimum(k + step, k_main - step));
      multiply(k, U, false, bv);
    });
    // The rest of the slice (fewer than a step): one masked step of 32 (N x K) or W rows (K x N) at a time.
    for_range(k_main, k_end, b_is_nk ? 32 : W, [&](Int k) {
      std::vector<Tile<bf16>> bv;
      for (int r = 0; r < R; ++r) bv.push_back(load(b_at(r, k, 0), in_k(k), 0));
      multiply(k, 1, true, bv);
    });

    Long s = cast<int64_t>(program_id(1));
    for (int m = 0; m < MP; ++m)
      for (int r = 0; r < R; ++r) {
        // Output (m, n): the sum over the warp (N x K) or over the warps (K x N).
        Int n = b_is_nk ? n0 + r : n0 + 32 * r + arange(0, 32);
        Float sum_mr = sum(acc[m * R + r].read(), 0);
        Bool keep = (n < N) & (M > m);
        Long at = Nl * int64_t(m) + cast<int64_t>(n);
        store_result(sliced, w, c, s, M, Nl, at, sum_mr, keep);
      }
  }, options);
}

inline const weft::Kernel& small_m_kernel(bool b_is_nk, bool sliced) {
  static const weft::Kernel kernels[2][2] = {{make_gemm_small_m(false, false), make_gemm_small_m(false, true)},
                                             {make_gemm_small_m(true, false), make_gemm_small_m(true, true)}};
  return kernels[b_is_nk][sliced];
}

// K of an M-row product cut into slices of whole `step`s for the plain-load kernels, one program per slice
// and column block: `wanted` slices, but none shorter than 4 steps and the partial sums' traffic (slices x
// M x N f32, written and read back) at most about a quarter of B's bytes. Returns {k_slice, slices}.
inline std::pair<int64_t, int64_t> slice_k(int M, int K, int64_t step, int64_t wanted) {
  const int64_t k_steps = cdiv64(K, step);
  const int64_t slices_max = std::max<int64_t>(1, std::min<int64_t>(k_steps / 4, K / (16 * int64_t(M))));
  const int64_t k_slice = cdiv64(k_steps, std::clamp<int64_t>(wanted, 1, slices_max)) * step;
  return {k_slice, cdiv64(K, k_slice)};
}

// How the small-M product runs on `sms` multiprocessors: the grid's columns from N, and K sliced (slice_k)
// for about 48 warps per multiprocessor.
struct SmallMPlan {
  SmallMShape shape;
  int64_t col_blocks, slices, k_slice;
};
inline SmallMPlan plan_small_m(int M, int N, int K, bool b_is_nk, int sms) {
  SmallMPlan p;
  p.shape = small_m_shape(M, b_is_nk);
  p.col_blocks = cdiv64(N, p.shape.columns_per_program(b_is_nk));
  const int64_t warps = b_is_nk ? 1 : kSmallMWarps;
  std::tie(p.k_slice, p.slices) =
      slice_k(M, K, p.shape.k_step(b_is_nk), cdiv64(cdiv64(48 * int64_t(sms), warps), p.col_blocks));
  return p;
}

inline void gemm_small_m(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                         const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk, const weft::Device& dev,
                         weft::SourceLoc loc) {
  const SmallMPlan p = plan_small_m(M, N, K, b_is_nk, dev.multiprocessors());
  const weft::Stream stream = dev.stream();
  const weft::Grid grid(int(p.col_blocks), int(p.slices), 1, loc);
  weft::Buffer<float> w = slices_workspace(dev, p.slices, M, N, loc);
  small_m_kernel(b_is_nk, p.slices > 1)
      .launch(stream, grid, a, b, c, w, M, N, K, int(p.k_slice), p.shape.mp, p.shape.r, p.shape.u);
  sum_slices(stream, w, c, M, N, p.slices, loc);
}

// M <= 64 rows of C with the rows of A and B wherever they are (any N, K, alignment), on the tensor cores:
// the swapped product C^T = B^T A^T, so that B's columns fill wgmma's 64-row blocks and A's padded rows its
// N (MP: 8, 16, 32 or 64). B and A are read with plain loads (16 bytes a thread, coalesced along their
// contiguous dimension; rows not 16-byte aligned as the two aligned blocks around each chunk, shifted),
// written into a two-stage shared ring (16-byte swizzled stores) and multiplied there by async_dot, one wgmma
// group in flight; the next step's loads (the next two, with MP <= 16 and BN 64) are issued before the current
// step is stored, so that each thread has B in flight while the tensor cores run. No copies of the operands: what the padded route costs a thin product (B read, written and read
// again) is what this kernel saves. Rows of A past M are clamped to the last real one (computed, never
// stored); the last partial step of K is masked. Program (j, s): columns [BN j, BN j + BN) of C (the last
// block moved back to end at N; N >= BN) and K slice s, C or f32 partial sums (sliced) as make_gemm_small_m.
// The most rows of A (padded) and columns a program with which the plain-load tensor-core kernel keeps two
// steps of loads in flight (more spill: ptxas, sm_90a).
inline constexpr int kRowsMmaTwoStepsRows = 16, kRowsMmaTwoStepsColumns = 64;
inline weft::Kernel make_gemm_rows_mma(bool b_is_nk, bool sliced) {
  using namespace weft;
  std::string name = std::string("gemm_rows_mma_") + (b_is_nk ? "nk" : "kn") + (sliced ? "_sliced" : "");
  KernelOptions options;
  options.num_warps = 4;
  return Kernel(name, [b_is_nk, sliced](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> c, Ptr<float> w, Int M, Int N, Int K,
                                        Int k_slice, Const<int> MP, Const<int> BN) {
    const int BK = 64;
    // The split-K reduce (which waits for this grid) may be scheduled now: a grid of about one wave, so its
    // programs take no slot from this one's and start the moment it ends.
    if (sliced) launch_dependent_grids();
    Int k_begin = program_id(1) * k_slice;
    Int k_end = minimum(K, k_begin + k_slice);
    Int k_main = k_begin + (k_end - k_begin) / BK * BK;
    Long Kl = cast<int64_t>(K), Nl = cast<int64_t>(N);
    // The last block of columns ends at N (N >= BN): it shares columns with the one before, which both
    // compute alike and store alike, and no column index needs a clamp (which would hide from the
    // compiler that a row's elements are consecutive, and so its 16-byte loads).
    Int n0 = minimum(program_id(0) * BN, N - BN);
    Int ks = arange(0, BK);
    Long a_rows = expand_dims(cast<int64_t>(minimum(M - 1, arange(0, MP))) * Kl, 1);  // [MP, 1]
    Long b_cols = cast<int64_t>(n0 + arange(0, BN));                                  // [BN]
    // A [MP, BK] and B's block, [BN, BK] (N x K) or [BK, BN] (K x N), from k; masked: zeros from k_end on.
    auto a_tile = [&](Int k, bool masked) {
      Int kk = expand_dims(k + ks, 0);
      Ptr<bf16> at = a + (a_rows + cast<int64_t>(kk));
      return masked ? load(at, broadcast_to(kk < k_end, {MP, BK}), 0) : load(at);
    };
    auto b_tile = [&](Int k, bool masked) {
      if (b_is_nk) {
        Int kk = expand_dims(k + ks, 0);
        Ptr<bf16> at = b + (expand_dims(b_cols * Kl, 1) + cast<int64_t>(kk));
        return masked ? load(at, broadcast_to(kk < k_end, {BN, BK}), 0) : load(at);
      }
      Int kk = expand_dims(k + ks, 1);
      Ptr<bf16> at = b + (cast<int64_t>(kk) * Nl + expand_dims(b_cols, 0));
      return masked ? load(at, broadcast_to(kk < k_end, {BK, BN}), 0) : load(at);
    };
    auto a_s = local_alloc<bf16>({MP, BK}, 2, "a_s");
    auto b_s = b_is_nk ? local_alloc<bf16>({BN, BK}, 2, "b_s") : local_alloc<bf16>({BK, BN}, 2, "b_s");
    Var acc = zeros<float>({BN, MP});
    // One step: the tiles into stage `s`, then C^T += B^T A^T there (waiting for the step before).
    auto multiply = [&](Operand<int32_t> s, const Tile<bf16>& at, const Tile<bf16>& bt) {
      local_store(a_s[s], at);
      local_store(b_s[s], bt);
      SharedView<bf16> x = b_is_nk ? b_s[s] : local_trans(b_s[s]);
      acc = async_dot_wait(1, async_dot(x, local_trans(a_s[s]), acc));
    };
    const Shape a_shape{MP, BK}, b_shape = b_is_nk ? Shape{BN, BK} : Shape{BK, BN};
    // Steps in flight per thread: two where the registers allow (a step of MP x 64 and BN x 64 elements,
    // loaded two steps before it is stored), else one. A step's loads wait out the memory's latency; one
    // step in flight left the kernel stalled on them (ncu, H100: 0.86 TB/s at 16 x 4095², session 24).
    const int depth = int(MP) <= kRowsMmaTwoStepsRows && int(BN) <= kRowsMmaTwoStepsColumns ? 2 : 1;
    std::deque<Var<bf16>> a_next, b_next;  // (a Var does not move)
    for (int d = 0; d < depth; ++d) {
      a_next.emplace_back(zeros<bf16>(a_shape));
      b_next.emplace_back(zeros<bf16>(b_shape));
    }
    Int last = k_main - BK;  // the last whole step; loads past it load it again (never used)
    if_(k_main > k_begin, [&] {
      for (int d = 0; d < depth; ++d) {
        a_next[d] = a_tile(minimum(k_begin + d * BK, last), false);
        b_next[d] = b_tile(minimum(k_begin + d * BK, last), false);
      }
    });
    // Steps `depth` at a time, step d of each group in stage d % 2 of the ring (depth 1: stage by parity).
    Int steps = (k_main - k_begin) / BK;
    Int k_groups = k_begin + steps / depth * (depth * BK);
    for_range(k_begin, k_groups, depth * BK, [&](Int k) {
      for (int d = 0; d < depth; ++d) {
        Tile<bf16> at = a_next[d].read(), bt = b_next[d].read();
        Int k_next = minimum(k + (depth + d) * BK, last);
        a_next[d] = a_tile(k_next, false);
        b_next[d] = b_tile(k_next, false);
        if (depth == 2) multiply(d, at, bt);
        else multiply(((k - k_begin) / BK) % 2, at, bt);
      }
    });
    // Depth 2, an odd number of steps: the last, loaded and waiting in a_next[0] (an even step: stage 0).
    if (depth == 2) if_(k_groups < k_main, [&] { multiply(0, a_next[0].read(), b_next[0].read()); });
    if_(k_main < k_end, [&] { multiply(((k_main - k_begin) / BK) % 2, a_tile(k_main, true), b_tile(k_main, true)); });
    Tile<float> result = async_dot_wait(0, acc);  // [BN, MP]: C^T
    Int n = n0 + expand_dims(arange(0, BN), 1), m = expand_dims(arange(0, MP), 0);
    Bool keep = broadcast_to(m < M, {BN, MP});
    Long at = cast<int64_t>(m) * Nl + cast<int64_t>(n);
    store_result(sliced, w, c, cast<int64_t>(program_id(1)), M, Nl, at, result, keep);
  }, options);
}

inline const weft::Kernel& rows_mma_kernel(bool b_is_nk, bool sliced) {
  static const weft::Kernel kernels[2][2] = {{make_gemm_rows_mma(false, false), make_gemm_rows_mma(false, true)},
                                             {make_gemm_rows_mma(true, false), make_gemm_rows_mma(true, true)}};
  return kernels[b_is_nk][sliced];
}

inline constexpr int kRowsMmaMaxM = 64;  // the most rows of C the kernel takes

// How the kernel runs an M x N x K product with BN columns a program on `sms` multiprocessors: K sliced
// (slice_k, steps of 64) for about four programs per multiprocessor.
struct RowsMmaPlan {
  int mp, bn;
  int64_t col_blocks, slices, k_slice;
};
inline RowsMmaPlan plan_rows_mma(int M, int N, int K, int bn, int sms) {
  RowsMmaPlan p;
  p.mp = padded_rows(M, 8);
  p.bn = bn;
  p.col_blocks = cdiv64(N, bn);
  std::tie(p.k_slice, p.slices) = slice_k(M, K, 64, cdiv64(4 * int64_t(sms), p.col_blocks));
  return p;
}

inline void gemm_rows_mma(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                          const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk, int bn,
                          const weft::Device& dev, weft::SourceLoc loc) {
  if (N < bn)
    throw weft::Error("gemm_rows_mma: N = " + std::to_string(N) + " is less than the " + std::to_string(bn) +
                          " columns a program takes; use the small-M kernel or the padded copies",
                      loc);
  const RowsMmaPlan p = plan_rows_mma(M, N, K, bn, dev.multiprocessors());
  const weft::Stream stream = dev.stream();
  weft::Buffer<float> w = slices_workspace(dev, p.slices, M, N, loc);
  rows_mma_kernel(b_is_nk, p.slices > 1)
      .launch(stream, weft::Grid(int(p.col_blocks), int(p.slices), 1, loc), a, b, c, w, M, N, K, int(p.k_slice), p.mp,
              p.bn);
  sum_slices(stream, w, c, M, N, p.slices, loc);
}

// M <= 4 rows of C with B K x N where TMA cannot stride its rows (N not a multiple of 8), for bandwidth: a
// producer warp streams segments of B's rows into a ring of shared stages with bulk copies (cp.async.bulk), so
// that each multiprocessor keeps tens of KB of B in flight with one thread issuing, where the plain-load
// kernels need every thread's registers for it. A segment is W = 1024 consecutive columns of one row; it
// rarely starts 16-byte aligned, so the copy takes the aligned window of W + 8 elements around it (as W
// elements and 8: a view's rows() take a divisor of the stage's rows, so a stage holds its segments 2 W apart)
// and the consumers read it at its offset in the window (local_gather). Windows never pass B's end: B's last
// row is read with plain loads, as is what a slice has past its whole stages. A stage is R = 4 rows; eight
// consumer warps accumulate in f32, a thread 4 columns of each of C's MP rows. Program (j, s): columns
// [W j, W j + W) (the last block moved back to end at N; N >= W), K slice s. Either writes C or f32 partial
// sums (sliced) as make_gemm_small_m. (B N x K had its own variant, a stage of 512 elements of K of 8 rows of
// B: 2-3x slower than the small-M kernel on every shape on the H100 and H200, so it was removed;
// benchmarks/NOTES.md, session 23.)
inline constexpr int kRowsBulkStages = 4;     // stages of the ring
inline constexpr int kRowsBulkWarps = 8;      // consumer warps
inline constexpr int kRowsBulkRows = 4;       // segments (rows of B) a stage: R
inline constexpr int kRowsBulkWidth = 1024;   // columns a segment: W

inline weft::Kernel make_gemm_rows_bulk(bool sliced) {
  using namespace weft;
  std::string name = std::string("gemm_rows_bulk_kn") + (sliced ? "_sliced" : "");
  return Kernel(name, [sliced](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> c, Ptr<float> w, Int M, Int N, Int K,
                               Int k_slice, Const<int> MP) {
    const int R = kRowsBulkRows, W = kRowsBulkWidth, S = kRowsBulkStages;
    // No launch_dependent_grids() here: the reduce's programs, resident early, cost this kernel 1-11 us (H100,
    // session 24: 4 x 4095 x 14336 K x N 65.8 -> 76.5 us). The reduce still waits for this grid, launched ahead.
    Int k_begin = program_id(1) * k_slice;
    Int k_end = minimum(K, k_begin + k_slice);
    Int stages = maximum(minimum(k_end, K - 1) - k_begin, 0) / R;  // whole stages, none holding B's last row
    Int k_rest = k_begin + stages * R;
    Int n0 = minimum(program_id(0) * W, N - W);
    Long Kl = cast<int64_t>(K), Nl = cast<int64_t>(N);
    auto ring = local_alloc<bf16>({R * 2 * W / 8, 8}, S, "b_rows");  // rows of 16 bytes: what bulk copies fill
    auto full = alloc_barriers(S, 1, "full");
    auto empty = alloc_barriers(S, 1, "empty");
    // Segment r of stage i: its first element in B, and where its aligned window starts (8 elements: 16 bytes).
    auto first = [&](Int i, int r) { return cast<int64_t>(k_begin + i * R + r) * Nl + cast<int64_t>(n0); };
    auto window = [&](const Long& e) { return e / 8 * 8; };
    async_tasks(
        task("producer", {.warps = 1}, [&] {
          Pipeline p(S);
          for_range(0, stages, [&](Int i) {
            p.acquire(empty);
            barrier_expect_bytes(full[p.index()], R * (W + 8) * int(sizeof(bf16)));
            SharedView<bf16> stage = ring[p.index()];
            for (int r = 0; r < R; ++r) {
              Ptr<bf16> from = b + window(first(i, r));
              async_load_bulk(from, stage.rows(r * 2 * W / 8, W / 8), full[p.index()]);
              async_load_bulk(from + W, stage.rows((r * 2 + 1) * W / 8, 1), full[p.index()]);
            }
            p.advance();
          });
        }),
        task("consumer", {.warps = kRowsBulkWarps}, [&] {
          Pipeline p(S);
          std::deque<Var<float>> acc;
          for (int m = 0; m < MP; ++m) acc.emplace_back(zeros<float>({W}));
          std::vector<Long> a_row;  // A's row m (the last real one for padding rows)
          for (int m = 0; m < MP; ++m) a_row.push_back(cast<int64_t>(minimum(M - 1, m)) * Kl);
          Int cols = arange(0, W);
          auto add_row = [&](Int k, const Tile<bf16>& row) {
            Tile<float> bv = cast<float>(row);
            for (int m = 0; m < MP; ++m) {
              Float av = cast<float>(load(a + (a_row[m] + cast<int64_t>(k))));
              acc[m] = fma(broadcast_to(av, {W}), bv, acc[m]);
            }
          };
          for_range(0, stages, [&](Int i) {
            p.wait(full);
            SharedView<bf16> stage = local_reshape(ring[p.index()], {R * 2 * W});
            for (int r = 0; r < R; ++r) {
              Long e = first(i, r);
              add_row(k_begin + i * R + r, local_gather(stage, cols + (cast<int32_t>(e - window(e)) + r * 2 * W)));
            }
            p.release(empty);
            p.advance();
          });
          for_range(k_rest, k_end, [&](Int k) {
            add_row(k, load(b + (cast<int64_t>(k) * Nl + cast<int64_t>(n0 + cols))));
          });
          // Row m of C, or of this slice's partial sums.
          for (int m = 0; m < MP; ++m) {
            Long at = Nl * int64_t(m) + cast<int64_t>(n0 + cols);
            Bool keep = broadcast_to(M > m, {W});
            store_result(sliced, w, c, cast<int64_t>(program_id(1)), M, Nl, at, acc[m].read(), keep);
          }
        }));
  });
}

inline const weft::Kernel& rows_bulk_kernel(bool sliced) {
  static const weft::Kernel kernels[2] = {make_gemm_rows_bulk(false), make_gemm_rows_bulk(true)};
  return kernels[sliced];
}

// The shapes the bulk-copy kernel takes: M <= 4, B K x N, N >= 1024 (a program's columns).
inline bool rows_bulk_takes(int M, int N, bool b_is_nk) { return M <= 4 && !b_is_nk && N >= kRowsBulkWidth; }

// How it runs an M x N x K product on `sms` multiprocessors: K sliced in whole stages for about three programs
// a multiprocessor (64 KB of ring each).
struct RowsBulkPlan {
  int mp;
  int64_t col_blocks, slices, k_slice;
};
inline RowsBulkPlan plan_rows_bulk(int M, int N, int K, int sms) {
  RowsBulkPlan p;
  p.mp = padded_rows(M, 1);
  p.col_blocks = cdiv64(N, kRowsBulkWidth);
  std::tie(p.k_slice, p.slices) = slice_k(M, K, kRowsBulkRows, cdiv64(3 * int64_t(sms), p.col_blocks));
  return p;
}

inline void gemm_rows_bulk(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                           const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk,
                           const weft::Device& dev, weft::SourceLoc loc) {
  if (!rows_bulk_takes(M, N, b_is_nk))
    throw weft::Error("gemm_rows_bulk: takes M <= 4 with B K x N and N >= 1024; got M = " + std::to_string(M) +
                          ", N = " + std::to_string(N) + ", B " + (b_is_nk ? "N x K" : "K x N") +
                          "; use the small-M kernel",
                      loc);
  const RowsBulkPlan p = plan_rows_bulk(M, N, K, dev.multiprocessors());
  const weft::Stream stream = dev.stream();
  weft::Buffer<float> w = slices_workspace(dev, p.slices, M, N, loc);
  rows_bulk_kernel(p.slices > 1)
      .launch(stream, weft::Grid(int(p.col_blocks), int(p.slices), 1, loc), a, b, c, w, M, N, K, int(p.k_slice), p.mp);
  sum_slices(stream, w, c, M, N, p.slices, loc);
}

}  // namespace gemm_detail
