#include "passes/task_plan.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/walk.h"
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

// The values a named barrier id computed in the kernel can take, [lo, hi], where weft can bound them: constants,
// task_replica_id() (0 .. replicas - 1 of the task it runs in), and +, -, *, min, max, select of those, % and /
// by a positive constant, casts between 32- and 64-bit integers, as long as no bound leaves the node's type (an
// i32 past 2^31, an i64 past 2^61: the kernel's value could wrap there). Otherwise nothing, and `culprit` the node
// that could not be bounded.
struct IdRange {
  int64_t lo, hi;
};
std::optional<IdRange> id_range(const ir::Node& id, int replicas, const ir::Node*& culprit) {
  using ir::Op;
  auto bounded = [](const ir::Node& n) {
    switch (n.op) {
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Min: case Op::Max: case Op::Select: case Op::Cast: return true;
      case Op::Rem: case Op::Div: return n.operands[1]->op == Op::Constant && n.operands[1]->attrs.number > 0;
      default: return false;
    }
  };
  // The operands an id's node takes its range from (a select's condition is not one of them).
  auto inputs = [&](const ir::Node& n) {
    std::vector<const ir::Node*> out;
    if (bounded(n))
      for (size_t i = n.op == Op::Select ? 1 : 0; i < n.operands.size(); ++i) out.push_back(n.operands[i].get());
    return out;
  };
  std::unordered_map<const ir::Node*, IdRange> known;
  for (const ir::Node* n : ir::post_order(id, inputs)) {
    // (32- and 64-bit integers only: a narrower type could wrap where the bounds do not.)
    const DType t = n->type.dtype;
    const bool integral = t == DType{ScalarType::i32, false} || t == DType{ScalarType::i64, false};
    std::optional<IdRange> r;
    if (n->op == Op::Constant && integral && std::nearbyint(n->attrs.number) == n->attrs.number &&
        std::abs(n->attrs.number) < 0x1p62) {
      r = IdRange{static_cast<int64_t>(n->attrs.number), static_cast<int64_t>(n->attrs.number)};
    } else if (n->op == Op::TaskReplicaId) {
      r = IdRange{0, replicas - 1};
    } else if (integral && bounded(*n)) {  // (its inputs came first, and are known: an unknown one returned)
      std::vector<const ir::Node*> in = inputs(*n);
      IdRange a = known.at(in[0]);
      if (n->op == Op::Cast) {
        r = a;
      } else {
        IdRange b = known.at(in[1]);
        switch (n->op) {
          case Op::Select: r = IdRange{std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; break;
          // (Known bounds are within 2^61 (the width check below), so sums and differences cannot overflow.)
          case Op::Add: r = IdRange{a.lo + b.lo, a.hi + b.hi}; break;
          case Op::Sub: r = IdRange{a.lo - b.hi, a.hi - b.lo}; break;
          case Op::Min: r = IdRange{std::min(a.lo, b.lo), std::min(a.hi, b.hi)}; break;
          case Op::Max: r = IdRange{std::max(a.lo, b.lo), std::max(a.hi, b.hi)}; break;
          case Op::Mul: {
            int64_t p[4];
            if (!__builtin_mul_overflow(a.lo, b.lo, &p[0]) && !__builtin_mul_overflow(a.lo, b.hi, &p[1]) &&
                !__builtin_mul_overflow(a.hi, b.lo, &p[2]) && !__builtin_mul_overflow(a.hi, b.hi, &p[3]))
              r = IdRange{*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
            break;
          }
          case Op::Div: r = IdRange{a.lo / b.lo, a.hi / b.lo}; break;  // truncating; b is a positive constant
          case Op::Rem:  // the sign of the dividend
            r = a.lo >= 0 && a.hi < b.lo ? a : IdRange{a.lo < 0 ? -(b.lo - 1) : 0, a.hi > 0 ? b.lo - 1 : 0};
            break;
          default: break;
        }
      }
    }
    // (Bounds past the node's own width would wrap in the kernel, where the exact range no longer holds.)
    const int64_t width_max = t.scalar == ScalarType::i32 ? INT32_MAX : INT64_MAX / 4;
    if (!r || r->lo < -width_max || r->hi > width_max) {
      culprit = n;
      return std::nullopt;
    }
    known[n] = *r;
  }
  return known.at(&id);
}

// Named barrier ids the user may take: 1 .. first_reserved - 1. An id computed in the kernel must be bounded
// (id_range) within them; `replicas` are those of the task the region belongs to.
void check_named_barrier_ids(const ir::Region& r, int first_reserved, int replicas = 1) {
  auto reserved = [&] {
    std::string replica_ids = first_reserved > 15 ? ""
                              : fmt::format(" and each of the {} task replicas with one of {} to 15", 16 - first_reserved,
                                            first_reserved);
    return fmt::format("weft syncs the whole block with 0{}; use an id from 1 to {}", replica_ids, first_reserved - 1);
  };
  for (const ir::NodeRef& n : r.body) {
    if (n->op == ir::Op::NamedBarrierArrive || n->op == ir::Op::NamedBarrierWait) {
      const char* op = n->op == ir::Op::NamedBarrierWait ? "named_barrier_wait" : "named_barrier_arrive";
      if (n->operands.empty()) {
        int64_t id = n->attrs.ints.at(0);
        if (id == 0 || id >= first_reserved)
          throw Error(fmt::format("named barrier {} is reserved: {}", id, reserved()), n->loc);
      } else {
        const ir::Node* culprit = nullptr;
        std::optional<IdRange> range = id_range(*n->operands[0], replicas, culprit);
        if (!range)
          throw Error(fmt::format("{}: weft cannot bound the barrier id this call computes ({} at {} is not among what "
                                  "it follows); build the id from constants and task_replica_id() with +, -, *, min, "
                                  "max, where and % or / by a positive constant, so that the verifier can check that "
                                  "every id it takes is free",
                                  op, ir::op_name(culprit->op), culprit->loc.str()),
                      n->loc);
        if (range->lo < 1 || range->hi >= first_reserved)
          throw Error(fmt::format("{}: the barrier id this call computes takes values from {} to {}, not all of them "
                                  "ids the user may take: {}",
                                  op, range->lo, range->hi, reserved()),
                      n->loc);
      }
    }
    if (n->op == ir::Op::AsyncTasks) {
      for (size_t t = 0; t < n->regions.size(); ++t)
        check_named_barrier_ids(n->regions[t], first_reserved, static_cast<int>(n->attrs.ints.at(3 * t + 2)));
      continue;
    }
    for (const ir::Region& inner : n->regions) check_named_barrier_ids(inner, first_reserved, replicas);
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
