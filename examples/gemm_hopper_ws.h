// A persistent, warp-specialized bf16 GEMM family for Hopper, written only with weft's public API:
//   C (M x N) = A (M x K) @ B, B stored N x K (K contiguous: C = A B^T) or K x N (N contiguous, read by
//   wgmma as a transposed, N-major operand in 64-column panels), f32 accumulation, bf16 out.
//
// One producer warp group (40 registers per thread) issues TMA loads of A and B tiles into a ring of
// `stages` shared-memory stages guarded by `full` / `empty` mbarriers; `consumers` consumer warp groups
// (232 registers) each multiply their BM / consumers rows of the BM x BN block with wgmma, then write C
// through a small shared-memory tile and TMA stores. Blocks are persistent (one per SM) and walk the output
// tiles in grouped order for L2 reuse. TMA zero-fills reads past the edges and clips writes, so any M, and
// K not a multiple of BK, work; N and K must be multiples of 8 (TMA's 16-byte row strides: see gemm.h for
// the entry point that falls back to a kernel without TMA).
//
// The configuration (GemmConfig) spans the shapes of real workloads:
// - tile shape BM x BN x BK, ring depth, group of the tile order, 1 or 2 consumer warp groups;
// - split_k > 1: each output tile's K range is cut in split_k slices taken by different blocks, which
//   write f32 partial sums to a workspace [split_k * Mpad, N] (Mpad: M rounded up to the tile); a second
//   kernel sums the slices in a fixed order (deterministic) and writes bf16 C. For small M*N, long K.
// - swap_ab: C^T = B A^T, so N fills wgmma's 64-row M dimension and M (as small as 1) becomes wgmma's N (a
//   multiple of 8): BM tiles N and BN tiles M; the consumers transpose their result in registers and store
//   C directly. For M <= 64-ish, where BM = 64 rows of A would be mostly zero. B stored N x K is wgmma's
//   K-major A; B stored K x N is its M-major (transposed) A: each consumer's BM / consumers columns of B's
//   [BK, BM] box in a stage of their own, in 64-column panels, read through local_trans.
// - epilogue_buffers = 2: two C staging tiles per consumer, so that the TMA store of one chunk of C reads
//   shared memory while the consumer writes the next one (with one, each chunk waits for the last store).
// - pingpong (CUTLASS's "ping-pong" schedule): each of the two consumers computes whole BM x BN tiles, the
//   block's tiles taken alternately (consumer 0 its 1st, 3rd, ...; consumer 1 its 2nd, 4th, ...), and their
//   main loops take turns on the tensor cores (two named barriers), so that one consumer's epilogue runs
//   while the other's wgmmas run. Both read the one ring, which the producer fills tile after tile; each
//   stage goes to one consumer, which passes over the other's stages.
// The default configuration is the large-square kernel (128 x 256 x 64, 4 stages, two consumers).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <weft/weft.h>

struct GemmConfig {
  int BM = 128, BN = 256, BK = 64;  // block tile: BM rows of wgmma's M operand, BN of its N, BK of K
  int stages = 4;
  int group = 8;                     // rows of tiles per group of the tile order
  int epilogue_n = 64;               // columns of bf16 C written per TMA store (128 bytes)
  int consumers = 2;                 // consumer warp groups; each owns BM / consumers rows (64 or 128)
  int split_k = 1;                   // K slices per output tile (> 1: f32 partials + a reduction kernel)
  bool swap_ab = false;              // C^T = B A^T: BM tiles N, BN tiles M
  int cluster_m = 1;                 // 2: blocks in clusters of two along M, each loading half of the shared
                                     // B tile and multicasting it to both (TMA multicast)
  int epilogue_buffers = 1;          // C staging tiles per consumer: 2 lets the TMA store of one chunk of C
                                     // read shared memory while the consumer writes the next chunk
  bool pingpong = false;             // two consumers, each computing whole tiles (BM rows), alternate tiles,
                                     // main loops in turn: one's epilogue under the other's wgmmas
  bool reduce_in_kernel = false;     // split_k > 1: the last slice to finish a tile sums the slices' partial
                                     // sums (in slice order) and writes C: no second kernel

  int rows_per_consumer() const { return pingpong ? BM : BM / consumers; }
  bool is_default() const { return *this == GemmConfig{}; }
  friend bool operator==(const GemmConfig&, const GemmConfig&) = default;
  friend auto operator<=>(const GemmConfig&, const GemmConfig&) = default;

  // A stable, distinct name: "128x256x64_s4_g8_c2", then "_k<split>", "_swap", "_eb2", "_pp" when set.
  std::string name() const {
    std::string s = std::to_string(BM) + "x" + std::to_string(BN) + "x" + std::to_string(BK) + "_s" +
                    std::to_string(stages) + "_g" + std::to_string(group) + "_c" + std::to_string(consumers);
    if (epilogue_n != 64) s += "_e" + std::to_string(epilogue_n);
    if (split_k > 1) s += "_k" + std::to_string(split_k);
    if (swap_ab) s += "_swap";
    if (cluster_m > 1) s += "_cl" + std::to_string(cluster_m);
    if (epilogue_buffers != 1) s += "_eb" + std::to_string(epilogue_buffers);
    if (pingpong) s += "_pp";
    if (reduce_in_kernel) s += "_rk";
    return s;
  }

  // The configuration name() gives (e.g. "128x128x64_s6_g8_c2_pp", as the tuner's progress lines print
  // them), or nothing where `text` is not such a name.
  static std::optional<GemmConfig> from_name(const std::string& text) {
    GemmConfig c;
    c.epilogue_n = 64;
    int used = 0;
    if (std::sscanf(text.c_str(), "%dx%dx%d_s%d_g%d_c%d%n", &c.BM, &c.BN, &c.BK, &c.stages, &c.group, &c.consumers,
                    &used) != 6)
      return std::nullopt;
    for (size_t at = size_t(used); at < text.size();) {
      if (text[at] != '_') return std::nullopt;
      size_t end = text.find('_', at + 1);
      if (end == std::string::npos) end = text.size();
      const std::string part = text.substr(at + 1, end - at - 1);
      at = end;
      auto number = [&](const char* prefix, int& field) {
        const size_t n = std::strlen(prefix);
        if (part.size() <= n || part.compare(0, n, prefix) != 0 ||
            part.find_first_not_of("0123456789", n) != std::string::npos)
          return false;
        field = std::atoi(part.c_str() + n);
        return true;
      };
      if (part == "swap") c.swap_ab = true;
      else if (part == "pp") c.pingpong = true;
      else if (part == "rk") c.reduce_in_kernel = true;
      else if (!number("eb", c.epilogue_buffers) && !number("e", c.epilogue_n) && !number("k", c.split_k) &&
               !number("cl", c.cluster_m))
        return std::nullopt;
    }
    if (c.name() != text) return std::nullopt;  // e.g. "_k1", or the parts out of name()'s order
    return c;
  }

  // Shared memory the kernel needs (bytes): the ring, epilogue_buffers C staging tiles per consumer and,
  // swapped or reducing in the kernel, the consumers' exchange space for their accumulators (weft's scratch:
  // at most the f32 tile).
  int64_t shared_bytes() const {
    int64_t ring = int64_t(stages) * (BM + BN) * BK * 2;
    int64_t c_tile = swap_ab ? int64_t(BN) * epilogue_n * 2 : int64_t(rows_per_consumer()) * epilogue_n * 2;
    if (reduce_in_kernel) c_tile = 0;  // plain stores: no staging tile
    int64_t exchange = swap_ab || reduce_in_kernel ? int64_t(rows_per_consumer()) * BN * 4 : 0;
    return ring + consumers * (epilogue_buffers * c_tile + exchange);
  }

  // Empty when the configuration is one the kernel supports for this B layout, else every broken rule.
  std::string problems(bool b_is_nk) const {
    std::string out;
    auto rule = [&](bool ok, const std::string& what) {
      if (!ok) out += (out.empty() ? "" : "; ") + what;
    };
    rule(consumers == 1 || consumers == 2, "consumers must be 1 or 2");
    if (pingpong) {
      rule(consumers == 2, "pingpong needs consumers = 2 (they take turns)");
      rule(split_k == 1 && !swap_ab && cluster_m == 1, "pingpong needs split_k = 1, swap_ab off and cluster_m = 1");
      rule(BM == 64 || BM == 128, "with pingpong each consumer computes the whole tile: BM must be 64 or 128");
    } else if (consumers == 1 || consumers == 2) {
      rule(BM % consumers == 0 && (rows_per_consumer() == 64 || rows_per_consumer() == 128),
           "BM / consumers must be 64 or 128 (wgmma's 64-row blocks; BM 64, 128 or 256)");
    }
    rule(BK == 32 || BK == 64, "BK must be 32 or 64 (rows of 64 or 128 bytes: one swizzle span)");
    rule(stages >= 2 && stages <= 16, "stages must be 2 to 16");
    rule(group >= 1, "group must be at least 1");
    rule(split_k >= 1 && split_k <= 64, "split_k must be 1 to 64");
    rule(epilogue_n == 32 || epilogue_n == 64, "epilogue_n must be 32 or 64");
    bool y_nk = swap_ab || b_is_nk;
    // Tiles have power-of-two dimensions; wgmma's N is a multiple of 8 up to 256.
    rule(BN >= (swap_ab ? 8 : 16) && BN <= 256 && (BN & (BN - 1)) == 0,
         swap_ab ? "BN must be 8, 16, 32, 64, 128 or 256" : "BN must be 16, 32, 64, 128 or 256");
    if (!y_nk)
      rule(BN < 64 || BN % 64 == 0,
           "with B stored K x N, BN must be 16, 32 or a multiple of 64 (B's 128-byte column panels)");
    if (swap_ab) rule(rows_per_consumer() % epilogue_n == 0, "BM / consumers must be a multiple of epilogue_n");
    rule(epilogue_buffers == 1 || epilogue_buffers == 2, "epilogue_buffers must be 1 or 2");
    // With one store per tile there is nothing to overlap (the next tile's main loop separates the stores).
    if (epilogue_buffers == 2)
      rule((swap_ab ? rows_per_consumer() : BN) >= 2 * epilogue_n,
           swap_ab ? "epilogue_buffers = 2 needs at least two stores per tile: BM / consumers >= 2 * epilogue_n"
                   : "epilogue_buffers = 2 needs at least two stores per tile: BN >= 2 * epilogue_n");
    rule(cluster_m == 1 || cluster_m == 2, "cluster_m must be 1 or 2");
    if (reduce_in_kernel) rule(split_k > 1 && epilogue_buffers == 1, "reduce_in_kernel needs split_k > 1 and epilogue_buffers = 1");
    if (cluster_m == 2) {
      rule(split_k == 1 && !swap_ab, "cluster_m = 2 needs split_k = 1 and swap_ab off");
      rule(y_nk ? BN >= 16 : BN % 128 == 0,
           y_nk ? "cluster_m = 2 needs BN >= 16 (each block multicasts BN / 2 rows of B)"
                : "cluster_m = 2 with B K x N needs BN a multiple of 128 (each block multicasts half of B's panels)");
    }
    rule(int64_t(rows_per_consumer()) * BN <= 64 * 256,
         "BM / consumers * BN must be at most 64 * 256 (the f32 accumulator: 128 registers per thread)");
    // 227 KB per block (what the compiler's shared-memory plan allows on sm_90) less 2 KB for what
    // shared_bytes() leaves out: the mbarriers and the 1024-byte alignment of the buffers. (220 KB until
    // epilogue_buffers: the default tile with two staging buffers needs 224 KB.)
    rule(shared_bytes() <= 225 * 1024, "the stages and C tiles need " + std::to_string(shared_bytes()) +
                                           " bytes of shared memory; at most 225 KB: fewer stages or smaller tiles");
    return out;
  }
};

namespace gemm_detail {

// bf16 out for C, f32 for the split-K workspace.
template <class Out> weft::Tile<Out> to_out(const weft::Tile<float>& t) {
  if constexpr (std::is_same_v<Out, float>) return t;
  else return weft::cast<Out>(t);
}

// Columns of C one TMA store writes: 128 bytes (64 bf16, 32 f32), or BN when the tile is narrower.
template <class Out> int epilogue_cols(const GemmConfig& cfg) {
  int n = cfg.epilogue_n * 2 / int(sizeof(Out));
  return cfg.swap_ab ? n : std::min(n, cfg.BN);
}

// Split-K reduced in the kernel (GemmConfig::reduce_in_kernel): each slice's partial sums go to `w`, f32
// [split_k, R_pad, Q] (R x Q: the product as the kernel tiles it, C^T when swapped; R_pad: R rounded up to
// BM), by plain stores; `counters` (one per tile and consumer, zero between launches) counts the slices
// done, and the slice that makes the count whole sums the slices in order (as the reduction kernel does,
// so C is the same bits) into C [M, N] and sets the counter back to zero.
struct InKernelReduce {
  weft::Ptr<float> w;
  weft::Ptr<int32_t> counters;
  weft::Ptr<weft::bf16> c;
};

// The body of the GEMM kernel for C of element type Out (bf16: C itself; f32: split-K partial sums), C
// written by TMA, or (`rk`) the split-K partial sums reduced in the kernel (C null).
template <class Out>
void gemm_ws_body(const GemmConfig& cfg, bool b_is_nk, weft::TensorDesc<weft::bf16, 2> A, weft::TensorDesc<weft::bf16, 2> B,
                  const weft::TensorDesc<Out, 2>* C, weft::Int M, weft::Int N, weft::Int K,
                  const InKernelReduce* rk = nullptr) {
  using namespace weft;
  using bf16 = weft::bf16;
  const int BM = cfg.BM, BN = cfg.BN, BK = cfg.BK, S = cfg.stages, HALF = cfg.rows_per_consumer();
  const int EN = epilogue_cols<Out>(cfg), SPLIT = cfg.split_k, CONS = cfg.consumers;
  const bool swap = cfg.swap_ab, y_nk = swap || b_is_nk;
  // Swapped with B stored K x N: X's boxes are [BK, BM] as B stores them, N contiguous; each consumer's
  // HALF columns of a box go to a stage of their own (consumer r of ring stage s: stage s * CONS + r),
  // which wgmma reads through local_trans as an M-major A.
  const bool x_kn = swap && !b_is_nk;
  const int PANEL = 64;  // columns of B (K x N) one TMA box brings: 128 bytes, the swizzle's width
  // X: the operand whose rows fill wgmma's M (A, or B when swapped); Y: the other one, R x Q the product.
  const TensorDesc<bf16, 2>& X = swap ? B : A;
  const TensorDesc<bf16, 2>& Y = swap ? A : B;
  Int R = swap ? N : M, Q = swap ? M : N;
  auto a_s = x_kn ? local_alloc<bf16>({BK, HALF}, S * CONS, "a_s") : local_alloc<bf16>({BM, BK}, S, "a_s");
  const int64_t a_bytes = int64_t(BM) * BK * 2;  // of one ring stage
  auto b_s = y_nk ? local_alloc<bf16>({BN, BK}, S, "b_s") : local_alloc<bf16>({BK, BN}, S, "b_s");
  // EB staging tiles per consumer: consumer r's buffer b is stage r * EB + b.
  const int EB = cfg.epilogue_buffers;
  std::optional<SharedBuffer<Out>> c_s;  // (none when reducing in the kernel: plain stores)
  if (!rk) c_s = swap ? local_alloc<Out>({BN, EN}, CONS * EB, "c_s") : local_alloc<Out>({HALF, EN}, CONS * EB, "c_s");
  auto full = alloc_barriers(S, 1, "full");     // the producer's expect_bytes, then TMA bytes
  const int CL = cfg.cluster_m;
  // Every consumer (of every block of the cluster) releases a stage; with ping-pong, the one consumer whose
  // tile it holds.
  const bool PP = cfg.pingpong;
  auto empty = alloc_barriers(S, PP ? 1 : CONS * CL, "empty");
  Int tiles_q = cdiv(Q, BN);  // (before tiles_r: the order the default kernel's IR has always had)
  Int tiles_r = cdiv(R, BM);
  // With split-K the scheduler's columns are (tile column, slice) pairs, the slice fastest.
  TileScheduler tiles(tiles_r, SPLIT > 1 ? tiles_q * SPLIT : tiles_q, cfg.group);
  Int k_tiles = cdiv(K, BK);

  // What one scheduled tile covers: its column of tiles, its K slice (first k-tile, count) and the row of
  // the workspace where its slice's partial sums go (split-K).
  struct Work {
    Int n, k0, count, c_row0;
  };
  auto work_of = [&](Int nq) {
    if (SPLIT == 1) return Work{nq, k_tiles, k_tiles, k_tiles};  // k0 and c_row0 unused
    Int s = nq % SPLIT, per = cdiv(k_tiles, SPLIT);
    Int k0 = s * per;
    Int count = maximum(minimum(k_tiles - k0, per), Int(scalar<int32_t>(0)));
    Int m_pad = swap ? tiles_q * BN : tiles_r * BM;  // rows of C's padded slice in the workspace
    return Work{nq / SPLIT, k0, count, s * m_pad};
  };
  auto k_of = [&](const Work& w, Int i) { return SPLIT == 1 ? i : w.k0 + i; };
  // The tiles of this block. In clusters of two along M, both blocks of a cluster walk the same pairs of tile
  // rows (grouped order over pairs), block r taking row 2 * pair + r: their B tile is the same. A row past
  // the end (odd tile rows) still takes part in the multicast; its loads read zeros and its stores clip.
  auto for_each_tile = [&](auto&& body) {
    if (CL == 1) {
      tiles.for_each(body);
      return;
    }
    Int pairs = cdiv(tiles_r, CL), total = pairs * tiles_q;
    for_range(program_id(0) / CL, total, num_programs(0) / CL, [&](Int t) {
      Int per_group = tiles_q * cfg.group;
      Int first = (t / per_group) * cfg.group;
      Int rows = minimum(pairs - first, Int(scalar<int32_t>(cfg.group)));
      Int within = t % per_group;
      body((first + within % rows) * CL + cluster_cta_rank(), within / rows);
    });
  };
  // A consumer's release of the `done` stage: to its own producer, or to both producers of the cluster
  // (each multicast into this block's stage).
  auto release = [&](Pipeline& done) {
    if (CL == 1) done.release(empty);
    else
      for (int rank = 0; rank < CL; ++rank) done.release(empty, Int(scalar<int32_t>(rank)));
  };

  async_tasks(
      task("producer", {.warps = 4, .regs = 40}, [&] {
        // The descriptors into the cache TMA reads them from, under the set-up, not at the first copy.
        prefetch_descriptor(X);
        prefetch_descriptor(Y);
        Pipeline p(S);
        for_each_tile([&](Int m, Int nq) {
          Work w = work_of(nq);
          Int n = w.n;
          for_range(0, w.count, [&](Int i) {
            Int k = k_of(w, i);
            p.acquire(empty);
            barrier_expect_bytes(full[p.index()], a_bytes + b_s.stage_bytes());
            if (x_kn) {
              for (int c = 0; c < CONS; ++c)
                for (int j = 0; j < HALF / PANEL; ++j)
                  async_descriptor_load(X, a_s[p.index() * CONS + c].cols(j * PANEL, PANEL),
                                        {k * BK, m * BM + c * HALF + j * PANEL}, full[p.index()]);
            } else {
              async_descriptor_load(X, a_s[p.index()], {m * BM, k * BK}, full[p.index()]);
            }
            if (CL > 1) {
              // This block's share of B, multicast to both blocks (mask 0b11): rows or panels.
              Int rank = cluster_cta_rank();
              Int both = scalar<int32_t>((1 << CL) - 1);
              if (y_nk) {
                async_descriptor_load(Y, b_s[p.index()].rows(rank * (BN / CL), BN / CL),
                                      {n * BN + rank * (BN / CL), k * BK}, full[p.index()], both);
              } else {
                const int share = BN / PANEL / CL;  // panels per block
                for (int j = 0; j < share; ++j) {
                  // Panel rank * share + j: a C++ panel index per rank, chosen at run time.
                  for (int r = 0; r < CL; ++r)
                    if_(rank == r, [&] {
                      int panel = r * share + j;
                      async_descriptor_load(Y, b_s[p.index()].cols(panel * PANEL, PANEL),
                                            {k * BK, n * BN + panel * PANEL}, full[p.index()], both);
                    });
                }
              }
            } else if (y_nk) {
              async_descriptor_load(Y, b_s[p.index()], {n * BN, k * BK}, full[p.index()]);
            } else if (BN < PANEL) {  // narrower than a panel: the stage is one box of BN * 2-byte rows
              async_descriptor_load(Y, b_s[p.index()], {k * BK, n * BN}, full[p.index()]);
            } else {
              for (int j = 0; j < BN / PANEL; ++j)
                async_descriptor_load(Y, b_s[p.index()].cols(j * PANEL, PANEL), {k * BK, n * BN + j * PANEL},
                                      full[p.index()]);
            }
            p.advance();
          });
        });
      }),
      task("consumer", {.warps = 4, .regs = 232, .replicas = CONS}, [&] {
        if (C) prefetch_descriptor(*C);
        Int r = task_replica_id();
        // One wgmma group stays in flight: step k waits for step k - 1's group, then releases its stage
        // (`done` trails `p` by one step).
        Pipeline p(S), done(S);
        // Tile (m, nq): its main loop, then its epilogue. `issued` runs between them, once every wgmma of
        // the main loop has been issued and before the last one is waited for (ping-pong: where the other
        // consumer's turn begins).
        auto consume = [&](Int m, Int nq, const std::function<void()>& issued) {
          Work w = work_of(nq);
          Int n = w.n;
          Var acc = zeros<float>({HALF, BN});
          for_range(0, w.count, [&](Int k) {
            p.wait(full);
            SharedView<bf16> b = y_nk ? local_trans(b_s[p.index()]) : b_s[p.index()];
            SharedView<bf16> a = x_kn ? local_trans(a_s[p.index() * CONS + r])
                                 : PP ? a_s[p.index()]
                                      : a_s[p.index()].rows(r * HALF, HALF);
            acc = async_dot_wait(1, async_dot(a, b, acc));
            if_(k > 0, [&] {
              release(done);
              done.advance();
            });
            p.advance();
          });
          if (issued) issued();
          Tile<float> result = async_dot_wait(0, acc);
          if_(w.count > 0, [&] {
            release(done);
            done.advance();
          });
          if (rk) {
            // This consumer's rows of the tile in R x Q (each consumer counts its own rows' slices).
            Int rows = expand_dims(m * BM + r * HALF + arange(0, HALF), 1);
            Int cols = expand_dims(n * BN + arange(0, BN), 0);
            Bool in = (rows < R) & (cols < Q);
            Int r_pad = tiles_r * BM;
            auto at = [&](Int slice) { return rk->w + (cast<int64_t>(slice * r_pad + rows) * cast<int64_t>(Q) + cast<int64_t>(cols)); };
            store(at(nq % SPLIT), result, in);
            Ptr<int32_t> counter = rk->counters + ((m * tiles_q + n) * CONS + r);
            Int done_before = atomic_add(counter, 1);  // acq_rel: publishes this slice, sees the others'
            if_(done_before == SPLIT - 1, [&] {
              Var<float> sum = zeros<float>({HALF, BN});
              for_range(0, SPLIT, [&](Int s) { sum = sum + load(at(s), in, 0.f); });
              // C[M, N]: (rows, cols) of R x Q, or of C^T when swapped.
              Long c_at = swap ? cast<int64_t>(cols) * cast<int64_t>(N) + cast<int64_t>(rows)
                               : cast<int64_t>(rows) * cast<int64_t>(N) + cast<int64_t>(cols);
              store(rk->c + c_at, cast<bf16>(sum.read()), in);
              store(counter, 0);
            });
            return;
          }
          // Store j of a tile: its staging buffer is free once the stores issued since its last use (the
          // EB - 1 newest) are all that still read shared memory. One buffer: every store waits for the
          // previous one. Two: store j uses buffer j % 2 and waits only for store j - 2, so that store
          // j - 1 reads shared memory while this consumer converts and writes chunk j. The next tile's
          // chunk 0 takes buffer 0 again, the older of the two when a tile has an even number of chunks
          // (it does: a power of two, at least 2 by problems()); with an odd number it would wait for all.
          const int chunks = swap ? HALF / EN : BN / EN;
          auto wait_staging = [&](int j) {
            async_store_wait(EB == 1 || (j == 0 && chunks % 2 != 0) ? 0 : EB - 1);
          };
          auto staging = [&](int j) { return EB == 1 ? (*c_s)[r] : (*c_s)[r * EB + j % EB]; };
          // This consumer's first row of C: its half of the tile, or (ping-pong) the whole tile.
          auto first_row = [&] { return PP ? m * BM : m * BM + r * HALF; };
          if (!swap) {
            for (int j = 0; j < chunks; ++j) {
              wait_staging(j);
              local_store(staging(j), to_out<Out>(result.slice(1, j * EN, EN)));
              if (SPLIT == 1)
                async_descriptor_store(*C, staging(j), {first_row(), n * BN + j * EN});
              else
                async_descriptor_store(*C, staging(j), {w.c_row0 + m * BM + r * HALF, n * BN + j * EN});
            }
          } else {
            // result: [rows of C^T (N), columns of C^T (M)]; C gets its transpose, EN columns at a time.
            for (int j = 0; j < chunks; ++j) {
              wait_staging(j);
              local_store(staging(j), to_out<Out>(trans(result.slice(0, j * EN, EN))));
              Int c_row = SPLIT == 1 ? n * BN : w.c_row0 + n * BN;
              async_descriptor_store(*C, staging(j), {c_row, m * BM + r * HALF + j * EN});
            }
          }
        };
        if (!PP) {
          for_each_tile([&](Int m, Int nq) { consume(m, nq, nullptr); });
        } else {
          // Ping-pong. The block's tiles are t = program, program + programs, ...; consumer r takes the
          // (r + 1)-th, (r + 3)-th, ... of them. Tile i of the block holds ring positions i * k_tiles to
          // (i + 1) * k_tiles - 1 (split_k is 1), so consumer 1 starts k_tiles positions in and each consumer
          // skips the other's k_tiles after each of its own tiles.
          //
          // Turns: consumer r waits for its turn on named barrier 1 + r before each tile but the block's
          // first, and after issuing its tile's last wgmma gives the turn to the other (an arrival on the
          // other's barrier) when the block has a tile after this one. So the k-th wait on a barrier meets
          // the k-th arrival there, whatever the number of tiles (0, 1, odd, even): nothing is left over
          // at the end. The order matters for more than speed: a consumer's first wait on a stage of a new
          // tile comes after the other consumer has waited on every stage of the tile before, so no stage
          // is then two fills behind (a parity wait cannot tell phase p from p - 2).
          Int programs = num_programs(0), first = program_id(0), total = tiles.count();
          // Consumer r's barrier is 1 + r, the other's 2 - r: ids computed from r, one bar.sync on a register.
          auto my_turn = [&] { named_barrier_wait(1 + r, 256); };
          auto your_turn = [&] { named_barrier_arrive(2 - r, 256); };
          p.advance(r * k_tiles);
          done.advance(r * k_tiles);
          for_range(first + r * programs, total, 2 * programs, [&](Int t) {
            auto [m, nq] = tiles.tile(t);
            if_(t > first, my_turn);
            consume(m, nq, [&] { if_(t + programs < total, your_turn); });
            p.advance(k_tiles);
            done.advance(k_tiles);
          });
        }
        async_store_wait(0);
      }));
}

}  // namespace gemm_detail

// The kernel of one configuration: parameters (A, B, C, M, N, K) with TMA descriptors of A [M, K],
// B [N, K] or [K, N], and C [M, N] bf16 (split_k == 1) or the f32 workspace [split_k * Mpad, N].
inline weft::Kernel make_gemm_hopper_ws(GemmConfig cfg, bool b_is_nk) {
  using namespace weft;
  std::string name = b_is_nk ? "gemm_hopper_ws_nk" : "gemm_hopper_ws_kn";
  if (!cfg.is_default()) name += "_" + cfg.name();
  KernelOptions options;
  options.cluster = {cfg.cluster_m, 1, 1};
  if (cfg.reduce_in_kernel)
    return Kernel(name, [cfg, b_is_nk](TensorDesc<bf16, 2> A, TensorDesc<bf16, 2> B, Ptr<float> w, Ptr<int32_t> counters,
                                       Ptr<bf16> c, Int M, Int N, Int K) {
      const gemm_detail::InKernelReduce rk{w, counters, c};
      gemm_detail::gemm_ws_body<float>(cfg, b_is_nk, A, B, nullptr, M, N, K, &rk);
    }, options);
  if (cfg.split_k > 1)
    return Kernel(name, [cfg, b_is_nk](TensorDesc<bf16, 2> A, TensorDesc<bf16, 2> B, TensorDesc<float, 2> C, Int M,
                                       Int N, Int K) { gemm_detail::gemm_ws_body<float>(cfg, b_is_nk, A, B, &C, M, N, K); },
                  options);
  return Kernel(name, [cfg, b_is_nk](TensorDesc<bf16, 2> A, TensorDesc<bf16, 2> B, TensorDesc<bf16, 2> C, Int M, Int N,
                                     Int K) { gemm_detail::gemm_ws_body<bf16>(cfg, b_is_nk, A, B, &C, M, N, K); },
                options);
}

// Split-K's second kernel: C[i, j] = bf16(sum over s of W[s * m_pad + i, j]), the slices summed in order.
// One program per row of C and kSplitKReduceColumns columns (one a thread), each thread with the loads of
// kSplitKReduceAtOnce slices in flight before it adds them: a sum over tens of slices is a chain of L2 round
// trips otherwise (with 1024 columns a program and one slice at a time, the bulk-copy GEMM's call at
// 1 x 4095 x 4095, 94 slices, took 49 µs on the H200; with this kernel 23 µs on an H100).
inline constexpr int kSplitKReduceColumns = 128;
inline constexpr int kSplitKReduceAtOnce = 16;
inline weft::Kernel make_gemm_splitk_reduce() {
  using namespace weft;
  KernelOptions options;
  options.num_warps = kSplitKReduceColumns / 32;
  return Kernel("gemm_splitk_reduce", [](Ptr<float> w, Ptr<bf16> c, Int /*M: the grid's rows*/, Int N, Int m_pad, Int split) {
    Int row = program_id(1);
    Int cols = program_id(0) * kSplitKReduceColumns + arange(0, kSplitKReduceColumns);
    Bool in = cols < N;
    Long Nl = cast<int64_t>(N);
    wait_for_prior_grid();  // the product's partial sums: launched to start while it ends
    Var<float> acc = zeros<float>({kSplitKReduceColumns});
    for_range(0, split, kSplitKReduceAtOnce, [&](Int s) {
      std::vector<Tile<float>> parts;  // all loaded, then added in order
      for (int u = 0; u < kSplitKReduceAtOnce; ++u) {
        Long at = cast<int64_t>((s + u) * m_pad + row) * Nl + cast<int64_t>(cols);
        parts.push_back(load(w + at, in && s + u < split, 0.f));
      }
      for (const Tile<float>& part : parts) acc = acc + part;
    });
    store(c + cast<int64_t>(row) * Nl + cast<int64_t>(cols), cast<bf16>(acc.read()), in);
  }, options);
}

// The launch grid of make_gemm_splitk_reduce for M x N.
inline weft::Grid splitk_reduce_grid(int M, int N, weft::SourceLoc loc) {
  return weft::Grid((N + kSplitKReduceColumns - 1) / kSplitKReduceColumns, M, 1, loc);
}

namespace gemm_detail {

// Kernels by configuration and layout, built once per process: a configuration's rules are checked when its
// kernel is built (an Error naming `loc`), so that a call with a known configuration builds no strings.
inline const weft::Kernel& gemm_kernel(const GemmConfig& cfg, bool b_is_nk,
                                       weft::SourceLoc loc = weft::SourceLoc::current()) {
  static std::mutex mutex;
  static std::map<std::pair<GemmConfig, bool>, std::unique_ptr<weft::Kernel>> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kernels.find({cfg, b_is_nk});
  if (it != kernels.end()) return *it->second;
  if (std::string why = cfg.problems(b_is_nk); !why.empty())
    throw weft::Error("gemm_hopper_ws: configuration " + cfg.name() + " is not supported: " + why, loc);
  return *kernels.emplace(std::pair{cfg, b_is_nk}, std::make_unique<weft::Kernel>(make_gemm_hopper_ws(cfg, b_is_nk)))
              .first->second;
}
inline const weft::Kernel& splitk_reduce_kernel() {
  static const weft::Kernel k = make_gemm_splitk_reduce();
  return k;
}

// Scratch buffers that a process keeps per device (backend) and slot, so that a call does not allocate:
// get() returns the slot's buffer, first grown to at least `elements` (to twice its size if that is more)
// when it is smaller. A new buffer's elements are uninitialized, or `fill` where one is given. The table's
// own lock covers only the lookup; a call that uses the buffer between launches holds lock_scratch.
template <class T>
class DeviceScratch {
 public:
  DeviceScratch() = default;
  explicit DeviceScratch(T fill) : fill_(fill) {}

  weft::Buffer<T> get(const weft::Device& dev, int slot, size_t elements, weft::SourceLoc loc) {
    std::lock_guard<std::mutex> lock(mutex_);
    weft::Buffer<T>& b = buffers_[{&dev.backend(), slot}];
    if (b.size() < elements) {
      size_t n = std::max(elements, b.size() * 2);
      b = fill_ ? dev.upload(std::vector<T>(n, *fill_), loc) : dev.alloc<T>(n, loc);
    }
    return b;
  }

 private:
  std::optional<T> fill_;
  std::mutex mutex_;
  std::map<std::pair<weft::detail::Backend*, int>, weft::Buffer<T>> buffers_;
};

// The split-K workspace of a device: one per process and backend, grown as needed, so that a call does not
// allocate. Calls that run at the same time on several streams of one device would share it: give such
// callers split_k = 1, or serialize them.
inline weft::Buffer<float> workspace(const weft::Device& dev, size_t elements, weft::SourceLoc loc) {
  static DeviceScratch<float> buffers;
  return buffers.get(dev, 0, elements, loc);
}

// The tile counters of split-K reduced in the kernel: one per device, zeros between launches (each launch's
// last slices set them back), grown as needed (new ones start at zero).
inline weft::Buffer<int32_t> split_counters(const weft::Device& dev, size_t count, weft::SourceLoc loc) {
  static DeviceScratch<int32_t> buffers(0);
  return buffers.get(dev, 0, count, loc);
}

// The scratch of gemm() and gemm_hopper_ws() (the split-K workspace, the padded copies) is one per device,
// and a call uses it between two of its launches. So a call holds its device's lock from taking scratch to
// its last launch: two host threads calling on one device do not interleave their launches around it (all
// go to the device's default stream, whose order then keeps each call's launches together). Recursive:
// gemm() calls itself on padded copies.
inline std::unique_lock<std::recursive_mutex> lock_scratch(const weft::Device& dev) {
  static std::mutex mutex;
  static std::map<weft::detail::Backend*, std::unique_ptr<std::recursive_mutex>> locks;
  std::recursive_mutex* lock;
  {
    std::lock_guard<std::mutex> guard(mutex);
    std::unique_ptr<std::recursive_mutex>& l = locks[&dev.backend()];
    if (!l) l = std::make_unique<std::recursive_mutex>();
    lock = l.get();
  }
  return std::unique_lock<std::recursive_mutex>(*lock);
}

// Everything one launch of a configuration needs: the descriptors (built once per call), the grid.
struct GemmLaunch {
  const weft::Kernel* kernel;
  weft::Tma<weft::bf16> a, b;
  std::optional<weft::Tma<weft::bf16>> c;       // split_k == 1
  std::optional<weft::Tma<float>> partial;      // split_k > 1: the workspace
  weft::Buffer<float> work;
  weft::Buffer<int32_t> counters;               // reduce_in_kernel
  weft::Buffer<weft::bf16> c_buffer;
  int M, N, K, m_pad, grid;

  // Compiles what run() launches (Kernel::prepare: the same specialization, with the sizes' divisibility).
  void compile(const weft::Device& dev) const {
    if (c) {
      kernel->prepare(dev, a, b, *c, M, N, K);
      return;
    }
    if (!partial) {
      kernel->prepare(dev, a, b, work, counters, c_buffer, M, N, K);
      return;
    }
    kernel->prepare(dev, a, b, *partial, M, N, K);
    splitk_reduce_kernel().prepare(dev, work, c_buffer, M, N, m_pad, int(partial->shape()[0] / m_pad));
  }
  void run(const weft::Stream& stream, weft::SourceLoc loc) const {
    weft::Grid g(grid, 1, 1, loc);  // launch errors name the caller's line
    if (c) {
      kernel->launch(stream, g, a, b, *c, M, N, K);
      return;
    }
    if (!partial) {
      kernel->launch(stream, g, a, b, work, counters, c_buffer, M, N, K);
      return;
    }
    kernel->launch(stream, g, a, b, *partial, M, N, K);
    splitk_reduce_kernel().launch(stream, splitk_reduce_grid(M, N, loc), work, c_buffer, M, N, m_pad,
                                  int(partial->shape()[0] / m_pad));
  }
};

inline GemmLaunch plan_gemm(const GemmConfig& cfg, const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                            const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk, weft::SourceLoc loc) {
  using namespace weft;
  const Kernel& kernel = gemm_kernel(cfg, b_is_nk, loc);  // (checks the configuration's rules)
  Device dev = Device::from_backend(*a.backend());
  const bool swap = cfg.swap_ab;
  const int R = swap ? N : M, Q = swap ? M : N;
  const int tiles_r = (R + cfg.BM - 1) / cfg.BM, tiles_q = (Q + cfg.BN - 1) / cfg.BN;
  const int m_pad = swap ? tiles_q * cfg.BN : tiles_r * cfg.BM;
  const int tiles = tiles_r * tiles_q * cfg.split_k;
  const int CL = cfg.cluster_m;
  // Clusters of CL blocks take pairs of tile rows: the grid is a multiple of CL.
  const int grid = CL == 1 ? std::min(tiles, dev.multiprocessors())
                           : CL * std::min((tiles_r + CL - 1) / CL * tiles_q, dev.multiprocessors() / CL);
  const int rows = cfg.rows_per_consumer();
  GemmLaunch l{&kernel,
               // Swapped, A's rows are wgmma's N (BN) and B's its M (BM).
               tma(a, {M, K}, {swap ? cfg.BN : cfg.BM, cfg.BK}, {}, loc),
               b_is_nk ? tma(b, {N, K}, {swap ? cfg.BM : cfg.BN / CL, cfg.BK}, {}, loc)
                       : tma(b, {K, N}, {cfg.BK, std::min(swap ? cfg.BM : cfg.BN, 64)}, {}, loc),
               std::nullopt, std::nullopt, {}, {}, c, M, N, K, m_pad, grid};
  if (cfg.split_k == 1) {
    int en = gemm_detail::epilogue_cols<bf16>(cfg);
    l.c = swap ? tma(c, {M, N}, {cfg.BN, en}, {}, loc) : tma(c, {M, N}, {rows, en}, {}, loc);
  } else if (cfg.reduce_in_kernel) {
    const int64_t elements = int64_t(cfg.split_k) * tiles_r * cfg.BM * Q;
    if (elements >= (int64_t(1) << 31))
      throw Error("gemm_hopper_ws: split_k = " + std::to_string(cfg.split_k) + " needs a workspace of " +
                      std::to_string(elements) + " f32 partial sums, over 2^31: use a smaller split_k",
                  loc);
    l.work = workspace(dev, size_t(elements), loc);
    l.counters = split_counters(dev, size_t(tiles_r) * tiles_q * cfg.consumers, loc);
  } else {
    int64_t elements = int64_t(cfg.split_k) * m_pad * N;
    if (elements >= (int64_t(1) << 31))
      throw Error("gemm_hopper_ws: split_k = " + std::to_string(cfg.split_k) + " needs a workspace of " +
                      std::to_string(elements) + " f32 partial sums, over 2^31: use a smaller split_k for " +
                      std::to_string(M) + " x " + std::to_string(N),
                  loc);
    l.work = workspace(dev, size_t(elements), loc);
    int en = gemm_detail::epilogue_cols<float>(cfg);
    Shape shape{int64_t(cfg.split_k) * m_pad, N};
    l.partial = swap ? tma(l.work, shape, {cfg.BN, en}, {}, loc) : tma(l.work, shape, {rows, en}, {}, loc);
  }
  return l;
}

inline void check_sizes(const char* who, const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                        const weft::Buffer<weft::bf16>& c, int M, int N, int K, weft::SourceLoc loc) {
  auto expect = [&](const char* name, size_t have, size_t want) {
    if (have != want)
      throw weft::Error(std::string(who) + ": " + name + " holds " + std::to_string(have) +
                            " elements, the shapes need " + std::to_string(want),
                        loc);
  };
  if (M < 1 || N < 1 || K < 1)
    throw weft::Error(std::string(who) + ": M, N and K must be at least 1, got " + std::to_string(M) + " x " +
                          std::to_string(N) + " x " + std::to_string(K),
                      loc);
  expect("A", a.size(), size_t(M) * K);
  expect("B", b.size(), size_t(K) * N);
  expect("C", c.size(), size_t(M) * N);
}

}  // namespace gemm_detail

// C (M x N) = A (M x K) @ B, bf16 row-major, f32 accumulation; B is K x N (b_is_nk false) or N x K (true),
// with configuration `cfg` (the default: the large-square kernel). N and K must be multiples of 8 (TMA's
// 16-byte row strides). Launches on the default stream of the buffers' device and returns without waiting.
// `loc` is the caller's line: every Error of the call — buffer sizes and the configuration here, a TMA
// rule in tma(), a launch argument in Kernel::launch — names it, not this header.
inline void gemm_hopper_ws(const weft::Buffer<weft::bf16>& a, const weft::Buffer<weft::bf16>& b,
                           const weft::Buffer<weft::bf16>& c, int M, int N, int K, bool b_is_nk,
                           const GemmConfig& cfg = GemmConfig{}, weft::SourceLoc loc = weft::SourceLoc::current()) {
  gemm_detail::check_sizes("gemm_hopper_ws", a, b, c, M, N, K, loc);
  weft::Device dev = weft::Device::from_backend(*a.backend());
  auto hold = gemm_detail::lock_scratch(dev);
  gemm_detail::plan_gemm(cfg, a, b, c, M, N, K, b_is_nk, loc).run(dev.stream(), loc);
}
