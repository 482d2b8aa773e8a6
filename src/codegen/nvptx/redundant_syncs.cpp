#include "codegen/nvptx/redundant_syncs.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <vector>

namespace weft::codegen::nvptx {
namespace {

constexpr const char* kGroupSync = "weft.group_sync";

bool is_barrier(const llvm::Instruction& i) {
  const auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&i);
  if (!call) return false;
  llvm::Intrinsic::ID id = call->getIntrinsicID();
  return id == llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count ||
         id == llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all;
}

bool is_group_sync(const llvm::Instruction& i) { return is_barrier(i) && i.getMetadata(kGroupSync); }

bool is_fence(const llvm::Instruction& i) {
  const auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&i);
  return call && call->getIntrinsicID() == llvm::Intrinsic::nvvm_fence_proxy_async_shared_cta;
}

bool same_call(const llvm::CallInst& a, const llvm::CallInst& b) {
  return a.getCalledFunction() == b.getCalledFunction() &&
         std::equal(a.arg_begin(), a.arg_end(), b.arg_begin(), b.arg_end());
}

void clean_block(llvm::BasicBlock& block, std::vector<llvm::Instruction*>& dead) {
  llvm::CallInst* last_sync = nullptr;  // the marked sync with nothing touching memory since, if any
  bool fenced = false;                  // a fence with no memory access since (barriers aside)
  for (llvm::Instruction& i : block) {
    if (is_group_sync(i)) {
      auto& sync = llvm::cast<llvm::CallInst>(i);
      if (last_sync && same_call(*last_sync, sync)) dead.push_back(&i);
      else last_sync = &sync;
      continue;
    }
    if (is_barrier(i)) {  // a user's barrier: it may meet other arrivals, so it ends the run of syncs
      last_sync = nullptr;
      continue;
    }
    if (is_fence(i)) {
      if (fenced) {
        dead.push_back(&i);  // (gone: the syncs on either side of it may now be two in a row)
        continue;
      }
      fenced = true;
      last_sync = nullptr;  // a fence kept between two syncs keeps both
      continue;
    }
    if (i.mayReadOrWriteMemory() || i.mayHaveSideEffects()) {
      last_sync = nullptr;
      fenced = false;
    }
  }
}

}  // namespace

void mark_group_sync(llvm::CallInst* sync) {
  sync->setMetadata(kGroupSync, llvm::MDNode::get(sync->getContext(), {}));
}

void remove_redundant_syncs(llvm::Module& m) {
  std::vector<llvm::Instruction*> dead;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& block : f) clean_block(block, dead);
  for (llvm::Instruction* i : dead) i->eraseFromParent();
}

}  // namespace weft::codegen::nvptx
