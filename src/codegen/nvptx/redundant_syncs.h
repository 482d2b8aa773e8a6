// Group syncs and async-proxy fences that the optimized code repeats with nothing between them to order.
#pragma once

namespace llvm {
class CallInst;
class Module;
}  // namespace llvm

namespace weft::codegen::nvptx {

// Marks `sync` (a bar.sync call) as one of the lowering's own group syncs (Lowering::sync_group), which
// remove_redundant_syncs may remove. A user's named_barrier_wait is never marked: two in a row may each meet
// the arrivals of another group.
void mark_group_sync(llvm::CallInst* sync);

// In each block of the optimized module: a marked group sync identical to the marked sync before it, with
// no instruction that touches memory between, is removed (the second synchronizes nothing more); so is a
// fence.proxy.async.shared::cta with no memory access since the previous one (barriers between are no
// access: the thread wrote nothing for the second fence to order). One op's closing sync followed by the
// next op's opening one (a staging tile written, then stored by TMA) is the common case.
void remove_redundant_syncs(llvm::Module& m);

}  // namespace weft::codegen::nvptx
