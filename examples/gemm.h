// gemm(): the bf16 GEMM entry point that picks its kernel and configuration per shape.
//
//   GemmChoice how = gemm(a, b, c, M, N, K, b_is_nk);   // C (M x N) = A (M x K) @ B, f32 accumulation
//
// - N and K multiples of 8 and 16-byte aligned buffers (what TMA can describe): the warp-specialized kernel
//   of gemm_hopper_ws.h, in the configuration weft::Autotuner picks for the shape's bucket (M rounded up to
//   a power of two, N and K to a multiple of 128; the B layout; the device). The candidates are the best
//   few configurations of a simple cost model (gemm_candidates), the model's favourite first: with
//   WEFT_AUTOTUNE=0 that one runs untuned. Tuning compiles the candidates on host threads at once, times
//   them on the caller's buffers (C is overwritten, then written again by the winner) and remembers the
//   winner in the process and on disk (weft's compile cache), so a later process does not tune again.
// - M <= 16 and rows TMA cannot stride or address (N or K not a multiple of 8, a buffer not 16-byte
//   aligned): a plain-load kernel reads A and B where they are (no copies: a product this thin is
//   bound by reading B once), all M rows in one tensor-core tile, B's columns over the grid and K split
//   over it too when there are few column blocks (f32 partial sums, then the split-K reduction).
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

// What one gemm() call ran.
struct GemmChoice {
  bool padded = false;    // the operands were copied to buffers with N and K rounded up to multiples of 8
  bool small_m = false;   // M <= 16 with rows TMA cannot stride: the plain-load kernel ran (config unused)
  GemmConfig config;
  std::string problem;    // the shape bucket it was tuned for
  weft::AutotuneReport report;  // of the tuning (or the cache hit) that chose `config`, on the bucket's first call
};

namespace gemm_detail {

inline int64_t cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Estimated microseconds of one call of `c` on an H100/H200-class GPU with `sms` multiprocessors: the
// persistent blocks' share of tiles times a tile's time (its MMAs at a rate that grows with the wgmma N
// and the consumer count, or its operand bytes at what its ring keeps in flight, whichever is slower),
// never below reading A and B and writing C from DRAM; split-K adds its workspace traffic and the
// reduction. Only a ranking of candidates: the autotuner measures.
inline double gemm_model_us(const GemmConfig& c, int M, int N, int K, int sms) {
  const bool swap = c.swap_ab;
  const int64_t R = swap ? N : M, Q = swap ? M : N;
  const int64_t tiles = cdiv64(R, c.BM) * cdiv64(Q, c.BN) * c.split_k;
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
  const int64_t m_pad = swap ? cdiv64(Q, c.BN) * c.BN : cdiv64(R, c.BM) * c.BM;
  double dram = 2.0 * (double(M) * K + double(N) * K + double(M) * N);
  double reduce_s = 0;
  if (c.split_k > 1) {
    double ws = 4.0 * c.split_k * m_pad * N;
    dram += ws;                                    // written by the main kernel
    reduce_s = (ws + 2.0 * M * N) / 3.0e12 + 3e-6;  // read back and C written, plus a launch
  }
  // A tie-breaker between memory-bound candidates: the tensor-core work they waste on padding.
  const double padded_s = 2.0 * cdiv64(R, c.BM) * c.BM * cdiv64(Q, c.BN) * c.BN * double(K) / (989e12 * n_eff);
  return (std::max(main_s, dram / 3.3e12) + reduce_s + 0.02 * padded_s) * 1e6;
}

}  // namespace gemm_detail

// The configurations worth trying for an M x N x K product (B N x K when b_is_nk) on `sms`
// multiprocessors: every supported tile shape, consumer count, split-K, operand order and cluster, ranked by
// gemm_model_us, the best `count` first; for large products, then the best one's variants with
// double-buffered C stores and two ping-pong configurations.
inline std::vector<GemmConfig> gemm_candidates(int M, int N, int K, bool b_is_nk, int sms, size_t count = 8) {
  using gemm_detail::cdiv64;
  std::vector<std::pair<double, GemmConfig>> scored;
  const int64_t k_tiles = cdiv64(K, 64);
  for (bool swap : {false, true}) {
    if (swap && (!b_is_nk || M > 128)) continue;
    for (auto [BM, consumers] : {std::pair{64, 1}, {128, 1}, {128, 2}, {256, 2}})
      for (int BN : {8, 16, 32, 64, 128, 256}) {
        // Tiles much larger than the product only multiply zeros.
        const int64_t R = swap ? N : M, Q = swap ? M : N;
        if (BN > 16 && BN / 2 >= Q) continue;
        if (BM > 64 && BM / 2 >= R) continue;
        if (!swap && BN < 64) continue;
        for (int split : {1, 2, 3, 4, 6, 8, 12, 16}) {
          if (split > 1 && k_tiles / split < 4) continue;  // slices too short to fill the ring
          const int64_t tiles = cdiv64(R, BM) * cdiv64(Q, BN);
          if (split > 1 && tiles * split > 2 * sms) continue;  // enough tiles already
          const int64_t m_pad = swap ? cdiv64(Q, BN) * BN : cdiv64(R, BM) * BM;
          if (split > 1 && 4.0 * split * m_pad * N > 256e6) continue;  // workspace over 256 MB
          // Clusters of two along M (B multicast) for products with enough tile rows.
          for (int cluster : {1, 2}) {
            if (cluster > 1 && (swap || split > 1 || cdiv64(R, BM) < 2)) continue;
            GemmConfig c{.BM = BM, .BN = BN, .BK = 64, .stages = 2, .consumers = consumers, .split_k = split,
                         .swap_ab = swap, .cluster_m = cluster};
            // As many stages as fit (up to 8): 4 for the 128 x 256 tile, as in the default configuration.
            while (c.stages < 8 && c.shared_bytes() + (c.BM + c.BN) * c.BK * 2 <= 220 * 1024) ++c.stages;
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
  const int64_t best_tiles = cdiv64(best.swap_ab ? N : M, best.BM) * cdiv64(best.swap_ab ? M : N, best.BN);
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

// Scratch buffers of a device for the padded operands (slot 0: A, 1: B, 2: C), grown as needed; shared by
// the calls of a process like the split-K workspace.
inline weft::Buffer<weft::bf16> pad_scratch(const weft::Device& dev, int slot, size_t elements, weft::SourceLoc loc) {
  static std::mutex mutex;
  static std::map<std::pair<weft::detail::Backend*, int>, weft::Buffer<weft::bf16>> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  weft::Buffer<weft::bf16>& b = buffers[{&dev.backend(), slot}];
  if (b.size() < elements) b = dev.alloc<weft::bf16>(std::max(elements, b.size() * 2), loc);
  return b;
}

inline bool tma_can_describe(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                             const weft::Buffer<weft::bf16>& c, int N, int K) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return N % 8 == 0 && K % 8 == 0 && aligned(a.data()) && aligned(b.data()) && aligned(c.data());
}

// M <= 16 rows of C, rows of A and B wherever they are (any N, K, alignment): program (j, s) computes
// columns [j * BN, j * BN + BN) of all rows over K slice s ([s * k_slice, s * k_slice + k_slice)), one
// 16-row tensor-core tile (rows past M masked). With one slice it writes C; with several, f32 partial sums
// into the split-K workspace [slices * M, N], which make_gemm_splitk_reduce sums in order.
inline constexpr int kSmallM = 16;
inline weft::Kernel make_gemm_small_m(bool b_is_nk, bool sliced) {
  using namespace weft;
  std::string name = std::string("gemm_small_m_") + (b_is_nk ? "nk" : "kn") + (sliced ? "_sliced" : "");
  return Kernel(name, [b_is_nk, sliced](Ptr<bf16> a, Ptr<bf16> b, Ptr<bf16> c, Ptr<float> w, Int M, Int N, Int K,
                                        Int k_slice, Const<int> BN, Const<int> BK) {
    Int rows = arange(0, kSmallM);                   // [16]
    Int cols = program_id(0) * BN + arange(0, BN);   // [BN]
    Int k_begin = program_id(1) * k_slice;
    Int k_end = minimum(K, k_begin + k_slice);
    Long row_off = expand_dims(cast<int64_t>(rows), 1), col_off = expand_dims(cast<int64_t>(cols), 0);
    Bool row_in = expand_dims(rows < M, 1), col_in = expand_dims(cols < N, 0);
    Var acc = zeros<float>({kSmallM, BN});
    for_range(k_begin, k_end, BK, [&](Int k0) {
      Int ka = k0 + arange(0, BK);
      Long k_row = expand_dims(cast<int64_t>(ka), 0), k_col = expand_dims(cast<int64_t>(ka), 1);
      Tile<bf16> a_tile = load(a + row_off * cast<int64_t>(K) + k_row, row_in & expand_dims(ka < k_end, 0), 0);
      Tile<bf16> b_tile =
          b_is_nk ? trans(load(b + expand_dims(cast<int64_t>(cols), 1) * cast<int64_t>(K) + k_row,
                               expand_dims(cols < N, 1) & expand_dims(ka < k_end, 0), 0))  // [BN, BK] -> [BK, BN]
                  : load(b + k_col * cast<int64_t>(N) + col_off, expand_dims(ka < k_end, 1) & col_in, 0);
      acc = dot(a_tile, b_tile, acc);
    });
    if (sliced)
      store(w + (cast<int64_t>(program_id(1)) * cast<int64_t>(M) + row_off) * cast<int64_t>(N) + col_off, acc.read(),
            row_in & col_in);
    else
      store(c + row_off * cast<int64_t>(N) + col_off, cast<bf16>(acc.read()), row_in & col_in);
  });
}

inline const weft::Kernel& small_m_kernel(bool b_is_nk, bool sliced) {
  static const weft::Kernel kernels[2][2] = {{make_gemm_small_m(false, false), make_gemm_small_m(false, true)},
                                             {make_gemm_small_m(true, false), make_gemm_small_m(true, true)}};
  return kernels[b_is_nk][sliced];
}

// Launches the small-M product: 32-column blocks, and K cut into slices (multiples of BK) until there are
// about four programs per multiprocessor, no slice shorter than 4 BK.
inline void gemm_small_m(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                         const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk, const weft::Device& dev,
                         weft::SourceLoc loc) {
  constexpr int BN = 32, BK = 128;
  const int64_t col_blocks = cdiv64(N, BN);
  const int64_t k_blocks = cdiv64(K, BK);
  const int64_t wanted = cdiv64(4 * int64_t(dev.multiprocessors()), col_blocks);
  const int64_t slices_max = std::max<int64_t>(1, k_blocks / 4);
  int64_t slices = std::clamp<int64_t>(wanted, 1, slices_max);
  const int64_t k_slice = cdiv64(k_blocks, slices) * BK;
  slices = cdiv64(K, k_slice);
  const weft::Stream stream = dev.stream();
  // One slice: the kernel writes C and does not touch the workspace (passed for the signature's sake).
  weft::Buffer<float> w = workspace(dev, slices == 1 ? 1 : size_t(slices) * M * N, loc);
  if (slices == 1) {
    small_m_kernel(b_is_nk, false)
        .launch(stream, weft::Grid(int(col_blocks), 1, 1, loc), a, b, c, w, M, N, K, int(k_slice), BN, BK);
    return;
  }
  small_m_kernel(b_is_nk, true)
      .launch(stream, weft::Grid(int(col_blocks), int(slices), 1, loc), a, b, c, w, M, N, K, int(k_slice), BN, BK);
  splitk_reduce_kernel().launch(stream, weft::Grid(int(cdiv64(N, 1024)), M, 1, loc), w, c, M, N, M, int(slices));
}

inline int bucket_m(int M) {
  int b = 8;
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
                       weft::SourceLoc loc = weft::SourceLoc::current()) {
  using namespace weft;
  gemm_detail::check_sizes("gemm", a, b, c, M, N, K, loc);
  Device dev = Device::from_backend(*a.backend());
  auto hold = gemm_detail::lock_scratch(dev);  // scratch and workspace are this call's until its last launch
  GemmChoice choice;
  const bool tma_fits = gemm_detail::tma_can_describe(a, b, c, N, K);
  if (M <= gemm_detail::kSmallM && !tma_fits) {
    gemm_detail::gemm_small_m(a, b, c, M, N, K, b_is_nk, dev, loc);
    choice.small_m = true;
    return choice;
  }
  if (!tma_fits) {
    // Copies with rows TMA can stride and address: K and N up to multiples of 8, zeros in the new rows and
    // columns. A buffer already fine (right shape, aligned) is used as it is.
    const int Kp = (K + 7) / 8 * 8, Np = (N + 7) / 8 * 8;
    const bool reshaped = Kp != K || Np != N;
    auto aligned = [](const Buffer<bf16>& x) { return reinterpret_cast<uintptr_t>(x.data()) % 16 == 0; };
    // A view of the first n elements of a scratch buffer (kept alive by pad_scratch's table).
    auto first = [&](const Buffer<bf16>& x, size_t n) { return dev.wrap(static_cast<bf16*>(x.data()), n, loc); };
    const Stream stream = dev.stream();
    Buffer<bf16> pa = a, pb = b, pc = c;
    if (Kp != K || !aligned(a)) {
      pa = first(gemm_detail::pad_scratch(dev, 0, size_t(M) * Kp, loc), size_t(M) * Kp);
      gemm_detail::pad_copy(a, pa, M, K, K, M, Kp, stream, loc);
    }
    if (reshaped || !aligned(b)) {
      pb = first(gemm_detail::pad_scratch(dev, 1, size_t(Kp) * Np, loc), size_t(Kp) * Np);
      if (b_is_nk) gemm_detail::pad_copy(b, pb, N, K, K, Np, Kp, stream, loc);  // [Np, Kp]
      else gemm_detail::pad_copy(b, pb, K, N, N, Kp, Np, stream, loc);          // [Kp, Np]
    }
    if (Np != N || !aligned(c)) pc = first(gemm_detail::pad_scratch(dev, 2, size_t(M) * Np, loc), size_t(M) * Np);
    choice = gemm(pa, pb, pc, M, Np, Kp, b_is_nk, loc);
    if (pc.data() != c.data()) gemm_detail::pad_copy(pc, c, M, N, Np, M, N, stream, loc);
    choice.padded = true;
    return choice;
  }
  const int sms = dev.multiprocessors();
  const std::string problem = gemm_detail::problem_of(M, N, K, b_is_nk, sms);
  const char* mode_env = std::getenv("WEFT_AUTOTUNE");
  const std::string mode = mode_env ? mode_env : "";

  // Chosen configurations by (exact shape, device, WEFT_AUTOTUNE), so that a warm call costs a lookup.
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, bool, detail::Backend*, std::string>, GemmChoice> chosen;
  static std::map<std::string, std::unique_ptr<Autotuner<GemmConfig>>> tuners;  // by bucket
  const auto key = std::make_tuple(M, N, K, b_is_nk, &dev.backend(), mode);
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (auto it = chosen.find(key); it != chosen.end()) {
      choice = it->second;
      lock.unlock();
      gemm_detail::plan_gemm(choice.config, a, b, c, M, N, K, b_is_nk, loc).run(dev.stream(), loc);
      return choice;
    }
  }
  Autotuner<GemmConfig>* tuner;
  {
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<Autotuner<GemmConfig>>& t = tuners[problem];
    if (!t) {
      // Candidates from the bucket's shape, so that every shape of the bucket tunes the same set.
      std::vector<GemmConfig> candidates = gemm_candidates(gemm_detail::bucket_m(M), gemm_detail::bucket_nk(N),
                                                           gemm_detail::bucket_nk(K), b_is_nk, sms);
      // On a GPU, ten launches per timed round hide the synchronization's latency; the CPU backend (a
      // reference, not a target to tune for) times one launch, once.
      AutotuneOptions options = dev.kind() == BackendKind::cpu
                                    ? AutotuneOptions{.warmup = 0, .rounds = 1, .calls_per_round = 1}
                                    : AutotuneOptions{.warmup = 2, .rounds = 5, .calls_per_round = 10};
      t = std::make_unique<Autotuner<GemmConfig>>(
          "gemm_bf16", std::move(candidates), [](const GemmConfig& g) { return g.name(); }, options, loc);
    }
    tuner = t.get();
  }
  // The candidates' launches, planned on the compile threads (descriptors of the caller's buffers).
  std::mutex plans_mutex;
  std::map<std::string, gemm_detail::GemmLaunch> plans;
  auto compile = [&](const GemmConfig& g) {
    gemm_detail::GemmLaunch l = gemm_detail::plan_gemm(g, a, b, c, M, N, K, b_is_nk, loc);
    l.compile(dev);
    std::lock_guard<std::mutex> lock(plans_mutex);
    plans.emplace(g.name(), std::move(l));
  };
  auto run = [&](const GemmConfig& g) { plans.at(g.name()).run(dev.stream(), loc); };
  choice.problem = problem;
  choice.report = tuner->best_report(problem, dev.stream(), compile, run, loc);
  choice.config = tuner->candidates().at(choice.report.index);
  {
    std::lock_guard<std::mutex> lock(mutex);
    chosen[key] = choice;
  }
  gemm_detail::plan_gemm(choice.config, a, b, c, M, N, K, b_is_nk, loc).run(dev.stream(), loc);
  return choice;
}
