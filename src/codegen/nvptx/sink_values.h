// weft's sink pass for NVPTX modules ("weft-sink" in a pipeline): a value is computed in the block that
// uses it rather than where the lowering put it, which shortens live ranges (registers) — what LLVM's own
// `sink` does, with a GPU's cost model in one respect: an integer division or remainder by a value that is
// not a constant is not moved past a loop. On a GPU a block's warps wait in their loops (barrier and
// mbarrier waits), and a division computed before a loop overlaps those waits; moved below the loop it
// runs after the last wait, on the path to the block's next step (a tile's store, the next tile's first
// load), ~30-45 SASS instructions each.
#pragma once

#include <llvm/IR/PassManager.h>

namespace weft::codegen::nvptx {

// Moves each instruction without side effects or memory access, used outside its block, down the
// dominator tree to the nearest block that dominates all its uses — not into a loop it is not already
// in, and (divisions and remainders by non-constants) not past a loop.
class SinkValuesPass : public llvm::PassInfoMixin<SinkValuesPass> {
 public:
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager& analyses);
};

}  // namespace weft::codegen::nvptx
