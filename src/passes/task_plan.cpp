#include "passes/task_plan.h"

#include <unordered_set>

#include <fmt/format.h>

#include "support/compile_timing.h"
#include "weft/error.h"

namespace weft::passes {

int TaskPlan::fibers() const {
  int n = 0;
  for (const TaskSlot& s : slots) n += s.replicas;
  return n;
}

namespace {

const ir::Node* find_tasks(const ir::Function& f) {
  for (const ir::NodeRef& n : f.body.body)
    if (n->op == ir::Op::AsyncTasks) return n.get();
  return nullptr;
}

std::string budget_table(const TaskPlan& plan) {
  std::string rows;
  for (const TaskSlot& s : plan.slots) {
    int regs = s.regs ? s.regs : plan.entry_regs;
    rows += fmt::format("\n  task '{}': {} warps x {} replicas x 32 threads x {} registers{} = {}", s.name, s.warps,
                        s.replicas, regs, s.regs ? "" : " (entry cap)", s.warps * s.replicas * 32 * regs);
  }
  return rows;
}

// Named barrier ids the user may take: 1 .. first_reserved - 1.
void check_named_barrier_ids(const ir::Region& r, int first_reserved) {
  for (const ir::NodeRef& n : r.body) {
    if (n->op == ir::Op::NamedBarrierArrive || n->op == ir::Op::NamedBarrierWait) {
      int64_t id = n->attrs.ints.at(0);
      if (id == 0 || id >= first_reserved) {
        std::string replicas = first_reserved > 15 ? ""
                               : fmt::format(" and each of the {} task replicas with one of {} to 15", 16 - first_reserved,
                                             first_reserved);
        throw Error(fmt::format("named barrier {} is reserved: weft syncs the whole block with 0{}; use an id from 1 to {}",
                                id, replicas, first_reserved - 1),
                    n->loc);
      }
    }
    for (const ir::Region& inner : n->regions) check_named_barrier_ids(inner, first_reserved);
  }
}

// runs_on_one_thread's walk: `declared` collects the body's own Vars (a Var is declared before it is set).
bool one_thread_region(const ir::Region& r, std::unordered_set<const ir::Node*>& declared) {
  using ir::Op;
  for (const ir::NodeRef& n : r.body) {
    const ir::Type& t = n->type;
    if ((t.kind == ir::Type::Kind::Value || t.kind == ir::Type::Kind::Var) && !t.shape.empty()) return false;
    switch (n->op) {
      case Op::VarDecl: declared.insert(n.get()); break;
      case Op::VarSet:
        if (!declared.count(n->operands[0].get())) return false;  // other threads would not see the new value
        break;
      case Op::BarrierArrive: {  // an arrival per group, not per thread (alloc_warp_barriers)
        const ir::Node* array = n->operands[0]->op == Op::BarrierAt ? n->operands[0]->operands[0].get()
                                                                     : n->operands[0].get();
        if (array->attrs.ints.size() > 2 && array->attrs.ints[2] == 1) return false;
        break;
      }
      case Op::ProgramId: case Op::NumPrograms: case Op::Constant: case Op::TaskReplicaId: case Op::ClusterCtaRank:
      case Op::Fma: case Op::Select: case Op::Cast: case Op::PtrAdd: case Op::Load:
      case Op::For: case Op::If: case Op::While: case Op::LoopCondition: case Op::VarGet:
      case Op::LocalView: case Op::LocalTrans: case Op::LocalRows: case Op::LocalCols: case Op::LocalReinterpret:
      case Op::BarrierAt: case Op::BarrierExpectBytes: case Op::BarrierWait: case Op::BarrierArriveRemote:
      case Op::AsyncDescriptorLoad: case Op::AsyncDescriptorLoadMulticast: case Op::AsyncDescriptorPrefetch:
      case Op::DescriptorPrefetch: case Op::AsyncDescriptorStore: case Op::AsyncStoreWait:
      case Op::FenceAsyncShared: case Op::Fence: case Op::Nanosleep:
        break;
      default:
        if (ir::op_category(n->op) == ir::OpCategory::Special || ir::op_category(n->op) == ir::OpCategory::Leaf)
          return false;  // everything else: per-thread data, warp- or block-wide operations
    }
    for (const ir::Region& inner : n->regions)
      if (!one_thread_region(inner, declared)) return false;
  }
  return true;
}

}  // namespace

bool runs_on_one_thread(const ir::Region& task_body) {
  std::unordered_set<const ir::Node*> declared;
  return one_thread_region(task_body, declared);
}

TaskPlan plan_tasks(const ir::Function& f, int default_warps) {
  support::StageTimer timer(support::CompileStage::passes);
  TaskPlan plan;
  plan.tasks = find_tasks(f);
  if (!plan.tasks) {
    plan.slots.push_back({"main", 0, default_warps, 1, 0});
    plan.total_warps = default_warps;
    check_named_barrier_ids(f.body, 16);
    return plan;
  }
  const ir::Node& n = *plan.tasks;
  SourceLoc loc = n.loc;
  bool any_regs = false;
  int warp = 0;
  for (size_t t = 0; t < n.regions.size(); ++t) {
    TaskSlot s;
    s.name = n.attrs.names.at(t);
    s.warps = static_cast<int>(n.attrs.ints.at(3 * t));
    s.regs = static_cast<int>(n.attrs.ints.at(3 * t + 1));
    s.replicas = static_cast<int>(n.attrs.ints.at(3 * t + 2));
    s.first_warp = warp;
    s.one_thread = runs_on_one_thread(n.regions[t]);
    // Errors about one task name its task() call; those about all of them, async_tasks (the first task).
    SourceLoc task_loc = n.regions[t].loc.line ? n.regions[t].loc : loc;
    // Deadlock reports and budget errors name tasks: two of one name would make them ambiguous.
    for (size_t earlier = 0; earlier < t; ++earlier)
      if (n.attrs.names.at(earlier) == s.name)
        throw Error(fmt::format("a second task named '{}' (the first is at {}); tasks of one async_tasks need distinct "
                                "names, so that deadlock reports and budget errors say which one they mean: rename "
                                "one (replicas of one task come from its .replicas option, not from repeating it)",
                                s.name, (n.regions[earlier].loc.line ? n.regions[earlier].loc : loc).str()),
                    task_loc);
    if (s.warps < 1 || s.replicas < 1)
      throw Error(fmt::format("task '{}' has {} warps and {} replicas; each must be at least 1", s.name, s.warps,
                              s.replicas),
                  task_loc);
    if (s.warps & (s.warps - 1))
      throw Error(fmt::format("task '{}' has {} warps; a task's warps must be a power of two (1, 2, 4, 8 or 16) so "
                              "that its tiles spread evenly over its threads",
                              s.name, s.warps),
                  task_loc);
    if (s.regs) {
      any_regs = true;
      if (s.regs < 24 || s.regs > 256 || s.regs % 8 != 0)
        throw Error(fmt::format("task '{}' asks for {} registers per thread; setmaxnreg takes a multiple of 8 from 24 "
                                "to 256",
                                s.name, s.regs),
                    task_loc);
      if (s.warps % 4 != 0)
        throw Error(fmt::format("task '{}' sets regs but has {} warps; register budgets (setmaxnreg) apply to whole "
                                "warp groups: give it a multiple of 4 warps, or drop regs",
                                s.name, s.warps),
                    task_loc);
      if (s.first_warp % 4 != 0)
        throw Error(fmt::format("task '{}' starts at warp {}, but a task that sets regs must start a warp group (a "
                                "multiple of 4 warps); the tasks before it have {} warps in all: give them a multiple "
                                "of 4, or list '{}' first",
                                s.name, s.first_warp, s.first_warp, s.name),
                    task_loc);
    }
    warp += s.warps * s.replicas;
    plan.slots.push_back(s);
  }
  plan.total_warps = warp;
  if (plan.threads() > 1024)
    throw Error(fmt::format("the tasks need {} warps ({} threads) but a block has at most 1024 threads (32 warps); use "
                            "fewer warps or replicas",
                            plan.total_warps, plan.threads()),
                loc);
  // Named barrier 0 syncs the block and 15, 14, ... each task replica (see codegen/nvptx): the user's ids
  // must stay below those.
  if (plan.fibers() > 15)
    throw Error(fmt::format("the tasks have {} replicas in all; at most 15 can run side by side (each needs its own "
                            "named barrier)",
                            plan.fibers()),
                loc);
  check_named_barrier_ids(f.body, 16 - plan.fibers());
  if (any_regs) {
    // The block starts with the per-thread cap ptxas gives it, and setmaxnreg moves registers between its warps
    // within that allocation, not the whole register file (a setmaxnreg.inc the allocation cannot meet waits
    // forever). The cap comes from the fullest quarter of the register file (one per scheduler, warps dealt to
    // them in turn): 16K / (32 x ceil(warps / 4)), a multiple of 8. 640 threads: 96 each, 61440 in all, not
    // 65536; 544 threads (17 warps, five on one scheduler): also 96, not 65536 / 544.
    const int warps_per_quarter = (plan.total_warps + 3) / 4;
    plan.entry_regs = std::min(255, kRegisterFile / 4 / (32 * warps_per_quarter)) / 8 * 8;
    const int64_t allocation = int64_t(plan.threads()) * plan.entry_regs;
    int64_t total = 0;
    for (const TaskSlot& s : plan.slots) total += int64_t(s.warps) * s.replicas * 32 * (s.regs ? s.regs : plan.entry_regs);
    if (total > allocation)
      throw Error(fmt::format("the tasks' register budgets need {} registers but a block of {} threads has {} ({} per "
                              "thread: one scheduler's quarter of the register file, {}, over the 32 x {} threads "
                              "of its fullest one, a multiple of 8; setmaxnreg only moves them between the block's "
                              "warps):{}\nlower some task's regs (a producer that only issues copies needs about "
                              "24 to 40)",
                              total, plan.threads(), allocation, plan.entry_regs, kRegisterFile / 4,
                              warps_per_quarter, budget_table(plan)),
                  loc);
  }
  return plan;
}

}  // namespace weft::passes
