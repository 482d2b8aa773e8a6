// IR -> LLVM IR for the host CPU. See lower_cpu.h for the model: one function per kernel, called once per
// program instance; rank-0 values are SSA registers; tiles live in the instance's frame and every tile
// operation is a loop over elements. Values whose elements are all equal (constants, broadcast scalars)
// stay "splats" and take no memory. Block ops (shared memory, barriers, tasks) are calls into the block
// runtime, each passing the index of its call site in the BlockPlan so that errors name the user's line.
#include "codegen/cpu/lower_cpu.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "codegen/cpu/cpu_abi.h"
#include "codegen/element_ops.h"
#include "codegen/llvm_builders.h"
#include "passes/pointer_roots.h"
#include "passes/shared_layouts.h"
#include "passes/kernel_plans.h"

namespace weft::codegen::cpu {
namespace {

using ir::NodeRef;
using ir::Op;
using llvm::Value;

struct Val {
  enum class Kind { Scalar, Splat, Memory } kind = Kind::Scalar;
  Value* v = nullptr;  // Scalar/Splat: the element in its compute type; Memory: address of element 0
};

int64_t numel(const ir::Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool is_block_op(Op op) {
  switch (op) {
    case Op::LocalAlloc: case Op::LocalView: case Op::LocalLoad: case Op::LocalStore: case Op::AllocBarriers:
    case Op::BarrierAt: case Op::BarrierExpectBytes: case Op::BarrierArrive: case Op::BarrierWait:
    case Op::NamedBarrierArrive: case Op::NamedBarrierWait: case Op::AsyncTasks: case Op::TaskReplicaId:
    case Op::LocalTrans: case Op::LocalRows: case Op::LocalCols: case Op::AsyncDot: case Op::AsyncDotWait: case Op::FenceAsyncShared:
    case Op::AsyncDescriptorLoad: case Op::AsyncDescriptorStore: case Op::AsyncStoreWait:
    case Op::ClusterCtaRank: case Op::ClusterSync: case Op::BarrierArriveRemote: case Op::AsyncDescriptorLoadMulticast:
    case Op::LocalStoreRemote: case Op::AsyncRemoteShmemCopy:
    case Op::AsyncLoad: case Op::AsyncCommitGroup: case Op::AsyncWaitGroup:
      return true;
    default:
      return false;
  }
}

bool uses_block_ops(const ir::Region& r) {
  for (const NodeRef& n : r.body) {
    if (is_block_op(n->op)) return true;
    for (const ir::Region& inner : n->regions)
      if (uses_block_ops(inner)) return true;
  }
  return false;
}

// The runtime's view of the kernel's shared memory and tasks, from the plans the GPU lowering uses too.
std::shared_ptr<BlockPlan> make_block_plan(const ir::Function& f, const passes::KernelPlans& plans, int default_warps,
                                           std::unordered_map<const ir::Node*, int32_t>& alloc_index) {
  auto plan = std::make_shared<BlockPlan>();
  plan->kernel = f.name;
  const passes::SharedMemoryPlan& memory = plans.memory;
  plan->shared_bytes = memory.bytes;
  for (const passes::SharedAllocation& a : memory.allocations) {
    const ir::Node& n = *a.node;
    if (n.op == Op::LocalAlloc) {
      alloc_index[&n] = static_cast<int32_t>(plan->buffers.size());
      int32_t stages = static_cast<int32_t>(n.type.shape.at(0));
      plan->buffers.push_back({a.name, a.offset, a.bytes / stages, stages, n.loc});
    } else {
      alloc_index[&n] = static_cast<int32_t>(plan->barriers.size());
      plan->barriers.push_back({a.name, a.offset, static_cast<int32_t>(n.attrs.ints.at(0)),
                                static_cast<int32_t>(n.attrs.ints.at(1)), n.loc});
      plan->barriers.back().per_thread = n.attrs.ints.size() > 2 && n.attrs.ints[2] == 1;
    }
  }
  for (const passes::TaskSlot& s : plans.tasks_for(default_warps).slots)
    plan->tasks.push_back({s.name, s.warps, s.replicas});
  return plan;
}

class Lowering {
 public:
  Lowering(const ir::Function& f, llvm::LLVMContext& c, const std::string& symbol, int default_warps,
           bool check_bounds)
      : f_(f), c_(c), b_(c), ops_(b_, MathTarget::Host), checked_(check_bounds) {
    for (const NodeRef& p : f.params)
      if (p->type.is_value() && p->type.dtype.pointer) pointer_slots_.push_back(static_cast<int32_t>(p->attrs.ints.at(0)));
    if (uses_block_ops(f.body)) {
      plans_ = passes::kernel_plans(f);
      block_ = make_block_plan(f, *plans_, default_warps, alloc_index_);
    }
    mod_ = std::make_unique<llvm::Module>(symbol, c);
    ptr_ = llvm::PointerType::get(c, 0);
    i8_ = b_.getInt8Ty();
    i32_ = b_.getInt32Ty();
    i64_ = b_.getInt64Ty();
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, ptr_}, false);
    fn_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, *mod_);
    for (unsigned i = 0; i < 3; ++i) fn_->addParamAttr(i, llvm::Attribute::NoAlias);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    entry_ = llvm::BasicBlock::Create(c, "entry", fn_);
    b_.SetInsertPoint(entry_);
    args_ = fn_->getArg(0);
    ctx_ = fn_->getArg(1);
    frame_ = fn_->getArg(2);
  }

  CpuModule run() {
    for (const NodeRef& p : f_.params) node(p);
    region(f_.body);
    b_.CreateRetVoid();
    std::string problems;
    llvm::raw_string_ostream os(problems);
    if (llvm::verifyModule(*mod_, &os))
      throw InternalError(fmt::format("CPU lowering of kernel '{}' produced invalid LLVM IR: {}", f_.name, problems));
    CpuModule out;
    out.symbol = fn_->getName().str();
    out.module = std::move(mod_);
    out.frame_bytes = std::max<int64_t>(frame_bytes_, kFrameAlign);
    out.block = block_;
    if (checked_) out.access_sites = std::make_shared<const std::vector<AccessSite>>(std::move(access_sites_));
    return out;
  }

 private:
  // ---- storage -----------------------------------------------------------------------------------------

  Value* frame_slot(int64_t bytes) {
    int64_t offset = (frame_bytes_ + kFrameAlign - 1) / kFrameAlign * kFrameAlign;
    frame_bytes_ = offset + std::max<int64_t>(bytes, 1);
    return b_.CreateConstInBoundsGEP1_64(i8_, frame_, offset);
  }
  Value* tile_slot(DType d, const ir::Shape& s) { return frame_slot(numel(s) * d.bytes()); }
  // A stack slot in the entry block (promoted to a register by LLVM).
  Value* entry_alloca(llvm::Type* t) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    return eb.CreateAlloca(t);
  }
  Value* scratch() {
    if (!scratch_) {
      llvm::IRBuilder<>::InsertPointGuard guard(b_);
      b_.SetInsertPoint(entry_, entry_->begin());
      scratch_ = frame_slot(16);
    }
    return scratch_;
  }

  Value* load_elem(DType d, Value* base, Value* i) {
    return ops_.to_compute(d, b_.CreateLoad(ops_.memory_type(d), b_.CreateGEP(ops_.memory_type(d), base, i)));
  }
  void store_elem(DType d, Value* base, Value* i, Value* v) {
    b_.CreateStore(ops_.to_memory(d, v), b_.CreateGEP(ops_.memory_type(d), base, i));
  }

  const Val& val(const NodeRef& n) { return vals_.at(n.get()); }
  // Element i (an i64) of a value, in its compute type.
  Value* elem(const NodeRef& n, Value* i) {
    const Val& v = val(n);
    if (v.kind != Val::Kind::Memory) return v.v;
    return load_elem(n->type.dtype, v.v, i);
  }
  bool uniform(const NodeRef& n) { return val(n).kind != Val::Kind::Memory; }

  // ---- loops -------------------------------------------------------------------------------------------

  Value* i64c(int64_t v) { return llvm::ConstantInt::get(i64_, v); }

  // for (i = begin; i < end; ++i) body(i), on i64 values.
  void loop(Value* begin, Value* end, const std::function<void(Value*)>& body) {
    emit_loop(b_, begin, end, i64c(1), body);
  }
  void loop(int64_t count, const std::function<void(Value*)>& body) {
    if (count == 1)
      body(i64c(0));
    else
      loop(i64c(0), i64c(count), body);
  }

  // Defines n elementwise: a register for rank 0, a splat when every operand is uniform, else a tile.
  void define_elementwise(const NodeRef& n, const std::function<Value*(Value*)>& element) {
    DType d = n->type.dtype;
    bool all_uniform = true;
    for (const NodeRef& o : n->operands) all_uniform = all_uniform && uniform(o);
    if (n->type.shape.empty() || all_uniform) {
      Val v{n->type.shape.empty() ? Val::Kind::Scalar : Val::Kind::Splat, ops_.round(d, element(i64c(0)))};
      vals_[n.get()] = v;
      return;
    }
    Value* base = tile_slot(d, n->type.shape);
    loop(numel(n->type.shape), [&](Value* i) { store_elem(d, base, i, element(i)); });
    vals_[n.get()] = {Val::Kind::Memory, base};
  }
  // Defines n as a tile computed element by element, or a register when it has rank 0.
  void define_tile(const NodeRef& n, const std::function<Value*(Value*)>& element) {
    DType d = n->type.dtype;
    if (n->type.shape.empty()) {
      vals_[n.get()] = {Val::Kind::Scalar, ops_.round(d, element(i64c(0)))};
      return;
    }
    Value* base = tile_slot(d, n->type.shape);
    loop(numel(n->type.shape), [&](Value* i) { store_elem(d, base, i, element(i)); });
    vals_[n.get()] = {Val::Kind::Memory, base};
  }

  // ---- index arithmetic (all shapes are powers of two, so these become shifts and masks) ---------------

  std::vector<int64_t> strides(const ir::Shape& s) {
    std::vector<int64_t> st(s.size(), 1);
    for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
    return st;
  }
  Value* coord(Value* i, int64_t stride, int64_t extent) {
    return b_.CreateURem(b_.CreateUDiv(i, i64c(stride)), i64c(extent));
  }

  // Index into `from` of element i of its broadcast to `to`.
  Value* broadcast_index(Value* i, const ir::Shape& to, const ir::Shape& from) {
    std::vector<int64_t> to_st = strides(to), from_st = strides(from);
    size_t offset = to.size() - from.size();
    Value* j = i64c(0);
    for (size_t d = offset; d < to.size(); ++d) {
      if (from[d - offset] == 1) continue;
      j = b_.CreateAdd(j, b_.CreateMul(coord(i, to_st[d], to[d]), i64c(from_st[d - offset])));
    }
    return j;
  }

  // ---- nodes -------------------------------------------------------------------------------------------

  void region(const ir::Region& r) {
    for (const NodeRef& n : r.body) node(n);
  }

  void node(const NodeRef& n) {
    DType d = n->type.dtype;
    const auto& ops = n->operands;
    switch (ir::op_category(n->op)) {
      case ir::OpCategory::Unary:
        return define_elementwise(n, [&](Value* i) { return ops_.unary(n->op, d, elem(ops[0], i), approximate(*n)); });
      case ir::OpCategory::Binary:
        return define_elementwise(n, [&](Value* i) { return ops_.binary(n->op, d, elem(ops[0], i), elem(ops[1], i)); });
      case ir::OpCategory::Compare:
        return define_elementwise(
            n, [&](Value* i) { return ops_.compare(n->op, ops[0]->type.dtype, elem(ops[0], i), elem(ops[1], i)); });
      default: break;
    }

    switch (n->op) {
      case Op::Param: {
        Value* slot = b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, args_, n->attrs.ints[0]));
        // A TMA descriptor's slot holds the address of its TensorDescData (driver/tensor_desc_data.h).
        bool descriptor = n->type.kind == ir::Type::Kind::TensorDesc;
        vals_[n.get()] = {Val::Kind::Scalar, descriptor ? b_.CreateIntToPtr(slot, ptr_) : ops_.from_slot(d, slot)};
        return;
      }
      case Op::ProgramId:
      case Op::NumPrograms: {
        int64_t field = (n->op == Op::ProgramId ? 0 : 3) + n->axis();
        Value* v = b_.CreateLoad(i32_, b_.CreateConstInBoundsGEP1_64(i32_, ctx_, field));
        vals_[n.get()] = {Val::Kind::Scalar, v};
        return;
      }
      case Op::Constant:
        vals_[n.get()] = {n->type.shape.empty() ? Val::Kind::Scalar : Val::Kind::Splat, ops_.constant(d, n->attrs.number)};
        return;
      case Op::Arange: {
        int64_t start = n->attrs.ints[0];
        return define_tile(n, [&](Value* i) { return b_.CreateTrunc(b_.CreateAdd(i, i64c(start)), i32_); });
      }
      case Op::Fma:
        return define_elementwise(n, [&](Value* i) { return ops_.fma(elem(ops[0], i), elem(ops[1], i), elem(ops[2], i)); });
      case Op::Select:
        return define_elementwise(
            n, [&](Value* i) { return b_.CreateSelect(elem(ops[0], i), elem(ops[1], i), elem(ops[2], i)); });
      case Op::Cast:
        return define_elementwise(n, [&](Value* i) { return ops_.cast(ops[0]->type.dtype, d, elem(ops[0], i)); });
      case Op::PtrAdd: {
        DType pointee{d.scalar, false};
        return define_elementwise(n, [&](Value* i) {
          Value* offset = b_.CreateSExt(elem(ops[1], i), i64_);
          return b_.CreateGEP(ops_.memory_type(pointee), elem(ops[0], i), offset);
        });
      }
      case Op::Broadcast: {
        if (uniform(ops[0])) {
          vals_[n.get()] = {Val::Kind::Splat, val(ops[0]).v};
          return;
        }
        const ir::Shape& from = ops[0]->type.shape;
        return define_tile(n, [&](Value* i) { return elem(ops[0], broadcast_index(i, n->type.shape, from)); });
      }
      case Op::Reshape: {
        const Val& src = val(ops[0]);
        if (src.kind == Val::Kind::Memory && !n->type.shape.empty()) {
          vals_[n.get()] = src;  // same elements, same order
        } else if (src.kind == Val::Kind::Memory) {
          vals_[n.get()] = {Val::Kind::Scalar, elem(ops[0], i64c(0))};
        } else {
          vals_[n.get()] = {n->type.shape.empty() ? Val::Kind::Scalar : Val::Kind::Splat, src.v};
        }
        return;
      }
      case Op::Permute: {
        if (uniform(ops[0])) {
          vals_[n.get()] = val(ops[0]);
          return;
        }
        std::vector<int64_t> src_st = strides(ops[0]->type.shape), dst_st = strides(n->type.shape);
        return define_tile(n, [&](Value* i) {
          Value* j = i64c(0);
          for (size_t k = 0; k < n->type.shape.size(); ++k)
            j = b_.CreateAdd(j, b_.CreateMul(coord(i, dst_st[k], n->type.shape[k]), i64c(src_st[n->attrs.ints[k]])));
          return elem(ops[0], j);
        });
      }
      case Op::Slice: {
        if (uniform(ops[0])) {
          vals_[n.get()] = val(ops[0]);
          return;
        }
        int64_t axis = n->attrs.ints[0], start = n->attrs.ints[1];
        std::vector<int64_t> src_st = strides(ops[0]->type.shape), dst_st = strides(n->type.shape);
        return define_tile(n, [&](Value* i) {
          Value* j = i64c(0);
          for (size_t k = 0; k < n->type.shape.size(); ++k) {
            Value* c = coord(i, dst_st[k], n->type.shape[k]);
            if (static_cast<int64_t>(k) == axis) c = b_.CreateAdd(c, i64c(start));
            j = b_.CreateAdd(j, b_.CreateMul(c, i64c(src_st[k])));
          }
          return elem(ops[0], j);
        });
      }
      case Op::Load:
        check_access(n, "load", ops[0], ops.size() > 1 ? &ops[1] : nullptr);
        return define_tile(n, [&](Value* i) {
          Value* p = elem(ops[0], i);
          if (ops.size() < 2) return load_elem(d, p, i64c(0));
          Value* m = elem(ops[1], i);
          Value* v = load_elem(d, b_.CreateSelect(m, p, scratch()), i64c(0));
          Value* other = ops.size() == 3 ? elem(ops[2], i) : llvm::Constant::getNullValue(ops_.compute_type(d));
          return b_.CreateSelect(m, v, other);
        });
      case Op::Store: {
        check_access(n, "store", ops[0], ops.size() == 3 ? &ops[2] : nullptr);
        DType elem_type = ops[1]->type.dtype;
        loop(numel(ops[0]->type.shape), [&](Value* i) {
          Value* p = elem(ops[0], i);
          if (ops.size() == 3) p = b_.CreateSelect(elem(ops[2], i), p, scratch());
          store_elem(elem_type, p, i64c(0), elem(ops[1], i));
        });
        return;
      }
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::ArgMax:
      case Op::ArgMin:
        return reduce(n);
      case Op::Dot:
        return dot(n);
      case Op::For:
        return for_loop(n);
      case Op::If:
        return if_else(n);
      case Op::VarDecl: {
        const ir::Type& t = n->type;
        if (t.shape.empty()) {
          Value* slot = entry_alloca(ops_.compute_type(t.dtype));
          b_.CreateStore(elem(ops[0], i64c(0)), slot);
          vars_[n.get()] = slot;
        } else {
          Value* slot = tile_slot(t.dtype, t.shape);
          copy_into(slot, ops[0]);
          vars_[n.get()] = slot;
        }
        return;
      }
      case Op::VarGet: {
        Value* slot = vars_.at(ops[0].get());
        if (n->type.shape.empty()) {
          vals_[n.get()] = {Val::Kind::Scalar, b_.CreateLoad(ops_.compute_type(d), slot)};
          return;
        }
        Value* base = tile_slot(d, n->type.shape);
        loop(numel(n->type.shape), [&](Value* i) {
          llvm::Type* mt = ops_.memory_type(d);
          b_.CreateStore(b_.CreateLoad(mt, b_.CreateGEP(mt, slot, i)), b_.CreateGEP(mt, base, i));
        });
        vals_[n.get()] = {Val::Kind::Memory, base};
        return;
      }
      case Op::VarSet: {
        Value* slot = vars_.at(ops[0].get());
        if (ops[1]->type.shape.empty())
          b_.CreateStore(elem(ops[1], i64c(0)), slot);
        else
          copy_into(slot, ops[1]);
        return;
      }
      case Op::LocalAlloc:
      case Op::AllocBarriers:
        return;  // placed by the BlockPlan; the runtime sets them up before the fibers start
      case Op::LocalView: return local_view(n);
      case Op::LocalLoad: return local_load(n);
      case Op::LocalStore:
      case Op::LocalStoreRemote: return local_store(n);
      case Op::BarrierAt: return barrier_at(n);
      case Op::BarrierArrive: return barrier_arrive(n);
      case Op::BarrierExpectBytes: return barrier_expect_bytes(n);
      case Op::BarrierWait: return barrier_wait(n);
      case Op::NamedBarrierArrive:
      case Op::NamedBarrierWait: return named_barrier(n);
      case Op::AsyncTasks: return async_tasks(n);
      case Op::TaskReplicaId: return task_replica_id(n);
      case Op::ThreadIndex: return thread_index(n);
      case Op::ReadClock: return read_clock(n);
      case Op::Nanosleep: return;  // changes no value; the fibers' order is WEFT_CPU_SCHED_SEED's business
      case Op::LocalTrans: vals_[n.get()] = val(n->operands[0]); return;  // the same bytes, read transposed
      case Op::LocalRows: return local_rows(n);
      case Op::LocalCols: return local_cols(n);
      case Op::AsyncDot: return async_dot(n);
      case Op::AsyncDotWait: return async_dot_wait(n);
      case Op::FenceAsyncShared: return;  // one proxy on the CPU
      case Op::AsyncDescriptorLoad:
        runtime_call(block_fn::kTmaLoad, b_.getVoidTy(),
                     {ctx_, site(n), val(n->operands[0]).v, val(n->operands[1]).v, scalar(n->operands[2]),
                      coordinates(n, 3)});
        return;
      case Op::AsyncDescriptorLoadMulticast:
        runtime_call(block_fn::kTmaLoadMulticast, b_.getVoidTy(),
                     {ctx_, site(n), val(n->operands[0]).v, val(n->operands[1]).v, scalar(n->operands[2]),
                      scalar(n->operands[3]), coordinates(n, 4)});
        return;
      case Op::ClusterCtaRank:
        vals_[n.get()] = {Val::Kind::Scalar, ctx_field(offsetof(ProgramCtx, cluster_rank))};
        return;
      case Op::ClusterSync: runtime_call(block_fn::kClusterSync, b_.getVoidTy(), {ctx_, site(n)}); return;
      case Op::BarrierArriveRemote:
        runtime_call(block_fn::kBarrierArriveRemote, b_.getVoidTy(),
                     {ctx_, site(n), scalar(n->operands[0]), scalar(n->operands[1])});
        return;
      case Op::AsyncRemoteShmemCopy: {
        const NodeRef& src = n->operands[1];
        int64_t bytes = numel(src->type.shape) * src->type.dtype.bytes();
        runtime_call(block_fn::kBulkCopyRemote, b_.getVoidTy(),
                     {ctx_, site(n), val(n->operands[0]).v, val(src).v, b_.getInt32(static_cast<uint32_t>(bytes)),
                      scalar(n->operands[2]), scalar(n->operands[3])});
        return;
      }
      case Op::AsyncDescriptorPrefetch:
      case Op::DescriptorPrefetch: return;  // L2 and descriptor caches: nothing to do on the CPU
      case Op::AsyncDescriptorStore:
        runtime_call(block_fn::kTmaStore, b_.getVoidTy(),
                     {ctx_, site(n), val(n->operands[0]).v, val(n->operands[1]).v, coordinates(n, 2)});
        return;
      case Op::AsyncLoad: return async_load(n);
      case Op::AsyncCommitGroup: runtime_call(block_fn::kAsyncCommitGroup, b_.getVoidTy(), {ctx_, site(n)}); return;
      case Op::AsyncWaitGroup:
        runtime_call(block_fn::kAsyncWaitGroup, b_.getVoidTy(),
                     {ctx_, site(n), b_.getInt32(static_cast<uint32_t>(n->attrs.ints[0]))});
        return;
      case Op::AsyncStoreWait:
        runtime_call(block_fn::kTmaStoreWait, b_.getVoidTy(),
                     {ctx_, site(n), b_.getInt32(static_cast<uint32_t>(n->attrs.ints[0]))});
        return;
      default: break;
    }
    throw InternalError(fmt::format("CPU lowering: no rule for op '{}'", ir::op_name(n->op)));
  }

  void copy_into(Value* slot, const NodeRef& value) {
    DType d = value->type.dtype;
    loop(numel(value->type.shape), [&](Value* i) { store_elem(d, slot, i, elem(value, i)); });
  }

  void reduce(const NodeRef& n) {
    const NodeRef& x = n->operands[0];
    DType d = x->type.dtype;
    const ir::Shape& s = x->type.shape;
    int axis = n->axis();
    int64_t len = s[axis], inner = 1;
    for (size_t k = axis + 1; k < s.size(); ++k) inner *= s[k];
    bool is_arg = n->op == Op::ArgMax || n->op == Op::ArgMin;
    Value* acc = entry_alloca(ops_.compute_type(d));
    Value* best = entry_alloca(i32_);
    define_tile(n, [&](Value* o) {
      Value* base = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(o, i64c(inner)), i64c(len * inner)),
                                 b_.CreateURem(o, i64c(inner)));
      b_.CreateStore(elem(x, base), acc);
      b_.CreateStore(b_.getInt32(0), best);
      loop(i64c(1), i64c(len), [&](Value* k) {
        Value* v = elem(x, b_.CreateAdd(base, b_.CreateMul(k, i64c(inner))));
        Value* a = b_.CreateLoad(ops_.compute_type(d), acc);
        switch (n->op) {
          case Op::ReduceSum: b_.CreateStore(ops_.binary(Op::Add, d, a, v), acc); break;
          case Op::ReduceMax: b_.CreateStore(ops_.binary(Op::Max, d, a, v), acc); break;
          case Op::ReduceMin: b_.CreateStore(ops_.binary(Op::Min, d, a, v), acc); break;
          default: {  // first index of the extreme value (a NaN's first): replace only on a strict improvement
            Value* better = ops_.arg_better(n->op, d, v, a);
            b_.CreateStore(b_.CreateSelect(better, v, a), acc);
            b_.CreateStore(b_.CreateSelect(better, b_.CreateTrunc(k, i32_), b_.CreateLoad(i32_, best)), best);
          }
        }
      });
      return is_arg ? b_.CreateLoad(i32_, best) : b_.CreateLoad(ops_.compute_type(d), acc);
    });
  }

  void dot(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    DType f32{ScalarType::f32, false};
    Value* c = tile_slot(f32, n->type.shape);
    if (n->operands.size() == 3)
      copy_into(c, n->operands[2]);
    else
      loop(M * N, [&](Value* i) { store_elem(f32, c, i, llvm::ConstantFP::get(b_.getFloatTy(), 0.0)); });
    loop(M, [&](Value* m) {
      loop(K, [&](Value* k) {
        Value* a_mk = elem(a, b_.CreateAdd(b_.CreateMul(m, i64c(K)), k));
        loop(N, [&](Value* j) {
          Value* at = b_.CreateAdd(b_.CreateMul(m, i64c(N)), j);
          Value* prod = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()},
                                           {a_mk, elem(bm, b_.CreateAdd(b_.CreateMul(k, i64c(N)), j)),
                                            load_elem(f32, c, at)});
          store_elem(f32, c, at, prod);
        });
      });
    });
    vals_[n.get()] = {Val::Kind::Memory, c};
  }

  // ---- bounds checks (cpu_abi.h, LaunchChecks) ---------------------------------------------------------

  // The launch's extents array, loaded once at the function's entry.
  Value* extents() {
    if (!extents_) {
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      Value* checks = eb.CreateLoad(ptr_, eb.CreateConstInBoundsGEP1_64(i8_, ctx_, offsetof(ProgramCtx, checks)));
      extents_ = eb.CreateLoad(ptr_, eb.CreateConstInBoundsGEP1_64(i8_, checks, offsetof(LaunchChecks, extents)));
    }
    return extents_;
  }

  // Before an access through the pointer tile `ptrs`: the first element (not masked off) whose bytes are
  // not all inside the allocation of a pointer argument it may derive from is reported, and the program
  // instance returns. The scan has no early exit, so LLVM vectorizes it like the access itself.
  void check_access(const NodeRef& n, const char* op, const NodeRef& ptrs, const NodeRef* mask) {
    if (!checked_) return;
    DType pointee{ptrs->type.dtype.scalar, false};
    const int64_t count = numel(ptrs->type.shape), bytes = pointee.bytes();
    std::vector<int32_t> slots = passes::pointer_roots(*ptrs);
    if (slots.empty()) slots = pointer_slots_;
    const int32_t site = static_cast<int32_t>(access_sites_.size());
    access_sites_.push_back({n->loc, op, pointee.str(), count, bytes, slots});
    std::vector<std::pair<Value*, Value*>> bounds;
    for (int32_t s : slots)
      bounds.push_back({b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, extents(), 2 * s)),
                        b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, extents(), 2 * s + 1))});
    auto outside = [&](Value* i) {  // element i is checked and outside every allocation it may come from
      Value* at = b_.CreatePtrToInt(elem(ptrs, i), i64_);
      Value* end = b_.CreateAdd(at, i64c(bytes));
      Value* inside = b_.getFalse();
      for (auto [lo, hi] : bounds)
        inside = b_.CreateOr(inside, b_.CreateAnd(b_.CreateAnd(b_.CreateICmpUGE(at, lo), b_.CreateICmpULE(end, hi)),
                                                  b_.CreateICmpUGT(end, at)));
      Value* bad = b_.CreateNot(inside);
      return mask ? b_.CreateAnd(bad, elem(*mask, i)) : bad;
    };
    // Whether any element is outside: an OR over the tile, which LLVM vectorizes like the access itself.
    Value* any = entry_alloca(i8_);
    b_.CreateStore(b_.getInt8(0), any);
    loop(count, [&](Value* i) {
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(i8_, any), b_.CreateZExt(outside(i), i8_)), any);
    });
    auto* fail = llvm::BasicBlock::Create(c_, "out_of_bounds", fn_);
    auto* ok = llvm::BasicBlock::Create(c_, "in_bounds", fn_);
    b_.CreateCondBr(b_.CreateICmpNE(b_.CreateLoad(i8_, any), b_.getInt8(0)), fail, ok,
                    llvm::MDBuilder(c_).createBranchWeights(1, 1u << 20));
    b_.SetInsertPoint(fail);  // which element was first: only when there is one
    Value* first = entry_alloca(i64_);
    b_.CreateStore(i64c(count), first);
    loop(count, [&](Value* i) {
      Value* so_far = b_.CreateLoad(i64_, first);
      b_.CreateStore(b_.CreateSelect(outside(i), b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, so_far, i), so_far), first);
    });
    Value* element = b_.CreateLoad(i64_, first);
    runtime_call(kOutOfBoundsFn, b_.getVoidTy(),
                 {ctx_, b_.getInt32(static_cast<uint32_t>(site)), element, b_.CreatePtrToInt(elem(ptrs, element), i64_)});
    b_.CreateRetVoid();
    b_.SetInsertPoint(ok);
  }

  // ---- block ops: calls into the block runtime (driver/cpu/block_runtime.cpp) -------------------------

  // A call site the runtime can name in errors: its index in the BlockPlan, as an i32 constant.
  Value* site(const NodeRef& n, int32_t target = -1) {
    block_->sites.push_back({n->loc, target});
    return b_.getInt32(static_cast<int32_t>(block_->sites.size() - 1));
  }
  Value* runtime_call(const char* name, llvm::Type* result, llvm::ArrayRef<Value*> args) {
    std::vector<llvm::Type*> params;
    for (Value* a : args) params.push_back(a->getType());
    llvm::FunctionCallee callee = mod_->getOrInsertFunction(name, llvm::FunctionType::get(result, params, false));
    llvm::cast<llvm::Function>(callee.getCallee())->addFnAttr(llvm::Attribute::NoUnwind);
    return b_.CreateCall(callee, args);
  }
  Value* scalar(const NodeRef& n) { return elem(n, i64c(0)); }
  Value* ctx_field(size_t offset) {
    return b_.CreateLoad(i32_, b_.CreateConstInBoundsGEP1_64(i8_, ctx_, static_cast<int64_t>(offset)));
  }

  // A stage of a buffer: its address in the block's shared memory (the runtime checks the stage).
  void local_view(const NodeRef& n) {
    Value* s = site(n, alloc_index_.at(n->operands[0].get()));
    vals_[n.get()] = {Val::Kind::Scalar, runtime_call(block_fn::kLocalView, ptr_, {ctx_, s, scalar(n->operands[1])})};
  }
  // Shared memory holds a stage row-major, like a tile in the frame: both copies are element loops. (The
  // GPU's swizzles are a matter of addresses there; here every access is logical.)
  void local_load(const NodeRef& n) {
    Value* view = val(n->operands[0]).v;
    define_tile(n, [&](Value* i) { return load_elem(n->type.dtype, view, stored_index(n->operands[0], i)); });
  }
  void local_store(const NodeRef& n) {
    Value* view = val(n->operands[0]).v;
    if (n->op == Op::LocalStoreRemote)  // the same stage in the other block's arena
      view = runtime_call(block_fn::kSharedAtRank, ptr_, {ctx_, site(n), view, scalar(n->operands[2])});
    const NodeRef& x = n->operands[1];
    loop(numel(x->type.shape), [&](Value* i) { store_elem(x->type.dtype, view, stored_index(n->operands[0], i), elem(x, i)); });
  }
  // Where element i of a view is stored: a local_trans view [C, R] reads storage [R, C]; a buffer in
  // column panels keeps (r, c) at (c / P) * R * P + r * P + c % P (passes/shared_layouts.h).
  Value* stored_index(const NodeRef& view, Value* i) {
    bool transposed = view->op == Op::LocalTrans;
    const ir::Shape& stored = transposed ? view->operands[0]->type.shape : view->type.shape;
    if (transposed) {
      int64_t R = view->type.shape[1], C = view->type.shape[0];
      i = b_.CreateAdd(b_.CreateMul(b_.CreateURem(i, i64c(R)), i64c(C)), b_.CreateUDiv(i, i64c(R)));
    }
    int64_t P = panel_of(view);
    if (!P) return i;
    Value* r = b_.CreateUDiv(i, i64c(stored[1]));
    Value* c = b_.CreateURem(i, i64c(stored[1]));
    return b_.CreateAdd(b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(c, i64c(P)), i64c(stored[0] * P)), b_.CreateMul(r, i64c(P))),
                        b_.CreateURem(c, i64c(P)));
  }
  // The panel width of a view's buffer when the view spans several panels, else 0.
  int64_t panel_of(const NodeRef& view) {
    const ir::Shape& stored = view->op == Op::LocalTrans ? view->operands[0]->type.shape : view->type.shape;
    int64_t P = plans_->memory.of(passes::root_allocation(view.get())).panel;
    return stored.size() == 2 && P && P < stored[1] ? P : 0;
  }
  void local_cols(const NodeRef& n) {
    const NodeRef& view = n->operands[0];
    int64_t P = plans_->memory.of(passes::root_allocation(n.get())).panel, first = n->attrs.ints[0];
    int64_t rows = view->type.shape[0], eb = n->type.dtype.bytes();
    int64_t bytes = P ? first / P * rows * P * eb : first * eb;
    vals_[n.get()] = {Val::Kind::Scalar, b_.CreateConstInBoundsGEP1_64(i8_, val(view).v, bytes)};
  }
  void local_rows(const NodeRef& n) {
    const NodeRef& view = n->operands[0];
    int64_t row_bytes = numel(view->type.shape) / view->type.shape[0] * view->type.dtype.bytes();
    Value* first = b_.CreateSExt(scalar(n->operands[1]), i64_);
    vals_[n.get()] = {Val::Kind::Scalar, b_.CreateGEP(i8_, val(view).v, b_.CreateMul(first, i64c(row_bytes)))};
  }
  // The address of a tile's elements in the frame (a splat is written out first).
  Value* tile_address(const NodeRef& x) {
    if (!uniform(x)) return val(x).v;
    Value* slot = tile_slot(x->type.dtype, x->type.shape);
    loop(numel(x->type.shape), [&](Value* i) { store_elem(x->type.dtype, slot, i, elem(x, i)); });
    return slot;
  }
  // A TMA copy's coordinates (operands `first`...), outermost first, in an i32 array on the stack.
  Value* coordinates(const NodeRef& n, size_t first) {
    auto* type = llvm::ArrayType::get(i32_, 5);
    Value* array = entry_alloca(type);
    for (size_t i = first; i < n->operands.size(); ++i)
      b_.CreateStore(scalar(n->operands[i]), b_.CreateConstInBoundsGEP2_32(type, array, 0, static_cast<unsigned>(i - first)));
    return array;
  }
  // async_load (ptrs, view[, mask[, other]]): the runtime gets each element's destination in shared memory
  // (where the view's layout stores it), its source pointer, mask and fill value.
  void async_load(const NodeRef& n) {
    const auto& o = n->operands;
    check_access(n, "async_load", o[0], o.size() > 2 ? &o[2] : nullptr);
    DType d = o[1]->type.dtype;
    int64_t count = numel(o[0]->type.shape);
    Value* dst = frame_slot(count * 8);
    Value* view = val(o[1]).v;
    loop(count, [&](Value* i) {
      Value* at = b_.CreateGEP(i8_, view, b_.CreateMul(stored_index(o[1], i), i64c(d.bytes())));
      b_.CreateStore(at, b_.CreateGEP(ptr_, dst, i));
    });
    Value* null = llvm::ConstantPointerNull::get(ptr_);
    auto i32c = [&](int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); };
    runtime_call(block_fn::kAsyncLoad, b_.getVoidTy(),
                 {ctx_, site(n), i32c(count), i32c(d.bytes()), dst, tile_address(o[0]),
                  o.size() > 2 ? tile_address(o[2]) : null, o.size() > 3 ? tile_address(o[3]) : null});
  }
  void async_dot(const NodeRef& n) {
    const auto& o = n->operands;
    Value* out = tile_slot(n->type.dtype, n->type.shape);
    auto i32c = [&](int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); };
    // a in registers (a tile in the frame, row-major as in shared memory) is read at issue: a_mode 2.
    bool a_registers = o[0]->type.kind == ir::Type::Kind::Value;
    Value* a = a_registers ? tile_address(o[0]) : val(o[0]).v;
    runtime_call(block_fn::kAsyncDot, b_.getVoidTy(),
                 {ctx_, site(n), a, i32c(a_registers ? 2 : o[0]->op == Op::LocalTrans),
                  i32c(a_registers ? 0 : panel_of(o[0])), val(o[1]).v,
                  i32c(o[1]->op == Op::LocalTrans), i32c(panel_of(o[1])), i32c(n->type.shape[0]), i32c(n->type.shape[1]),
                  i32c(o[0]->type.shape[1]),
                  i32c(static_cast<int>(o[0]->type.dtype.scalar) | static_cast<int>(o[1]->type.dtype.scalar) << 8),
                  tile_address(o[2]), out});
    vals_[n.get()] = {Val::Kind::Memory, out};
  }
  void async_dot_wait(const NodeRef& n) {
    Value* out = tile_slot(n->type.dtype, n->type.shape);
    runtime_call(block_fn::kAsyncDotWait, b_.getVoidTy(),
                 {ctx_, site(n), b_.getInt32(static_cast<uint32_t>(n->attrs.ints[0])), tile_address(n->operands[0]), out,
                  b_.getInt32(static_cast<uint32_t>(numel(n->type.shape)))});
    vals_[n.get()] = {Val::Kind::Memory, out};
  }
  // A barrier is its byte offset in shared memory (an i32 register).
  void barrier_at(const NodeRef& n) {
    Value* s = site(n, alloc_index_.at(n->operands[0].get()));
    vals_[n.get()] = {Val::Kind::Scalar, runtime_call(block_fn::kBarrierAt, i32_, {ctx_, s, scalar(n->operands[1])})};
  }
  void barrier_arrive(const NodeRef& n) {
    runtime_call(block_fn::kBarrierArrive, b_.getVoidTy(), {ctx_, site(n), scalar(n->operands[0])});
  }
  void barrier_expect_bytes(const NodeRef& n) {
    runtime_call(block_fn::kBarrierExpectBytes, b_.getVoidTy(),
                 {ctx_, site(n), scalar(n->operands[0]), scalar(n->operands[1])});
  }
  void barrier_wait(const NodeRef& n) {
    runtime_call(block_fn::kBarrierWait, b_.getVoidTy(), {ctx_, site(n), scalar(n->operands[0]), scalar(n->operands[1])});
  }
  void named_barrier(const NodeRef& n) {
    const char* fn = n->op == Op::NamedBarrierWait ? block_fn::kNamedBarrierWait : block_fn::kNamedBarrierArrive;
    runtime_call(fn, b_.getVoidTy(),
                 {ctx_, site(n), b_.getInt32(static_cast<int32_t>(n->attrs.ints.at(0))),
                  b_.getInt32(static_cast<int32_t>(n->attrs.ints.at(1)))});
  }
  // Every fiber runs the kernel; each takes the branch of its own task.
  void async_tasks(const NodeRef& n) {
    llvm::BasicBlock* after = llvm::BasicBlock::Create(c_, "tasks.end", fn_);
    llvm::SwitchInst* branch = b_.CreateSwitch(ctx_field(offsetof(ProgramCtx, task)), after,
                                               static_cast<unsigned>(n->regions.size()));
    for (size_t t = 0; t < n->regions.size(); ++t) {
      llvm::BasicBlock* body = llvm::BasicBlock::Create(c_, fmt::format("task.{}", n->attrs.names.at(t)), fn_, after);
      branch->addCase(b_.getInt32(static_cast<int32_t>(t)), body);
      b_.SetInsertPoint(body);
      region(n->regions[t]);
      b_.CreateBr(after);
    }
    b_.SetInsertPoint(after);
  }
  // Element t is thread t's: its index, lane (t % 32), warp (t / 32) or warp group (t / 128).
  void thread_index(const NodeRef& n) {
    static const int64_t shift[] = {0, 0, 5, 7};
    int64_t kind = n->attrs.ints[1];
    define_tile(n, [&](Value* i) {
      Value* v = kind == 1 ? b_.CreateAnd(i, i64c(31)) : b_.CreateLShr(i, i64c(shift[kind]));
      return b_.CreateTrunc(v, i32_);
    });
  }

  // One reading per element: the time-stamp counter, or CLOCK_REALTIME in nanoseconds (clock_gettime from
  // the C library in the process, as libm's functions are).
  void read_clock(const NodeRef& n) {
    if (n->attrs.ints[1] == 0)
      return define_tile(n, [&](Value*) -> Value* { return b_.CreateIntrinsic(i64_, llvm::Intrinsic::readcyclecounter, {}); });
    llvm::FunctionCallee clock_gettime =
        mod_->getOrInsertFunction("clock_gettime", llvm::FunctionType::get(i32_, {i32_, ptr_}, false));
    Value* timespec = entry_alloca(llvm::ArrayType::get(i64_, 2));  // {seconds, nanoseconds}
    define_tile(n, [&](Value*) {
      b_.CreateCall(clock_gettime, {b_.getInt32(0 /* CLOCK_REALTIME */), timespec});
      Value* seconds = b_.CreateLoad(i64_, timespec);
      Value* nanoseconds = b_.CreateLoad(i64_, b_.CreateConstGEP1_64(i64_, timespec, 1));
      return b_.CreateAdd(b_.CreateMul(seconds, i64c(1000000000)), nanoseconds);
    });
  }

  void task_replica_id(const NodeRef& n) {
    vals_[n.get()] = {Val::Kind::Scalar, ctx_field(offsetof(ProgramCtx, replica))};
  }

  void for_loop(const NodeRef& n) {
    auto bound = [&](size_t k) { return elem(n->operands[k], i64c(0)); };
    emit_for(b_, bound(0), bound(1), bound(2), [&](Value* i) {
      vals_[n->regions[0].args[0].get()] = {Val::Kind::Scalar, i};
      region(n->regions[0]);
    });
  }

  void if_else(const NodeRef& n) {
    emit_if(b_, elem(n->operands[0], i64c(0)), [&] { region(n->regions[0]); }, [&] {
      if (n->regions.size() > 1) region(n->regions[1]);
    });
  }

  const ir::Function& f_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  ElementOps ops_;
  std::unique_ptr<llvm::Module> mod_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::PointerType* ptr_ = nullptr;
  llvm::IntegerType *i8_ = nullptr, *i32_ = nullptr, *i64_ = nullptr;
  Value *args_ = nullptr, *ctx_ = nullptr, *frame_ = nullptr, *scratch_ = nullptr;
  bool checked_ = false;                  // bounds checks
  std::vector<int32_t> pointer_slots_;    // the argument slots of the pointer parameters
  std::vector<AccessSite> access_sites_;  // of the checks, by site index
  Value* extents_ = nullptr;
  int64_t frame_bytes_ = 0;
  std::unordered_map<const ir::Node*, Val> vals_;
  std::unordered_map<const ir::Node*, Value*> vars_;
  std::shared_ptr<BlockPlan> block_;                         // null without block ops
  std::shared_ptr<const passes::KernelPlans> plans_;         // shared memory (with the buffers' column panels), tasks
  std::unordered_map<const ir::Node*, int32_t> alloc_index_;  // LocalAlloc/AllocBarriers -> BlockPlan index
};

}  // namespace

CpuModule lower_to_cpu(const ir::Function& f, llvm::LLVMContext& context, const std::string& symbol,
                       int default_warps, bool check_bounds) {
  return Lowering(f, context, symbol, default_warps, check_bounds).run();
}

}  // namespace weft::codegen::cpu
