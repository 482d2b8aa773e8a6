#include "driver/cpu/cpu_jit.h"

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/AbsoluteSymbols.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/EHFrameRegistrationPlugin.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include "cache/disk_cache.h"
#include "codegen/cpu/lower_cpu.h"
#include "codegen/llvm_builders.h"
#include "codegen/llvm_options.h"
#include "driver/cpu/block_runtime.h"
#include "ir/printer.h"
#include "support/build_id.h"
#include "driver/cpu/bounds_checks.h"
#include "support/compile_timing.h"
#include "support/env.h"

namespace weft::driver::cpu {
namespace {

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return s;
}

std::string print_module(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

// Counts the bytes of code and data the JIT has linked for each resource key (a kernel's JITDylib), so
// that tests can see them released (jit_stats).
class CodeBytesPlugin final : public llvm::orc::ObjectLinkingLayer::Plugin {
 public:
  void modifyPassConfig(llvm::orc::MaterializationResponsibility& mr, llvm::jitlink::LinkGraph& g,
                        llvm::jitlink::PassConfiguration&) override {
    uint64_t bytes = 0;
    for (auto& section : g.sections())
      for (auto* block : section.blocks()) bytes += block->getSize();
    llvm::consumeError(mr.withResourceKeyDo([&](llvm::orc::ResourceKey key) {
      std::lock_guard<std::mutex> lock(mutex_);
      by_key_[key] += bytes;
      total_ += bytes;
    }));
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility& mr) override {
    return mr.withResourceKeyDo([&](llvm::orc::ResourceKey key) { forget(key); });
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey key) override {
    forget(key);
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey to,
                                   llvm::orc::ResourceKey from) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_key_.find(from);
    if (it == by_key_.end()) return;
    by_key_[to] += it->second;
    by_key_.erase(from);
  }
  uint64_t total() {
    std::lock_guard<std::mutex> lock(mutex_);
    return total_;
  }

 private:
  void forget(llvm::orc::ResourceKey key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return;
    total_ -= it->second;
    by_key_.erase(it);
  }
  std::mutex mutex_;
  std::map<llvm::orc::ResourceKey, uint64_t> by_key_;
  uint64_t total_ = 0;
};

// A cache entry: "weft cpu object\n<frame bytes>\n" and the object file.
constexpr std::string_view kEntryMagic = "weft cpu object\n";

// Blocks of more instructions than this make a kernel compile without optimization (see HostJit::compile).
constexpr size_t kHugeBlock = 20000;

// Marks every function of `m` optnone when one of its basic blocks is huge; returns whether it did.
bool without_optimization_if_huge(llvm::Module& m) {
  size_t biggest = 0;
  for (llvm::Function& fn : m)
    for (llvm::BasicBlock& bb : fn) biggest = std::max(biggest, bb.size());
  if (biggest <= kHugeBlock) return false;
  for (llvm::Function& fn : m) {
    if (fn.isDeclaration()) continue;
    fn.addFnAttr(llvm::Attribute::OptimizeNone);
    fn.addFnAttr(llvm::Attribute::NoInline);
  }
  return true;
}

// O2 without loop unrolling or interleaving: a tile op is a loop over the program's elements (a few hundred
// at most), which the vectorizer turns into a handful of vector iterations; unrolled, every such loop of a
// kernel body became straight-line code, and a small-M GEMM's body a block of ~36,000 instructions (10 s of
// optimization, then 38 s of code generation). Without: the unit suite's CPU compiles take 40% of the time.
llvm::PipelineTuningOptions cpu_pipeline_tuning() {
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = false;
  tuning.LoopInterleaving = false;
  return tuning;
}

class HostJit {
 public:
  HostJit() : code_bytes_(std::make_shared<CodeBytesPlugin>()) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!builder) throw InternalError("CPU JIT: cannot describe the host: " + to_string(builder.takeError()));
    builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    auto tm = builder->createTargetMachine();
    if (!tm) throw InternalError("CPU JIT: no target machine for the host: " + to_string(tm.takeError()));
    target_machine_ = std::move(*tm);
    machine_builder_ = *builder;
    // LLJIT's own JITLink layer (with its exception-frame registration, for errors thrown through kernel
    // frames), plus the byte counter.
    auto jit = llvm::orc::LLJITBuilder()
                   .setJITTargetMachineBuilder(std::move(*builder))
                   .setObjectLinkingLayerCreator([plugin = code_bytes_](llvm::orc::ExecutionSession& es)
                                                     -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
                     auto layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(es);
                     auto frames = llvm::orc::EHFrameRegistrationPlugin::Create(es);
                     if (!frames) return frames.takeError();
                     layer->addPlugin(std::move(*frames));
                     layer->addPlugin(plugin);
                     return std::unique_ptr<llvm::orc::ObjectLayer>(std::move(layer));
                   })
                   .create();
    if (!jit) throw InternalError("CPU JIT: cannot create LLJIT: " + to_string(jit.takeError()));
    jit_ = std::move(*jit);
    // Math functions (expf, sinf, fmodf …) come from the C library already in the process.
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit_->getDataLayout().getGlobalPrefix());
    if (!process) throw InternalError("CPU JIT: cannot search the process's symbols: " + to_string(process.takeError()));
    jit_->getMainJITDylib().addGenerator(std::move(*process));
    // The block runtime's functions, by address: libweft's symbols are hidden from the process search.
    llvm::orc::SymbolMap runtime;
    std::vector<RuntimeSymbol> symbols = block_runtime_symbols();
    symbols.push_back({codegen::cpu::kOutOfBoundsFn, reinterpret_cast<void*>(&out_of_bounds)});
    for (const RuntimeSymbol& s : symbols)
      runtime[jit_->mangleAndIntern(s.name)] =
          llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(s.address),
                                       llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    if (auto err = jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(runtime))))
      throw InternalError("CPU JIT: cannot define the block runtime's symbols: " + to_string(std::move(err)));
  }

  JitKernel compile(const ir::Function& f, int default_warps, bool check_bounds, const JitCheck& check) {
    // Each kernel links into a JITDylib of its own, so one symbol name serves every kernel, and an object
    // compiled by another process links here unchanged.
    const std::string symbol = fmt::format("weft_{}", f.name);
    const support::Knobs& knobs = support::knobs();
    const bool dumping = knobs.dumps_llvm_ir();
    const std::string key = cache_key(f, default_warps, symbol, check_bounds, check.key);
    // An entry is stored only after the check passed for its key: a hit skips the check.
    std::optional<std::string> entry = dumping ? std::nullopt : cache::load(key);
    bool checked = false;
    auto run_check = [&] {
      if (checked || !check.run) return;
      support::StageTimer timer(support::CompileStage::passes);
      check.run();
      checked = true;
    };
    if (!entry) run_check();
    auto context = std::make_unique<llvm::LLVMContext>();
    context->setDiscardValueNames(!dumping);  // local names only make the dumps readable
    std::optional<support::StageTimer> stage(std::in_place, support::CompileStage::llvm_ir);
    codegen::cpu::CpuModule lowered = codegen::cpu::lower_to_cpu(f, *context, symbol, default_warps, check_bounds);
    llvm::Module& m = *lowered.module;
    m.setDataLayout(jit_->getDataLayout());
    m.setTargetTriple(target_machine_->getTargetTriple());
    if (knobs.dumps("llvm")) support::dump("llvm", f.name, "ll", print_module(m));
    stage.reset();

    if (entry)
      if (std::optional<JitKernel> k = link(f, symbol, object_of(*entry, lowered.frame_bytes), lowered)) {
        ++loaded_from_cache_;
        return *k;
      }
    run_check();  // an entry that does not link is compiled afresh, checked as any other
    std::string object = compile_object(m, f.name);
    ++compiled_;
    std::optional<JitKernel> k = link(f, symbol, object, lowered);
    if (!k) throw InternalError(fmt::format("CPU JIT: kernel '{}' compiled to an object that does not link", f.name));
    cache::store(key, fmt::format("{}{}\n", kEntryMagic, lowered.frame_bytes) + object);
    return *k;
  }

  JitStats stats() {
    return {compiled_.load(), loaded_from_cache_.load(), live_kernels_.load(), code_bytes_->total()};
  }

 private:
  // Everything that decides the object: the IR (with the divisibility the specialization assumes), the
  // warps of the implicit task, the symbol, the host CPU and its features, the optimization level, LLVM
  // and weft itself (whose lowering and block runtime ABI change with its build).
  std::string cache_key(const ir::Function& f, int default_warps, const std::string& symbol, bool check_bounds,
                        const std::string& check) const {
    return cache::KeyBuilder()
        .add("cpu object 2")
        .add(check)
        .add(ir::print(f))
        .add(default_warps)
        .add(check_bounds ? "bounds checked" : "unchecked")
        .add(symbol)
        .add(target_machine_->getTargetTriple().str())
        .add(std::string(target_machine_->getTargetCPU()))
        .add(std::string(target_machine_->getTargetFeatureString()))
        .add("O2, no loop unrolling or interleaving")
        .add("LLVM " LLVM_VERSION_STRING)
        .add("LLVM options " + support::knobs().llvm_args)
        .add(support::weft_identity())
        .finish();
  }

  // The object in a cache entry, or "" when the entry is not one for a kernel of `frame_bytes`.
  static std::string object_of(const std::string& entry, int64_t frame_bytes) {
    const std::string head = fmt::format("{}{}\n", kEntryMagic, frame_bytes);
    return entry.starts_with(head) ? entry.substr(head.size()) : "";
  }

  std::string compile_object(llvm::Module& m, const std::string& name) {
    // A target machine of its own (a TargetMachine is not thread-safe), so that threads compile in parallel.
    std::optional<support::StageTimer> stage(std::in_place, support::CompileStage::codegen);
    auto tm = machine_builder_.createTargetMachine();
    if (!tm) throw InternalError("CPU JIT: no target machine for the host: " + to_string(tm.takeError()));
    stage.emplace(support::CompileStage::llvm_opt);
    // LLVM's machine scheduler takes time quadratic in the length of a basic block (a value used all
    // along it: ScheduleDAGMILive::collectVRegUses; memory chains: SUnit::addPred), so a kernel with a
    // block that long (thousands of straight-line ops) is compiled without optimization (optnone):
    // linear, and seconds instead of minutes. Checked before the IR optimizer (straight-line code as
    // traced) and after it (loops it unrolled).
    if (!without_optimization_if_huge(m)) {
      codegen::optimize_module(m, tm->get(), llvm::OptimizationLevel::O2, cpu_pipeline_tuning());
      without_optimization_if_huge(m);
    }
    if (support::knobs().dumps("llvm-opt")) support::dump("llvm-opt", name, "opt.ll", print_module(m));
    stage.emplace(support::CompileStage::codegen);
    auto object = llvm::orc::SimpleCompiler(**tm)(m);
    if (!object)
      throw InternalError(fmt::format("CPU JIT: compiling kernel '{}' failed: {}", name, to_string(object.takeError())));
    return std::string((*object)->getBuffer());
  }

  // Links `object` into a new JITDylib; nothing (and nothing left behind) when it does not link.
  std::optional<JitKernel> link(const ir::Function& f, const std::string& symbol, const std::string& object,
                                const codegen::cpu::CpuModule& lowered) {
    if (object.empty()) return std::nullopt;
    support::StageTimer timer(support::CompileStage::link);
    auto dylib = jit_->createJITDylib(fmt::format("weft_kernel_{}", dylib_counter_++));
    if (!dylib)
      throw InternalError(fmt::format("CPU JIT: no JITDylib for kernel '{}': {}", f.name, to_string(dylib.takeError())));
    llvm::orc::JITDylib& jd = *dylib;
    jd.addToLinkOrder(jit_->getMainJITDylib());  // the block runtime and the C library
    ++live_kernels_;
    std::shared_ptr<void> code(&jd, [this](void* p) { release(*static_cast<llvm::orc::JITDylib*>(p)); });
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
    if (auto err = jit_->addObjectFile(jd, std::move(buffer))) {
      llvm::consumeError(std::move(err));
      return std::nullopt;
    }
    auto address = jit_->lookup(jd, symbol);
    if (!address) {
      llvm::consumeError(address.takeError());
      return std::nullopt;
    }
    return JitKernel{address->toPtr<codegen::cpu::KernelFn>(), lowered.frame_bytes, lowered.block, lowered.access_sites,
                     std::move(code)};
  }

  // Frees a kernel's code and symbols. Runs from destructors, so it reports instead of throwing.
  void release(llvm::orc::JITDylib& jd) {
    if (auto err = jit_->getExecutionSession().removeJITDylib(jd))
      std::fprintf(stderr, "weft: warning: freeing a kernel's JIT code failed: %s\n", to_string(std::move(err)).c_str());
    --live_kernels_;
  }

  llvm::orc::JITTargetMachineBuilder machine_builder_{llvm::Triple()};  // the host's, set in the constructor
  std::unique_ptr<llvm::TargetMachine> target_machine_;  // its names and layout, for keys and modules
  std::shared_ptr<CodeBytesPlugin> code_bytes_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::atomic<uint64_t> dylib_counter_{0}, compiled_{0}, loaded_from_cache_{0}, live_kernels_{0};
};

// Never destroyed: a Kernel in static storage may free its code after function-local statics are gone.
HostJit& host_jit() {
  static HostJit* jit = new HostJit;
  return *jit;
}

}  // namespace

JitKernel jit_compile(const ir::Function& f, int default_warps, bool check_bounds, const JitCheck& check) {
  codegen::apply_llvm_args();
  return host_jit().compile(f, default_warps, check_bounds, check);
}

JitStats jit_stats() { return host_jit().stats(); }

}  // namespace weft::driver::cpu
