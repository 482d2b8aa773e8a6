#include "driver/cpu/fibers.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "weft/error.h"

namespace weft::driver::cpu {
namespace {

// The pool whose fiber is starting on this thread (makecontext passes only int arguments).
thread_local FiberPool* starting_pool = nullptr;

}  // namespace

FiberPool::FiberPool(size_t stack_bytes) : page_bytes_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
  stack_bytes_ = (stack_bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_;
}

FiberPool::~FiberPool() {
  for (Fiber& f : fibers_)
    if (f.mapping) munmap(f.mapping, stack_bytes_ + page_bytes_);
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
  pool->body_(pool->arg_, i);
  pool->fibers_[i].finished = true;
  pool->suspend();  // never resumed again
}

bool FiberPool::resume(int i) {
  Fiber& f = fibers_.at(i);
  if (f.finished) return true;
  current_ = i;
  starting_pool = this;
  if (swapcontext(&scheduler_, &f.context) != 0) throw InternalError("CPU backend: swapcontext failed");
  current_ = -1;
  return f.finished;
}

void FiberPool::suspend() { swapcontext(&fibers_[current_].context, &scheduler_); }

}  // namespace weft::driver::cpu
