// GPU debug mode in the NVPTX lowering: mbarrier waits that give up instead of hanging.
//
// A debug kernel has three hidden trailing i64 parameters after the user's: the device address of a
// passes::WaitTimeoutRecord (pinned host memory, so that it survives the trap), the address of a claim word
// in device memory (0 until a thread claims the record) and the timeout in nanoseconds. Each wait polls
// mbarrier.try_wait.parity as usual; once it has failed, it reads %globaltimer and keeps polling until the
// phase completes or the timeout has passed. Then the thread calls one shared function that claims the
// record (atomic CAS 0 -> 1 on the claim word; the losers exit), writes the site, barrier offset, parity,
// thread and block, fences at system scope, sets `complete`, fences again and traps. The host
// (driver/cuda) synchronizes after each debug launch and turns the record into a weft::Error.
//
// Named barriers (bar.sync) cannot time out: a deadlock on one still hangs in debug mode.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <cstdint>

namespace weft::codegen::nvptx {

class DebugWaits {
 public:
  // `kernel`: the kernel function, whose last three arguments are the hidden record, claim and timeout.
  DebugWaits(llvm::IRBuilder<>& b, llvm::Function* kernel);

  // Waits at `bar` (its 32-bit shared address; `offset`: the same as a byte offset in the block's shared
  // memory, what the host names) until the phase of parity `parity` completes, or reports wait `site`.
  void wait(llvm::Value* bar, llvm::Value* offset, llvm::Value* parity, uint32_t site);

 private:
  // Made at first use: void(i64 record, i64 claim, i32 site, i32 bar, i32 parity).
  llvm::Function* report_function();

  llvm::IRBuilder<>& b_;
  llvm::Function* kernel_;
  llvm::Value* record_;
  llvm::Value* claim_;
  llvm::Value* timeout_ns_;
  llvm::Function* report_ = nullptr;
};

}  // namespace weft::codegen::nvptx
