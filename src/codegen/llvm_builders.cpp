#include "codegen/llvm_builders.h"

#include <fmt/format.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>

#include "support/env.h"
#include "weft/error.h"

namespace weft::codegen {

llvm::KnownBits known_bits_while_building(llvm::Value* v, const llvm::DataLayout& dl, unsigned depth) {
  unsigned width = dl.getTypeSizeInBits(v->getType());
  if (auto* k = llvm::dyn_cast<llvm::ConstantInt>(v)) return llvm::KnownBits::makeConstant(k->getValue());
  auto* inst = llvm::dyn_cast<llvm::Instruction>(v);
  if (!inst || depth >= llvm::MaxAnalysisRecursionDepth || !v->getType()->isIntegerTy()) return llvm::KnownBits(width);
  if (auto* call = llvm::dyn_cast<llvm::CallBase>(inst)) {  // a thread index with its range, or nothing known
    std::optional<llvm::ConstantRange> range = call->getRange();
    return range ? range->toKnownBits() : llvm::KnownBits(width);
  }
  auto operand = [&](unsigned i) { return known_bits_while_building(inst->getOperand(i), dl, depth + 1); };
  using I = llvm::Instruction;
  switch (inst->getOpcode()) {
    case I::And: return operand(0) & operand(1);
    case I::Or: return operand(0) | operand(1);
    case I::Xor: return operand(0) ^ operand(1);
    case I::Add:
    case I::Sub:
      return llvm::KnownBits::computeForAddSub(inst->getOpcode() == I::Add, inst->hasNoSignedWrap(),
                                               inst->hasNoUnsignedWrap(), operand(0), operand(1));
    case I::Mul: return llvm::KnownBits::mul(operand(0), operand(1));
    case I::Shl: return llvm::KnownBits::shl(operand(0), operand(1));
    case I::LShr: return llvm::KnownBits::lshr(operand(0), operand(1));
    case I::AShr: return llvm::KnownBits::ashr(operand(0), operand(1));
    case I::UDiv: return llvm::KnownBits::udiv(operand(0), operand(1));
    case I::URem: return llvm::KnownBits::urem(operand(0), operand(1));
    case I::ZExt: return operand(0).zext(width);
    case I::SExt: return operand(0).sext(width);
    case I::Trunc: return operand(0).trunc(width);
    case I::Select: return operand(1).intersectWith(operand(2));
    default: return llvm::KnownBits(width);  // a phi among them: its back edge's value may not be there yet
  }
}

void check_lowered_module(const llvm::Module& m, const char* backend, const std::string& kernel) {
  if (!support::knobs().verify_llvm) return;
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(m, &os))
    throw InternalError(fmt::format("{} lowering of kernel '{}' produced invalid LLVM IR: {}", backend, kernel, problems));
}

void emit_loop(llvm::IRBuilder<>& b, llvm::Value* begin, llvm::Value* end, llvm::Value* step,
               const std::function<void(llvm::Value*)>& body) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  auto* header = llvm::BasicBlock::Create(b.getContext(), "loop", fn);
  auto* inside = llvm::BasicBlock::Create(b.getContext(), "loop.body", fn);
  auto* exit = llvm::BasicBlock::Create(b.getContext(), "loop.exit", fn);
  llvm::BasicBlock* pre = b.GetInsertBlock();
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* i = b.CreatePHI(begin->getType(), 2);
  i->addIncoming(begin, pre);
  b.CreateCondBr(b.CreateICmpSLT(i, end), inside, exit);
  b.SetInsertPoint(inside);
  body(i);
  i->addIncoming(b.CreateAdd(i, step), b.GetInsertBlock());
  b.CreateBr(header);
  b.SetInsertPoint(exit);
}

void emit_for(llvm::IRBuilder<>& b, llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
              const std::function<void(llvm::Value*)>& body) {
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Value* lo64 = b.CreateSExt(lo, i64);
  llvm::Value* step64 = b.CreateSExt(step, i64);
  llvm::Value* end = b.CreateSelect(b.CreateICmpSGT(step64, b.getInt64(0)), b.CreateSExt(hi, i64), lo64);
  emit_loop(b, lo64, end, step64, [&](llvm::Value* i) { body(b.CreateTrunc(i, b.getInt32Ty())); });
}

void emit_while(llvm::IRBuilder<>& b, const std::function<llvm::Value*()>& cond, const std::function<void()>& body) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  auto* header = llvm::BasicBlock::Create(b.getContext(), "while", fn);
  auto* inside = llvm::BasicBlock::Create(b.getContext(), "while.body", fn);
  auto* exit = llvm::BasicBlock::Create(b.getContext(), "while.exit", fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  b.CreateCondBr(cond(), inside, exit);
  b.SetInsertPoint(inside);
  body();
  b.CreateBr(header);
  b.SetInsertPoint(exit);
}

void emit_if(llvm::IRBuilder<>& b, llvm::Value* cond, const std::function<void()>& then_body,
             const std::function<void()>& else_body) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  auto* then_block = llvm::BasicBlock::Create(b.getContext(), "then", fn);
  auto* else_block = llvm::BasicBlock::Create(b.getContext(), "else", fn);
  auto* merge = llvm::BasicBlock::Create(b.getContext(), "endif", fn);
  b.CreateCondBr(cond, then_block, else_block);
  b.SetInsertPoint(then_block);
  then_body();
  b.CreateBr(merge);
  b.SetInsertPoint(else_block);
  else_body();
  b.CreateBr(merge);
  b.SetInsertPoint(merge);
}

void run_passes(llvm::Module& m, llvm::TargetMachine* target,
                const std::function<llvm::ModulePassManager(llvm::PassBuilder&)>& build,
                const llvm::PipelineTuningOptions& tuning) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(target, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  build(pb).run(m, mam);
}

void optimize_module(llvm::Module& m, llvm::TargetMachine* target, llvm::OptimizationLevel level,
                     const llvm::PipelineTuningOptions& tuning) {
  run_passes(m, target, [&](llvm::PassBuilder& pb) { return pb.buildPerModuleDefaultPipeline(level); }, tuning);
}

}  // namespace weft::codegen
