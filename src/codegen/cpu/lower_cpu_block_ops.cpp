// CPU lowering: block ops (shared memory and its views, mbarriers and named barriers, TMA, async_load,
// async_dot, async_tasks, thread identity and time), mostly calls into the block runtime
// (driver/cpu/block_runtime_abi.cpp), each passing the index of its call site in the BlockPlan.
#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include <cstddef>

#include "codegen/cpu/lowering.h"
#include "passes/shared_layouts.h"

namespace weft::codegen::cpu::detail {

// A stage of a buffer: its address in the block's shared memory (the runtime checks the stage).
void Lowering::local_view(const NodeRef& n) {
  Value* s = site(n, alloc_index_.at(n->operands[0].get()));
  vals_[n.get()] = {Val::Kind::Scalar, runtime_call(block_fn::kLocalView, ptr_, {ctx_, s, scalar(n->operands[1])})};
}
// Shared memory holds a stage row-major, like a tile in the frame: both copies are element loops. (The
// GPU's swizzles are a matter of addresses there; here every access is logical.)
void Lowering::local_load(const NodeRef& n) {
  Value* view = val(n->operands[0]).v;
  define_tile(n, [&](Value* i) { return load_elem(n->type.dtype, view, stored_index(n->operands[0], i)); });
}
void Lowering::local_store(const NodeRef& n) {
  Value* view = val(n->operands[0]).v;
  if (n->op == Op::LocalStoreRemote)  // the same stage in the other block's arena
    view = runtime_call(block_fn::kSharedAtRank, ptr_, {ctx_, site(n), view, scalar(n->operands[2])});
  const NodeRef& x = n->operands[1];
  loop(numel(x->type.shape), [&](Value* i) { store_elem(x->type.dtype, view, stored_index(n->operands[0], i), elem(x, i)); });
}
// local_gather (view, indices) and local_scatter (view, values, indices): element i of the indices is the
// view's element at i's own coordinates with the `axis` one replaced by its index. Every index is checked
// first (a block error naming the first bad one: nothing is read or written then); the accesses follow in
// row-major order, so among equal indices a scatter's later element is the one left.
void Lowering::local_gather_scatter(const NodeRef& n) {
  const bool scatter = n->op == Op::LocalScatter;
  const NodeRef& view = n->operands[0];
  const NodeRef& indices = n->operands[scatter ? 2 : 1];
  const ir::Shape& ishape = indices->type.shape;
  const ir::Shape& vshape = view->type.shape;
  const int64_t axis = n->attrs.ints[0], extent = vshape[static_cast<size_t>(axis)], count = numel(ishape);
  std::vector<int64_t> ist = strides(ishape), vst = strides(vshape);
  Value* base = val(view).v;
  auto index_at = [&](Value* i) { return b_.CreateSExt(elem(indices, i), i64_); };

  Value* bad = entry_alloca(i64_);  // the first element whose index is out of range, or count
  b_.CreateStore(i64c(count), bad);
  loop(count, [&](Value* i) {
    Value* out = b_.CreateICmpUGE(index_at(i), i64c(extent));
    Value* so_far = b_.CreateLoad(i64_, bad);
    b_.CreateStore(b_.CreateSelect(out, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, so_far, i), so_far), bad);
  });
  auto* fail = llvm::BasicBlock::Create(c_, "index_out_of_range", fn_);
  auto* ok = llvm::BasicBlock::Create(c_, "indices_in_range", fn_);
  Value* first = b_.CreateLoad(i64_, bad);
  b_.CreateCondBr(b_.CreateICmpNE(first, i64c(count)), fail, ok);
  b_.SetInsertPoint(fail);
  auto i32c = [&](int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); };
  runtime_call(block_fn::kLocalIndexError, b_.getVoidTy(),
               {ctx_, site(n, alloc_index_.at(passes::root_allocation(view.get()))), first,
                elem(indices, first), i32c(axis), i32c(extent), i32c(scatter)});
  b_.CreateRetVoid();
  b_.SetInsertPoint(ok);

  auto view_index = [&](Value* i) {  // element i of the indices -> its element of the view (row-major)
    Value* j = i64c(0);
    for (size_t d = 0; d < ishape.size(); ++d) {
      Value* c = static_cast<int64_t>(d) == axis ? index_at(i) : coord(i, ist[d], ishape[d]);
      j = b_.CreateAdd(j, b_.CreateMul(c, i64c(vst[d])));
    }
    return stored_index(view, j);
  };
  if (!scatter) {
    define_tile(n, [&](Value* i) { return load_elem(n->type.dtype, base, view_index(i)); });
    return;
  }
  const NodeRef& values = n->operands[1];
  loop(count, [&](Value* i) { store_elem(values->type.dtype, base, view_index(i), elem(values, i)); });
}
// Where element i of a view is stored: a local_trans view [C, R] reads storage [R, C]; a buffer in
// column panels keeps (r, c) at (c / P) * R * P + r * P + c % P (passes/shared_layouts.h).
Value* Lowering::stored_index(const NodeRef& view, Value* i) {
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
int64_t Lowering::panel_of(const NodeRef& view) {
  const ir::Shape& stored = view->op == Op::LocalTrans ? view->operands[0]->type.shape : view->type.shape;
  int64_t P = plans_->memory.of(passes::root_allocation(view.get())).panel;
  return stored.size() == 2 && P && P < stored[1] ? P : 0;
}
void Lowering::local_cols(const NodeRef& n) {
  const NodeRef& view = n->operands[0];
  int64_t P = plans_->memory.of(passes::root_allocation(n.get())).panel, first = n->attrs.ints[0];
  int64_t rows = view->type.shape[0], eb = n->type.dtype.bytes();
  int64_t bytes = P ? first / P * rows * P * eb : first * eb;
  vals_[n.get()] = {Val::Kind::Scalar, b_.CreateConstInBoundsGEP1_64(i8_, val(view).v, bytes)};
}
void Lowering::local_rows(const NodeRef& n) {
  const NodeRef& view = n->operands[0];
  int64_t row_bytes = numel(view->type.shape) / view->type.shape[0] * view->type.dtype.bytes();
  Value* first = b_.CreateSExt(scalar(n->operands[1]), i64_);
  vals_[n.get()] = {Val::Kind::Scalar, b_.CreateGEP(i8_, val(view).v, b_.CreateMul(first, i64c(row_bytes)))};
}
// The address of a tile's elements in the frame (a splat is written out first).
Value* Lowering::tile_address(const NodeRef& x) {
  if (!uniform(x)) return val(x).v;
  Value* slot = tile_slot(x->type.dtype, x->type.shape);
  loop(numel(x->type.shape), [&](Value* i) { store_elem(x->type.dtype, slot, i, elem(x, i)); });
  return slot;
}
// A TMA copy's coordinates (operands `first`...), outermost first, in an i32 array on the stack.
Value* Lowering::coordinates(const NodeRef& n, size_t first) {
  auto* type = llvm::ArrayType::get(i32_, 5);
  Value* array = entry_alloca(type);
  for (size_t i = first; i < n->operands.size(); ++i)
    b_.CreateStore(scalar(n->operands[i]), b_.CreateConstInBoundsGEP2_32(type, array, 0, static_cast<unsigned>(i - first)));
  return array;
}
// The address of each of a view's first `count` elements (where its layout stores them), in an array in the
// frame: what the runtime's element-wise copies write to.
Value* Lowering::element_addresses(const NodeRef& view, int64_t count) {
  Value* out = frame_slot(count * 8);
  Value* base = val(view).v;
  const int64_t bytes = view->type.dtype.bytes();
  loop(count, [&](Value* i) {
    Value* at = b_.CreateGEP(i8_, base, b_.CreateMul(stored_index(view, i), i64c(bytes)));
    b_.CreateStore(at, b_.CreateGEP(ptr_, out, i));
  });
  return out;
}
// async_load (ptrs, view[, mask[, other]]): the runtime gets each element's destination in shared memory
// (where the view's layout stores it), its source pointer, mask and fill value.
void Lowering::async_load(const NodeRef& n) {
  const auto& o = n->operands;
  check_access(n, "async_load", o[0], o.size() > 2 ? &o[2] : nullptr);
  DType d = o[1]->type.dtype;
  int64_t count = numel(o[0]->type.shape);
  Value* dst = element_addresses(o[1], count);
  Value* null = llvm::ConstantPointerNull::get(ptr_);
  auto i32c = [&](int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); };
  runtime_call(block_fn::kAsyncLoad, b_.getVoidTy(),
               {ctx_, site(n), i32c(count), i32c(d.bytes()), dst, tile_address(o[0]),
                o.size() > 2 ? tile_address(o[2]) : null, o.size() > 3 ? tile_address(o[3]) : null});
}
// async_remote_shmem_store (view, value, barrier, rank): each element's place in this block's view and the
// tile's values; the runtime maps the places into the block of that rank.
void Lowering::remote_store(const NodeRef& n) {
  const NodeRef& x = n->operands[1];
  const int64_t count = numel(x->type.shape);
  auto i32c = [&](int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); };
  runtime_call(block_fn::kRemoteStore, b_.getVoidTy(),
               {ctx_, site(n), i32c(count), i32c(x->type.dtype.bytes()), element_addresses(n->operands[0], count),
                tile_address(x), scalar(n->operands[2]), scalar(n->operands[3])});
}
void Lowering::async_dot(const NodeRef& n) {
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
void Lowering::async_dot_wait(const NodeRef& n) {
  Value* out = tile_slot(n->type.dtype, n->type.shape);
  runtime_call(block_fn::kAsyncDotWait, b_.getVoidTy(),
               {ctx_, site(n), b_.getInt32(static_cast<uint32_t>(n->attrs.ints[0])), tile_address(n->operands[0]), out,
                b_.getInt32(static_cast<uint32_t>(numel(n->type.shape)))});
  vals_[n.get()] = {Val::Kind::Memory, out};
}
// A barrier is its byte offset in shared memory (an i32 register).
void Lowering::barrier_at(const NodeRef& n) {
  Value* s = site(n, alloc_index_.at(n->operands[0].get()));
  vals_[n.get()] = {Val::Kind::Scalar, runtime_call(block_fn::kBarrierAt, i32_, {ctx_, s, scalar(n->operands[1])})};
}
void Lowering::barrier_arrive(const NodeRef& n) {
  runtime_call(block_fn::kBarrierArrive, b_.getVoidTy(), {ctx_, site(n), scalar(n->operands[0])});
}
void Lowering::barrier_expect_bytes(const NodeRef& n) {
  runtime_call(block_fn::kBarrierExpectBytes, b_.getVoidTy(),
               {ctx_, site(n), scalar(n->operands[0]), scalar(n->operands[1])});
}
void Lowering::barrier_wait(const NodeRef& n) {
  runtime_call(block_fn::kBarrierWait, b_.getVoidTy(), {ctx_, site(n), scalar(n->operands[0]), scalar(n->operands[1])});
}
void Lowering::named_barrier(const NodeRef& n) {
  const char* fn = n->op == Op::NamedBarrierWait ? block_fn::kNamedBarrierWait : block_fn::kNamedBarrierArrive;
  llvm::Value* id = n->operands.empty() ? b_.getInt32(static_cast<int32_t>(n->attrs.ints.at(0)))
                                        : scalar(n->operands[0]);  // computed in the kernel
  runtime_call(fn, b_.getVoidTy(), {ctx_, site(n), id, b_.getInt32(static_cast<int32_t>(n->attrs.ints.at(1)))});
}
// Every fiber runs the kernel; each takes the branch of its own task.
void Lowering::async_tasks(const NodeRef& n) {
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
void Lowering::thread_index(const NodeRef& n) {
  static const int64_t shift[] = {0, 0, 5, 7};
  int64_t kind = n->attrs.ints[1];
  define_tile(n, [&](Value* i) {
    Value* v = kind == 1 ? b_.CreateAnd(i, i64c(31)) : b_.CreateLShr(i, i64c(shift[kind]));
    return b_.CreateTrunc(v, i32_);
  });
}

// One reading per element: the time-stamp counter, or CLOCK_REALTIME in nanoseconds (clock_gettime from
// the C library in the process, as libm's functions are).
void Lowering::read_clock(const NodeRef& n) {
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

// Element t: bit l set where lane l of t's warp (element t - t % 32 + l) votes true and bit l of the mask is
// set; a scalar vote is the mask or 0.
void Lowering::vote_ballot(const NodeRef& n) {
  const NodeRef& pred = n->operands[0];
  Value* mask = b_.getInt32(static_cast<uint32_t>(n->attrs.ints[1]));
  if (pred->type.shape.empty()) {
    vals_[n.get()] = {Val::Kind::Scalar, b_.CreateSelect(elem(pred, i64c(0)), mask, b_.getInt32(0))};
    return;
  }
  define_tile(n, [&](Value* i) {
    Value* warp_start = b_.CreateAnd(i, i64c(~int64_t(31)));
    Value* bits = b_.getInt32(0);
    for (int64_t lane = 0; lane < 32; ++lane) {
      Value* vote = b_.CreateZExt(elem(pred, b_.CreateAdd(warp_start, i64c(lane))), i32_);
      bits = b_.CreateOr(bits, b_.CreateShl(vote, b_.getInt32(static_cast<uint32_t>(lane))));
    }
    return b_.CreateAnd(bits, mask);
  });
}

void Lowering::task_replica_id(const NodeRef& n) {
  vals_[n.get()] = {Val::Kind::Scalar, ctx_field(offsetof(ProgramCtx, replica))};
}

}  // namespace weft::codegen::cpu::detail
