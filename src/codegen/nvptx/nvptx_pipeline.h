// The LLVM pass pipeline that optimizes weft's NVPTX modules before the code generator.
//
// weft's lowering already does what LLVM's O3 spends most of its time on for this code: tile ops are
// unrolled per register, values are kept in SSA, address arithmetic is proven (passes/access_patterns),
// loops are uniform and are not to be unrolled or vectorized (the NVPTX code generator's own IR passes
// vectorize loads and stores and reassociate addresses). What is left to LLVM: Vars to registers (sroa),
// redundant values (early-cse, gvn), peepholes (instcombine), hoisting loop invariants (licm) and the
// CFG's leftovers (simplifycfg, adce), plus index ranges (nvvm-intr-range) and alignments
// (infer-alignment) that the code generator's own passes use. WEFT_NVPTX_PASSES replaces the pipeline (LLVM's textual syntax,
// e.g. "default<O3>" for LLVM's own, to compare).
#pragma once

#include <string>

namespace llvm {
class Module;
class raw_pwrite_stream;
class TargetMachine;
}  // namespace llvm

namespace weft::codegen::nvptx {

// The pipeline weft runs: WEFT_NVPTX_PASSES, or the default above (part of the compile cache's key).
std::string nvptx_pipeline();

// Runs nvptx_pipeline() on `m`. A pipeline LLVM cannot parse is a weft::Error naming WEFT_NVPTX_PASSES.
void optimize_for_nvptx(llvm::Module& m, llvm::TargetMachine* target);

// The code generator's optional passes weft skips, comma-separated: WEFT_NVPTX_SKIP, or weft's list (part of
// the compile cache's key).
std::string skipped_codegen_passes();

// Runs the code generator on the optimized `m`, writing PTX to `os`, without the passes above.
void generate_ptx(llvm::Module& m, llvm::TargetMachine* target, llvm::raw_pwrite_stream& os);

}  // namespace weft::codegen::nvptx
