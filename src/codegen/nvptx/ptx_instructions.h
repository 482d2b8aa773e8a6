// The GPU instructions the NVPTX lowering uses, each emitted by exactly one function here (grep for the
// PTX mnemonic to find where an instruction comes from).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <array>
#include <functional>

#include "weft/dtype.h"

namespace weft::codegen::nvptx {

// The element types of wgmma's A and B: bf16 or f16 (both the same), or f8e4m3 / f8e5m2 (any mix).
struct WgmmaTypes {
  ScalarType a = ScalarType::bf16, b = ScalarType::bf16;
  bool fp8() const { return a == ScalarType::f8e4m3 || a == ScalarType::f8e5m2; }
  int k() const { return fp8() ? 32 : 16; }  // K of one instruction
};

class PtxInstructions {
 public:
  explicit PtxInstructions(llvm::IRBuilder<>& b) : b_(b) {}

  llvm::Value* thread_index();          // mov.u32 %r, %tid.x
  // The same read as inline asm with side effects: LLVM neither hoists it out of a loop nor merges it with
  // another read, so what is computed from it stays where it is used (Lowering::acc_pair_offset).
  llvm::Value* thread_index_in_place();  // mov.u32 %r, %tid.x
  llvm::Value* block_index(int axis);   // mov.u32 %r, %ctaid.{x,y,z}
  llvm::Value* grid_size(int axis);     // mov.u32 %r, %nctaid.{x,y,z}
  llvm::CallInst* barrier();                                       // bar.sync 0
  llvm::CallInst* barrier(llvm::Value* id, llvm::Value* threads);  // bar.sync id, threads
  void barrier_arrive(llvm::Value* id, llvm::Value* threads);  // bar.arrive id, threads
  void warp_sync();                     // bar.warp.sync 0xffffffff
  llvm::Value* elect_one();             // elect.sync over the full warp: i1, true in one of its lanes
  llvm::Value* from_lane_zero(llvm::Value* v);  // shfl.sync.idx.b32 of an i32 from lane 0 (warp-uniform)
  // The warp-group register budget: setmaxnreg.{inc,dec}.sync.aligned.u32 regs.
  void set_max_registers(bool increase, int regs);

  // mbarriers; `bar` is the barrier's 32-bit shared-memory address.
  void mbarrier_init(llvm::Value* bar, int arrivals);   // mbarrier.init.shared::cta.b64 [bar], arrivals
  void fence_mbarrier_init();                           // fence.mbarrier_init.release.cluster
  void mbarrier_arrive(llvm::Value* bar);               // mbarrier.arrive.shared::cta.b64 state, [bar]
  // mbarrier.arrive.expect_tx.shared::cta.b64 state, [bar], bytes
  void mbarrier_arrive_expect_tx(llvm::Value* bar, llvm::Value* bytes);
  // mbarrier.try_wait.parity{.acquire.cluster}.shared::cta.b64 p, [bar], parity -> i1: the phase of that
  // parity completed. `cluster_scope`: acquire at cluster scope (ptxas adds a CCTL.IVALL), for generic
  // writes of other blocks of the cluster published by their arrivals (the default is .acquire.cta).
  llvm::Value* mbarrier_try_wait_parity(llvm::Value* bar, llvm::Value* parity, bool cluster_scope = false);

  // GPU debug mode (debug_waits.h).
  llvm::Value* global_timer();  // mov.u64 %rd, %globaltimer: nanoseconds, the same clock on every SM
  void fence_system();          // fence.sc.sys: earlier stores reach the host before later ones
  void trap();                  // trap: aborts the whole launch (the CUDA context is then unusable)
  void exit_thread();           // exit: this thread ends here

  // Thread identity and time (weft/threads.h; global_timer above serves them too).
  llvm::Value* clock64();             // mov.u64 %rd, %clock64: this SM's cycle counter
  void nanosleep(llvm::Value* ns);    // nanosleep.u32 ns: sleep about ns nanoseconds (0 to 2 ns, at most 1 ms)
  // One element of global memory read or written where `pred` (i1) holds, without a branch: @p ld.global /
  // @p st.global of 16, 32 or 64 bits (the load's value is undefined where pred does not hold). False (load:
  // nullptr) for a type of another size, which the caller guards with a branch instead.
  llvm::Value* load_global_if(llvm::Value* pred, llvm::Type* type, llvm::Value* ptr);
  bool store_global_if(llvm::Value* pred, llvm::Value* value, llvm::Value* ptr);
  // @p st.global.v4.b32: four 32-bit words to a 16-byte aligned address where `pred` (i1) holds.
  void store_global_block_if(llvm::Value* pred, const std::vector<llvm::Value*>& words, llvm::Value* ptr);
  // vote.sync.ballot.b32 with every lane of the warp: bit l set where lane l's `pred` (i1) is true.
  llvm::Value* vote_ballot(llvm::Value* pred);

  // Global-memory atomics (weft/ops.h): atom.{order}.{scope}.global.{op}.{type} old, [address], value, and
  // for op "cas" atom.{order}.{scope}.global.cas.{type} old, [address], compare, value. `address`: a global
  // pointer (addrspace 1); `value` and `compare`: i32, i64, f32 or f64 as `type` says (u32, s64, f32, b32, …).
  llvm::Value* atom(const char* op, const char* type, const char* order, const char* scope, llvm::Value* address,
                    llvm::Value* value, llvm::Value* compare = nullptr);
  // The same without the old value: red.{order}.{scope}.global.{op}.{type} [address], value (no round trip
  // back to the thread; `order` relaxed or release only, as PTX allows).
  void red(const char* op, const char* type, const char* order, const char* scope, llvm::Value* address,
           llvm::Value* value);
  // fence.acq_rel.{scope}: this thread's accesses before it, ordered before those after it for `scope`
  // (cta, cluster, gpu or sys).
  void fence_acq_rel(const char* scope);
  // Programmatic dependent launch: wait for the prior grid, or let dependent grids be scheduled.
  void griddepcontrol_wait();
  void griddepcontrol_launch_dependents();

  // TMA. `desc`: the generic address (i64) of a CUtensorMap; `coords`: i32, innermost first; `smem`,
  // `bar`: 32-bit shared addresses.
  // cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes [smem], [desc, {coords}], [bar]
  // (`policy`, from l2_eviction_policy: with .L2::cache_hint and the policy as the last operand; also below)
  void tma_load(llvm::Value* smem, llvm::Value* desc, const std::vector<llvm::Value*>& coords, llvm::Value* bar,
                llvm::Value* policy = nullptr);
  // cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [desc, {coords}], [smem]; with a `reduction` ("add",
  // "min", "max") cp.reduce.async.bulk.tensor.Nd.global.shared::cta.<reduction>.tile.bulk_group
  void tma_store(llvm::Value* desc, const std::vector<llvm::Value*>& coords, llvm::Value* smem,
                 llvm::Value* policy = nullptr, const char* reduction = nullptr);
  // cp.async.bulk.prefetch.tensor.Nd.L2.global.tile [desc, {coords}]: the box into L2, nothing waited for.
  void tma_prefetch(llvm::Value* desc, const std::vector<llvm::Value*>& coords, llvm::Value* policy = nullptr);
  // prefetch.tensormap [desc]: the descriptor (a generic address of the grid-constant parameter) cached.
  void prefetch_tensormap(llvm::Value* desc);
  // createpolicy.fractional.L2::evict_{first,last,normal,unchanged}.b64 %rd, 1.0 -> i64: an L2 cache policy
  // for every line of an access (`evict`: weft::Evict's 1 to 4). Pure: LLVM may hoist and share it.
  llvm::Value* l2_eviction_policy(int evict);
  void bulk_commit_group();                  // cp.async.bulk.commit_group
  void bulk_wait_group_read(int pending);    // cp.async.bulk.wait_group.read pending
  void fence_proxy_async_shared();           // fence.proxy.async.shared::cta
  void fence_proxy_async_shared_cluster();   // fence.proxy.async.shared::cluster

  // Thread-block clusters (sm_90).
  llvm::Value* cluster_cta_rank();           // mov.u32 %r, %cluster_ctarank
  // barrier.cluster.arrive.release; barrier.cluster.wait.acquire (every thread of every block of the cluster)
  void cluster_sync();
  // mapa.shared::cluster.u32 %r, addr, rank: the 32-bit shared::cluster address of `addr` (a shared::cta
  // address of this block) in the block of cluster rank `rank`.
  llvm::Value* map_shared_to_rank(llvm::Value* addr, llvm::Value* rank);
  // The same with pointers: a shared::cta pointer (addrspace 3) -> a shared::cluster one (addrspace 7),
  // through which loads and stores are ld/st.shared::cluster (the llvm.nvvm.mapa.shared.cluster intrinsic).
  llvm::Value* map_shared_pointer_to_rank(llvm::Value* pointer, llvm::Value* rank);
  // st.async.shared::cluster.mbarrier::complete_tx::bytes.{b32|b64} [addr], value, [bar]: `value` (i32 or
  // i64) into another block's shared memory, its bytes completed on that block's `bar` (both 32-bit
  // shared::cluster addresses from map_shared_to_rank).
  void st_async(llvm::Value* addr, llvm::Value* value, llvm::Value* bar);
  // mbarrier.arrive{.release.cluster}.shared::cluster.b64 _, [bar]: `bar` from map_shared_to_rank.
  // Without `cluster_scope` the release is the default .release.cta (CUTLASS's remote arrive): no fence;
  // with it ptxas puts MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before the arrival (as for fence.acq_rel.gpu).
  void mbarrier_arrive_cluster(llvm::Value* bar, bool cluster_scope);
  // cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
  //   [smem], [desc, {coords}], [bar], mask: the box lands at `smem` and signals `bar` in every block whose
  //   bit is set in `mask` (an i16).
  void tma_load_multicast(llvm::Value* smem, llvm::Value* desc, const std::vector<llvm::Value*>& coords,
                          llvm::Value* bar, llvm::Value* mask, llvm::Value* policy = nullptr);
  // cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], bytes, [bar]: `bytes`
  // (a multiple of 16) from this block's `src` (shared::cta) to `dst`, completing them on `bar`; dst and bar
  // are shared::cluster addresses (map_shared_to_rank), all 16-byte aligned.
  void bulk_copy_to_cluster(llvm::Value* dst, llvm::Value* src, llvm::Value* bytes, llvm::Value* bar);
  // cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [smem], [global], bytes, [bar]: `bytes`
  // (a multiple of 16) from a 16-byte aligned global address (a global pointer) into this block's `smem`
  // (a 32-bit shared address), completed on `bar`.
  void bulk_load(llvm::Value* smem, llvm::Value* global, llvm::Value* bytes, llvm::Value* bar);
  // cp.async.bulk.global.shared::cta.bulk_group [global], [smem], bytes: the reverse, in the bulk group.
  void bulk_store(llvm::Value* global, llvm::Value* smem, llvm::Value* bytes);
  // mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [bar], bytes: `bytes` of the transactions `bar`
  // expects, done (what a copy this thread made itself reports in place of the copy engine).
  void mbarrier_complete_tx(llvm::Value* bar, llvm::Value* bytes);

  // stmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16 [smem + offset], {words}: one to four 8 x 8 matrices of
  // 16-bit elements from the warp's registers into shared memory. Word i of lane l holds row l / 4, columns
  // 2 (l % 4) and + 1 of matrix i (the mma/wgmma accumulator fragment); lanes 8 i .. 8 i + 7 give the 16-byte
  // aligned rows of matrix i (`smem`, a 32-bit shared address; `offset`, a constant added in the instruction).
  void store_matrices(llvm::Value* smem, int64_t offset, const std::vector<llvm::Value*>& words);

  // Non-bulk asynchronous copies (sm_80+). `smem`: a 32-bit shared address; `global`: an i64 address;
  // `src_bytes` (i32): how many of the `bytes` (4, 8 or 16) to read, the rest zero-filled.
  // cp.async.cg.shared.global [smem], [global], 16, src_bytes (16 bytes; .cg: cached in L2 only)
  // cp.async.ca.shared.global [smem], [global], bytes, src_bytes (4 or 8 bytes)
  // (`policy`: .L2::cache_hint with that L2 policy as the last operand)
  void cp_async(llvm::Value* smem, llvm::Value* global, int bytes, llvm::Value* src_bytes, llvm::Value* policy = nullptr);
  void cp_async_commit_group();              // cp.async.commit_group
  void cp_async_wait_group(int pending);     // cp.async.wait_group pending

  // wgmma (sm_90a).
  void wgmma_fence();                        // wgmma.fence.sync.aligned
  void wgmma_commit_group();                 // wgmma.commit_group.sync.aligned
  // wgmma.wait_group.sync.aligned pending, with `registers` (an accumulator the waited-for wgmmas write)
  // tied in and out: the values it returns are those registers after the wait, so that the compiler moves
  // no use of them above it (an empty list: the wait alone). When `registers` are exactly the results of the
  // last wgmma chain and nothing but its commit_group came after it, the commit and the wait are appended
  // to the chain's own asm statement instead: the same instructions, and one statement with the accumulator
  // tied less for the code generator (whose cost grows with each statement's operands).
  std::vector<llvm::Value*> wgmma_wait_group(int pending, const std::vector<llvm::Value*>& registers = {});
  // One step of a wgmma chain: A as its shared-memory descriptor (one i64) or as its four b32 fragment
  // registers (two 16-bit elements each: the A fragment of m64nNk16), B's descriptor, and whether the step
  // adds to the accumulator (scale-d = 1) or overwrites it (scale-d = 0: D = A * B).
  struct WgmmaStep {
    std::vector<llvm::Value*> a;
    llvm::Value* b_desc = nullptr;
    bool accumulate = true;
  };
  // For each step in order, on one accumulator (n / 2 f32 registers per thread), with A (64 x 16) and B
  // (16 x n):
  //   { .reg .pred p; setp.ne.b32 p, scale_d, 0;
  //     wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{bf16,f16}.{bf16,f16} {acc}, a_desc, b_desc, p, 1, 1, trans_a, trans_b; }
  // (trans_a / trans_b: imm-trans-a / imm-trans-b, 1 for an M-major A / N-major B in shared memory;
  // {a0, a1, a2, a3} and no imm-trans-a for A in registers, where trans_a must be false). fp8 operands
  // (types {f8e4m3|f8e5m2} x {f8e4m3|f8e5m2}, A in shared memory): m64n{n}k32.f32.{e4m3,e5m2}.{e4m3,e5m2},
  // 32 of K per step and no transpose operands (trans_a and trans_b must be false). All steps are one inline asm statement with the
  // accumulator tied in and out once: the instructions issue back to back, and the code generator handles
  // n / 2 accumulator operands per chain rather than per instruction (its cost grows with those). When the
  // first step does not accumulate, acc's registers are not read (pass poison): they are outputs only, not
  // tied to inputs.
  std::vector<llvm::Value*> wgmma(WgmmaTypes types, int n, const std::vector<WgmmaStep>& steps,
                                  const std::vector<llvm::Value*>& acc, bool trans_a, bool trans_b);
  // shfl.sync.bfly.b32 across the full warp (values of 64 bits take two shuffles).
  llvm::Value* shuffle_xor(llvm::Value* v, int64_t lane_mask);
  // shfl.sync.up.b32 / shfl.sync.down.b32 by `delta` lanes across the full warp: the value of lane l - delta
  // (up) or l + delta (down); lanes with no such lane get their own value back.
  llvm::Value* shuffle_up(llvm::Value* v, int64_t delta);
  llvm::Value* shuffle_down(llvm::Value* v, int64_t delta);
  // mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d = a (16x16) * b (16x8) + c, one warp.
  // a: 4 x i32 (two 16-bit elements each), b: 2 x i32, c: 4 x f32, in the fragment layouts of the PTX ISA.
  std::array<llvm::Value*, 4> mma_m16n8k16(bool bf16, const std::array<llvm::Value*, 4>& a,
                                           const std::array<llvm::Value*, 2>& b, const std::array<llvm::Value*, 4>& c);

 private:
  // A full-warp shuffle of v (32 or 64 bits) by `shuffle32`, one 32-bit half at a time.
  llvm::Value* shuffle(llvm::Value* v, const std::function<llvm::Value*(llvm::Value*)>& shuffle32);

  llvm::IRBuilder<>& b_;
  // The last wgmma chain's asm statement and the commit_group that followed it (null: none since), for
  // wgmma_wait_group to fold both into one statement.
  llvm::CallInst* last_chain_ = nullptr;
  llvm::CallInst* last_commit_ = nullptr;
};

}  // namespace weft::codegen::nvptx
