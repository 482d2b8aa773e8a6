// Fibers for the CPU backend's blocks: each task replica of a running block is a fiber (ucontext) with
// its own stack, resumed by the block's scheduler on one host thread (driver/cpu/block_runtime.cpp). This
// file is only the mechanics: stacks, switching in and out; the scheduling policy lives with the barriers.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <vector>

namespace weft::driver::cpu {

class FiberPool {
 public:
  using Body = void (*)(void* arg, int fiber);

  // Stacks of `stack_bytes` each (plus a guard page below), mapped as fibers are first needed.
  explicit FiberPool(size_t stack_bytes = 256 * 1024);
  ~FiberPool();
  FiberPool(const FiberPool&) = delete;
  FiberPool& operator=(const FiberPool&) = delete;

  // Sets up `count` fresh fibers; fiber i runs body(arg, i) when first resumed. Fibers of a previous
  // start that never finished are abandoned: their stacks are reused as they are (nothing on them owns
  // anything, see block_runtime_abi.cpp).
  void start(int count, Body body, void* arg);
  // Runs fiber i until it suspends or its body returns; returns true once the body has returned.
  bool resume(int i);
  // From inside a fiber: back to the caller of resume().
  void suspend();
  int current() const { return current_; }

 private:
  struct Fiber {
    char* mapping = nullptr;  // guard page + stack
    ucontext_t context;
    bool finished = false;
    void* asan_fake_stack = nullptr;  // ASan builds: the fiber's fake stack while it is switched out
    void* tsan_fiber = nullptr;       // TSan builds: the fiber's TSan context
  };
  static void trampoline();
  // The switch out of the current fiber (final: it never runs again) and the first thing a fiber does
  // when it runs again (resumed: nullptr on its first entry); both only tell the sanitizers.
  void switch_to_scheduler(bool final);
  void entered_fiber(Fiber* resumed);

  size_t stack_bytes_;
  size_t page_bytes_;
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_;
  int current_ = -1;
  Body body_ = nullptr;
  void* arg_ = nullptr;
  // The sanitizers' view of the scheduler's side (unused in other builds).
  [[maybe_unused]] const void* scheduler_stack_bottom_ = nullptr;
  [[maybe_unused]] size_t scheduler_stack_bytes_ = 0;
  [[maybe_unused]] void* scheduler_tsan_fiber_ = nullptr;
};

}  // namespace weft::driver::cpu
