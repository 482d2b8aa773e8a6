#include "codegen/nvptx/compile_ptx.h"

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include "codegen/llvm_builders.h"
#include "codegen/llvm_options.h"
#include "codegen/nvptx/lower_nvptx.h"
#include "codegen/nvptx/nvptx_pipeline.h"
#include "codegen/nvptx/ptx_emitter.h"
#include "support/compile_timing.h"
#include "support/env.h"

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace weft::codegen::nvptx {
namespace {

const char* kTriple = "nvptx64-nvidia-cuda";

const llvm::Target& nvptx_target() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string error;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(llvm::Triple(kTriple), error);
  if (!t) throw InternalError("NVPTX target unavailable: " + error);
  return *t;
}

// The target machine for `target`, made once per thread and kept: making one builds the NVPTX subtarget's
// lowering tables (half a megabyte), a tenth of a warm compile of a small kernel. A target machine serves one
// module at a time, so threads do not share theirs.
llvm::TargetMachine& target_machine(const PtxTarget& target) {
  thread_local std::map<std::pair<std::string, std::string>, std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::TargetMachine>& tm = machines[{target.arch, target.features}];
  if (!tm) {
    llvm::TargetOptions options;
    // No contraction of a * b + c into an fma: every op rounds as on the CPU (fma() is there to ask for one).
    options.AllowFPOpFusion = llvm::FPOpFusion::Standard;
    tm.reset(nvptx_target().createTargetMachine(llvm::Triple(kTriple), target.arch, target.features, options,
                                                std::nullopt));
    if (!tm) throw InternalError("NVPTX: no target machine for " + target.arch);
  }
  return *tm;
}

std::string print_module(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}


}  // namespace

namespace {
thread_local int chosen_emitter = -1;  // -1: the environment's; 0: LLVM's; 1: weft's
}  // namespace

PtxEmitterChoice::PtxEmitterChoice(bool weft) : before_(chosen_emitter) { chosen_emitter = weft ? 1 : 0; }
PtxEmitterChoice::~PtxEmitterChoice() { chosen_emitter = before_; }

bool weft_emitter_chosen() { return chosen_emitter < 0 ? support::knobs().weft_ptx_emitter : chosen_emitter == 1; }

std::string code_generator_version() {
  std::string version = "LLVM " LLVM_VERSION_STRING "; passes " + nvptx_pipeline() + "; math expanded after them";
  if (!support::knobs().llvm_args.empty()) version += "; LLVM options " + support::knobs().llvm_args;
  if (weft_emitter_chosen()) return version + "; weft's PTX emitter 2";
  return version + "; skipped " + skipped_codegen_passes();
}

bool debug_mode(const KernelOptions& options) { return options.debug || support::knobs().debug; }

std::string unknown_arch_reason(const std::string& arch) {
  std::unique_ptr<llvm::MCSubtargetInfo> info(nvptx_target().createMCSubtargetInfo(llvm::Triple(kTriple), "", ""));
  if (!info) throw InternalError("NVPTX: no subtarget information");
  if (arch.starts_with("sm_") && info->isCPUStringValid(arch)) return "";
  std::string known;
  for (const llvm::SubtargetSubTypeKV& cpu : info->getAllProcessorDescriptions())
    if (llvm::StringRef(cpu.Key).starts_with("sm_")) known += fmt::format("{}{}", known.empty() ? "" : " ", cpu.Key);
  return fmt::format("'{}' is not an NVIDIA GPU architecture that weft's code generator (LLVM {}) knows; use one of: "
                     "{} (sm_90a for Hopper)",
                     arch, LLVM_VERSION_STRING, known);
}

namespace {

void check_options(const ir::Function& f, const KernelOptions& options, const PtxTarget& target) {
  if (options.num_warps < 1 || options.num_warps > 32 || (options.num_warps & (options.num_warps - 1)))
    throw Error(fmt::format("kernel '{}': num_warps = {} must be a power of two from 1 to 32", f.name, options.num_warps),
                f.loc);
  if (std::string why = unknown_arch_reason(target.arch); !why.empty())
    throw Error(fmt::format("kernel '{}' compiled for {}", f.name, why), f.loc);
}

}  // namespace

TargetPlan plan_for_target(const ir::Function& f, const KernelOptions& options, const PtxTarget& target) {
  check_options(f, options, target);
  llvm::LLVMContext context;
  LoweredKernel lowered = lower_to_nvptx(f, context, options.num_warps, options.cluster, f.name, nullptr);
  return {lowered.threads, lowered.shared_bytes};
}

PtxKernel compile_to_ptx(const ir::Function& f, const KernelOptions& options, const PtxTarget& target) {
  check_options(f, options, target);
  apply_llvm_args();
  using support::CompileStage;
  llvm::TargetMachine* tm;
  {
    support::StageTimer timer(CompileStage::codegen);
    tm = &target_machine(target);
  }
  llvm::LLVMContext context;
  // Local values' names only make the dumps readable: without a dump they are not made (globals keep theirs).
  context.setDiscardValueNames(!support::knobs().dumps_llvm_ir());
  bool debug = debug_mode(options);
  passes::WaitSites waits = debug ? passes::plan_wait_sites(f, options.num_warps) : passes::WaitSites{};
  std::optional<support::StageTimer> stage(std::in_place, CompileStage::llvm_ir);
  LoweredKernel lowered = lower_to_nvptx(f, context, options.num_warps, options.cluster, f.name, debug ? &waits : nullptr);
  llvm::Module& m = *lowered.module;
  m.setTargetTriple(llvm::Triple(kTriple));
  m.setDataLayout(tm->createDataLayout());
  if (support::knobs().dumps("llvm")) support::dump("llvm", f.name, "nvptx.ll", print_module(m));
  stage.emplace(CompileStage::llvm_opt);
  optimize_for_nvptx(m, tm);
  if (support::knobs().dumps("llvm-opt")) support::dump("llvm-opt", f.name, "nvptx.opt.ll", print_module(m));

  stage.emplace(CompileStage::codegen);
  PtxKernel out;
  std::string unsupported;
  std::optional<std::string> own = weft_emitter_chosen() ? emit_ptx(m, target, &unsupported) : std::nullopt;
  if (own) {
    out.ptx = std::move(*own);
    out.emitter = "weft";
  } else {
    out.emitter = "llvm";
    if (!unsupported.empty()) {
      out.emitter += " (weft's emitter does not handle " + unsupported + ")";
      if (support::knobs().time_passes) fmt::print(stderr, "weft: kernel '{}': PTX by {}\n", f.name, out.emitter);
    }
    llvm::SmallString<0> ptx;
    llvm::raw_svector_ostream os(ptx);
    generate_ptx(m, tm, os);
    out.ptx = std::string(ptx.str());
  }
  stage.reset();
  out.entry = lowered.symbol;
  out.threads = lowered.threads;
  out.shared_bytes = lowered.shared_bytes;
  out.debug = debug;
  support::dump("ptx", f.name, "ptx", out.ptx);
  return out;
}

}  // namespace weft::codegen::nvptx
