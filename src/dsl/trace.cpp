#include "dsl/trace.h"

#include <fmt/format.h>

#include <unordered_map>

#include "ir/verifier.h"
#include "passes/kernel_plans.h"
#include "support/compile_timing.h"

namespace weft {
namespace {

using ir::Function;
using ir::Node;
using ir::Region;
using ir::Type;

// The state of one kernel being traced on this thread.
struct TraceContext {
  std::vector<Region*> open_regions;     // innermost last
  std::vector<int> open_serials;         // parallel to open_regions
  std::unordered_map<const Node*, int> defined_in;  // node -> serial of the region that defines it
  int next_serial = 0;
  uint32_t next_id = 0;
  int group_threads = 128;  // threads of the group running the code being traced (a task replica's inside a task)

  bool visible(const Node* n) const {
    auto it = defined_in.find(n);
    if (it == defined_in.end()) return false;
    for (int s : open_serials)
      if (s == it->second) return true;
    return false;
  }
};

thread_local TraceContext* current = nullptr;

TraceContext& context(SourceLoc loc) {
  if (!current)
    throw Error("this DSL operation is outside a kernel body; weft operations can only be used while a weft::Kernel "
                "traces its callable",
                loc);
  return *current;
}

// Opens a region for the duration of a body's tracing.
class RegionScope {
 public:
  RegionScope(TraceContext& ctx, Region& r) : ctx_(ctx) {
    ctx.open_regions.push_back(&r);
    ctx.open_serials.push_back(ctx.next_serial++);
  }
  ~RegionScope() {
    ctx_.open_regions.pop_back();
    ctx_.open_serials.pop_back();
  }
  int serial() const { return ctx_.open_serials.back(); }

 private:
  TraceContext& ctx_;
};

std::shared_ptr<Node> make_node(TraceContext& ctx, detail::Op op, std::vector<detail::NodeRef> operands, detail::Attrs attrs,
                                std::vector<Region> regions, SourceLoc loc) {
  for (const detail::NodeRef& o : operands) {
    if (o && !ctx.visible(o.get()))
      throw Error(fmt::format("{} uses a value made at {} inside a for_range or if_ body that has already ended; "
                              "values do not leave their body: declare a Var before it and assign the value to the Var",
                              ir::op_name(op), o->loc.str()),
                  loc);
  }
  Type type = ir::infer_type(op, operands, attrs, loc);
  auto node = std::make_shared<Node>();
  node->op = op;
  node->type = std::move(type);
  node->operands = std::move(operands);
  node->attrs = std::move(attrs);
  node->regions = std::move(regions);
  node->loc = loc;
  node->id = ctx.next_id++;
  return node;
}

detail::NodeRef append(TraceContext& ctx, std::shared_ptr<Node> node) {
  ctx.open_regions.back()->body.push_back(node);
  ctx.defined_in[node.get()] = ctx.open_serials.back();
  return node;
}

// Whether a tile of shape `from` grows to `to` by broadcasting (size-1 or missing leading dimensions).
bool broadcasts_to(const ir::Shape& from, const ir::Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i];
    if (f != 1 && f != to[to.size() - 1 - i]) return false;
  }
  return true;
}

detail::NodeRef broadcast_to(const detail::NodeRef& x, const ir::Shape& shape, SourceLoc loc) {
  if (x->type.shape == shape || !x->type.is_value()) return x;
  detail::Attrs a;
  a.shape = shape;
  return detail::emit(detail::Op::Broadcast, {x}, a, loc);
}

}  // namespace

namespace detail {

void require_tracing(SourceLoc loc) { context(loc); }

NodeRef emit(Op op, std::vector<NodeRef> operands, Attrs attrs, SourceLoc loc) {
  TraceContext& ctx = context(loc);
  for (const NodeRef& o : operands)
    if (!o) throw Error(fmt::format("{}: an operand is an empty Tile handle; give it a value first", ir::op_name(op)), loc);
  // Masks, fill values and stored values take the shape of the pointers; a scalar assigned to a Var
  // takes the Var's shape.
  // async_load's operands are (ptrs, view, mask, other): its mask and fill value start at operand 2.
  // Atomics' operands (value, or compare and value, then the mask) do too.
  const bool atomic = op == Op::AtomicRmw || op == Op::AtomicCas;
  if ((op == Op::Load || op == Op::Store || op == Op::AsyncLoad || atomic) && !operands.empty() &&
      operands[0]->type.is_value()) {
    const ir::Shape& target = operands[0]->type.shape;
    const size_t first = op == Op::AsyncLoad ? 2 : 1;
    const size_t mask_at = op == Op::AtomicCas ? 3 : 2;
    for (size_t i = first; i < operands.size(); ++i) {
      const ir::Type& t = operands[i]->type;
      if (t.is_value() && !broadcasts_to(t.shape, target)) {
        const char* role = atomic ? (i == mask_at ? "mask" : op == Op::AtomicCas && i == 1 ? "compare value" : "value")
                           : op != Op::Store ? (i == first ? "mask" : "fill value")
                                             : (i == 1 ? "value" : "mask");
        throw Error(fmt::format("{}: the {} has shape {} but the pointers have shape {}; it must have the pointers' "
                                "shape or broadcast to it (to {} a tile, offset the pointers by a tile of offsets, "
                                "e.g. p + arange(0, n))",
                                ir::op_name(op), role, ir::shape_str(t.shape), ir::shape_str(target),
                                ir::op_name(op)),
                    loc);
      }
      operands[i] = broadcast_to(operands[i], target, loc);
    }
  }
  if (op == Op::VarSet && operands.size() == 2 && operands[1]->type.is_scalar())
    operands[1] = broadcast_to(operands[1], operands[0]->type.shape, loc);
  return append(ctx, make_node(ctx, op, std::move(operands), std::move(attrs), {}, loc));
}

NodeRef emit_elementwise(Op op, std::vector<NodeRef> operands, SourceLoc loc) {
  context(loc);
  ir::Shape shape;
  for (const NodeRef& o : operands) {
    if (!o) throw Error(fmt::format("{}: an operand is an empty Tile handle; give it a value first", ir::op_name(op)), loc);
    shape = ir::broadcast_shapes(shape, o->type.shape, ir::op_name(op), loc);
  }
  for (NodeRef& o : operands) o = broadcast_to(o, shape, loc);
  return emit(op, std::move(operands), {}, loc);
}

NodeRef constant(DType dtype, double value, const Shape& shape, SourceLoc loc) {
  Attrs a;
  a.dtype = dtype;
  a.has_dtype = true;
  a.number = value;
  a.shape = shape;
  return emit(Op::Constant, {}, a, loc);
}

NodeRef constant_int(DType dtype, int64_t value, const Shape& shape, SourceLoc loc) {
  Attrs a;
  a.dtype = dtype;
  a.has_dtype = true;
  a.number = static_cast<double>(value);
  if (!dtype.is_float()) a.integer = value;
  a.shape = shape;
  return emit(Op::Constant, {}, a, loc);
}

DType node_dtype(const NodeRef& n) { return n->type.dtype; }
const Shape& node_shape(const NodeRef& n) { return n->type.shape; }

void trace_for(NodeRef lo, NodeRef hi, NodeRef step, const std::function<void(NodeRef)>& body, SourceLoc loc) {
  TraceContext& ctx = context(loc);
  std::vector<Region> regions(1);
  {
    RegionScope scope(ctx, regions[0]);
    auto index = make_node(ctx, Op::LoopIndex, {}, {}, {}, loc);
    regions[0].args.push_back(index);
    ctx.defined_in[index.get()] = scope.serial();
    body(index);
  }
  append(ctx, make_node(ctx, Op::For, {std::move(lo), std::move(hi), std::move(step)}, {}, std::move(regions), loc));
}

void trace_if(NodeRef cond, const std::function<void()>& then_body, const std::function<void()>* else_body, SourceLoc loc) {
  TraceContext& ctx = context(loc);
  std::vector<Region> regions(2);
  {
    RegionScope scope(ctx, regions[0]);
    then_body();
  }
  if (else_body) {
    RegionScope scope(ctx, regions[1]);
    (*else_body)();
  }
  append(ctx, make_node(ctx, Op::If, {std::move(cond)}, {}, std::move(regions), loc));
}

void trace_while(const std::function<NodeRef()>& cond, const std::function<void()>& body, SourceLoc loc) {
  TraceContext& ctx = context(loc);
  std::vector<Region> regions(2);
  {
    RegionScope scope(ctx, regions[0]);
    NodeRef c = cond();
    if (!c) throw Error("while_: the condition returned an empty Tile handle; return a Bool", loc);
    emit(Op::LoopCondition, {std::move(c)}, {}, loc);
  }
  {
    RegionScope scope(ctx, regions[1]);
    body();
  }
  append(ctx, make_node(ctx, Op::While, {}, {}, std::move(regions), loc));
}

void trace_tasks(const std::vector<TaskSpec>& tasks, SourceLoc loc) {
  TraceContext& ctx = context(loc);
  if (tasks.empty()) throw Error("async_tasks needs at least one task", loc);
  std::vector<Region> regions(tasks.size());
  Attrs attrs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    RegionScope scope(ctx, regions[i]);
    regions[i].loc = tasks[i].loc;
    int block_threads = ctx.group_threads;
    ctx.group_threads = tasks[i].warps * 32;
    tasks[i].body();
    ctx.group_threads = block_threads;
    attrs.ints.insert(attrs.ints.end(), {tasks[i].warps, tasks[i].regs, tasks[i].replicas});
    attrs.names.push_back(tasks[i].name);
  }
  append(ctx, make_node(ctx, Op::AsyncTasks, {}, std::move(attrs), std::move(regions), loc));
}

int group_threads(SourceLoc loc) { return context(loc).group_threads; }

}  // namespace detail

namespace dsl {

bool tracing() { return current != nullptr; }

std::shared_ptr<const ir::Function> trace_kernel(const std::string& name, const std::vector<detail::ParamInfo>& params,
                                                 const std::function<void(const detail::TraceInputs&)>& tracer,
                                                 const std::vector<detail::KernelArg>& consts, uint64_t divisible,
                                                 SourceLoc loc, int num_warps) {
  if (current)
    throw Error(fmt::format("kernel '{}' is being traced inside the body of another kernel; trace kernels one at a time",
                            name),
                loc);
  auto function = std::make_shared<Function>();
  function->name = name;
  function->loc = loc;
  TraceContext ctx;
  ctx.group_threads = num_warps * 32;
  current = &ctx;
  struct Reset {
    ~Reset() { current = nullptr; }
  } reset;
  RegionScope scope(ctx, function->body);

  detail::TraceInputs inputs;
  inputs.values.resize(params.size());
  inputs.consts.resize(params.size());
  int64_t value_index = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].is_const) {
      inputs.consts[i] = consts.at(i);
      continue;
    }
    detail::Attrs a;
    a.dtype = params[i].dtype;
    a.has_dtype = true;
    if (params[i].is_descriptor) {
      // The IR contract of a TMA descriptor (see the verifier's Op::Param): ints = {index, divisor 1,
      // 1 = descriptor, swizzle bytes}, shape = the box, dtype = the element type.
      const detail::TmaFields& tma = detail::tma_fields(*consts.at(i).descriptor);
      a.ints = {value_index++, 1, 1, tma.swizzle};
      a.shape = tma.box;
    } else {
      bool multiple_of_16 = value_index < 64 && (divisible >> value_index) & 1;
      a.ints = {value_index++, multiple_of_16 ? 16 : 1};  // {index, known divisor}
    }
    auto p = make_node(ctx, detail::Op::Param, {}, a, {}, loc);
    ctx.defined_in[p.get()] = scope.serial();
    function->params.push_back(p);
    inputs.values[i] = p;
  }
  {
    support::StageTimer timer(support::CompileStage::trace);
    tracer(inputs);
  }
  support::StageTimer timer(support::CompileStage::passes);
  ir::verify(*function);
  // Made once, here, so that budget and placement errors come at trace time; the backends lower by them.
  function->plans = passes::make_kernel_plans(*function);
  return function;
}

}  // namespace dsl
}  // namespace weft
