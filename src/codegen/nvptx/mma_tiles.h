// Tensor-core tiles of a dot on NVPTX (mma.sync m16n8k16), over operands staged in shared memory.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "codegen/nvptx/ptx_instructions.h"

namespace weft::codegen::nvptx {

// What a piece of per-block code needs to know about the block it runs in.
struct BlockContext {
  llvm::Value* smem;           // where the operands' byte offsets start (the group's scratch)
  llvm::BasicBlock* entry;     // where allocas go
  llvm::Value* tid;            // thread index (i32)
  int64_t threads;
};

// A (M x K) at a_at and B (K x N) at b_at: 16-bit elements as memory holds them; C (M x N, f32) at c_at,
// read as the accumulator when has_acc. Byte offsets into shared memory. M % 16 == N % 8 == K % 16 == 0.
struct MmaTiles {
  int64_t M, N, K, a_at, b_at, c_at;
  bool bf16;  // else f16
  bool has_acc;
};

// Each warp computes 16x8 tiles of C (round robin) and writes them to c_at; no barrier before or after.
void emit_mma_tiles(llvm::IRBuilder<>& b, PtxInstructions& ptx, const BlockContext& block, const MmaTiles& t);

}  // namespace weft::codegen::nvptx
