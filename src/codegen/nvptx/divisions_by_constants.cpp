#include "codegen/nvptx/divisions_by_constants.h"

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>

#include <vector>

namespace weft::codegen::nvptx {
namespace {

using llvm::Instruction;
using llvm::Value;

// `q == k` or `q != k` for a quotient q = x / c by a constant c > 1 and k = 0 (or -1, signed) as a range check
// of x, which leaves the division to the values that need it: x / c == 0 where -c < x < c (unsigned: x < c),
// x / c == -1 where -2c < x <= -c. (weft's division by a run-time value tests its divisor for 0 and -1.)
Value* quotient_test(llvm::ICmpInst& cmp, llvm::IRBuilder<>& b) {
  auto* q = llvm::dyn_cast<llvm::BinaryOperator>(cmp.getOperand(0));
  auto* k = llvm::dyn_cast<llvm::ConstantInt>(cmp.getOperand(1));
  if (!q || !k || !cmp.isEquality()) return nullptr;
  bool is_signed = q->getOpcode() == Instruction::SDiv;
  auto* c = llvm::dyn_cast<llvm::ConstantInt>(q->getOperand(1));
  if ((!is_signed && q->getOpcode() != Instruction::UDiv) || !c || c->getValue().sle(1)) return nullptr;
  const llvm::APInt& d = c->getValue();
  llvm::APInt offset, width;
  if (k->isZero()) {
    offset = is_signed ? d - 1 : llvm::APInt(d.getBitWidth(), 0);
    width = is_signed ? d * 2 - 1 : d;
  } else if (is_signed && k->isMinusOne() && !d.ugt(llvm::APInt::getSignedMaxValue(d.getBitWidth()).lshr(1))) {
    offset = d * 2 - 1;
    width = d;
  } else {
    return nullptr;
  }
  Value* x = q->getOperand(0);
  if (!offset.isZero()) x = b.CreateAdd(x, llvm::ConstantInt::get(x->getType(), offset));
  Value* in = llvm::ConstantInt::get(x->getType(), width);
  return cmp.getPredicate() == llvm::ICmpInst::ICMP_EQ ? b.CreateICmpULT(x, in) : b.CreateICmpUGE(x, in);
}

// The replacement for `inst`, or null to keep it.
Value* simpler(Instruction& inst, llvm::IRBuilder<>& b, const llvm::DataLayout& dl) {
  unsigned op = inst.getOpcode();
  if (auto* cmp = llvm::dyn_cast<llvm::ICmpInst>(&inst)) return quotient_test(*cmp, b);
  if (op == Instruction::FDiv) {
    auto* k = llvm::dyn_cast<llvm::ConstantFP>(inst.getOperand(1));
    llvm::APFloat inverse(0.0);
    if (!k || !k->getValueAPF().getExactInverse(&inverse)) return nullptr;
    auto* product = llvm::BinaryOperator::CreateFMul(inst.getOperand(0), llvm::ConstantFP::get(inst.getType(), inverse));
    product->copyFastMathFlags(&inst);
    return b.Insert(product);
  }
  if (op != Instruction::SDiv && op != Instruction::SRem && op != Instruction::UDiv && op != Instruction::URem)
    return nullptr;
  auto* k = llvm::dyn_cast<llvm::ConstantInt>(inst.getOperand(1));
  if (!k || !k->getValue().isStrictlyPositive()) return nullptr;
  Value* x = inst.getOperand(0);
  bool is_div = op == Instruction::SDiv || op == Instruction::UDiv;
  if (op == Instruction::SDiv || op == Instruction::SRem) {
    if (!llvm::isKnownNonNegative(x, llvm::SimplifyQuery(dl, &inst))) return nullptr;
  }
  const llvm::APInt& c = k->getValue();
  if (c.isPowerOf2())
    return is_div ? b.CreateLShr(x, c.logBase2()) : b.CreateAnd(x, llvm::ConstantInt::get(x->getType(), c - 1));
  if (op == Instruction::UDiv || op == Instruction::URem) return nullptr;  // already unsigned
  return is_div ? b.CreateUDiv(x, k) : b.CreateURem(x, k);
}

}  // namespace

llvm::PreservedAnalyses DivisionsByConstantsPass::run(llvm::Function& f, llvm::FunctionAnalysisManager&) {
  const llvm::DataLayout& dl = f.getDataLayout();
  std::vector<Instruction*> dead;
  llvm::IRBuilder<> b(f.getContext());
  for (Instruction& inst : llvm::instructions(f)) {
    b.SetInsertPoint(&inst);
    Value* v = simpler(inst, b, dl);
    if (!v) continue;
    v->takeName(&inst);
    inst.replaceAllUsesWith(v);
    dead.push_back(&inst);
  }
  for (Instruction* inst : dead) inst->eraseFromParent();
  if (dead.empty()) return llvm::PreservedAnalyses::all();
  llvm::PreservedAnalyses kept;
  kept.preserveSet<llvm::CFGAnalyses>();
  return kept;
}

}  // namespace weft::codegen::nvptx
