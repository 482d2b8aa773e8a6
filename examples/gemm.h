// gemm(): the bf16 GEMM entry point that picks its kernel and configuration per shape.
//
//   GemmChoice how = gemm(a, b, c, M, N, K, b_is_nk);   // C (M x N) = A (M x K) @ B, f32 accumulation
//
// - N and K multiples of 8 and 16-byte aligned buffers (what TMA can describe): the warp-specialized kernel
//   of gemm_hopper_ws.h, in the configuration weft::Autotuner picks for the shape's bucket (M rounded up to
//   a power of two from 1, N and K to a multiple of 128; the B layout; the device). The candidates are the best
//   few configurations of a simple cost model (gemm_candidates), the model's favourite first: with
//   WEFT_AUTOTUNE=0 that one runs untuned. With M <= 8 (B N x K) or 4 (B K x N) the small-M plain-load kernel
//   (gemm_plain_loads.h, with the other plain-load kernels) is
//   a candidate too (last: never the untuned choice); it wins some single-row products. Tuning compiles the candidates on host threads at once, times
//   them on the caller's buffers (C is overwritten, then written again by the winner) and remembers the
//   winner in the process and on disk (weft's compile cache), so a later process does not tune again.
// - M <= 64 and rows TMA cannot stride or address (N or K not a multiple of 8, a buffer not 16-byte
//   aligned): tuned the same way among kernels that read A and B where they are (no copies: a product this
//   thin is bound by reading B once) — at M <= 8 (B N x K) or 4 (B K x N) the plain-load FMA kernel (the
//   untuned choice there), the plain-load tensor-core kernel (make_gemm_rows_mma, 64 or 128 columns a
//   program; the untuned choice up to M 64 where N allows), at M <= 4 with B K x N the bulk-copy kernel
//   (make_gemm_rows_bulk) — and the padded copies below (the untuned choice otherwise). B's
//   columns go over the grid and K is split over it too when there are few column blocks (f32 partial
//   sums, then the split-K reduction).
// - Larger M with such rows: the operands that need it are copied into scratch buffers with K and N
//   rounded up to a multiple of 8 (zeros in the new columns, which add nothing to the sums), the product
//   runs as above on those, and C's first N columns are copied out. The copies are bandwidth-bound: a few
//   percent of a large product.
// Launches on the default stream of the buffers' device and returns without waiting; calls from several
// host threads on one device take turns (their scratch is shared). `loc` is the caller's line, which every
// Error of the call names.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <weft/autotune.h>

#include "gemm_hopper_ws.h"
#include "gemm_plain_loads.h"

// What one gemm() call ran.
struct GemmChoice {
  bool padded = false;    // the operands were copied to buffers with N and K rounded up to multiples of 8
  bool small_m = false;   // the plain-load FMA kernel ran (config unused): M <= small_m_limit with rows TMA cannot
                          // stride, or where the tuner found it faster than every configuration
  int rows_mma_bn = 0;    // > 0: the plain-load tensor-core kernel ran with this many columns a program (config
                          // unused): M <= 64 with rows TMA cannot stride, where the tuner found it fastest
  bool rows_bulk = false; // the bulk-copy FMA kernel ran (config unused): M <= 4, B K x N with rows TMA cannot stride
                          // (gemm_detail::rows_bulk_takes), where the tuner found it fastest
  GemmConfig config;
  std::string problem;    // the shape bucket it was tuned for
  weft::AutotuneReport report;  // of the tuning (or the cache hit) that chose `config`, on the bucket's first call

  // A configuration of the warp-specialized kernel ran (on the operands or their padded copies).
  bool warp_specialized() const { return !small_m && !rows_mma_bn && !rows_bulk; }
  // What ran, for a table: "small_m", "rows_bulk", "rows_mma_bn64", or the configuration's name ("+pad" after
  // it where the operands were copied).
  std::string name() const {
    if (small_m) return "small_m";
    if (rows_bulk) return "rows_bulk";
    if (rows_mma_bn) return "rows_mma_bn" + std::to_string(rows_mma_bn);
    return config.name() + (padded ? "+pad" : "");
  }
};

namespace gemm_detail {

// The output tiles of `c` on an M x N product (swapped: N along the tile's rows), not counting split-K's
// slices.
inline int64_t output_tiles(const GemmConfig& c, int M, int N) {
  return c.swap_ab ? cdiv64(N, c.BM) * cdiv64(M, c.BN) : cdiv64(M, c.BM) * cdiv64(N, c.BN);
}

// Bytes of split-K's f32 workspace: split_k slices of C, its M rows padded to whole tiles.
inline double split_workspace_bytes(const GemmConfig& c, int M, int N) {
  const int64_t m_pad = c.swap_ab ? cdiv64(M, c.BN) * c.BN : cdiv64(M, c.BM) * c.BM;
  return 4.0 * c.split_k * m_pad * N;
}
constexpr double kMaxSplitWorkspaceBytes = 256e6;

// Estimated microseconds of one call of `c` on an H100/H200-class GPU with `sms` multiprocessors: the
// persistent blocks' share of tiles times a tile's time (its MMAs at a rate that grows with the wgmma N
// and the consumer count, or its operand bytes at what its ring keeps in flight, whichever is slower),
// never below reading A and B and writing C from DRAM; split-K adds its workspace traffic and the
// reduction. Only a ranking of candidates: the autotuner measures.
inline double gemm_model_us(const GemmConfig& c, int M, int N, int K, int sms) {
  const bool swap = c.swap_ab;
  const int64_t R = swap ? N : M, Q = swap ? M : N;
  const int64_t tiles = output_tiles(c, M, N) * c.split_k;
  const int64_t k_steps = cdiv64(cdiv64(K, c.BK), c.split_k);
  const double active = double(std::min<int64_t>(tiles, sms));
  const double n_eff = c.BN >= 128 ? 0.9 : c.BN >= 64 ? 0.75 : c.BN >= 32 ? 0.5 : 0.3;  // wgmma issue overheads
  const double cons_eff = c.consumers == 2 ? 1.0 : 0.8;  // one warp group cannot hide its own epilogue
  const double mma_rate = 989e12 / 132 * n_eff * cons_eff;  // flop/s per SM
  const double stage_bytes = double(c.BM + c.BN) * c.BK * 2;
  const double loaded_bytes = double(c.BM + c.BN / c.cluster_m) * c.BK * 2;  // per stage, B shared in a cluster
  // L2 to SM: ~9 TB/s in all reached by the 128 x 256 kernel at 780 TFLOP/s (run 12); 12 assumed.
  const double sm_bw = std::min({c.stages * stage_bytes / 1.0e-6, 12.0e12 / active, 200e9});  // bytes/s per SM
  const double tile_s = std::max(2.0 * c.BM * c.BN * c.BK * k_steps / mma_rate, loaded_bytes * k_steps / sm_bw) +
                        double(c.BM) * c.BN * (c.split_k > 1 ? 4 : 2) / sm_bw + 0.5e-6;
  const double main_s = double(cdiv64(tiles, sms)) * tile_s;
  double dram = 2.0 * (double(M) * K + double(N) * K + double(M) * N);
  double reduce_s = 0;
  if (c.split_k > 1) {
    double ws = split_workspace_bytes(c, M, N);
    dram += ws;                                    // written by the main kernel
    reduce_s = (ws + 2.0 * M * N) / 3.0e12 + 3e-6;  // read back and C written, plus a launch
  }
  // A tie-breaker between memory-bound candidates: the tensor-core work they waste on padding.
  const double padded_s = 2.0 * cdiv64(R, c.BM) * c.BM * cdiv64(Q, c.BN) * c.BN * double(K) / (989e12 * n_eff);
  return (std::max(main_s, dram / 3.3e12) + reduce_s + 0.02 * padded_s) * 1e6;
}

}  // namespace gemm_detail

// The configurations worth trying for an M x N x K product (B N x K when b_is_nk) on `sms`
// multiprocessors: every supported tile shape, consumer count, split-K, operand order (swapped for M <= 128,
// either B layout: B K x N becomes wgmma's M-major A) and cluster, ranked by gemm_model_us, the best `count`
// first; for large products, then the best one's variants with double-buffered C stores and two ping-pong
// configurations.
inline std::vector<GemmConfig> gemm_candidates(int M, int N, int K, bool b_is_nk, int sms, size_t count = 8) {
  using gemm_detail::cdiv64;
  std::vector<std::pair<double, GemmConfig>> scored;
  const int64_t k_tiles = cdiv64(K, 64);
  for (bool swap : {false, true}) {
    if (swap && M > 128) continue;
    for (auto [BM, consumers] : {std::pair{64, 1}, {128, 1}, {128, 2}, {256, 2}})
      for (int BN : {8, 16, 32, 64, 128, 256}) {
        // Tiles much larger than the product only multiply zeros.
        const int64_t R = swap ? N : M, Q = swap ? M : N;
        if (BN > 16 && BN / 2 >= Q) continue;
        if (BM > 64 && BM / 2 >= R) continue;
        for (int split : {1, 2, 3, 4, 6, 8, 12, 16}) {
          if (split > 1 && k_tiles / split < 4) continue;  // slices too short to fill the ring
          const GemmConfig shape{.BM = BM, .BN = BN, .split_k = split, .swap_ab = swap};
          if (split > 1 && gemm_detail::output_tiles(shape, M, N) * split > 2 * sms) continue;  // enough tiles
          if (split > 1 && gemm_detail::split_workspace_bytes(shape, M, N) > gemm_detail::kMaxSplitWorkspaceBytes)
            continue;
          // Clusters of two along M (B multicast) for products with enough tile rows.
          for (int cluster : {1, 2}) {
            if (cluster > 1 && (swap || split > 1 || cdiv64(R, BM) < 2)) continue;
            GemmConfig c{.BM = BM, .BN = BN, .BK = 64, .stages = 2, .consumers = consumers, .split_k = split,
                         .swap_ab = swap, .cluster_m = cluster};
            // As many stages as fit (up to 8): 4 for the 128 x 256 tile, as in the default configuration. Tiles
            // of at most 16 columns (swapped thin products: 9-10 KB a stage) take up to 16: a block keeps only its
            // ring's bytes in flight, and such products are bound by reading the other operand.
            const int max_stages = BN <= 16 ? 16 : 8;
            while (c.stages < max_stages && c.shared_bytes() + (c.BM + c.BN) * c.BK * 2 <= 220 * 1024) ++c.stages;
            if (!c.problems(b_is_nk).empty()) continue;
            scored.push_back({gemm_detail::gemm_model_us(c, M, N, K, sms), c});
          }
        }
      }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<GemmConfig> out;
  for (const auto& [us, c] : scored) {
    if (out.size() == count) break;
    out.push_back(c);
  }
  if (out.empty()) out.push_back(GemmConfig{});
  // Large products (C at least 1024 x 1024, a tile per multiprocessor or more): the model's favourite
  // also with two C staging buffers per consumer (epilogue_buffers = 2), at its epilogue_n and at 32
  // columns (the same shared memory as one buffer of 64). The model does not see the epilogue's stores;
  // only timing can rank these. After the ranked ones, so that WEFT_AUTOTUNE=0 still runs the model's
  // favourite.
  const GemmConfig best = out.front();
  const int64_t best_tiles = gemm_detail::output_tiles(best, M, N);
  if (M >= 1024 && N >= 1024 && best.split_k == 1 && best_tiles >= sms)
    for (int en : {best.epilogue_n, 32}) {
      GemmConfig c = best;
      c.epilogue_n = en;
      c.epilogue_buffers = 2;
      if (c.problems(b_is_nk).empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  // The same products also in ping-pong (pingpong: two consumers computing alternate whole tiles, one's
  // epilogue under the other's main loop), 128 x 128 and 64 x 256 tiles per consumer, with as many stages
  // as fit in 225 KB. The model does not see that overlap either.
  if (M >= 1024 && N >= 1024 && best.split_k == 1 && best_tiles >= sms)
    for (auto [BM, BN] : {std::pair{128, 128}, {64, 256}}) {
      GemmConfig c{.BM = BM, .BN = BN, .BK = 64, .stages = 2, .pingpong = true};
      while (c.stages < 8 && c.shared_bytes() + (c.BM + c.BN) * c.BK * 2 <= 225 * 1024) ++c.stages;
      if (c.problems(b_is_nk).empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  // A favourite with fewer tiles than multiprocessors and no split (a thin product bound by reading B, e.g.
  // 1 x 4096 x 14336: 64 tiles of 64 x 8) also with the best-ranked split-K configuration that gives every
  // multiprocessor a tile. The model counts DRAM bandwidth only, but a block keeps no more than its ring's
  // bytes in flight, so fewer blocks read B more slowly: on the H200 (session 7) that shape took 40 us
  // with 64 swapped tiles and 38 us with 256 tiles of 64 x 128 split 4 ways.
  if (best.split_k == 1 && best_tiles < sms)
    for (const auto& [us, c] : scored) {
      if (c.split_k == 1 || gemm_detail::output_tiles(c, M, N) * c.split_k < sms) continue;
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
      break;
    }
  // Thin products whose ranked tiles leave multiprocessors idle: the best two tile shapes also split into as
  // many K slices as make one full wave (tiles x split <= sms, at least 4 k-steps a slice). The ranked splits
  // come from a fixed list and favour less workspace, but a block reads no faster than its ring allows, so
  // such products go as fast as the number of blocks reading at once: 16 x 1024 x 8192 had 64 or 128 blocks,
  // 1 x 4096 x 14336 had 64 or 192 (a second, partial wave).
  std::vector<GemmConfig> shapes;
  const size_t ranked = out.size();  // out grows below
  for (size_t i = 0; i < ranked && shapes.size() < 2; ++i) {
    const GemmConfig c = out[i];
    GemmConfig one = c;
    one.split_k = 1;
    if (std::find(shapes.begin(), shapes.end(), one) != shapes.end()) continue;
    shapes.push_back(one);
    const int64_t tiles = gemm_detail::output_tiles(c, M, N);
    const int64_t split = std::min<int64_t>({sms / std::max<int64_t>(tiles, 1), k_tiles / 4, 64});
    if (tiles * c.split_k >= sms || split <= c.split_k || c.pingpong || c.cluster_m > 1 || c.epilogue_buffers > 1)
      continue;
    GemmConfig wave = c;
    wave.split_k = static_cast<int>(split);
    if (gemm_detail::split_workspace_bytes(wave, M, N) > gemm_detail::kMaxSplitWorkspaceBytes ||
        !wave.problems(b_is_nk).empty())
      continue;
    if (std::find(out.begin(), out.end(), wave) == out.end()) out.push_back(wave);
  }
  // Split-K configurations whose slices of one tile are few bytes also with the reduction in the kernel
  // (reduce_in_kernel): the slice that finishes a tile last reads the tile's partial sums (at most 128 KB,
  // a microsecond or so for one multiprocessor) instead of a second kernel's launch reading all of them.
  const size_t before_twins = out.size();
  for (size_t i = 0; i < before_twins; ++i) {
    GemmConfig c = out[i];
    if (c.split_k == 1 || c.reduce_in_kernel || int64_t(c.split_k) * c.BM * c.BN * 4 > 128 * 1024) continue;
    c.reduce_in_kernel = true;
    while (c.stages > 2 && c.shared_bytes() > 220 * 1024) --c.stages;
    if (c.problems(b_is_nk).empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

namespace gemm_detail {

// dst[r, c] = src[r * src_stride + c] for r < rows and c < cols, 0 elsewhere up to dst_cols: a row-major
// copy into longer rows (and more of them). One program per destination row and 1024 columns (rows on the
// grid's x: B can have 128256).
inline weft::Kernel make_gemm_pad_copy() {
  using namespace weft;
  return Kernel("gemm_pad_copy", [](Ptr<bf16> src, Ptr<bf16> dst, Int rows, Int cols, Int src_stride, Int dst_cols) {
    const int BLOCK = 1024;
    Int r = program_id(0);
    Long row = cast<int64_t>(r);
    Int c = program_id(1) * BLOCK + arange(0, BLOCK);
    Tile<bf16> v = load(src + row * cast<int64_t>(src_stride) + cast<int64_t>(c), (c < cols) & (r < rows), 0);
    store(dst + row * cast<int64_t>(dst_cols) + cast<int64_t>(c), v, c < dst_cols);
  });
}

inline void pad_copy(const weft::Buffer<weft::bf16>& src, const weft::Buffer<weft::bf16>& dst, int rows, int cols,
                     int src_stride, int dst_rows, int dst_cols, const weft::Stream& stream, weft::SourceLoc loc) {
  static const weft::Kernel k = make_gemm_pad_copy();
  k.launch(stream, weft::Grid(dst_rows, (dst_cols + 1023) / 1024, 1, loc), src, dst, rows, cols, src_stride, dst_cols);
}

// Reads 128 MB of scratch (kept per device for the process; one f32 per 2048 written), more than twice the
// L2 of today's GPUs (50 MB on the H100 and H200): what was in the L2 is evicted, and what replaces it is
// clean (an eviction by writes leaves 128 MB of dirty lines, whose write-back then competes with the timed
// kernel's reads). The tuner runs it before every timed launch, so that candidates read A and B from DRAM
// as a call in a workload does: timed back to back on the same buffers, a thin product's B stays in the
// L2, and configurations that pass over more bytes (split-K's workspace) look faster than they are.
inline void evict_l2(const weft::Device& dev, weft::SourceLoc loc) {
  using namespace weft;
  const int BLOCK = 2048;
  static const Kernel read_all("gemm_evict_l2", [](Ptr<float> x, Ptr<float> sums) {
    Tile<float> v = load(x + program_id(0) * BLOCK + arange(0, BLOCK));
    store(sums + program_id(0), sum(v, 0));
  });
  const size_t elements = size_t(128) << 18;  // 128 MB of f32
  static DeviceScratch<float> ones(1.f), block_sums;
  Buffer<float> x = ones.get(dev, 0, elements, loc), sums = block_sums.get(dev, 0, elements / BLOCK, loc);
  read_all.launch(dev.stream(), Grid(int64_t(elements / BLOCK), 1, 1, loc), x, sums);
}

// Scratch buffers of a device for the padded operands (slot 0: A, 1: B, 2: C), grown as needed; shared by
// the calls of a process like the split-K workspace.
inline weft::Buffer<weft::bf16> pad_scratch(const weft::Device& dev, int slot, size_t elements, weft::SourceLoc loc) {
  static DeviceScratch<weft::bf16> buffers;
  return buffers.get(dev, slot, elements, loc);
}

inline bool tma_can_describe(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                             const weft::Buffer<weft::bf16>& c, int N, int K) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return N % 8 == 0 && K % 8 == 0 && aligned(a.data()) && aligned(b.data()) && aligned(c.data());
}

// What gemm()'s tuner chooses among. For a shape TMA can describe: a configuration of the warp-specialized
// kernel, or (M <= small_m_limit) the plain-load FMA kernel, which reads B once at full bandwidth and wins
// some single-row products (decoding's GEMV) against the tensor-core kernel's few tiles. For M <= 64 with
// rows TMA cannot stride or address: the plain-load kernels (FMA at M <= small_m_limit, tensor cores with
// 64 or 128 columns a program), the bulk-copy FMA kernel (M <= 4, rows_bulk_takes) and the padded copies
// (gemm() again on them).
struct GemmCandidate {
  GemmConfig config;
  bool small_m = false;
  int rows_mma_bn = 0;  // make_gemm_rows_mma with this many columns a program
  bool padded = false;
  bool rows_bulk = false;  // make_gemm_rows_bulk
  // A configuration of the warp-specialized kernel (planned and compiled ahead), not one of the others.
  bool warp_specialized() const { return !small_m && !rows_mma_bn && !padded && !rows_bulk; }
  std::string name() const {
    if (small_m) return "small_m";
    if (rows_bulk) return "rows_bulk";
    if (rows_mma_bn) return "rows_mma_bn" + std::to_string(rows_mma_bn);
    return padded ? "padded" : config.name();
  }
};

// M rounded up to a power of two: the rows a tuned winner is reused for.
inline int bucket_m(int M) {
  int b = 1;
  while (b < M) b *= 2;
  return b;
}
inline int bucket_nk(int x) { return int(cdiv64(x, 128) * 128); }

// "bf16 M<=16 N4096 K4096 B=NxK sms132": what decides the winner (the device's name is added by the
// Autotuner's key).
inline std::string problem_of(int M, int N, int K, bool b_is_nk, int sms) {
  return "bf16 M<=" + std::to_string(bucket_m(M)) + " N" + std::to_string(bucket_nk(N)) + " K" +
         std::to_string(bucket_nk(K)) + (b_is_nk ? " B=NxK" : " B=KxN") + " sms" + std::to_string(sms);
}

}  // namespace gemm_detail

// C (M x N) = A (M x K) @ B, bf16 row-major, f32 accumulation; B is K x N (b_is_nk false) or N x K (true).
// Any M, N, K >= 1. Returns what ran (see the top of this file).
inline GemmChoice gemm(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                       const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk,
                       weft::SourceLoc loc = weft::SourceLoc::current());

namespace gemm_detail {

// gemm() on copies with rows TMA can stride and address: K and N rounded up to multiples of 8, zeros in the
// new rows and columns (which add nothing to the sums). A buffer already fine (right shape, aligned) is used
// as it is.
inline GemmChoice gemm_padded(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                              const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk,
                              const weft::Device& dev, weft::SourceLoc loc) {
  using namespace weft;
  const int Kp = (K + 7) / 8 * 8, Np = (N + 7) / 8 * 8;
  const bool reshaped = Kp != K || Np != N;
  auto aligned = [](const Buffer<bf16>& x) { return reinterpret_cast<uintptr_t>(x.data()) % 16 == 0; };
  // A view of the first n elements of a scratch buffer (kept alive by pad_scratch's table).
  auto first = [&](const Buffer<bf16>& x, size_t n) { return dev.wrap(static_cast<bf16*>(x.data()), n, loc); };
  const Stream stream = dev.stream();
  Buffer<bf16> pa = a, pb = b, pc = c;
  if (Kp != K || !aligned(a)) {
    pa = first(pad_scratch(dev, 0, size_t(M) * Kp, loc), size_t(M) * Kp);
    pad_copy(a, pa, M, K, K, M, Kp, stream, loc);
  }
  if (reshaped || !aligned(b)) {
    pb = first(pad_scratch(dev, 1, size_t(Kp) * Np, loc), size_t(Kp) * Np);
    if (b_is_nk) pad_copy(b, pb, N, K, K, Np, Kp, stream, loc);  // [Np, Kp]
    else pad_copy(b, pb, K, N, N, Kp, Np, stream, loc);          // [Kp, Np]
  }
  if (Np != N || !aligned(c)) pc = first(pad_scratch(dev, 2, size_t(M) * Np, loc), size_t(M) * Np);
  GemmChoice choice = gemm(pa, pb, pc, M, Np, Kp, b_is_nk, loc);
  if (pc.data() != c.data()) pad_copy(pc, c, M, N, Np, M, N, stream, loc);
  choice.padded = true;
  return choice;
}

}  // namespace gemm_detail

inline GemmChoice gemm(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                       const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk, weft::SourceLoc loc) {
  using namespace weft;
  gemm_detail::check_sizes("gemm", a, b, c, M, N, K, loc);
  Device dev = Device::from_backend(*a.backend());
  auto hold = gemm_detail::lock_scratch(dev);  // scratch and workspace are this call's until its last launch
  GemmChoice choice;
  const bool tma_fits = gemm_detail::tma_can_describe(a, b, c, N, K);
  // Rows TMA cannot stride: read in place (the small-M kernel, the tensor-core plain-load one where every
  // N of the bucket has 64 columns), or copied.
  const bool in_place = M <= gemm_detail::small_m_limit(b_is_nk) ||
                        (M <= gemm_detail::kRowsMmaMaxM && gemm_detail::bucket_nk(N) - 127 >= 64);
  if (!tma_fits && !in_place) return gemm_detail::gemm_padded(a, b, c, M, N, K, b_is_nk, dev, loc);
  const int sms = dev.multiprocessors();
  const char* mode_env = std::getenv("WEFT_AUTOTUNE");
  const std::string mode = mode_env ? mode_env : "";

  // Chosen configurations by (exact shape, device, WEFT_AUTOTUNE), so that a warm call costs a lookup.
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, bool, detail::Backend*, std::string>, GemmChoice> chosen;
  static std::map<std::string, std::unique_ptr<Autotuner<gemm_detail::GemmCandidate>>> tuners;  // by bucket
  const auto key = std::make_tuple(M, N, K, b_is_nk, &dev.backend(), mode);
  // Runs what `choice` names (the small-M kernel, or a configuration of the warp-specialized one).
  auto run_choice = [&](const GemmChoice& ch) {
    if (ch.small_m) gemm_detail::gemm_small_m(a, b, c, M, N, K, b_is_nk, dev, loc);
    else if (ch.rows_bulk) gemm_detail::gemm_rows_bulk(a, b, c, M, N, K, b_is_nk, dev, loc);
    else if (ch.rows_mma_bn) gemm_detail::gemm_rows_mma(a, b, c, M, N, K, b_is_nk, ch.rows_mma_bn, dev, loc);
    else if (ch.padded) gemm_detail::gemm_padded(a, b, c, M, N, K, b_is_nk, dev, loc);
    else gemm_detail::plan_gemm(ch.config, a, b, c, M, N, K, b_is_nk, loc).run(dev.stream(), loc);
  };
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (auto it = chosen.find(key); it != chosen.end()) {
      choice = it->second;
      lock.unlock();
      run_choice(choice);
      return choice;
    }
  }
  const std::string problem = gemm_detail::problem_of(M, N, K, b_is_nk, sms) + (tma_fits ? "" : " rows-unaligned");
  Autotuner<gemm_detail::GemmCandidate>* tuner;
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<Autotuner<gemm_detail::GemmCandidate>>& t = tuners[problem];
    if (!t) {
      // Candidates from the bucket's shape, so that every shape of the bucket tunes the same set: the
      // model's configurations, then the small-M kernel where the bucket's rows allow it.
      const int bm = gemm_detail::bucket_m(M);
      std::vector<gemm_detail::GemmCandidate> candidates;
      if (tma_fits) {
        for (const GemmConfig& g :
             gemm_candidates(bm, gemm_detail::bucket_nk(N), gemm_detail::bucket_nk(K), b_is_nk, sms))
          candidates.push_back({.config = g, .small_m = false});
        if (bm <= gemm_detail::small_m_limit(b_is_nk)) candidates.push_back({.config = {}, .small_m = true});
      } else {
        // The untuned choice: the small-M kernel where it takes M, else the tensor-core plain-load kernel
        // (64 columns a program up to 16 rows, 128 above where N allows), else the copies (what won most
        // such shapes on the H100, benchmarks/NOTES.md sessions 19 and 24).
        if (bm <= gemm_detail::small_m_limit(b_is_nk)) candidates.push_back({.config = {}, .small_m = true});
        if (gemm_detail::rows_bulk_takes(bm, gemm_detail::bucket_nk(N) - 127, b_is_nk))  // every N of the bucket
          candidates.push_back({.config = {}, .rows_bulk = true});
        for (int bn : bm <= 16 ? std::vector<int>{64, 128} : std::vector<int>{128, 64})
          if (gemm_detail::bucket_nk(N) - 127 >= bn)  // where every N of the bucket has that many columns
            candidates.push_back({.config = {}, .rows_mma_bn = bn});
        candidates.push_back({.config = {}, .padded = true});
      }
      // On a GPU, ten launches per timed round hide the synchronization's latency, and near-ties get ten
      // more rounds (AutotuneOptions::finalists); the CPU backend (a reference, not a target to tune for)
      // times one launch, once.
      // On the GPU each timed launch finds the L2 cold (gemm_detail::evict_l2).
      AutotuneOptions options = dev.kind() == BackendKind::cpu
                                    ? AutotuneOptions{.warmup = 0, .rounds = 1, .calls_per_round = 1, .finalists = 0}
                                    : AutotuneOptions{.warmup = 2, .rounds = 5, .calls_per_round = 10};
      if (dev.kind() != BackendKind::cpu) options.before_each_call = [dev, loc] { gemm_detail::evict_l2(dev, loc); };
      t = std::make_unique<Autotuner<gemm_detail::GemmCandidate>>(
          "gemm_bf16", std::move(candidates), [](const gemm_detail::GemmCandidate& g) { return g.name(); }, options,
          loc);
    }
    tuner = t.get();
  }
  // The candidates' launches, planned on the compile threads (descriptors of the caller's buffers). The
  // small-M kernel compiles at its first (warm-up) launch.
  std::mutex plans_mutex;
  std::map<std::string, gemm_detail::GemmLaunch> plans;
  auto compile = [&](const gemm_detail::GemmCandidate& g) {
    if (!g.warp_specialized()) return;
    gemm_detail::GemmLaunch l = gemm_detail::plan_gemm(g.config, a, b, c, M, N, K, b_is_nk, loc);
    l.compile(dev);
    std::lock_guard<std::mutex> lock(plans_mutex);
    plans.emplace(g.name(), std::move(l));
  };
  auto run = [&](const gemm_detail::GemmCandidate& g) {
    if (g.warp_specialized()) return plans.at(g.name()).run(dev.stream(), loc);
    GemmChoice ch;
    ch.padded = g.padded, ch.small_m = g.small_m, ch.rows_mma_bn = g.rows_mma_bn, ch.rows_bulk = g.rows_bulk;
    run_choice(ch);
  };
  choice.problem = problem;
  choice.report = tuner->best_report(problem, dev.stream(), compile, run, loc);
  const gemm_detail::GemmCandidate& won = tuner->candidates().at(choice.report.index);
  choice.config = won.config;
  choice.small_m = won.small_m;
  choice.rows_bulk = won.rows_bulk;
  choice.rows_mma_bn = won.rows_mma_bn;
  choice.padded = won.padded;
  if (won.padded) choice.config = gemm_detail::gemm_padded(a, b, c, M, N, K, b_is_nk, dev, loc).config;
  {
    std::lock_guard<std::mutex> lock(mutex);
    chosen[key] = choice;
  }
  if (!choice.padded) run_choice(choice);  // (the padded copies ran above, to learn their configuration)
  return choice;
}
