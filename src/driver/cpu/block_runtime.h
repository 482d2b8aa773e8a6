// The CPU semantics of shared memory, mbarriers, named barriers and warp-specialized tasks.
//
// A kernel with block ops (codegen/cpu/cpu_abi.h) runs each program instance as a block of fibers, one
// per task replica, on one host thread. Per block:
//   - shared memory: one arena of BlockPlan::shared_bytes, filled with 0xFF bytes (NaN for floats) at
//     block start, so that reading a stage nobody wrote shows up in a test;
//   - mbarriers, by offset: arrivals still missing in the current phase (reset to the arrive count when
//     a phase completes), transaction bytes still expected, and the phase parity. A phase completes when
//     both reach 0; barrier_wait(bar, p) blocks while the parity is p (PTX mbarrier.try_wait.parity);
//   - named barriers 0-15 (bar.sync / bar.arrive): a fiber counts as its task's warps * 32 threads.
// A fiber that must wait suspends; the scheduler resumes the unfinished fibers round after round, in task
// order or, with WEFT_CPU_SCHED_SEED=n, in an order shuffled by that seed. A round in which no fiber got
// past a wait (nor started, nor finished) is a deadlock: the Error lists every fiber's task, replica,
// what it waits for and the user's line, then the state of each barrier involved. Errors found inside a
// fiber (a stage or barrier index out of range, an arrival too many) abandon the block and are thrown,
// as weft::Error, from run() on the launching thread: nothing unwinds through generated code.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "codegen/cpu/cpu_abi.h"

namespace weft::driver::cpu {

// The C functions generated code calls (cpu_abi.h, block_fn), by name, for the JIT to resolve.
struct RuntimeSymbol {
  const char* name;
  void* address;
};
const std::vector<RuntimeSymbol>& block_runtime_symbols();

struct BlockState;

// Runs blocks of one kernel, one at a time, on the calling thread; one per host worker thread. Holds the
// fibers' stacks and frames and the shared-memory arena, reused from block to block.
class BlockRunner {
 public:
  BlockRunner(const codegen::cpu::BlockPlan& plan, codegen::cpu::KernelFn entry, int64_t frame_bytes);
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs the block `program_id` of a grid of `num_programs` to completion. `seed`: shuffle the order in
  // which fibers are resumed (none: round-robin in task order). Throws weft::Error for a deadlock or an
  // error in one of the block's fibers.
  void run(const uint64_t* args, const int32_t program_id[3], const int32_t num_programs[3],
           std::optional<uint64_t> seed);

 private:
  std::unique_ptr<BlockState> state_;
};

}  // namespace weft::driver::cpu
