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
  PtxInstructions ptx(b_);
  poll_until([&] { return ptx.mbarrier_try_wait_parity(bar, parity); }, site, offset, [&] { return parity; },
             "mbarrier");
}

void DebugWaits::poll_until(const std::function<llvm::Value*()>& done_now, uint32_t site, llvm::Value* barrier,
                            const std::function<llvm::Value*()>& parity, const char* name) {
  llvm::LLVMContext& c = b_.getContext();
  PtxInstructions ptx(b_);
  std::string prefix(name);
  auto* slow = llvm::BasicBlock::Create(c, prefix + ".slow", kernel_);
  auto* poll = llvm::BasicBlock::Create(c, prefix + ".poll", kernel_);
  auto* check = llvm::BasicBlock::Create(c, prefix + ".check", kernel_);
  auto* timed_out = llvm::BasicBlock::Create(c, prefix + ".timeout", kernel_);
  auto* done = llvm::BasicBlock::Create(c, prefix + ".done", kernel_);
  // The first try costs what a plain wait costs: the clock is read only once the phase is late.
  b_.CreateCondBr(done_now(), done, slow);
  b_.SetInsertPoint(slow);
  llvm::Value* start = ptx.global_timer();
  b_.CreateBr(poll);
  b_.SetInsertPoint(poll);
  b_.CreateCondBr(done_now(), done, check);
  b_.SetInsertPoint(check);
  llvm::Value* late = b_.CreateICmpUGT(b_.CreateSub(ptx.global_timer(), start), timeout_ns_);
  b_.CreateCondBr(late, timed_out, poll);
  b_.SetInsertPoint(timed_out);
  b_.CreateCall(report_function(), {record_, claim_, b_.getInt32(site), barrier, parity()});
  b_.CreateUnreachable();
  b_.SetInsertPoint(done);
}

void DebugWaits::named_barrier(llvm::Value* word, llvm::Value* id, int64_t threads, bool wait, uint32_t site) {
  llvm::LLVMContext& c = b_.getContext();
  PtxInstructions ptx(b_);
  llvm::SyncScope::ID block = c.getOrInsertSyncScopeID("block");
  auto* i64 = b_.getInt64Ty();
  auto* arrive = llvm::BasicBlock::Create(c, "named_barrier.arrive", kernel_);
  auto* join = llvm::BasicBlock::Create(c, "named_barrier.join", kernel_);
  ptx.warp_sync();  // the warp's accesses so far, before its arrival
  b_.CreateCondBr(b_.CreateICmpEQ(b_.CreateAnd(ptx.thread_index(), b_.getInt32(31)), b_.getInt32(0)), arrive, join);
  b_.SetInsertPoint(arrive);
  // Release: the warp's accesses (ordered before lane 0's by bar.warp.sync) before its arrival. The NVPTX
  // back end drops an atomicrmw's ordering, so the fences are explicit: fence.acq_rel.cta around it.
  b_.CreateFence(llvm::AtomicOrdering::AcquireRelease, block);
  llvm::Value* old = b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, word, b_.getInt64(32), llvm::MaybeAlign(8),
                                        llvm::AtomicOrdering::Monotonic, block);
  if (wait) {
    llvm::Value* total = b_.getInt64(static_cast<uint64_t>(threads));
    llvm::Value* end = b_.CreateMul(b_.CreateAdd(b_.CreateUDiv(old, total), b_.getInt64(1)), total);
    auto count = [&] {
      auto* load = b_.CreateAlignedLoad(i64, word, llvm::MaybeAlign(8));
      load->setAtomic(llvm::AtomicOrdering::Acquire, block);
      return load;
    };
    llvm::Value* barrier = b_.CreateOr(b_.getInt32(passes::kNamedBarrierFlag), id);
    // The threads of this phase that had arrived when the wait gave up.
    auto arrived = [&] { return b_.CreateTrunc(b_.CreateSub(count(), b_.CreateSub(end, total)), b_.getInt32Ty()); };
    poll_until([&] { return b_.CreateICmpUGE(count(), end); }, site, barrier, arrived, "named_barrier");
    b_.CreateFence(llvm::AtomicOrdering::AcquireRelease, block);  // acquire: the other warps' accesses
  }
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  ptx.warp_sync();  // the warp leaves together, after its lane 0 saw the phase complete
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
