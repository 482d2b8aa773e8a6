#include "codegen/nvptx/debug_waits.h"

#include <llvm/IR/Module.h>

#include "codegen/nvptx/ptx_instructions.h"
#include "passes/wait_sites.h"

namespace weft::codegen::nvptx {

DebugWaits::DebugWaits(llvm::IRBuilder<>& b, llvm::Function* kernel)
    : b_(b), kernel_(kernel), record_(kernel->getArg(kernel->arg_size() - 3)),
      claim_(kernel->getArg(kernel->arg_size() - 2)), timeout_ns_(kernel->getArg(kernel->arg_size() - 1)) {
  record_->setName("weft_debug_record");
  claim_->setName("weft_debug_claim");
  timeout_ns_->setName("weft_debug_timeout_ns");
}

void DebugWaits::wait(llvm::Value* bar, llvm::Value* offset, llvm::Value* parity, uint32_t site) {
  llvm::LLVMContext& c = b_.getContext();
  PtxInstructions ptx(b_);
  auto* slow = llvm::BasicBlock::Create(c, "mbarrier.slow", kernel_);
  auto* poll = llvm::BasicBlock::Create(c, "mbarrier.poll", kernel_);
  auto* check = llvm::BasicBlock::Create(c, "mbarrier.check", kernel_);
  auto* timed_out = llvm::BasicBlock::Create(c, "mbarrier.timeout", kernel_);
  auto* done = llvm::BasicBlock::Create(c, "mbarrier.done", kernel_);
  // The first try costs what a plain wait costs: the clock is read only once the phase is late.
  b_.CreateCondBr(ptx.mbarrier_try_wait_parity(bar, parity), done, slow);
  b_.SetInsertPoint(slow);
  llvm::Value* start = ptx.global_timer();
  b_.CreateBr(poll);
  b_.SetInsertPoint(poll);
  b_.CreateCondBr(ptx.mbarrier_try_wait_parity(bar, parity), done, check);
  b_.SetInsertPoint(check);
  llvm::Value* late = b_.CreateICmpUGT(b_.CreateSub(ptx.global_timer(), start), timeout_ns_);
  b_.CreateCondBr(late, timed_out, poll);
  b_.SetInsertPoint(timed_out);
  b_.CreateCall(report_function(), {record_, claim_, b_.getInt32(site), offset, parity});
  b_.CreateUnreachable();
  b_.SetInsertPoint(done);
}

// One copy of the reporting code, however many waits the kernel has.
llvm::Function* DebugWaits::report_function() {
  if (report_) return report_;
  llvm::LLVMContext& c = b_.getContext();
  llvm::IRBuilder<> b(c);
  auto* i32 = b.getInt32Ty();
  auto* type = llvm::FunctionType::get(b.getVoidTy(), {b.getInt64Ty(), b.getInt64Ty(), i32, i32, i32}, false);
  report_ = llvm::Function::Create(type, llvm::Function::InternalLinkage, "weft_debug_wait_timed_out",
                                   kernel_->getParent());
  report_->addFnAttr(llvm::Attribute::NoInline);
  report_->addFnAttr(llvm::Attribute::NoReturn);
  report_->addFnAttr(llvm::Attribute::Cold);
  report_->addFnAttr(llvm::Attribute::NoUnwind);
  auto* entry = llvm::BasicBlock::Create(c, "entry", report_);
  auto* lost = llvm::BasicBlock::Create(c, "lost", report_);
  auto* won = llvm::BasicBlock::Create(c, "won", report_);
  b.SetInsertPoint(entry);
  PtxInstructions ptx(b);
  llvm::Value* record = b.CreateIntToPtr(report_->getArg(0), b.getPtrTy());
  auto word = [&](int index) { return b.CreateConstInBoundsGEP1_32(i32, record, static_cast<unsigned>(index)); };
  // Many threads time out together (a whole group polls one barrier): the first CAS wins the record. The
  // others exit rather than trap, so that no trap ends the launch before the winner's record is complete.
  llvm::Value* claim_word = b.CreateIntToPtr(report_->getArg(1), b.getPtrTy());
  llvm::Value* claim = b.CreateAtomicCmpXchg(claim_word, b.getInt32(0), b.getInt32(1), llvm::MaybeAlign(4),
                                             llvm::AtomicOrdering::Monotonic, llvm::AtomicOrdering::Monotonic);
  b.CreateCondBr(b.CreateExtractValue(claim, 1), won, lost);
  b.SetInsertPoint(lost);
  ptx.exit_thread();
  b.CreateUnreachable();
  b.SetInsertPoint(won);
  // Volatile: stores to host memory that nothing in the kernel reads back must not be dropped.
  auto store = [&](int index, llvm::Value* v) { b.CreateAlignedStore(v, word(index), llvm::MaybeAlign(4), /*isVolatile=*/true); };
  store(passes::kSiteWord, report_->getArg(2));
  store(passes::kBarrierWord, report_->getArg(3));
  store(passes::kParityWord, report_->getArg(4));
  store(passes::kThreadWord, ptx.thread_index());
  for (int axis = 0; axis < 3; ++axis) store(passes::kBlockWord + axis, ptx.block_index(axis));
  ptx.fence_system();  // the fields reach host memory before `complete` does
  store(passes::kCompleteWord, b.getInt32(1));
  ptx.fence_system();  // and `complete` before the trap ends the launch
  ptx.trap();
  b.CreateUnreachable();
  return report_;
}

}  // namespace weft::codegen::nvptx
