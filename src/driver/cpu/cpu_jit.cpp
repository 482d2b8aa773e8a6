#include "driver/cpu/cpu_jit.h"

#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/AbsoluteSymbols.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "codegen/cpu/lower_cpu.h"
#include "codegen/llvm_builders.h"
#include "driver/cpu/block_runtime.h"
#include "driver/cpu/bounds_checks.h"
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

class HostJit {
 public:
  HostJit() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!builder) throw InternalError("CPU JIT: cannot describe the host: " + to_string(builder.takeError()));
    builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    auto tm = builder->createTargetMachine();
    if (!tm) throw InternalError("CPU JIT: no target machine for the host: " + to_string(tm.takeError()));
    target_machine_ = std::move(*tm);
    auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*builder)).create();
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

  JitKernel compile(const ir::Function& f, int default_warps, bool check_bounds) {
    std::string symbol = fmt::format("weft_{}_{}", f.name, counter_++);
    auto context = std::make_unique<llvm::LLVMContext>();
    codegen::cpu::CpuModule lowered = codegen::cpu::lower_to_cpu(f, *context, symbol, default_warps, check_bounds);
    llvm::Module& m = *lowered.module;
    m.setDataLayout(jit_->getDataLayout());
    m.setTargetTriple(target_machine_->getTargetTriple());
    if (support::knobs().dumps("llvm")) support::dump("llvm", f.name, "ll", print_module(m));
    // LLVM's machine scheduler takes time quadratic in the length of a basic block (a value used all
    // along it: ScheduleDAGMILive::collectVRegUses; memory chains: SUnit::addPred), so a kernel with a
    // block that long (thousands of straight-line ops) is compiled without optimization (optnone):
    // linear, and seconds instead of minutes. Checked before the IR optimizer (straight-line code as
    // traced) and after it (loops it unrolled).
    if (!without_optimization_if_huge(m)) {
      optimize(m);
      without_optimization_if_huge(m);
    }
    if (support::knobs().dumps("llvm-opt")) support::dump("llvm-opt", f.name, "opt.ll", print_module(m));

    if (auto err = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(lowered.module), std::move(context))))
      throw InternalError(fmt::format("CPU JIT: adding kernel '{}' failed: {}", f.name, to_string(std::move(err))));
    auto address = jit_->lookup(symbol);
    if (!address)
      throw InternalError(fmt::format("CPU JIT: compiling kernel '{}' failed: {}", f.name, to_string(address.takeError())));
    return {address->toPtr<codegen::cpu::KernelFn>(), lowered.frame_bytes, lowered.block, lowered.access_sites};
  }

 private:
  void optimize(llvm::Module& m) {
    std::lock_guard<std::mutex> lock(optimize_mutex_);  // the target machine is shared
    codegen::optimize_module(m, target_machine_.get(), llvm::OptimizationLevel::O2);
  }

  std::unique_ptr<llvm::TargetMachine> target_machine_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex optimize_mutex_;
  std::atomic<uint64_t> counter_{0};
};

HostJit& host_jit() {
  static HostJit jit;
  return jit;
}

}  // namespace

JitKernel jit_compile(const ir::Function& f, int default_warps, bool check_bounds) {
  return host_jit().compile(f, default_warps, check_bounds);
}

}  // namespace weft::driver::cpu
