// The plans every backend lowers a kernel by — its tasks' placement and its shared memory (with the buffers'
// layouts) — made once, right after tracing (dsl/trace.cpp, where their errors point at the user's code
// before any backend runs), and kept with the kernel's IR (ir::Function::plans) for the lowerings to read.
#pragma once

#include <memory>

#include "ir/node.h"
#include "passes/shared_memory_plan.h"
#include "passes/task_plan.h"

namespace weft::passes {

struct KernelPlans {
  TaskPlan tasks;  // as planned for a block of one warp when the kernel has no async_tasks (see tasks_for)
  SharedMemoryPlan memory;

  // The task plan of a block of `default_warps` warps: `tasks` itself when the kernel has async_tasks (which
  // say how many warps), else one implicit task of `default_warps` warps.
  TaskPlan tasks_for(int default_warps) const;
};

// Plans `f` (plan_tasks, plan_shared_memory); throws their weft::Errors.
std::shared_ptr<const KernelPlans> make_kernel_plans(const ir::Function& f);

// f.plans, or plans made now for an ir::Function that was built without tracing (tests).
std::shared_ptr<const KernelPlans> kernel_plans(const ir::Function& f);

}  // namespace weft::passes
