#include "codegen/nvptx/ptx_instructions.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

namespace weft::codegen::nvptx {

using llvm::Intrinsic::ID;

static llvm::Value* read_special(llvm::IRBuilder<>& b, ID id) { return b.CreateIntrinsic(b.getInt32Ty(), id, {}); }

llvm::Value* PtxInstructions::thread_index() { return read_special(b_, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x); }

llvm::Value* PtxInstructions::block_index(int axis) {
  static const ID ids[3] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                            llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
  return read_special(b_, ids[axis]);
}

llvm::Value* PtxInstructions::grid_size(int axis) {
  static const ID ids[3] = {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                            llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
  return read_special(b_, ids[axis]);
}

void PtxInstructions::barrier() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
}

llvm::Value* PtxInstructions::shuffle_xor(llvm::Value* v, int64_t lane_mask) {
  llvm::Type* t = v->getType();
  unsigned bits = t->getPrimitiveSizeInBits();
  auto shuffle32 = [&](llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                              {b_.getInt32(0xffffffffu), x, b_.getInt32(static_cast<uint32_t>(lane_mask)), b_.getInt32(0x1f)});
  };
  if (bits == 64) {
    llvm::Value* u = b_.CreateBitCast(v, b_.getInt64Ty());
    llvm::Value* lo = shuffle32(b_.CreateTrunc(u, b_.getInt32Ty()));
    llvm::Value* hi = shuffle32(b_.CreateTrunc(b_.CreateLShr(u, 32), b_.getInt32Ty()));
    llvm::Value* joined = b_.CreateOr(b_.CreateZExt(lo, b_.getInt64Ty()), b_.CreateShl(b_.CreateZExt(hi, b_.getInt64Ty()), 32));
    return b_.CreateBitCast(joined, t);
  }
  llvm::Value* as32 = t->isIntegerTy() ? b_.CreateSExtOrTrunc(v, b_.getInt32Ty()) : b_.CreateBitCast(v, b_.getInt32Ty());
  llvm::Value* moved = shuffle32(as32);
  return t->isIntegerTy() ? b_.CreateTrunc(moved, t) : b_.CreateBitCast(moved, t);
}

std::array<llvm::Value*, 4> PtxInstructions::mma_m16n8k16(bool bf16, const std::array<llvm::Value*, 4>& a,
                                                           const std::array<llvm::Value*, 2>& b,
                                                           const std::array<llvm::Value*, 4>& c) {
  llvm::Type* f32 = b_.getFloatTy();
  llvm::Type* i32 = b_.getInt32Ty();
  auto* result = llvm::StructType::get(b_.getContext(), {f32, f32, f32, f32});
  auto* type = llvm::FunctionType::get(result, {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
  std::string text = std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + (bf16 ? "bf16.bf16" : "f16.f16") +
                     ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};";
  auto* mma = llvm::InlineAsm::get(type, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", /*hasSideEffects=*/false);
  llvm::Value* d = b_.CreateCall(mma, {a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]});
  return {b_.CreateExtractValue(d, 0), b_.CreateExtractValue(d, 1), b_.CreateExtractValue(d, 2),
          b_.CreateExtractValue(d, 3)};
}

}  // namespace weft::codegen::nvptx
