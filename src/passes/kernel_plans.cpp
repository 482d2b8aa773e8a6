#include "passes/kernel_plans.h"

namespace weft::passes {

TaskPlan KernelPlans::tasks_for(int default_warps) const {
  if (tasks.tasks) return tasks;
  TaskPlan plan;
  plan.slots.push_back({"main", 0, default_warps, 1, 0});
  plan.total_warps = default_warps;
  return plan;
}

std::shared_ptr<const KernelPlans> make_kernel_plans(const ir::Function& f) {
  auto plans = std::make_shared<KernelPlans>();
  plans->tasks = plan_tasks(f, 1);
  plans->memory = plan_shared_memory(f);
  return plans;
}

std::shared_ptr<const KernelPlans> kernel_plans(const ir::Function& f) {
  return f.plans ? f.plans : make_kernel_plans(f);
}

}  // namespace weft::passes
