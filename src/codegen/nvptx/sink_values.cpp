#include "codegen/nvptx/sink_values.h"

#include <llvm/ADT/PostOrderIterator.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Instructions.h>

#include <vector>

namespace weft::codegen::nvptx {
namespace {

// Which instructions may move at all: pure values (no side effect, no memory access, not convergent:
// a shuffle must stay where all its lanes are), and not the ones tied to their place.
bool movable(const llvm::Instruction& i) {
  if (i.isTerminator() || i.isEHPad() || llvm::isa<llvm::PHINode>(i) || llvm::isa<llvm::AllocaInst>(i))
    return false;
  if (i.mayHaveSideEffects() || i.mayReadOrWriteMemory() || i.getType()->isTokenTy()) return false;
  if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i); call && call->isConvergent()) return false;
  return true;
}

// An integer division or remainder that the code generator expands into a long sequence (a constant
// divisor becomes a multiply instead).
bool long_division(const llvm::Instruction& i) {
  switch (i.getOpcode()) {
    case llvm::Instruction::SDiv:
    case llvm::Instruction::UDiv:
    case llvm::Instruction::SRem:
    case llvm::Instruction::URem:
      return !llvm::isa<llvm::Constant>(i.getOperand(1));
    default:
      return false;
  }
}

class Sinker {
 public:
  Sinker(llvm::DominatorTree& dom, llvm::LoopInfo& loops) : dom_(dom), loops_(loops) {}

  // Moves `i` down if a block below its own dominates all its uses; true if it moved.
  bool sink(llvm::Instruction& i) {
    if (!movable(i)) return false;
    llvm::BasicBlock* home = i.getParent();
    llvm::BasicBlock* target = nullptr;
    for (const llvm::Use& use : i.uses()) {
      auto* user = llvm::cast<llvm::Instruction>(use.getUser());
      llvm::BasicBlock* at = user->getParent();
      if (auto* phi = llvm::dyn_cast<llvm::PHINode>(user)) at = phi->getIncomingBlock(use);
      if (at == home) return false;
      if (!dom_.isReachableFromEntry(at)) continue;
      target = target ? dom_.findNearestCommonDominator(target, at) : at;
    }
    if (!target) return false;  // dead, or used only where nothing runs
    while (target != home && !acceptable(i, home, target)) target = dom_.getNode(target)->getIDom()->getBlock();
    if (target == home) return false;
    i.moveBefore(target->getFirstInsertionPt());
    return true;
  }

 private:
  bool acceptable(const llvm::Instruction& i, llvm::BasicBlock* home, llvm::BasicBlock* target) const {
    // Not into a loop the value is not computed in already: it would run on every iteration.
    if (const llvm::Loop* loop = loops_.getLoopFor(target); loop && !loop->contains(home)) return false;
    if (long_division(i) && crosses_loop(home, target)) return false;
    return true;
  }

  // Whether a loop lies on a path from `home` to `target` (which `home` dominates): a loop inside home's
  // region (its header dominated by `home`, `home` outside it) from which `target` can be reached without
  // passing `home` again (through a loop around both, everything is reachable).
  bool crosses_loop(llvm::BasicBlock* home, llvm::BasicBlock* target) const {
    for (const llvm::Loop* loop : loops_.getLoopsInPreorder()) {
      llvm::BasicBlock* header = loop->getHeader();
      if (!loop->contains(home) && dom_.dominates(home, header) && reaches(header, target, home)) return true;
    }
    return false;
  }

  // Whether `to` can be reached from `from` on a path that does not pass `avoid`.
  static bool reaches(llvm::BasicBlock* from, llvm::BasicBlock* to, llvm::BasicBlock* avoid) {
    llvm::SmallPtrSet<llvm::BasicBlock*, 32> seen{from};
    llvm::SmallVector<llvm::BasicBlock*, 32> todo{from};
    while (!todo.empty()) {
      llvm::BasicBlock* block = todo.pop_back_val();
      if (block == to) return true;
      for (llvm::BasicBlock* next : llvm::successors(block))
        if (next != avoid && seen.insert(next).second) todo.push_back(next);
    }
    return false;
  }

  llvm::DominatorTree& dom_;
  llvm::LoopInfo& loops_;
};

}  // namespace

llvm::PreservedAnalyses SinkValuesPass::run(llvm::Function& f, llvm::FunctionAnalysisManager& analyses) {
  auto& dom = analyses.getResult<llvm::DominatorTreeAnalysis>(f);
  auto& loops = analyses.getResult<llvm::LoopAnalysis>(f);
  Sinker sinker(dom, loops);
  bool changed = false;
  // Blocks bottom-up (post order) and each block's instructions last to first, so that a value's users
  // have moved before it is looked at; again while anything moves (an operand may follow its user).
  std::vector<llvm::Instruction*> order;
  for (bool moved = true; moved;) {
    moved = false;
    for (llvm::BasicBlock* block : llvm::post_order(&f.getEntryBlock())) {
      order.clear();
      for (llvm::Instruction& i : llvm::reverse(*block)) order.push_back(&i);
      for (llvm::Instruction* i : order) moved |= sinker.sink(*i);
    }
    changed |= moved;
  }
  if (!changed) return llvm::PreservedAnalyses::all();
  llvm::PreservedAnalyses kept;
  kept.preserveSet<llvm::CFGAnalyses>();
  return kept;
}

}  // namespace weft::codegen::nvptx
