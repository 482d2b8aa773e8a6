#include "codegen/nvptx/nvptx_pipeline.h"

#include <fmt/format.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>

#include "codegen/llvm_builders.h"
#include "support/env.h"
#include "weft/error.h"

namespace weft::codegen::nvptx {
namespace {

// In the order the lowering's leftovers need them: thread and block indices get their ranges first
// (nvvm-intr-range: what lets instcombine prove index arithmetic free of overflow, for mul.wide), Vars
// (allocas) become SSA values, so that CSE and instcombine see through them; licm after the first clean-up,
// when invariants are plain values; gvn for the loads and values CSE's dominance scan misses; a second
// instcombine for what gvn and licm exposed; infer-alignment so that the code generator's load/store
// vectorizer can merge shared-memory accesses (ld.shared.v4); adce. Instcombine stops where it stops
// (no-verify-fixpoint, as in LLVM's own pipelines: the textual default aborts when a fixpoint needs more
// than one round).
constexpr const char* kDefaultPipeline =
    "function(nvvm-intr-range,sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm),gvn,"
    "instcombine<no-verify-fixpoint>,infer-alignment,adce)";

}  // namespace

std::string nvptx_pipeline() {
  const std::string& chosen = support::knobs().nvptx_passes;
  return chosen.empty() ? kDefaultPipeline : chosen;
}

void optimize_for_nvptx(llvm::Module& m, llvm::TargetMachine* target) {
  const std::string pipeline = nvptx_pipeline();
  run_passes(m, target, [&](llvm::PassBuilder& pb) {
    llvm::ModulePassManager mpm;
    if (llvm::Error e = pb.parsePassPipeline(mpm, pipeline)) {
      std::string why = llvm::toString(std::move(e));
      throw Error(fmt::format("WEFT_NVPTX_PASSES={} is not an LLVM pass pipeline: {}; unset it for weft's own",
                              pipeline, why));
    }
    return mpm;
  });
}

}  // namespace weft::codegen::nvptx
