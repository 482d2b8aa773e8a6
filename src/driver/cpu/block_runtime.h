// The CPU semantics of shared memory, mbarriers, named barriers and warp-specialized tasks.
//
// A kernel with block ops (codegen/cpu/cpu_abi.h) runs each program instance as a block of fibers, one
// per task replica, on one host thread. A kernel launched in thread-block clusters runs a whole cluster
// that way: the fibers of all its blocks under one scheduler, since its blocks run side by side on the GPU
// and wait for each other. Per block:
//   - shared memory: one arena of BlockPlan::shared_bytes, filled with 0xFF bytes (NaN for floats) at
//     block start, so that reading a stage nobody wrote shows up in a test;
//   - mbarriers, by offset: arrivals still missing in the current phase (reset to the arrive count when
//     a phase completes), transaction bytes still expected, and the phase parity. A phase completes when
//     both reach 0; barrier_wait(bar, p) blocks while the parity is p (PTX mbarrier.try_wait.parity);
//   - named barriers 0-15 (bar.sync / bar.arrive): a fiber counts as its task's warps * 32 threads.
// Per cluster: remote arrivals (barrier_arrive(bar, rank)) and multicast TMA loads act on the target
// block's barriers and arena; cluster_sync waits until every fiber of every block of the cluster got there.
// A fiber that must wait suspends; the scheduler resumes the unfinished fibers round after round, in task
// order or, with WEFT_CPU_SCHED_SEED=n, in an order shuffled by that seed (and then a fiber also gives way at
// random right after an arrival, ClusterState::give_way). A round in which no fiber got
// past a wait (nor started, nor finished) is a deadlock: the Error lists every fiber's task, replica,
// what it waits for and the user's line (and, in a cluster, its block), then the state of each barrier
// involved. Errors found inside a fiber (a stage or barrier index out of range, an arrival too many, a
// cluster rank outside the cluster) abandon the cluster and are thrown,
// as weft::Error, from run() on the launching thread: nothing unwinds through generated code.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cpu/cpu_abi.h"
#include "weft/kernel.h"  // ClusterDims

namespace weft::driver::cpu {

// The C functions generated code calls (cpu_abi.h, block_fn), by name, for the JIT to resolve.
struct RuntimeSymbol {
  const char* name;
  void* address;
};
const std::vector<RuntimeSymbol>& block_runtime_symbols();

struct ClusterState;

// From a function generated code calls inside a fiber: ends the fiber's cluster with `message` (the
// fiber's task and replica appended), thrown by ClusterRunner::run as a weft::Error at `loc`. Never returns.
[[noreturn]] void abandon_block(const codegen::cpu::ProgramCtx* ctx, const std::string& message, SourceLoc loc) noexcept;

// Runs the blocks of one kernel, one cluster at a time (a block at a time without clusters), on the
// calling thread; one per host worker thread. Holds the fibers' stacks and frames and each block's
// shared-memory arena, reused from cluster to cluster.
class ClusterRunner {
 public:
  // `cluster`: blocks per thread-block cluster; {1, 1, 1} runs single blocks.
  ClusterRunner(const codegen::cpu::BlockPlan& plan, codegen::cpu::KernelFn entry, int64_t frame_bytes,
                const ClusterDims& cluster);
  ~ClusterRunner();
  ClusterRunner(const ClusterRunner&) = delete;
  ClusterRunner& operator=(const ClusterRunner&) = delete;

  // Runs the cluster whose first block has program ids `first_block` (each a multiple of the cluster's
  // dims) in a grid of `num_programs` to completion: every task replica of every block of the cluster,
  // under one scheduler. `seed`: shuffle the order in which fibers are resumed (none: round-robin, block by
  // block in rank order, in task order). Throws weft::Error for a deadlock or an error in one of the fibers.
  // `checks`: the launch's bounds checks (kernels compiled with them), given to every fiber.
  void run(const uint64_t* args, const int32_t first_block[3], const int32_t num_programs[3],
           std::optional<uint64_t> seed, const codegen::cpu::LaunchChecks* checks = nullptr);

 private:
  std::unique_ptr<ClusterState> state_;
};

}  // namespace weft::driver::cpu
