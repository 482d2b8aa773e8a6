// The whole-kernel check (verify): every node's type again, every operand visible where it is used, the
// Hopper constructs only where they may appear, and async_dot results read only after async_dot_wait.
#include <fmt/format.h>

#include <unordered_set>

#include "ir/atomics.h"
#include "ir/verifier.h"
#include "ir/verifier_internal.h"

namespace weft::ir {

namespace {

// Where the Hopper constructs may appear: shared memory and barriers are allocated once per block, so
// only at the top of the kernel body (not inside loops, ifs or tasks); async_tasks at most once, at the
// top; task_replica_id only inside a task. A tile Var may not be declared before async_tasks: each task
// holds its tiles in the register layout of its own warps (the NVPTX lowering recomputes plain tiles made
// before async_tasks in each task, but a Var's slots would have to hold them in one layout for all of
// them), so the rule holds on every backend, not only where the GPU lowering finds it.
struct PlacementChecker {
  int depth = 0;
  bool in_task = false;
  const Node* tasks = nullptr;
  const Node* tile_var = nullptr;  // the first tile Var declared at the top of the body, before any async_tasks
  const Node* thread_query_outside_tasks = nullptr;  // thread_id() & co. outside every task body
  const Node* atomic_outside_tasks = nullptr;        // an atomic or fence outside every task body

  void check(const Node& n) {
    switch (n.op) {
      case Op::VarDecl:
        if (depth == 0 && !tasks && !tile_var && !n.type.shape.empty()) tile_var = &n;
        break;
      case Op::LocalAlloc:
      case Op::AllocBarriers:
        if (depth > 0)
          fail(n.loc, fmt::format("{} is inside a for_range, if_ or task body; shared memory and barriers are allocated "
                                  "once per block: call it at the top of the kernel body, before the loops and tasks",
                                  name(n.op)));
        break;
      case Op::AsyncTasks:
        if (depth > 0)
          fail(n.loc, "async_tasks is inside a for_range, if_ or task body; call it at the top of the kernel body (each "
                      "task's body holds its own loops)");
        if (tasks)
          fail(n.loc, fmt::format("a second async_tasks; a kernel has one set of tasks (the first is at {}): put all "
                                  "tasks in that call",
                                  tasks->loc.str()));
        if (tile_var)
          fail(tile_var->loc,
               fmt::format("a tile Var ({}) is declared before async_tasks (at {}): each task holds tiles in the "
                           "register layout of its own warps, so no Var can carry a tile into or across the tasks; "
                           "declare the Var inside the task that uses it (a plain tile made before async_tasks is "
                           "fine: each task recomputes it)",
                           tile_var->type.str(), n.loc.str()));
        tasks = &n;
        break;
      case Op::ThreadIndex:
      case Op::ReadClock:
      case Op::VoteBallot:
        if (!in_task && !thread_query_outside_tasks) thread_query_outside_tasks = &n;
        break;
      case Op::AtomicRmw:
      case Op::AtomicCas:
      case Op::Fence:
        if (!in_task && !atomic_outside_tasks) atomic_outside_tasks = &n;
        break;
      case Op::TaskReplicaId:
        if (!in_task)
          fail(n.loc, "task_replica_id() is outside every task; call it inside a task body of async_tasks");
        break;
      case Op::WaitForPriorGrid:
        if (in_task)
          fail(n.loc, "wait_for_prior_grid() is inside a task: only that task's threads would wait for the grid "
                      "before, and the others could read what it writes too early; call it before async_tasks");
        break;
      default:
        break;
    }
  }
};

// An async_dot's value is pending until async_dot_wait: it may only flow into the wait, into a Var
// (carried to a wait), or be chained into another async_dot as its accumulator.
void check_async_dot_uses(const Node& n) {
  for (size_t i = 0; i < n.operands.size(); ++i) {
    const Node& o = *n.operands[i];
    if (o.op != Op::AsyncDot) continue;
    bool allowed = n.op == Op::AsyncDotWait || (n.op == Op::VarSet && i == 1) || (n.op == Op::AsyncDot && i == 2);
    if (!allowed)
      fail(n.loc, fmt::format("{} reads the result of async_dot (at {}) before async_dot_wait: the tensor cores may "
                              "still be writing it; wait first, e.g. acc = async_dot_wait(0, acc)",
                              name(n.op), o.loc.str()));
  }
}

struct ScopeChecker {
  std::unordered_set<const Node*> visible;
  PlacementChecker placement;

  void region(const Region& r) {
    std::vector<const Node*> added;
    auto define = [&](const NodeRef& n) {
      visible.insert(n.get());
      added.push_back(n.get());
    };
    for (const NodeRef& a : r.args) define(a);
    for (const NodeRef& n : r.body) {
      for (const NodeRef& o : n->operands)
        if (!visible.count(o.get()))
          fail(n->loc, fmt::format("{} uses a value (made at {}) that is not visible here: it was made inside a "
                                   "for_range or if_ body that has ended; carry it out through a Var declared before "
                                   "that body",
                                   name(n->op), o->loc.str()));
      Attrs attrs = n->attrs;
      Type t = infer_type(n->op, n->operands, attrs, n->loc);
      if (t.kind != n->type.kind || !t.same_value_type(n->type))
        throw InternalError(fmt::format("verifier: node %{} ({}) has type {} but its operands give {}", n->id,
                                        name(n->op), n->type.str(), t.str()));
      placement.check(*n);
      check_async_dot_uses(*n);
      bool was_in_task = placement.in_task;
      placement.in_task = was_in_task || n->op == Op::AsyncTasks;
      ++placement.depth;
      for (const Region& inner : n->regions) region(inner);
      --placement.depth;
      placement.in_task = was_in_task;
      define(n);
    }
    for (const Node* n : added) visible.erase(n);
  }
};

}  // namespace

void verify(const Function& f) {
  ScopeChecker checker;
  for (const NodeRef& p : f.params) checker.visible.insert(p.get());
  checker.region(f.body);
  const PlacementChecker& placed = checker.placement;
  if (placed.tasks && placed.thread_query_outside_tasks)
    fail(placed.thread_query_outside_tasks->loc,
         fmt::format("{}() is outside every task body of a kernel with async_tasks (at {}): the block's threads are "
                     "the tasks' threads, so per-thread values belong inside a task body; call it there",
                     thread_query_name(placed.thread_query_outside_tasks->op, placed.thread_query_outside_tasks->attrs),
                     placed.tasks->loc.str()));
  // The code outside the tasks is not run once per block on every backend (the GPU lowering makes its tiles
  // again in each task; the CPU backend's task fibers each run it): an atomic there would not be done once.
  if (placed.tasks && placed.atomic_outside_tasks)
    fail(placed.atomic_outside_tasks->loc,
         fmt::format("{} is outside every task body of a kernel with async_tasks (at {}): the code outside the "
                     "tasks is not run exactly once per block; move the {} into the task that owns the update",
                     placed.atomic_outside_tasks->op == Op::Fence
                         ? std::string("fence")
                         : "atomic_" + std::string(atomic_name(atomic_info(*placed.atomic_outside_tasks))),
                     placed.tasks->loc.str(), placed.atomic_outside_tasks->op == Op::Fence ? "fence" : "atomic"));
}

}  // namespace weft::ir
