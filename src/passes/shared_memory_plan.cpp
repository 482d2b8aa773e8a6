#include "passes/shared_memory_plan.h"

#include <fmt/format.h>

#include "passes/shared_layouts.h"
#include "support/compile_timing.h"
#include "weft/error.h"

namespace weft::passes {

std::string SharedMemoryPlan::table() const {
  std::string rows;
  for (const SharedAllocation& a : allocations) {
    const ir::Node& n = *a.node;
    std::string what = n.op == ir::Op::LocalAlloc ? n.type.dtype.str() + ir::shape_str(n.type.shape)
                                                  : fmt::format("{} mbarriers", n.type.shape.at(0));
    if (a.swizzle) what += fmt::format(", {}-byte swizzle", a.swizzle);
    if (a.panel) what += fmt::format(", panels of {} columns", a.panel);
    rows += fmt::format("\n  '{}' {}: {} bytes at offset {} ({})", a.name, what, a.bytes, a.offset, n.loc.str());
  }
  return rows;
}

SharedMemoryPlan plan_shared_memory(const ir::Function& f, int64_t limit) {
  support::StageTimer timer(support::CompileStage::passes);
  SharedLayouts layouts = assign_shared_layouts(f);
  SharedMemoryPlan plan;
  const ir::Node* last = nullptr;
  for (const ir::NodeRef& n : f.body.body) {
    int64_t bytes = 0, align = 0, stage_bytes = 0;
    int swizzle = 0;
    if (n->op == ir::Op::LocalAlloc && !n->operands.empty()) {  // the bytes of an earlier buffer
      const SharedAllocation& other = plan.of(n->operands[0].get());
      SharedAllocation a = other;
      a.node = n.get();
      a.name = n->attrs.names.at(0);
      a.swizzle = layouts.of(n.get());
      a.panel = layouts.panel_of(n.get());
      int64_t stages = n->type.shape[0];
      a.stage_bytes = n->type.numel() / stages * n->type.dtype.bytes();
      if (a.swizzle) a.stage_bytes = (a.stage_bytes + 1023) / 1024 * 1024;
      if (stages * a.stage_bytes > other.bytes)
        throw Error(fmt::format("buffer '{}' reuses '{}' but its swizzled stages take {} bytes, more than its {}; use "
                                "fewer stages",
                                a.name, other.name, stages * a.stage_bytes, other.bytes),
                    n->loc);
      a.bytes = stages * a.stage_bytes;
      plan.index[n.get()] = plan.allocations.size();
      plan.allocations.push_back(a);
      continue;
    }
    if (n->op == ir::Op::LocalAlloc) {
      swizzle = layouts.of(n.get());
      int64_t stages = n->type.shape[0];
      stage_bytes = n->type.numel() / stages * n->type.dtype.bytes();
      if (swizzle) stage_bytes = (stage_bytes + 1023) / 1024 * 1024;
      bytes = stages * stage_bytes;
      align = 1024;
    } else if (n->op == ir::Op::AllocBarriers) {
      bytes = n->type.shape.at(0) * kMbarrierBytes;
      align = kMbarrierBytes;
    } else {
      continue;
    }
    SharedAllocation a;
    a.node = n.get();
    a.name = n->attrs.names.empty() ? "" : n->attrs.names[0];
    a.offset = (plan.bytes + align - 1) / align * align;
    a.bytes = bytes;
    a.stage_bytes = stage_bytes;
    a.swizzle = swizzle;
    a.panel = n->op == ir::Op::LocalAlloc ? layouts.panel_of(n.get()) : 0;
    plan.bytes = a.offset + bytes;
    plan.index[n.get()] = plan.allocations.size();
    plan.allocations.push_back(a);
    last = n.get();
  }
  if (plan.bytes > limit)
    throw Error(fmt::format("kernel '{}' allocates {} bytes of shared memory per block but a block has at most {} ({} "
                            "KB):{}\nuse fewer stages or smaller tiles",
                            f.name, plan.bytes, limit, limit / 1024, plan.table()),
                last->loc);
  return plan;
}

}  // namespace weft::passes
