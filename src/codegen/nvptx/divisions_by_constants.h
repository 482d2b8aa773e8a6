// weft's pass for divisions by constants in NVPTX modules ("weft-divisions" in a pipeline): what instcombine
// does for them, without the rest of instcombine (a quarter of attention's compile time), for pipelines without
// it (weft's own has instcombine: nvptx_pipeline.cpp). weft's PTX emitter has no DAG combiner, and
// div-rem-pairs, which runs after this pass, turns a remainder next to its division into a product and a
// subtraction; so the forms are made here, before it:
//  - an integer division or remainder of a value known to be non-negative by a positive constant is unsigned
//    (the same result; ptxas's unsigned sequences are shorter);
//  - an unsigned division or remainder by a power of two is a shift or a mask;
//  - a floating-point division by a constant whose inverse is exact (a power of two) is a product by the
//    inverse (bit for bit the same: both round the same real number once).
// Every other instruction stays as it is. Known bits (for "non-negative") are LLVM's, asked only of the
// dividends of signed divisions by constants.
#pragma once

#include <llvm/IR/PassManager.h>

namespace weft::codegen::nvptx {

class DivisionsByConstantsPass : public llvm::PassInfoMixin<DivisionsByConstantsPass> {
 public:
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager& analyses);
};

}  // namespace weft::codegen::nvptx
