// The GPU instructions the NVPTX lowering uses, each emitted by exactly one function here (grep for the
// PTX mnemonic to find where an instruction comes from).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <array>

namespace weft::codegen::nvptx {

class PtxInstructions {
 public:
  explicit PtxInstructions(llvm::IRBuilder<>& b) : b_(b) {}

  llvm::Value* thread_index();          // mov.u32 %r, %tid.x
  llvm::Value* block_index(int axis);   // mov.u32 %r, %ctaid.{x,y,z}
  llvm::Value* grid_size(int axis);     // mov.u32 %r, %nctaid.{x,y,z}
  void barrier();                       // bar.sync 0
  void barrier(llvm::Value* id, llvm::Value* threads);         // bar.sync id, threads
  void barrier_arrive(llvm::Value* id, llvm::Value* threads);  // bar.arrive id, threads
  void warp_sync();                     // bar.warp.sync 0xffffffff
  // The warp-group register budget: setmaxnreg.{inc,dec}.sync.aligned.u32 regs.
  void set_max_registers(bool increase, int regs);

  // mbarriers; `bar` is the barrier's 32-bit shared-memory address.
  void mbarrier_init(llvm::Value* bar, int arrivals);   // mbarrier.init.shared::cta.b64 [bar], arrivals
  void fence_mbarrier_init();                           // fence.mbarrier_init.release.cluster
  void mbarrier_arrive(llvm::Value* bar);               // mbarrier.arrive.shared::cta.b64 state, [bar]
  // mbarrier.arrive.expect_tx.shared::cta.b64 state, [bar], bytes
  void mbarrier_arrive_expect_tx(llvm::Value* bar, llvm::Value* bytes);
  // mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity -> i1: the phase of that parity completed
  llvm::Value* mbarrier_try_wait_parity(llvm::Value* bar, llvm::Value* parity);
  // shfl.sync.bfly.b32 across the full warp (values of 64 bits take two shuffles).
  llvm::Value* shuffle_xor(llvm::Value* v, int64_t lane_mask);
  // mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d = a (16x16) * b (16x8) + c, one warp.
  // a: 4 x i32 (two 16-bit elements each), b: 2 x i32, c: 4 x f32, in the fragment layouts of the PTX ISA.
  std::array<llvm::Value*, 4> mma_m16n8k16(bool bf16, const std::array<llvm::Value*, 4>& a,
                                           const std::array<llvm::Value*, 2>& b, const std::array<llvm::Value*, 4>& c);

 private:
  llvm::IRBuilder<>& b_;
};

}  // namespace weft::codegen::nvptx
