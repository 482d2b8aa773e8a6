// The tensor-core part of a dot on NVPTX: warps walk the 16x8 tiles of C with mma.sync m16n8k16, the
// operands and the result in shared memory (see lower_nvptx_dot.cpp's dot_tensor_cores for the staging).
#include "codegen/nvptx/mma_tiles.h"

#include <array>

#include "codegen/llvm_builders.h"

namespace weft::codegen::nvptx {

using llvm::Value;

void emit_mma_tiles(llvm::IRBuilder<>& b, PtxInstructions& ptx, const BlockContext& s, const MmaTiles& t) {
  llvm::Type* i16 = b.getInt16Ty();
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* f32 = b.getFloatTy();
  auto i32c = [&](int64_t v) { return b.getInt32(static_cast<uint32_t>(v)); };
  auto shared_at = [&](llvm::Type* type, int64_t byte_offset, Value* index) {
    Value* base = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), s.smem, byte_offset);
    return b.CreateInBoundsGEP(type, base, b.CreateZExt(index, b.getInt64Ty()));
  };
  Value* lane = b.CreateAnd(s.tid, i32c(31));
  Value* warp = b.CreateLShr(s.tid, i32c(5));
  Value* group = b.CreateLShr(lane, i32c(2));          // row (of A, C) / column (of B) within the tile
  Value* pair = b.CreateShl(b.CreateAnd(lane, i32c(3)), i32c(1));  // first of two consecutive k (or n)
  auto a_pair = [&](Value* row, Value* col) {  // two consecutive bf16 of a row of A: one 32-bit load
    return b.CreateLoad(i32, shared_at(i16, t.a_at, b.CreateAdd(b.CreateMul(row, i32c(t.K)), col)));
  };
  auto b_pair = [&](Value* k, Value* col) {  // B[k][col] and B[k + 1][col], packed low to high
    Value* lo = b.CreateLoad(i16, shared_at(i16, t.b_at, b.CreateAdd(b.CreateMul(k, i32c(t.N)), col)));
    Value* hi = b.CreateLoad(i16, shared_at(i16, t.b_at, b.CreateAdd(b.CreateMul(b.CreateAdd(k, i32c(1)), i32c(t.N)), col)));
    return b.CreateOr(b.CreateZExt(lo, i32), b.CreateShl(b.CreateZExt(hi, i32), 16));
  };
  int64_t tiles_n = t.N / 8, tiles = (t.M / 16) * tiles_n, warps = s.threads / 32;
  llvm::IRBuilder<> eb(s.entry, s.entry->begin());
  std::array<Value*, 4> acc;
  for (Value*& slot : acc) slot = eb.CreateAlloca(f32);
  for (int64_t round = 0; round * warps < tiles; ++round) {
    Value* tile = b.CreateAdd(warp, i32c(round * warps));
    auto body = [&] {
      Value* row0 = b.CreateMul(b.CreateUDiv(tile, i32c(tiles_n)), i32c(16));
      Value* col0 = b.CreateMul(b.CreateURem(tile, i32c(tiles_n)), i32c(8));
      Value* row_lo = b.CreateAdd(row0, group);
      Value* row_hi = b.CreateAdd(row_lo, i32c(8));
      Value* c_col = b.CreateAdd(col0, pair);
      auto c_at_rc = [&](Value* row, int64_t dc) {
        return shared_at(f32, t.c_at, b.CreateAdd(b.CreateMul(row, i32c(t.N)), b.CreateAdd(c_col, i32c(dc))));
      };
      std::array<Value*, 4> c_addr = {c_at_rc(row_lo, 0), c_at_rc(row_lo, 1), c_at_rc(row_hi, 0), c_at_rc(row_hi, 1)};
      for (int e = 0; e < 4; ++e)
        b.CreateStore(t.has_acc ? static_cast<Value*>(b.CreateLoad(f32, c_addr[e])) : llvm::ConstantFP::get(f32, 0.0), acc[e]);
      emit_loop(b, i32c(0), i32c(t.K), i32c(16), [&](Value* k0) {
        Value* ka = b.CreateAdd(k0, pair);
        std::array<Value*, 4> fa = {a_pair(row_lo, ka), a_pair(row_hi, ka), a_pair(row_lo, b.CreateAdd(ka, i32c(8))),
                                    a_pair(row_hi, b.CreateAdd(ka, i32c(8)))};
        Value* b_col = b.CreateAdd(col0, group);
        std::array<Value*, 2> fb = {b_pair(ka, b_col), b_pair(b.CreateAdd(ka, i32c(8)), b_col)};
        std::array<Value*, 4> c;
        for (int e = 0; e < 4; ++e) c[e] = b.CreateLoad(f32, acc[e]);
        std::array<Value*, 4> out = ptx.mma_m16n8k16(t.bf16, fa, fb, c);
        for (int e = 0; e < 4; ++e) b.CreateStore(out[e], acc[e]);
      });
      for (int e = 0; e < 4; ++e) b.CreateStore(b.CreateLoad(f32, acc[e]), c_addr[e]);
    };
    if ((round + 1) * warps > tiles)  // the last round leaves some warps without a tile (warp-uniform)
      emit_if(b, b.CreateICmpULT(tile, i32c(tiles)), body, [] {});
    else
      body();
  }
}

}  // namespace weft::codegen::nvptx
