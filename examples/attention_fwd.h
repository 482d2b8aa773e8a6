// Attention forward for Hopper (FlashAttention-3 style), written only with weft's public API:
//   O = softmax(Q K^T * scale [+ causal mask]) V, per batch and head, and the per-row log-sum-exp
//   LSE = log(sum_j exp(s_ij * scale)) (natural log) that a backward pass needs.
// Q [B, Hq, Sq, D], K and V [B, Hkv, Sk, D] (grouped-query: Hq a multiple of Hkv; query head h reads
// key/value head h / (Hq / Hkv)), O like Q; bf16 or f16 in and out, f32 softmax and accumulation;
// D in {64, 128, 256}; any Sq, Sk >= 1 (partial blocks are masked). Causal masks are aligned to the
// bottom right when Sq != Sk, as FlashAttention-2 and PyTorch SDPA define it: query i sees key j iff
// j <= i + Sk - Sq. A query row that sees no key (causal, Sq > Sk) gets O = 0 and LSE = +inf (what
// FlashAttention writes: a backward pass then gets exp(s - LSE) = 0).
//
// One block computes BM = 128 (or 192) query rows of one (batch, head) against all of its keys:
// - a producer warp group (24 registers per thread) loads the Q tile once and K / V tiles into a ring of
//   `stages` shared-memory stages with TMA, in 64-column panels (the 128-byte swizzle's width), each stage
//   guarded by its own `k_full` / `v_full` mbarrier so QK^T can start while V is still on its way;
// - BM / 64 consumer warp groups (two with 240 registers, or three with 160) each own 64 of the rows:
//   S = Q K^T with wgmma, the online softmax on the accumulator in registers (row max and sum by
//   shuffles, exp2 with the scale folded in),
//   P converted in registers and fed to wgmma as its A operand for O += P V, then the stage released;
//   S_{j+1} and P_j V_j are issued together and the softmax of S_{j+1} runs while P_j V_j is in flight,
//   while the other consumers wait for their turns on the tensor cores (ping-pong, in a ring).
// The epilogue writes O (acc times 1 / l) through the tile's Q stage with TMA stores (which clip rows
// past Sq) and the LSE with a masked store. Causal grids run the longest query blocks first; persistent
// programs walk the tiles in a snake order, with two Q stages where they fit: the next tile's Q loads while
// this one runs, and a consumer's last step of a tile is the next tile's first (S_0 issued with the last
// P V, its softmax under that P V), O written after it.
#pragma once

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include <weft/weft.h>

struct AttentionParams {
  int B = 1, Hq = 1, Hkv = 1, Sq = 1, Sk = 1, D = 128;
  bool causal = false;
  float scale = 0;  // softmax scale; 0 means 1 / sqrt(D)
};

struct AttentionConfig {
  // Query rows per block: 128 (two consumer warp groups of 64), 192 (three, with 160 registers each: D <= 64
  // only) or 256 (four of 112 registers: D <= 64 and BN <= 64). More consumers keep the tensor cores busier
  // where the softmax, not the products, takes the time; 256 also tiles 512 or 1024 query rows without a
  // partial block, where 192 leaves a third of the last one idle.
  int BM = 128;
  int BN = 128;           // keys per step
  int stages = 2;         // depth of the K and of the V ring
  bool pingpong = true;   // the consumers take turns on the tensor cores (named barriers)
  // A consumer issues S_j = Q K_j^T together with P_{j-1} V_{j-1} and runs softmax_j meanwhile (FA3's
  // intra-warp-group overlap): 6-10% faster on the H200 (benchmarks/NOTES.md, run 19).
  bool overlap = true;
  // One program per multiprocessor walks the tiles instead of one program per tile: the next tile's Q and
  // first K load while this one runs, and (with two Q stages, which fit up to D 128) a consumer's last step of
  // a tile is the first of the next. The tile loop keeps more values live (the consumers spill a few bytes
  // per tile at D 128 and much at D 256), so it pays only where tiles are short: see attention_config(params).
  bool persistent = false;
  // A persistent consumer runs from one tile into the next: its last step of a tile issues the next tile's S_0
  // with this tile's last P V and writes this tile's O after the next tile's first softmax (with two Q stages,
  // up to D 128). Off, it finishes a tile (O written) before it starts the next; the producer still loads the
  // next tile's Q and first K ahead. Four D 64 consumers of 112 registers spill fewer bytes without it and ran
  // 3-6% faster at S 512-1024 than with it (benchmarks/NOTES.md, session 18); at D 128 it is up to 3% faster on.
  bool across_tiles = true;
};

// The tiling weft uses for head dimension D at any sequence length (what fits 227 KB of shared memory and
// 240 registers). D 256 issues S_j and P_{j-1} V_{j-1} one after the other: with both in flight its
// consumers spill, and on the H200 it ran 3-5% slower (benchmarks/NOTES.md, session 7).
inline AttentionConfig attention_config(int D) {
  if (D <= 64) return {128, 128, 3, true, true, false};
  if (D <= 128) return {128, 128, 2, true, true, false};
  return {128, 64, 2, true, false, false};
}

// The tiling for one problem: attention_config(D), made persistent where each (batch, head) has few keys.
// There a tile is short, and a program per tile spends a tenth of its time waiting for its first Q and K
// tiles; one program per multiprocessor runs from one tile into the next. Measured on the H200 (bf16,
// B * S = 16k; benchmarks/NOTES.md, sessions 7 and 9): non-causal +15% at D 128 and +13% at D 64 with
// S = 512, +5% at 1k, even at 2k; causal (snake order) +8% at S = 512, +3.5% at 1k, and at D 64 +3% at 2k.
// Not at D 256, whose persistent consumers spill 240 bytes. Longer D 64 problems take three consumers
// (BM 192): their softmax, not the products, sets the pace, and a third warp group keeps the tensor cores
// busy while two compute theirs (H200, bf16: +14-15% non-causal, +5-11% causal at S 2k-8k). Short D 64
// problems (up to 1024 keys) take four (BM 256, BN 64), persistent, finishing each tile before the next
// (across_tiles off); three from there on. Against the two-consumer persistent kernel (H200, bf16, B * S = 16k;
// NOTES, session 13) four consumers of one tile per program were +3% non-causal at S 512 and +5% at 1k, +3% causal
// at 512 and 1k; made persistent tile by tile, +8% non-causal and +10% causal at S 512, +1.5% and +3% at 1k
// (H100, session 18).
inline AttentionConfig attention_config(const AttentionParams& p) {
  AttentionConfig cfg = attention_config(p.D);
  if (p.D <= 64) {
    if (p.Sk <= 1024) {
      cfg.BM = 256;
      cfg.BN = 64;
      cfg.persistent = true;
      cfg.across_tiles = false;
    } else {
      cfg.BM = 192;
    }
  } else if (p.D <= 128 && p.Sk <= 1024) {
    cfg.persistent = true;
  }
  return cfg;
}

template <class T>
weft::Kernel make_attention_fwd(AttentionConfig cfg, int D, bool causal) {
  using namespace weft;
  std::string name = "attention_fwd_d" + std::to_string(D) + (causal ? "_causal" : "") +
                     (cfg.BM != 128 ? "_bm" + std::to_string(cfg.BM) : "") + "_bn" +
                     std::to_string(cfg.BN) + "_s" + std::to_string(cfg.stages) + (cfg.pingpong ? "_pingpong" : "") +
                     (cfg.overlap ? "_overlap" : "") + (cfg.persistent ? "_persistent" : "") +
                     (cfg.persistent && !cfg.across_tiles ? "_tilewise" : "");
  return Kernel(name, [cfg, D, causal](TensorDesc<T, 3> Q, TensorDesc<T, 3> K, TensorDesc<T, 3> V, TensorDesc<T, 3> O,
                                       Ptr<float> LSE, Int Sq, Int Sk, Int BH, Int group, Float scale_log2,
                                       Int resident) {
    const int BM = cfg.BM, BN = cfg.BN, S = cfg.stages, HALF = 64, CONS = BM / HALF, PANEL = 64, PANELS = D / PANEL;
    // Q stages: one per consumer, twice over in a persistent program when both fit (the next tile's Q then comes
    // while this one runs, and a consumer can start the next tile before it writes this one's O). O leaves
    // through the Q stage of its own tile, once the tile's last Q K^T is done.
    const int QB = cfg.persistent && (2 * CONS * HALF + 2 * S * BN) * D * int(sizeof(T)) <= 200 * 1024 ? 2 : 1;
    // A persistent consumer with two Q stages runs across tiles without a pause: the last step of a tile issues
    // the next tile's S_0 with this tile's last P V, runs the next tile's first softmax while that P V is in
    // flight, and writes this tile's O only then.
    const bool across = QB == 2 && cfg.overlap && cfg.across_tiles;
    auto q_s = local_alloc<T>({HALF, D}, QB * CONS, "q_s");  // stage b * CONS + r: consumer r's rows
    auto k_s = local_alloc<T>({BN, D}, S, "k_s");
    auto v_s = local_alloc<T>({BN, D}, S, "v_s");
    auto q_full = alloc_barriers(QB, 1, "q_full");
    auto q_empty = alloc_barriers(QB, CONS, "q_empty");  // every consumer's O has left the stage
    auto k_full = alloc_barriers(S, 1, "k_full");
    auto v_full = alloc_barriers(S, 1, "v_full");
    auto k_empty = alloc_barriers(S, CONS, "k_empty");  // every consumer releases each stage
    auto v_empty = alloc_barriers(S, CONS, "v_empty");

    // Output tiles: (query block of BM rows, batch * Hq + head), M * BH of them, taken in turn by the programs
    // of the grid (program p: tiles p, p + programs, ...; a grid of one program per tile runs each once).
    // Consecutive tiles share a head's K and V in L2. Causal: the last query blocks see the most keys; each
    // head's run starts with them. (Every head's last block first instead lost 7-10% on the H200: the
    // programs running at once then read 132 different heads' K and V.)
    Int M = cdiv(Sq, BM);
    Int shift = Sk - Sq;  // causal: row i sees keys j <= i + shift
    struct OutputTile {
      Int bh, bh_kv, q0, n_blocks;  // batch * Hq + query head, batch * Hkv + key/value head, first row, key blocks
    };
    auto tile_at = [&](Int t) {
      Int m_block = causal ? M - 1 - t % M : t % M;
      Int bh = t / M;
      Int q0 = m_block * BM;
      Int key_end = causal ? minimum(Sk, q0 + BM + shift) : Int(Sk);
      return OutputTile{bh, bh / group, q0, cdiv(maximum(key_end, 0), BN)};
    };
    // The tile of round `round` of a persistent program p: P = num_programs tiles per round, tile p of even
    // rounds and P - 1 - p of odd ones (a snake). Causal tiles differ in length, and P is often a multiple of M
    // (132 programs, M = 4 query blocks): with p every round, program p would always get the same query block,
    // the longest for a quarter of the programs. A partial last round is taken in order.
    Int tiles = M * BH;
    auto tile_of_round = [&](Int round) {
      Int P = num_programs(0), p = program_id(0);
      Int reversed = round * P + (P - 1 - p);
      return tile_at(where(round % 2 == 1 && (round + 1) * P <= tiles, reversed, round * P + p));
    };
    // Runs body(tile, i, next) for this program's tiles, i counting them from 0: a loop when persistent, else
    // the one tile of the program. next() gives whether the program has a next tile, and that tile.
    auto for_each_tile = [&](auto&& body) {
      if (!cfg.persistent) {
        OutputTile only = tile_at(program_id(0));
        return body(only, scalar<int32_t>(0), [&] { return std::pair{scalar<bool>(0), only}; });
      }
      Int P = num_programs(0);
      for_range(program_id(0), tiles, P, [&](Int t) {
        Int round = t / P;
        body(tile_of_round(round), round, [&] { return std::pair{t + P < tiles, tile_of_round(round + 1)}; });
      });
    };

    async_tasks(
        task("producer", {.warps = 4, .regs = 24}, [&] {
          Pipeline qp(QB), kp(S), vp(S);  // the rings run on across tiles
          // Q of a tile into its stages, once the consumers' O of QB tiles before has left them.
          auto load_q = [&](const OutputTile& tile) {
            qp.acquire(q_empty);
            barrier_expect_bytes(q_full[qp.index()], CONS * q_s.stage_bytes());
            for (int r = 0; r < CONS; ++r)
              for (int p = 0; p < PANELS; ++p)
                async_descriptor_load(Q, q_s[qp.index() * CONS + r].cols(p * PANEL, PANEL),
                                      {tile.bh, tile.q0 + r * HALF, p * PANEL}, q_full[qp.index()]);
            qp.advance();
          };
          // Block j of K (or V) into the next stage of its ring, 64 columns per TMA box.
          auto load = [&](Pipeline& ring, const TensorDesc<T, 3>& desc, const SharedBuffer<T>& buf, const Barriers& full,
                          const Barriers& empty, Int bh_kv, Int j) {
            ring.acquire(empty);
            barrier_expect_bytes(full[ring.index()], buf.stage_bytes());
            for (int p = 0; p < PANELS; ++p)
              async_descriptor_load(desc, buf[ring.index()].cols(p * PANEL, PANEL), {bh_kv, j * BN, p * PANEL},
                                    full[ring.index()]);
            ring.advance();
          };
          auto load_k = [&](const OutputTile& tile, Int j) { load(kp, K, k_s, k_full, k_empty, tile.bh_kv, j); };
          // K runs a block ahead of V: a K stage is free once S_j has been computed, a V stage only once P_j V_j
          // has, so K_{j+1} is loaded before V_j, and the next tile's Q (with two Q stages) and K_0 before this
          // tile's last V: they are then in place when a consumer's last step of this tile issues S_0 of the next.
          for_each_tile([&](const OutputTile& tile, Int i, auto&& next_tile) {
            if (QB == 1) load_q(tile);
            else if_(i == 0, [&] { load_q(tile); });  // later tiles' Q came during the tile before
            if_(i == 0 && tile.n_blocks > 0, [&] { load_k(tile, scalar<int32_t>(0)); });
            // A block of one tile (not persistent): the block that starts about when this one ends is `resident`
            // (the blocks that run at once) programs on. Its Q, prefetched into the L2 now, is there when it waits
            // for it (otherwise a DRAM round trip at the start of every tile: at D 64 S 512, 6.5% of the
            // consumers' time). Its K and V are mostly those of a head whose tiles run now.
            if (!cfg.persistent) {
              Int ahead = program_id(0) + resident;
              if_(ahead < tiles, [&] {
                OutputTile later = tile_at(ahead);
                for (int r = 0; r < CONS; ++r)
                  for (int p = 0; p < PANELS; ++p)
                    async_descriptor_prefetch(Q, {later.bh, later.q0 + r * HALF, p * PANEL});
              });
            }
            // (Named, not a structured binding: clang before 16 cannot capture one in a lambda.)
            const auto next_pair = next_tile();
            const auto& has_next = next_pair.first;
            const auto& next = next_pair.second;
            auto prefetch_next = [&] {
              if_(has_next, [&] {
                if (QB == 2) load_q(next);
                if_(next.n_blocks > 0, [&] { load_k(next, scalar<int32_t>(0)); });
              });
            };
            for_range(0, tile.n_blocks, [&](Int j) {
              if_(j + 1 < tile.n_blocks, [&] { load_k(tile, j + 1); }, prefetch_next);
              load(vp, V, v_s, v_full, v_empty, tile.bh_kv, j);
            });
            if_(tile.n_blocks == 0, prefetch_next);
          });
        }),
        task("consumer", {.warps = 4, .regs = CONS == 2 ? 240 : CONS == 3 ? 160 : 112, .replicas = CONS}, [&] {
          Int r = task_replica_id();
          // Ping-pong: the consumers take turns issuing their wgmmas, in a ring (consumer r waits on named
          // barrier 1 + r, then lets consumer r + 1 go), so that one's softmax runs while another's products
          // occupy the tensor cores. The ids are computed from r: one bar.sync on a register each, where a
          // branch per consumer to a constant id cost a consumer ~25 instructions of its ~350 per key block
          // at D 64 with four consumers (benchmarks/NOTES.md, session 32).
          auto my_turn = [&] {
            if (cfg.pingpong) named_barrier_wait(1 + r, 256);
          };
          auto your_turn = [&] {
            if (cfg.pingpong) named_barrier_arrive(1 + (r + 1) % CONS, 256);
          };
          // The ring of turns runs through all of the program's tiles (every consumer takes one turn per key block
          // of each tile): it starts with consumer 0 (the last consumer's arrival opens its barrier) and, at the
          // end, consumer 0 takes the last consumer's last arrival. (Stopping and restarting it at each tile would
          // let the last consumer arrive twice on barrier 1 before consumer 0 waits there once.)
          if (cfg.pingpong) if_(r == CONS - 1, [&] { named_barrier_arrive(1, 256); });
          // This consumer's rows of a tile. It computes key blocks 0 .. n_mine - 1: the blocks its rows see, fewer
          // than the tile's n_blocks where the causal diagonal ends earlier for them than for the tile's last rows
          // (BM 192 or 256, or BN <= 64), none where its rows are all past Sq (the last tile of a ragged Sq). It steps
          // through the tile's other blocks without products (idle steps), releasing them and taking its turns.
          // Blocks 0 .. n_full - 1 need no mask in any of its rows: every key is before Sk and (causal) at or
          // before each row's diagonal. The main loops run those without a mask and the rest with one, so that
          // no step of either loop branches on it.
          struct Rows {
            Int row0, n_mine, n_full;
          };
          // Idle steps are needed only where a consumer's blocks can be fewer than the tile's: causal, or a tile of
          // three or four consumers whose last ones may have no rows. Two non-causal consumers compute every block
          // (one without rows computes on the zeros TMA reads past Sq; nothing of it is stored), and their loops
          // carry no idle-step control flow: it cost 2-4% at D 128, S <= 1k (H200, sessions 13 and 14).
          const bool may_idle = causal || CONS > 2;
          auto rows_of = [&](const OutputTile& tile) {
            Int row0 = tile.q0 + r * HALF;
            Int n_mine = may_idle ? where(row0 < Sq, tile.n_blocks, 0) : tile.n_blocks;
            if (causal) n_mine = minimum(n_mine, cdiv(maximum(minimum(Int(Sk), row0 + HALF + shift), 0), BN));
            Int n_full = minimum(Int(Sk) / BN, n_mine);
            if (causal) n_full = minimum(n_full, maximum(row0 + shift + 1, 0) / BN);
            return Rows{row0, n_mine, n_full};
          };
          Pipeline kp(S), vp(S), q_ready(QB), q_free(QB);
          // The state of the tile in progress (it carries over to the next tile when `across`).
          Var<float> m_i = full<float>({HALF}, -INFINITY);  // running row maximum of s * scale * log2(e)
          Var<float> l_i = zeros<float>({HALF});            // running row sum of 2^(s * scale * log2(e) - m_i)
          Var<float> acc = zeros<float>({HALF, D});
          Var<T> p_prev = zeros<T>({HALF, BN});  // P of the block whose P V is still to issue
          Var<int32_t> begun = 0;                // this tile's block 0 was done by the last tile's last step
          enum class Mask { none, always, if_partial };
          // The online softmax of block j's scores s: updates the row maxima and sums, returns P (f32) and the
          // factor alpha that rescales acc.
          auto softmax = [&](const Rows& rows, Int j, Tile<float> scores, Mask mask) {
            Var<float> s = scores;
            // Keys past Sk, and (causal) keys after the row's diagonal.
            auto apply_mask = [&] {
              Int cols = expand_dims(arange(0, BN), 0) + j * BN;  // [1, BN]
              Bool keep = cols < Sk;
              if (causal) keep = keep && cols <= expand_dims(arange(0, HALF), 1) + (rows.row0 + shift);  // [HALF, BN]
              s = where(keep, s, -INFINITY);
            };
            if (mask == Mask::always) apply_mask();
            if (mask == Mask::if_partial) if_(j >= rows.n_full, apply_mask);
            Tile<float> m_new = maximum(m_i, max(s, 1) * scale_log2);
            Tile<float> m_use = where(m_new == -INFINITY, 0.f, m_new);  // a row that has seen no key yet
            Tile<float> p = fast::exp2(fma(s, scale_log2, -expand_dims(m_use, 1)));  // 2^(s * scale * log2 e - m)
            Tile<float> alpha = fast::exp2(m_i - m_use);
            l_i = l_i * alpha + sum(p, 1);
            m_i = m_new;
            return std::pair{p, alpha};
          };
          auto next_k = [&] {
            kp.release(k_empty);
            kp.advance();
          };
          auto next_v = [&] {
            vp.release(v_empty);
            vp.advance();
          };
          auto issue_scores = [&](const SharedView<T>& q) {
            return async_dot(q, local_trans(k_s[kp.index()]), zeros<float>({HALF, BN}));
          };
          // The tile's final row statistics: its LSE is stored, and 1 / l returned for O. One division per row, then
          // products: a division per element of O is ~10 instructions (rcp, its refinement and checks), a tenth of
          // a short tile's work. A row that saw no key gets O = 0 and LSE = +inf.
          auto finish_rows = [&](const OutputTile& tile, Int row0) {
            Tile<float> l = l_i;
            Bool empty_row = l == 0.f;
            Tile<float> lse = where(empty_row, INFINITY, (m_i + log2(where(empty_row, 1.f, l))) * float(M_LN2));
            Int rows = arange(0, HALF) + row0;
            // 64-bit: B * Hq * Sq may pass 2^31.
            store(LSE + cast<int64_t>(tile.bh) * cast<int64_t>(Sq) + rows, lse, rows < Sq);
            return Tile<float>(1.f / where(empty_row, 1.f, l));
          };
          // O = acc / l through the tile's Q stage and TMA stores (which clip rows past Sq).
          auto write_o = [&](const OutputTile& tile, Int row0, const SharedView<T>& stage, Tile<float> inv_l) {
            local_store(stage, cast<T>(acc * expand_dims(inv_l, 1)));
            for (int p = 0; p < PANELS; ++p)
              async_descriptor_store(O, stage.cols(p * PANEL, PANEL), {tile.bh, row0, p * PANEL});
          };
          // The O of this consumer's previous tile has been read out of its Q stage: the producer may refill it.
          auto free_q_stage = [&] {
            async_store_wait(0);
            q_free.release(q_empty);
            q_free.advance();
          };
          // With two Q stages, the previous tile's stage is freed in this tile's first step after its first softmax
          // (its O store has long been read by then), or at the tile's end when it has no such step. Always before
          // the step waits for a V block: the producer loads the next tile's Q ahead of this tile's last V.
          const int free_at_step = cfg.overlap ? 1 : 0;
          auto free_previous = [&](Int i, Int j) {
            if (QB == 2) if_(i > 0 && j == free_at_step, free_q_stage);
          };

          for_each_tile([&](const OutputTile& tile, Int i, auto&& next_tile) {
            Rows rows = rows_of(tile);
            Int n_blocks = tile.n_blocks, n_mine = rows.n_mine;
            SharedView<T> q = q_s[(QB == 2 ? i % 2 : scalar<int32_t>(0)) * CONS + r];
            auto begin_tile = [&] {  // acc is zero (the last tile's O was written)
              q_ready.wait(q_full);
              q_ready.advance();
              m_i = full<float>({HALF}, -INFINITY);
              l_i = zeros<float>({HALF});
            };
            // One turn on the tensor cores: S = Q K^T (Q from `q_view`) issued with O += P_prev V, then S waited for
            // (P V may still run).
            auto scores_with_pv = [&](const SharedView<T>& q_view) {
              kp.wait(k_full);
              vp.wait(v_full);
              my_turn();
              Tile<float> s = issue_scores(q_view);
              acc = async_dot(p_prev, v_s[vp.index()], acc);
              your_turn();
              Tile<float> scores = async_dot_wait(1, s);
              next_k();
              return scores;
            };
            auto scores_alone = [&] {  // S_j issued on its own and waited for
              kp.wait(k_full);
              my_turn();
              Tile<float> s_j = issue_scores(q);
              your_turn();
              Tile<float> scores = async_dot_wait(0, s_j);
              next_k();
              return scores;
            };
            if (!cfg.overlap) {  // each step in turn: S_j, its softmax, then P_j V_j
              begin_tile();
              auto step = [&](Int j, Mask mask) {
                auto [p, alpha] = softmax(rows, j, scores_alone(), mask);
                free_previous(i, j);  // before V_j: the producer loads the next Q ahead of it
                vp.wait(v_full);
                acc = async_dot_wait(0, async_dot(cast<T>(p), v_s[vp.index()], acc * expand_dims(alpha, 1)));
                next_v();
              };
              for_range(0, rows.n_full, [&](Int j) { step(j, Mask::none); });
              for_range(rows.n_full, n_mine, [&](Int j) { step(j, Mask::always); });
            } else {
              auto start = [&] {
                begin_tile();
                if_(n_mine > 0, [&] {
                  p_prev = cast<T>(softmax(rows, scalar<int32_t>(0), scores_alone(), Mask::if_partial).first);
                });
              };
              if (across) if_(begun == 0, start);
              else start();
              // Step j: S_j = Q K_j^T and O += P_{j-1} V_{j-1} in flight together; the softmax of S_j runs
              // while the tensor cores finish P_{j-1} V_{j-1}.
              auto step = [&](Int j, Mask mask) {
                auto [p, alpha] = softmax(rows, j, scores_with_pv(q), mask);
                free_previous(i, j);
                acc = async_dot_wait(0, acc);
                next_v();
                acc = acc * expand_dims(alpha, 1);
                // P_j packed only now: its registers may be P_{j-1}'s, which the wgmma above read until it ended.
                p_prev = cast<T>(p);
              };
              Int first_masked = maximum(rows.n_full, 1);
              for_range(1, first_masked, [&](Int j) { step(j, Mask::none); });
              for_range(first_masked, n_mine, [&](Int j) { step(j, Mask::always); });
            }
            if (QB == 2) if_(i > 0 && n_mine <= free_at_step, free_q_stage);  // a tile without that step
            auto last_alone = [&](Bool when) {  // the last P V on its own
              if (!cfg.overlap) return;
              if_(when, [&] {
                vp.wait(v_full);
                acc = async_dot_wait(0, async_dot(p_prev, v_s[vp.index()], acc));
                next_v();
              });
            };
            // The tile's blocks past this consumer's: each waited for and released, one turn taken, no product.
            auto idle_step = [&](Int) {
              kp.wait(k_full);
              my_turn();
              your_turn();
              next_k();
              vp.wait(v_full);
              next_v();
            };
            // With no idle steps, a consumer running across tiles issues its last P V with the next tile's S_0.
            if (may_idle) {
              Bool whole = n_mine == n_blocks;
              last_alone(across ? n_mine > 0 && !whole : n_mine > 0);
              for_range(n_mine, n_blocks, idle_step);
            } else if (!across) {
              last_alone(n_mine > 0);
            }
            // The row statistics once P's registers are free again (with P and acc live beside them, three
            // consumers' 160 registers spilled): after the last P V, or (across tiles) before the next tile's
            // first step resets them.
            Tile<float> inv_l = finish_rows(tile, rows.row0);
            if (across) {
              // The last step of this tile and the first of the next as one: the next tile's S_0 is issued with
              // this tile's last P V, and its softmax runs while that P V is in flight. The ring of turns runs on.
              const auto next_pair = next_tile();
              const auto& has_next = next_pair.first;
              const auto& next = next_pair.second;
              Rows next_rows = rows_of(next);
              Bool ready = has_next && n_mine > 0;
              if (may_idle) ready = ready && n_mine == n_blocks;
              begun = where(ready && next_rows.n_mine > 0, 1, 0);
              if_(begun == 1, [&] {
                q_ready.wait(q_full);
                SharedView<T> q_next = q_s[q_ready.index() * CONS + r];
                q_ready.advance();
                Tile<float> scores = scores_with_pv(q_next);
                m_i = full<float>({HALF}, -INFINITY);
                l_i = zeros<float>({HALF});
                Tile<float> p = softmax(next_rows, scalar<int32_t>(0), scores, Mask::if_partial).first;
                acc = async_dot_wait(0, acc);
                next_v();
                p_prev = cast<T>(p);
              }, [&] { last_alone(may_idle ? n_mine > 0 && n_mine == n_blocks : n_mine > 0); });
            }
            write_o(tile, rows.row0, q, inv_l);
            acc = zeros<float>({HALF, D});
            if (cfg.persistent && QB == 1) free_q_stage();  // the next Q comes into this stage
          });
          if (cfg.pingpong) if_(r == 0, [&] { named_barrier_wait(1, 256); });
          async_store_wait(0);
        }));
  });
}

// Checks the arguments (sizes of the buffers, heads, head dimension) and launches on `stream`.
// q: [B, Hq, Sq, D], k and v: [B, Hkv, Sk, D], o: [B, Hq, Sq, D], lse: [B, Hq, Sq], all contiguous.
// `cfg`: the tiling (attention_config(p) when not given); BN and stages must fit shared memory.
template <class T>
void attention_fwd(const weft::Stream& stream, const weft::Buffer<T>& q, const weft::Buffer<T>& k,
                   const weft::Buffer<T>& v, const weft::Buffer<T>& o, const weft::Buffer<float>& lse,
                   const AttentionParams& p, const AttentionConfig* cfg_or_null = nullptr,
                   weft::SourceLoc loc = weft::SourceLoc::current()) {
  using namespace weft;
  auto fail = [&](const std::string& what) { throw Error("attention_fwd: " + what, loc); };
  if (p.D != 64 && p.D != 128 && p.D != 256) fail("head dimension D = " + std::to_string(p.D) + "; use 64, 128 or 256");
  if (p.B < 1 || p.Hq < 1 || p.Hkv < 1 || p.Sq < 1 || p.Sk < 1)
    fail("B, Hq, Hkv, Sq and Sk must be at least 1 (got B " + std::to_string(p.B) + ", Hq " + std::to_string(p.Hq) +
         ", Hkv " + std::to_string(p.Hkv) + ", Sq " + std::to_string(p.Sq) + ", Sk " + std::to_string(p.Sk) + ")");
  if (p.Hq % p.Hkv != 0)
    fail("Hq = " + std::to_string(p.Hq) + " query heads are not a multiple of Hkv = " + std::to_string(p.Hkv) +
         " key/value heads");
  if (!(p.scale >= 0) || std::isinf(p.scale)) fail("the softmax scale must be finite and >= 0 (0: 1 / sqrt(D))");
  auto expect = [&](const char* name, size_t have, size_t want) {
    if (have != want)
      fail(std::string(name) + " holds " + std::to_string(have) + " elements; the shapes need " + std::to_string(want));
  };
  size_t bhq = size_t(p.B) * p.Hq, bhk = size_t(p.B) * p.Hkv;
  expect("q", q.size(), bhq * p.Sq * p.D);
  expect("k", k.size(), bhk * p.Sk * p.D);
  expect("v", v.size(), bhk * p.Sk * p.D);
  expect("o", o.size(), bhq * p.Sq * p.D);
  expect("lse", lse.size(), bhq * p.Sq);
  if ((p.Sq + 127) / 128 * bhq > 2147483647u)
    fail("B * Hq * Sq / 128 must stay below 2^31 (tiles are counted in 32 bits)");

  AttentionConfig cfg = cfg_or_null ? *cfg_or_null : attention_config(p);
  if ((cfg.BM != 128 && cfg.BM != 192 && cfg.BM != 256) || cfg.BN < 16 || cfg.BN > 256 || (cfg.BN & (cfg.BN - 1)) != 0 ||
      cfg.stages < 1)
    fail("config: BM must be 128, 192 or 256 and BN one of 16, 32, 64, 128, 256 (tiles are powers of two), with at "
         "least one stage (got BM " + std::to_string(cfg.BM) + ", BN " + std::to_string(cfg.BN) + ", stages " +
         std::to_string(cfg.stages) + ")");
  if (cfg.BM > 128 && p.D > 64)
    fail("config: BM = " + std::to_string(cfg.BM) + " (" + (cfg.BM == 192 ? "three consumers of 160" : "four of 112") +
         " registers) needs D <= 64; D = " + std::to_string(p.D) + " takes BM = 128");
  if (cfg.BM == 256 && cfg.BN > 64)
    fail("config: BM = 256 (four consumers of 112 registers) needs BN <= 64: S and P of BN = " + std::to_string(cfg.BN) +
         " keys do not fit beside O");
  static std::mutex mutex;
  static std::map<std::tuple<int, bool, int, int, int, bool, bool, bool, bool>, Kernel> kernels;
  const Kernel* kernel;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto key = std::make_tuple(p.D, p.causal, cfg.BM, cfg.BN, cfg.stages, cfg.pingpong, cfg.overlap, cfg.persistent,
                             cfg.across_tiles);
    auto it = kernels.find(key);
    if (it == kernels.end()) it = kernels.emplace(key, make_attention_fwd<T>(cfg, p.D, p.causal)).first;
    kernel = &it->second;
  }
  const int HALF = 64;  // rows of one consumer
  float scale = p.scale > 0 ? p.scale : 1.f / std::sqrt(float(p.D));
  const int64_t bq = int64_t(bhq), bk = int64_t(bhk);
  auto q_desc = tma(q, {bq, p.Sq, p.D}, {1, HALF, 64}, {}, loc);
  auto o_desc = tma(o, {bq, p.Sq, p.D}, {1, HALF, 64}, {}, loc);
  auto k_desc = tma(k, {bk, p.Sk, p.D}, {1, cfg.BN, 64}, {}, loc);
  auto v_desc = tma(v, {bk, p.Sk, p.D}, {1, cfg.BN, 64}, {}, loc);
  const int64_t tiles = (p.Sq + cfg.BM - 1) / cfg.BM * bq;
  const int64_t sms = Device::from_backend(stream.backend()).multiprocessors();
  const int64_t programs = cfg.persistent ? std::min<int64_t>(tiles, sms) : tiles;
  kernel->launch(stream, Grid(programs, 1, 1, loc), q_desc, k_desc, v_desc, o_desc, lse, p.Sq, p.Sk, int(bq),
                 p.Hq / p.Hkv, float(scale * M_LOG2E), int(std::min<int64_t>(sms, INT32_MAX)));
}
