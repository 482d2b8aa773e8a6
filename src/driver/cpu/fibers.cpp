#include "driver/cpu/fibers.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "weft/error.h"

// Sanitizer annotations of the fiber switches, compiled in only when the sanitizer is on (clang's
// __has_feature, g++'s __SANITIZE_*__). Without them ASan sees a stack it does not know after each
// swapcontext (false reports, or none where there should be) and TSan mixes the fibers' histories.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_FIBERS_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define WEFT_FIBERS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(WEFT_FIBERS_ASAN)
#define WEFT_FIBERS_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(WEFT_FIBERS_TSAN)
#define WEFT_FIBERS_TSAN 1
#endif
#ifdef WEFT_FIBERS_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEFT_FIBERS_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace weft::driver::cpu {
namespace {

// The pool whose fiber is starting on this thread (makecontext passes only int arguments).
thread_local FiberPool* starting_pool = nullptr;

}  // namespace

FiberPool::FiberPool(size_t stack_bytes) : page_bytes_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
  stack_bytes_ = (stack_bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_;
}

FiberPool::~FiberPool() {
  for (Fiber& f : fibers_) {
    if (f.mapping) munmap(f.mapping, stack_bytes_ + page_bytes_);
#ifdef WEFT_FIBERS_TSAN
    if (f.tsan_fiber) __tsan_destroy_fiber(f.tsan_fiber);
#endif
  }
}

void FiberPool::start(int count, Body body, void* arg) {
  // Contexts point into themselves (uc_mcontext.fpregs): set them up only after the vector stops moving.
  if (static_cast<int>(fibers_.size()) < count) fibers_.resize(count);
  body_ = body;
  arg_ = arg;
  for (int i = 0; i < count; ++i) {
    Fiber& f = fibers_[i];
    if (!f.mapping) {
      void* m = mmap(nullptr, stack_bytes_ + page_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (m == MAP_FAILED)
        throw Error(fmt::format("the CPU backend could not map a {}-byte fiber stack: {}", stack_bytes_, std::strerror(errno)));
      f.mapping = static_cast<char*>(m);
      // The lowest page stays inaccessible: a fiber that overflows its stack faults instead of
      // overwriting its neighbour's.
      mprotect(f.mapping, page_bytes_, PROT_NONE);
    }
#ifdef WEFT_FIBERS_ASAN
    // An abandoned fiber (an error or a deadlock suspended it for good) leaves its frames' redzones
    // poisoned on the stack that the fresh fiber reuses.
    ASAN_UNPOISON_MEMORY_REGION(f.mapping + page_bytes_, stack_bytes_);
    f.asan_fake_stack = nullptr;
#endif
#ifdef WEFT_FIBERS_TSAN
    // A fresh TSan fiber for each start: an abandoned one's shadow stack is left where it stopped.
    if (f.tsan_fiber) __tsan_destroy_fiber(f.tsan_fiber);
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
    if (getcontext(&f.context) != 0) throw InternalError("CPU backend: getcontext failed");
    f.context.uc_stack.ss_sp = f.mapping + page_bytes_;
    f.context.uc_stack.ss_size = stack_bytes_;
    f.context.uc_link = nullptr;  // fibers never return from trampoline(): they switch back themselves
    makecontext(&f.context, &FiberPool::trampoline, 0);
    f.finished = false;
  }
}

void FiberPool::trampoline() {
  FiberPool* pool = starting_pool;
  int i = pool->current_;
  pool->entered_fiber(nullptr);
  pool->body_(pool->arg_, i);
  pool->fibers_[i].finished = true;
  pool->switch_to_scheduler(/*final=*/true);  // never resumed again
}

bool FiberPool::resume(int i) {
  Fiber& f = fibers_.at(i);
  if (f.finished) return true;
  current_ = i;
  starting_pool = this;
#ifdef WEFT_FIBERS_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.mapping + page_bytes_, stack_bytes_);
#endif
#ifdef WEFT_FIBERS_TSAN
  scheduler_tsan_fiber_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
  const int rc = swapcontext(&scheduler_, &f.context);
#ifdef WEFT_FIBERS_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  if (rc != 0) throw InternalError("CPU backend: swapcontext failed");
  current_ = -1;
  return f.finished;
}

void FiberPool::suspend() {
  Fiber& f = fibers_[current_];
  switch_to_scheduler(/*final=*/false);
  entered_fiber(&f);
}

void FiberPool::switch_to_scheduler([[maybe_unused]] bool final) {
  Fiber& f = fibers_[current_];
#ifdef WEFT_FIBERS_ASAN
  // A finished fiber's fake stack (detect_stack_use_after_return) is freed: nullptr says so.
  __sanitizer_start_switch_fiber(final ? nullptr : &f.asan_fake_stack, scheduler_stack_bottom_, scheduler_stack_bytes_);
#endif
#ifdef WEFT_FIBERS_TSAN
  __tsan_switch_to_fiber(scheduler_tsan_fiber_, 0);
#endif
  swapcontext(&f.context, &scheduler_);
}

void FiberPool::entered_fiber([[maybe_unused]] Fiber* resumed) {
#ifdef WEFT_FIBERS_ASAN
  // Also learns the scheduler's stack (whichever host thread resumed the fiber) for the way back.
  __sanitizer_finish_switch_fiber(resumed ? resumed->asan_fake_stack : nullptr, &scheduler_stack_bottom_,
                                  &scheduler_stack_bytes_);
#endif
}

}  // namespace weft::driver::cpu
