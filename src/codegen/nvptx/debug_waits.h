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
// Named barriers (bar.sync / bar.arrive) cannot time out, so in debug mode the user's named barriers
// become counters in shared memory (one 64-bit word per id, zeroed at the kernel's start): lane 0 of each
// arriving warp adds 32 with an acq_rel atomic at block scope; the arrival that starts at count `old`
// belongs to the phase that ends when the count reaches (old / threads + 1) * threads, and a waiting warp
// polls the count (acquire) until then, with the same timeout and report as an mbarrier wait. The
// record's barrier word is kNamedBarrierFlag | id and its parity word the threads that had arrived. The
// warp meets (bar.warp.sync) before and after, as bar.sync orders the warp's accesses. weft's own syncs
// of a block or a task replica stay hardware barriers: all their threads run the same code.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <cstdint>
#include <functional>

namespace weft::codegen::nvptx {

class DebugWaits {
 public:
  // `kernel`: the kernel function, whose last three arguments are the hidden record, claim and timeout.
  DebugWaits(llvm::IRBuilder<>& b, llvm::Function* kernel);

  // Waits at `bar` (its 32-bit shared address; `offset`: the same as a byte offset in the block's shared
  // memory, what the host names) until the phase of parity `parity` completes, or reports wait `site`.
  void wait(llvm::Value* bar, llvm::Value* offset, llvm::Value* parity, uint32_t site);

  // named_barrier_arrive / named_barrier_wait (`wait`) on named barrier `id` of `threads` threads, whose
  // counter is the i64 at `word` (a shared-memory pointer); `site`: the wait's site (unused for arrivals).
  void named_barrier(llvm::Value* word, llvm::Value* id, int64_t threads, bool wait, uint32_t site);

 private:
  // Polls until `done()` (i1) holds; once `timeout_ns_` has passed since the first failed poll, reports
  // site `site` with the barrier word `barrier` and the parity word `parity()`.
  void poll_until(const std::function<llvm::Value*()>& done, uint32_t site, llvm::Value* barrier,
                  const std::function<llvm::Value*()>& parity, const char* name);
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
