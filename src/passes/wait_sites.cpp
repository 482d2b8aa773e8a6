#include "passes/wait_sites.h"

#include <fmt/format.h>

#include "passes/shared_memory_plan.h"
#include "support/compile_timing.h"

namespace weft::passes {
namespace {

// Program order, depth first: the order does not matter as long as lowering and host use this one table.
void number_waits(const ir::Region& r, WaitSites& out) {
  for (const ir::NodeRef& n : r.body) {
    if (n->op == ir::Op::BarrierWait || n->op == ir::Op::NamedBarrierWait) {
      out.index.emplace(n.get(), static_cast<uint32_t>(out.sites.size()));
      out.sites.push_back(n->loc);
      out.named_threads.push_back(n->op == ir::Op::NamedBarrierWait ? static_cast<int32_t>(n->attrs.ints.at(1)) : 0);
    }
    for (const ir::Region& inner : n->regions) number_waits(inner, out);
  }
}

}  // namespace

std::string WaitSites::barrier_name(uint32_t offset) const {
  for (const BarrierArrayInfo& a : barriers) {
    int64_t index = (static_cast<int64_t>(offset) - a.offset) / kMbarrierBytes;
    if (offset >= a.offset && index < a.count && (offset - a.offset) % kMbarrierBytes == 0)
      return fmt::format("'{}[{}]'", a.name, index);
  }
  return fmt::format("the mbarrier at shared-memory offset {} (no barrier array holds it)", offset);
}

std::string WaitSites::thread_name(uint32_t thread) const {
  int warp = static_cast<int>(thread / 32);
  for (const TaskSlot& t : tasks)
    if (warp >= t.first_warp && warp < t.first_warp + t.warps * t.replicas)
      return fmt::format("task '{}' replica {}", t.name, (warp - t.first_warp) / t.warps);
  return fmt::format("thread {} (outside every task)", thread);
}

std::string WaitSites::describe(const WaitTimeoutRecord& r, int64_t timeout_ms) const {
  std::string what = fmt::format("waits on {} for phase {}", barrier_name(r.barrier), r.parity);
  if (r.barrier & kNamedBarrierFlag) {
    int32_t threads = r.site < named_threads.size() ? named_threads[r.site] : 0;
    what = fmt::format("waits at named barrier {} of {} threads; {} of them had arrived", r.barrier & ~kNamedBarrierFlag,
                       threads, r.parity);
  }
  return fmt::format("barrier wait timed out after {} ms (GPU debug mode) in kernel '{}', block ({}, {}, {}):\n"
                     "  {} (thread {}) {}   {}\n"
                     "this is a deadlock unless the wait may take longer (WEFT_DEBUG_TIMEOUT_MS raises the limit); "
                     "only the first thread that gave up is reported: the CPU backend (WEFT_BACKEND=cpu) reports "
                     "every task's wait",
                     timeout_ms, kernel, r.block[0], r.block[1], r.block[2], thread_name(r.thread), r.thread, what,
                     site_loc(r.site).str());
}

WaitSites plan_wait_sites(const ir::Function& f, int num_warps) {
  support::StageTimer timer(support::CompileStage::passes);
  WaitSites out;
  out.kernel = f.name;
  number_waits(f.body, out);
  for (const SharedAllocation& a : plan_shared_memory(f).allocations)
    if (a.node->op == ir::Op::AllocBarriers) out.barriers.push_back({a.name, a.offset, a.node->type.shape.at(0)});
  out.tasks = plan_tasks(f, num_warps).slots;
  return out;
}

}  // namespace weft::passes
