// CPU lowering: the bounds checks before loads, stores and async_loads of a kernel compiled with them
// (cpu_abi.h, LaunchChecks): each access's elements against the allocations of the pointer arguments they
// may derive from, reported through the runtime's out-of-bounds function.
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include <cstddef>

#include "codegen/cpu/lowering.h"
#include "passes/pointer_roots.h"

namespace weft::codegen::cpu::detail {

// The launch's extents array, loaded once at the function's entry.
Value* Lowering::extents() {
  if (!extents_) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    Value* checks = eb.CreateLoad(ptr_, eb.CreateConstInBoundsGEP1_64(i8_, ctx_, offsetof(ProgramCtx, checks)));
    extents_ = eb.CreateLoad(ptr_, eb.CreateConstInBoundsGEP1_64(i8_, checks, offsetof(LaunchChecks, extents)));
  }
  return extents_;
}

// Before an access through the pointer tile `ptrs`: the first element (not masked off) whose bytes (its
// element's, or `span` bytes from it: a bulk copy's) are not all inside the allocation of a pointer argument
// it may derive from is reported, and the program instance returns. The scan has no early exit, so LLVM
// vectorizes it like the access itself.
void Lowering::check_access(const NodeRef& n, const char* op, const NodeRef& ptrs, const NodeRef* mask, int64_t span) {
  if (!checked_) return;
  DType pointee{ptrs->type.dtype.scalar, false};
  const int64_t count = numel(ptrs->type.shape), bytes = span ? span : pointee.bytes();
  std::vector<int32_t> slots = passes::pointer_roots(*ptrs);
  if (slots.empty()) slots = pointer_slots_;
  const int32_t site = static_cast<int32_t>(access_sites_.size());
  access_sites_.push_back({n->loc, op, pointee.str(), count, bytes, slots});
  std::vector<std::pair<Value*, Value*>> bounds;
  for (int32_t s : slots)
    bounds.push_back({b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, extents(), 2 * s)),
                      b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, extents(), 2 * s + 1))});
  auto outside = [&](Value* i) {  // element i is checked and outside every allocation it may come from
    Value* at = b_.CreatePtrToInt(elem(ptrs, i), i64_);
    Value* end = b_.CreateAdd(at, i64c(bytes));
    Value* inside = b_.getFalse();
    for (auto [lo, hi] : bounds)
      inside = b_.CreateOr(inside, b_.CreateAnd(b_.CreateAnd(b_.CreateICmpUGE(at, lo), b_.CreateICmpULE(end, hi)),
                                                b_.CreateICmpUGT(end, at)));
    Value* bad = b_.CreateNot(inside);
    return mask ? b_.CreateAnd(bad, elem(*mask, i)) : bad;
  };
  // Whether any element is outside: an OR over the tile, which LLVM vectorizes like the access itself.
  Value* any = entry_alloca(i8_);
  b_.CreateStore(b_.getInt8(0), any);
  loop(count, [&](Value* i) {
    b_.CreateStore(b_.CreateOr(b_.CreateLoad(i8_, any), b_.CreateZExt(outside(i), i8_)), any);
  });
  auto* fail = llvm::BasicBlock::Create(c_, "out_of_bounds", fn_);
  auto* ok = llvm::BasicBlock::Create(c_, "in_bounds", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(i8_, any), b_.getInt8(0)), fail, ok,
                  llvm::MDBuilder(c_).createBranchWeights(1, 1u << 20));
  b_.SetInsertPoint(fail);  // which element was first: only when there is one
  Value* first = entry_alloca(i64_);
  b_.CreateStore(i64c(count), first);
  loop(count, [&](Value* i) {
    Value* so_far = b_.CreateLoad(i64_, first);
    b_.CreateStore(b_.CreateSelect(outside(i), b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, so_far, i), so_far), first);
  });
  Value* element = b_.CreateLoad(i64_, first);
  runtime_call(kOutOfBoundsFn, b_.getVoidTy(),
               {ctx_, b_.getInt32(static_cast<uint32_t>(site)), element, b_.CreatePtrToInt(elem(ptrs, element), i64_)});
  b_.CreateRetVoid();
  b_.SetInsertPoint(ok);
}

}  // namespace weft::codegen::cpu::detail
