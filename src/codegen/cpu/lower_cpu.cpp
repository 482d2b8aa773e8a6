// IR -> LLVM IR for the host CPU: the entry point, the BlockPlan, the Lowering's constructor and run(), node
// dispatch, the tile ops (elementwise, shapes, loads and stores, reductions, dot) and control flow. The
// model and the class: lowering.h.
#include "codegen/cpu/lower_cpu.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstddef>
#include <functional>
#include <unordered_map>

#include "codegen/cpu/lowering.h"
#include "ir/atomics.h"
#include "ir/copy_hints.h"
#include "passes/kernel_plans.h"

namespace weft::codegen::cpu::detail {
namespace {

bool is_block_op(Op op) {
  switch (op) {
    case Op::LocalAlloc: case Op::LocalView: case Op::LocalLoad: case Op::LocalStore: case Op::AllocBarriers:
    case Op::LocalGather: case Op::LocalScatter: case Op::LocalReinterpret:
    case Op::BarrierAt: case Op::BarrierExpectBytes: case Op::BarrierArrive: case Op::BarrierWait:
    case Op::NamedBarrierArrive: case Op::NamedBarrierWait: case Op::AsyncTasks: case Op::TaskReplicaId:
    case Op::LocalTrans: case Op::LocalRows: case Op::LocalCols: case Op::AsyncDot: case Op::AsyncDotWait: case Op::FenceAsyncShared:
    case Op::AsyncDescriptorLoad: case Op::AsyncDescriptorStore: case Op::AsyncStoreWait:
    case Op::ClusterCtaRank: case Op::ClusterSync: case Op::BarrierArriveRemote: case Op::AsyncDescriptorLoadMulticast:
    case Op::LocalStoreRemote: case Op::AsyncRemoteShmemCopy: case Op::AsyncLoadBulk: case Op::AsyncStoreBulk:
    case Op::AsyncRemoteShmemStore:
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

}  // namespace

Lowering::Lowering(const ir::Function& f, llvm::LLVMContext& c, const std::string& symbol, int default_warps,
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

CpuModule Lowering::run() {
  for (const NodeRef& p : f_.params) node(p);
  plan_fusion(f_.body);
  region(f_.body);
  b_.CreateRetVoid();
  check_lowered_module(*mod_, "CPU", f_.name);
  CpuModule out;
  out.symbol = fn_->getName().str();
  out.module = std::move(mod_);
  out.frame_bytes = std::max<int64_t>(frame_bytes_, kFrameAlign);
  out.block = block_;
  if (checked_) out.access_sites = std::make_shared<const std::vector<AccessSite>>(std::move(access_sites_));
  return out;
}

void Lowering::region(const ir::Region& r) {
  for (const NodeRef& n : r.body) node(n);
}

void Lowering::node(const NodeRef& n) {
  DType d = n->type.dtype;
  const auto& ops = n->operands;
  // (The elementwise ops' element functions capture by value: a lazy one runs after this call returns.)
  const NodeRef& x = ops.empty() ? n : ops[0];
  switch (ir::op_category(n->op)) {
    case ir::OpCategory::Unary:
      return define_elementwise(n, [this, n, x, d](Value* i) { return ops_.unary(n->op, d, elem(x, i), approximate(*n)); });
    case ir::OpCategory::Binary:
      return define_elementwise(n, [this, n, x, y = ops[1], d](Value* i) {
        return ops_.binary(n->op, d, elem(x, i), elem(y, i));
      });
    case ir::OpCategory::Compare:
      return define_elementwise(n, [this, n, x, y = ops[1]](Value* i) {
        return ops_.compare(n->op, x->type.dtype, elem(x, i), elem(y, i));
      });
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
      vals_[n.get()] = {n->type.shape.empty() ? Val::Kind::Scalar : Val::Kind::Splat, ops_.constant(d, n->attrs)};
      return;
    case Op::Arange: {
      int64_t start = n->attrs.ints[0];
      return define_tile(n, [&](Value* i) { return b_.CreateTrunc(b_.CreateAdd(i, i64c(start)), i32_); });
    }
    case Op::Fma:
      return define_elementwise(n, [this, x, y = ops[1], z = ops[2]](Value* i) {
        return ops_.fma(elem(x, i), elem(y, i), elem(z, i));
      });
    case Op::Select:
      return define_elementwise(n, [this, x, y = ops[1], z = ops[2]](Value* i) {
        return b_.CreateSelect(elem(x, i), elem(y, i), elem(z, i));
      });
    case Op::Cast:
      return define_elementwise(n, [this, x, d](Value* i) { return ops_.cast(x->type.dtype, d, elem(x, i)); });
    case Op::PtrAdd: {
      DType pointee{d.scalar, false};
      return define_elementwise(n, [this, x, y = ops[1], pointee](Value* i) {
        Value* offset = b_.CreateSExt(elem(y, i), i64_);
        return b_.CreateGEP(ops_.memory_type(pointee), elem(x, i), offset);
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
    case Op::AtomicRmw:
    case Op::AtomicCas:
      return atomic(n);
    case Op::WaitForPriorGrid:      // grids run one after another on the CPU
    case Op::LaunchDependentGrids:
      return;
    case Op::Fence:  // a program's tile ops run on one host thread, its task fibers on one too
      b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
      return;
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
    case Op::While:
      return emit_while(b_, [&] {
        region(n->regions[0]);
        return loop_condition_;
      }, [&] { region(n->regions[1]); });
    case Op::LoopCondition:
      loop_condition_ = elem(n->operands[0], i64c(0));
      return;
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
      // Read where its one consumer computes, when no write of the Var comes before (plan_fusion).
      if (define_lazy(n, [this, slot, d](Value* i) { return load_elem(d, slot, i); }, /*rounded=*/true)) return;
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
    case Op::LocalGather:
    case Op::LocalScatter: return local_gather_scatter(n);
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
    case Op::VoteBallot: return vote_ballot(n);
    case Op::Nanosleep: return;  // changes no value; the fibers' order is WEFT_CPU_SCHED_SEED's business
    case Op::LocalTrans: vals_[n.get()] = val(n->operands[0]); return;  // the same bytes, read transposed
    case Op::LocalReinterpret: {  // the same bytes; a whole buffer from its first stage on
      const NodeRef& src = n->operands[0];
      if (src->op != Op::LocalAlloc) {
        vals_[n.get()] = val(src);
        return;
      }
      Value* s = site(n, alloc_index_.at(src.get()));
      vals_[n.get()] = {Val::Kind::Scalar, runtime_call(block_fn::kLocalView, ptr_, {ctx_, s, b_.getInt32(0)})};
      return;
    }
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
    case Op::AsyncRemoteShmemStore: return remote_store(n);
    case Op::AsyncLoadBulk:
    case Op::AsyncStoreBulk: {
      const bool load = n->op == Op::AsyncLoadBulk;
      const NodeRef& view = n->operands[1];
      int64_t bytes = numel(view->type.shape) * view->type.dtype.bytes();
      check_access(n, load ? "async_load_bulk" : "async_store_bulk", n->operands[0], nullptr, bytes);
      Value* global = scalar(n->operands[0]), *shared = val(view).v;
      Value* count = b_.getInt32(static_cast<uint32_t>(bytes));
      if (load)
        runtime_call(block_fn::kBulkLoad, b_.getVoidTy(),
                     {ctx_, site(n), shared, global, count, scalar(n->operands[2])});
      else
        runtime_call(block_fn::kBulkStore, b_.getVoidTy(), {ctx_, site(n), global, shared, count});
      return;
    }
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
                   {ctx_, site(n), val(n->operands[0]).v, val(n->operands[1]).v, coordinates(n, 2),
                    b_.getInt32(static_cast<uint32_t>(ir::copy_hints(n->attrs).reduce))});
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

// Each element (where the mask holds) as one LLVM atomicrmw / cmpxchg with the C++ order asked for: the
// program runs on one host thread, so its order is program order, and other programs run on other threads
// (system scope: the host has no narrower one). Masked-off elements read as 0.
void Lowering::atomic(const NodeRef& n) {
  const auto& ops = n->operands;
  const ir::AtomicInfo info = ir::atomic_info(*n);
  const size_t values = info.cas ? 2 : 1;
  const NodeRef* mask = ops.size() > 1 + values ? &ops[1 + values] : nullptr;
  check_access(n, fmt::format("atomic_{}", ir::atomic_name(info)).c_str(), ops[0], mask);
  const DType d = n->type.dtype;
  const llvm::MaybeAlign align(d.bytes());
  using llvm::AtomicOrdering;
  const AtomicOrdering order[] = {AtomicOrdering::Monotonic, AtomicOrdering::Acquire, AtomicOrdering::Release,
                                  AtomicOrdering::AcquireRelease};
  const AtomicOrdering on_failure[] = {AtomicOrdering::Monotonic, AtomicOrdering::Acquire, AtomicOrdering::Monotonic,
                                       AtomicOrdering::Acquire};
  const int o = static_cast<int>(info.order);
  using Rmw = llvm::AtomicRMWInst;
  Rmw::BinOp rmw = Rmw::Xchg;
  switch (info.op) {
    case AtomicOp::add: rmw = d.is_float() ? Rmw::FAdd : Rmw::Add; break;
    case AtomicOp::max: rmw = Rmw::Max; break;
    case AtomicOp::min: rmw = Rmw::Min; break;
    case AtomicOp::and_: rmw = Rmw::And; break;
    case AtomicOp::or_: rmw = Rmw::Or; break;
    case AtomicOp::xor_: rmw = Rmw::Xor; break;
    case AtomicOp::xchg: rmw = Rmw::Xchg; break;
  }
  llvm::Type* t = ops_.compute_type(d);
  Value* old_slot = mask ? entry_alloca(t) : nullptr;
  // f16 and bf16 add: the f32 value rounded to 16 bits, added in memory's type (LLVM expands it into a
  // compare-and-swap loop here), the old value widened again; bf16 memory is i16 to the lowering.
  const bool half = d.scalar == ScalarType::f16 || d.scalar == ScalarType::bf16;
  llvm::Type* half_type = d.scalar == ScalarType::bf16 ? b_.getBFloatTy() : b_.getHalfTy();
  define_tile(n, [&](Value* i) {
    auto apply = [&]() -> Value* {
      Value* p = elem(ops[0], i);
      if (half) {
        Value* v = b_.CreateBitCast(ops_.to_memory(d, elem(ops[1], i)), half_type);
        Value* old = b_.CreateAtomicRMW(rmw, p, v, align, order[o]);
        return ops_.to_compute(d, b_.CreateBitCast(old, ops_.memory_type(d)));
      }
      if (!info.cas) return b_.CreateAtomicRMW(rmw, p, elem(ops[1], i), align, order[o]);
      llvm::AtomicCmpXchgInst* x = b_.CreateAtomicCmpXchg(p, elem(ops[1], i), elem(ops[2], i), align, order[o], on_failure[o]);
      return b_.CreateExtractValue(x, 0);
    };
    if (!mask) return apply();
    b_.CreateStore(llvm::Constant::getNullValue(t), old_slot);
    emit_if(b_, elem(*mask, i), [&] { b_.CreateStore(apply(), old_slot); }, [] {});
    return static_cast<Value*>(b_.CreateLoad(t, old_slot));
  });
}

void Lowering::copy_into(Value* slot, const NodeRef& value) {
  DType d = value->type.dtype;
  loop(numel(value->type.shape), [&](Value* i) { store_elem(d, slot, i, elem(value, i)); });
}

void Lowering::reduce(const NodeRef& n) {
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

void Lowering::dot(const NodeRef& n) {
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

void Lowering::for_loop(const NodeRef& n) {
  auto bound = [&](size_t k) { return elem(n->operands[k], i64c(0)); };
  emit_for(b_, bound(0), bound(1), bound(2), [&](Value* i) {
    vals_[n->regions[0].args[0].get()] = {Val::Kind::Scalar, i};
    region(n->regions[0]);
  });
}

void Lowering::if_else(const NodeRef& n) {
  emit_if(b_, elem(n->operands[0], i64c(0)), [&] { region(n->regions[0]); }, [&] {
    if (n->regions.size() > 1) region(n->regions[1]);
  });
}

}  // namespace weft::codegen::cpu::detail

namespace weft::codegen::cpu {

CpuModule lower_to_cpu(const ir::Function& f, llvm::LLVMContext& context, const std::string& symbol,
                       int default_warps, bool check_bounds) {
  return detail::Lowering(f, context, symbol, default_warps, check_bounds).run();
}

}  // namespace weft::codegen::cpu
