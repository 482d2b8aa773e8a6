#include "codegen/nvptx/nvptx_pipeline.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/OptBisect.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "codegen/deferred_math.h"
#include "codegen/llvm_builders.h"
#include "codegen/nvptx/compile_ptx.h"
#include "codegen/nvptx/divisions_by_constants.h"
#include "codegen/nvptx/redundant_syncs.h"
#include "codegen/nvptx/sink_values.h"
#include "support/env.h"
#include "weft/error.h"

namespace weft::codegen::nvptx {
namespace {

// In the order the lowering's leftovers need them: thread and block indices get their ranges first
// (nvvm-intr-range: what lets instcombine prove index arithmetic free of overflow, for mul.wide), Vars
// (allocas) become SSA values, so that CSE and instcombine see through them; licm after the first clean-up,
// when invariants are plain values; gvn for the loads and values CSE's dominance scan misses (without
// partial-redundancy elimination: its scalar PRE was a third of gvn's time, and without it 16 of the unit
// suite's 305 kernels change, 15 of them 1-11 PTX instructions shorter, one 1 longer, ptxas reporting no new
// spills; benchmarks/NOTES.md round 6); a second instcombine for what gvn and licm exposed; infer-alignment so
// that the code generator's load/store vectorizer can merge shared-memory accesses (ld.shared.v4); adce.
// Instcombine stops where it stops (no-verify-fixpoint, as in LLVM's own pipelines: the textual default
// aborts when a fixpoint needs more than one round).
constexpr const char* kDefaultPipeline =
    "function(nvvm-intr-range,sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,loop-mssa(licm),"
    "gvn<no-pre>,instcombine<no-verify-fixpoint>,infer-alignment,adce)";

// For weft's own PTX emitter (ptx_emitter.h), which has no DAG combiner and no machine passes: thread indices
// get their ranges, Vars become SSA values, simplifycfg, licm; then addresses that differ by a constant share
// one base (separate-const-offset-from-gep), one early-cse merges the bases and what the lowering made twice,
// one round of instcombine, infer-alignment lets ptxas see vector accesses; then what LLVM's code generator
// would have done: a remainder next to its division becomes a multiply and a subtraction (div-rem-pairs), and a
// value moves into the block that uses it (weft-sink: LLVM's sink with a GPU's cost model, sink_values.h;
// without sinking ptxas spills in attention's consumers). No adce: ptxas removes dead code itself.
// The lowering writes the forms instcombine gives (index_add, index_mul, linear_index, blocked_coordinates,
// pointer_add, add_const's `or disjoint`, tid_in_region without a group start that its mask drops: lowering.h;
// 16-bit floats stored as loaded: ElementOps::to_memory), and without instcombine attention compiles in 25%
// fewer instructions (this pipeline less `instcombine<no-verify-fixpoint>` and with `weft-divisions` before
// div-rem-pairs, through WEFT_NVPTX_PASSES); but ptxas then schedules attention's D 64 three-consumer kernel
// 2.6-3.7% slower on the H200 (1.1-2.2% on an H100), with the same SASS in its main loop, while the driver's
// link of an attention kernel takes ~40 times weft's whole compile of it: instcombine stays, and with it
// weft-divisions has nothing left to do (the op suite's and the attention example's PTX are the same without it;
// benchmarks/NOTES.md, sessions 36 and 37).
constexpr const char* kWeftEmitterPipeline =
    "function(nvvm-intr-range,sroa,simplifycfg,loop-mssa(licm),separate-const-offset-from-gep,early-cse,"
    "instcombine<no-verify-fixpoint>,infer-alignment),"
    "function(div-rem-pairs,weft-sink)";

// The code generator's own optional passes weft skips by default. A name alone skips every run of that
// pass; "name#k" skips its k-th run on each function (from 1), for a pass the pipeline adds more than once.
// early-cse runs three times: after straight-line strength reduction, after nary reassociation, and before
// the load/store vectorizer. The first two find nothing in weft's modules that the third and instruction
// selection do not (the PTX of the six bench kernels and of the unit suite's 305 is byte-identical without
// them; without the third, 20 of those change) and cost 5% of attention's code generation (callgrind,
// benchmarks/NOTES.md round 6).
//
// Straight-line strength reduction (slsr) stays: it costs 37% of softmax's compile process (callgrind,
// benchmarks/NOTES.md round 5), 3% of the GEMM's, 1.5% of attention's; nary-reassociate and consthoist
// another 1-2%. Since round 5 the lowering makes global pointers, scratch slots and cp.async destinations
// one per-thread address plus constants itself, and without the three passes the six bench kernels' PTX has
// the same instructions (softmax and layernorm byte-identical); but 65 of the unit suite's 279 kernels are
// still longer than with slsr, 47 of them longer than before round 5: the GEMM epilogues with two staging
// buffers (eb2: +7 to +11 instructions, the fp8 continuous-stream ones +44), the small-M GEMM (+5 to +26),
// reduce (+5), attention (+1 to +3). Skip the three once those addresses are base + constant too.
// WEFT_NVPTX_SKIP names passes to skip instead of this list ("none": run them all), to measure such trades.
constexpr const char* kDefaultSkip = "early-cse#1,early-cse#2";

// Asked by every optional pass of the code generator's legacy pipeline whether to run (FunctionPass::
// skipFunction and friends; instruction selection and the printer are not optional): no for the names in
// `skip`, and for "name#k" on the k-th time the pass asks about one function (`ir` names the function).
class SkipPasses final : public llvm::OptPassGate {
 public:
  explicit SkipPasses(std::set<std::string, std::less<>> skip) : skip_(std::move(skip)) {}
  bool isEnabled() const override { return !skip_.empty(); }
  bool shouldRunPass(llvm::StringRef pass, llvm::StringRef ir) const override {
    std::string_view name(pass.data(), pass.size());
    if (skip_.contains(name)) return false;
    int run = ++runs_[std::string(name) + '\n' + ir.str()];
    return !skip_.contains(std::string(name) + '#' + std::to_string(run));
  }

 private:
  std::set<std::string, std::less<>> skip_;
  mutable std::map<std::string, int> runs_;  // per pass and function: how many times it asked
};

std::set<std::string, std::less<>> split_names(const std::string& list) {
  std::set<std::string, std::less<>> out;
  size_t at = 0;
  while (at < list.size()) {
    size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.insert(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

std::string skipped_codegen_passes() {
  const std::optional<std::string>& chosen = support::knobs().nvptx_skip;
  return chosen ? *chosen : kDefaultSkip;
}

void generate_ptx(llvm::Module& m, llvm::TargetMachine* target, llvm::raw_pwrite_stream& os) {
  SkipPasses gate(split_names(skipped_codegen_passes()));
  llvm::LLVMContext& context = m.getContext();
  llvm::OptPassGate& before = context.getOptPassGate();
  context.setOptPassGate(gate);
  llvm::legacy::PassManager pm;
  if (target->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("NVPTX: the target machine cannot emit PTX");
  pm.run(m);
  context.setOptPassGate(before);
}

std::string nvptx_pipeline() {
  const std::string& chosen = support::knobs().nvptx_passes;
  if (!chosen.empty()) return chosen;
  return weft_emitter_chosen() ? kWeftEmitterPipeline : kDefaultPipeline;
}

void optimize_for_nvptx(llvm::Module& m, llvm::TargetMachine* target) {
  const std::string pipeline = nvptx_pipeline();
  run_passes(m, target, [&](llvm::PassBuilder& pb) {
    pb.registerPipelineParsingCallback([](llvm::StringRef name, llvm::FunctionPassManager& fpm,
                                          llvm::ArrayRef<llvm::PassBuilder::PipelineElement>) {
      if (name == "weft-sink") fpm.addPass(SinkValuesPass());
      else if (name == "weft-divisions") fpm.addPass(DivisionsByConstantsPass());
      else return false;
      return true;
    });
    llvm::ModulePassManager mpm;
    if (llvm::Error e = pb.parsePassPipeline(mpm, pipeline)) {
      std::string why = llvm::toString(std::move(e));
      throw Error(fmt::format("WEFT_NVPTX_PASSES={} is not an LLVM pass pipeline: {}; unset it for weft's own",
                              pipeline, why));
    }
    return mpm;
  });
  deferred_math::expand(m);
  remove_redundant_syncs(m);
}

}  // namespace weft::codegen::nvptx
