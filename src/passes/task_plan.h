// Pass: where each warp-specialized task runs in the block, and whether the plan fits the hardware.
//
// A kernel with async_tasks runs each task's replicas on consecutive warps, in the order the tasks were
// given: replica r of a task of w warps starting at warp s covers warps [s + r*w, s + (r+1)*w). The block
// then has as many threads as all replicas together; code outside async_tasks runs on all of them. A
// kernel without tasks is one implicit task of `default_warps` warps.
//
// Checked here, each with the user's line of the task() at fault, or of async_tasks for what concerns all
// tasks (the thread count, the register file): warps >= 1 and replicas >= 1 per task; at most
// 1024 threads; a task that sets `regs` (setmaxnreg) has whole warp groups (a multiple of 4 warps) that
// start at a multiple of 4; regs is a multiple of 8 in [24, 256]; and the register file (64K 32-bit
// registers per block, as the kernel is launched one block per SM) holds every thread's budget, the tasks
// without `regs` counting at the cap the compiler gives all threads at entry.
#pragma once

#include <string>
#include <vector>

#include "ir/node.h"

namespace weft::passes {

struct TaskSlot {
  std::string name;
  int first_warp = 0;  // of replica 0
  int warps = 0;       // per replica
  int replicas = 1;
  int regs = 0;        // per thread after setmaxnreg; 0: the entry cap
  // The body is scalar work around operations that one thread performs for its group (TMA copies, expected
  // bytes, the group's mbarrier arrivals, waits): thread 0 of each replica can run it alone (runs_on_one_thread).
  bool one_thread = false;
};

struct TaskPlan {
  const ir::Node* tasks = nullptr;  // the AsyncTasks node, or null
  std::vector<TaskSlot> slots;      // one per task (one implicit task without async_tasks)
  int total_warps = 0;
  int entry_regs = 0;  // per-thread register cap at entry when tasks set regs (0: no cap needed)

  int threads() const { return total_warps * 32; }
  int fibers() const;  // task replicas in all
};

constexpr int kRegisterFile = 64 * 1024;

TaskPlan plan_tasks(const ir::Function& f, int default_warps);

// Whether a task body computes nothing per thread: every value it makes is a scalar (the same in every thread
// of the group), it assigns no Var declared outside it, and each effect is one a group performs once (TMA
// loads, prefetches and stores, expect-bytes, arrivals at barriers that count groups, remote arrivals) or a
// thread's own wait. Such a body means the same on one thread as on all of them; a back end may run it on one
// thread of the group, so that the group needs no sync before its one-thread operations (NVPTX runs it on
// the group's first warp, its one-thread operations on an elected lane: a producer's loop of waits and TMA
// copies then costs no bar.sync per step, and one warp polls its mbarriers instead of four).
bool runs_on_one_thread(const ir::Region& task_body);

}  // namespace weft::passes
