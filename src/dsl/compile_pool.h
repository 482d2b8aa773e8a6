// The host threads that compile kernels for Kernel::compile_async: one per core, started at the first
// request and kept for the process. Jobs run in the order they were queued.
#pragma once

#include <functional>

namespace weft::dsl {

// Queues `job` (which must not throw) on a compile thread.
void run_on_compile_thread(std::function<void()> job);

}  // namespace weft::dsl
