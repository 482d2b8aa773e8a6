// IR -> LLVM IR for the host CPU: the class that lowers one kernel (private to src/codegen/cpu/), its
// member functions in one file per section, as codegen/nvptx/lowering.h splits the NVPTX lowering:
//   lower_cpu.cpp                the entry point, node dispatch, tile ops (elementwise, shapes, loads and
//                                stores, reductions, dot) and control flow
//   lower_cpu_bounds_checks.cpp  the bounds checks before loads and stores (cpu_abi.h, LaunchChecks)
//   lower_cpu_block_ops.cpp      block ops: shared memory, barriers, TMA, async copies and dots, tasks
//
// The model (lower_cpu.h): one function per kernel, called once per program instance; rank-0 values are SSA
// registers; tiles live in the instance's frame and every tile operation is a loop over elements. Values
// whose elements are all equal (constants, broadcast scalars) stay "splats" and take no memory. Block ops
// (shared memory, barriers, tasks) are calls into the block runtime, each passing the index of its call site
// in the BlockPlan so that errors name the user's line.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/cpu/cpu_abi.h"
#include "codegen/cpu/lower_cpu.h"
#include "codegen/element_ops.h"
#include "codegen/llvm_builders.h"
#include "passes/kernel_plans.h"

namespace weft::codegen::cpu::detail {

// Internal to libweft (cmake/weft.map would export these names otherwise).
#pragma GCC visibility push(hidden)

using ir::NodeRef;
using ir::Op;
using llvm::Value;

struct Val {
  // Lazy: an elementwise tile not computed yet; its one consumer computes each element where it reads it
  // (Lowering::plan_fusion), so that a chain of elementwise ops is one loop, not one loop and tile each.
  enum class Kind { Scalar, Splat, Memory, Lazy } kind = Kind::Scalar;
  Value* v = nullptr;  // Scalar/Splat: the element in its compute type; Memory: address of element 0
};

inline int64_t numel(const ir::Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

class Lowering {
 public:
  Lowering(const ir::Function& f, llvm::LLVMContext& c, const std::string& symbol, int default_warps,
           bool check_bounds);
  CpuModule run();

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

  // A value as a whole (a lazy one has no whole: only its consumer, through elem(), reads it).
  const Val& val(const NodeRef& n) {
    const Val& v = vals_.at(n.get());
    if (v.kind == Val::Kind::Lazy)
      throw InternalError("CPU lowering: a fused elementwise value was read whole by " + std::string(ir::op_name(n->op)));
    return v;
  }
  // Element i (an i64) of a value, in its compute type. A lazy value's element is computed here, rounded
  // as a tile's store and load would round it.
  Value* elem(const NodeRef& n, Value* i) {
    const Val& v = vals_.at(n.get());
    if (v.kind == Val::Kind::Lazy) {
      const Lazy& lazy = lazy_.at(n.get());
      DType d = n->type.dtype;
      Value* x = lazy.element(i);
      return lazy.rounded ? x : ops_.to_compute(d, ops_.to_memory(d, x));
    }
    if (v.kind != Val::Kind::Memory) return v.v;
    return load_elem(n->type.dtype, v.v, i);
  }
  bool uniform(const NodeRef& n) {
    Val::Kind k = vals_.at(n.get()).kind;
    return k == Val::Kind::Scalar || k == Val::Kind::Splat;
  }

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

  // Defines n elementwise: a register for rank 0, a splat when every operand is uniform, lazy where
  // plan_fusion allows it, else a tile. `element` must own what it captures (a lazy one runs later).
  void define_elementwise(const NodeRef& n, std::function<Value*(Value*)> element) {
    DType d = n->type.dtype;
    bool all_uniform = true;
    for (const NodeRef& o : n->operands) all_uniform = all_uniform && uniform(o);
    if (n->type.shape.empty() || all_uniform) {
      Val v{n->type.shape.empty() ? Val::Kind::Scalar : Val::Kind::Splat, ops_.round(d, element(i64c(0)))};
      vals_[n.get()] = v;
      return;
    }
    if (define_lazy(n, element)) return;
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

  // ---- fusion of elementwise chains (lower_cpu_fusion.cpp) ---------------------------------------------

  struct Lazy {
    std::function<Value*(Value*)> element;
    int depth = 1;         // lazy values in the longest chain it computes, itself included
    bool rounded = false;  // element() gives values of the element type already (a Var's)
  };
  // Marks the elementwise values (and Var reads) that may stay lazy: one use, by a consumer in the same
  // region that reads each element once at its own index (elementwise ops, load, store, Var writes,
  // reductions), and (a Var read) no write of its Var before the value is computed.
  void plan_fusion(const ir::Region& r);
  // Makes n lazy when plan_fusion allows it and its chain is short enough; returns whether it did.
  bool define_lazy(const NodeRef& n, std::function<Value*(Value*)> element, bool rounded = false);

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

  // ---- nodes, tile ops and control flow (lower_cpu.cpp) ------------------------------------------------

  void region(const ir::Region& r);
  void node(const NodeRef& n);
  void copy_into(Value* slot, const NodeRef& value);
  void atomic(const NodeRef& n);
  Value* loop_condition_ = nullptr;  // the test of the while loop being lowered (its region 0's last statement)
  void reduce(const NodeRef& n);
  void dot(const NodeRef& n);
  void for_loop(const NodeRef& n);
  void if_else(const NodeRef& n);

  // ---- bounds checks (cpu_abi.h, LaunchChecks; lower_cpu_bounds_checks.cpp) ----------------------------

  Value* extents();
  void check_access(const NodeRef& n, const char* op, const NodeRef& ptrs, const NodeRef* mask, int64_t span = 0);

  // ---- block ops: calls into the block runtime (driver/cpu/block_runtime_abi.cpp) ----------------------

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

  // lower_cpu_block_ops.cpp
  void local_view(const NodeRef& n);
  void local_load(const NodeRef& n);
  void local_store(const NodeRef& n);
  void local_gather_scatter(const NodeRef& n);
  Value* stored_index(const NodeRef& view, Value* i);
  int64_t panel_of(const NodeRef& view);
  void local_cols(const NodeRef& n);
  void local_rows(const NodeRef& n);
  Value* tile_address(const NodeRef& x);
  Value* coordinates(const NodeRef& n, size_t first);
  Value* element_addresses(const NodeRef& view, int64_t count);
  void async_load(const NodeRef& n);
  void remote_store(const NodeRef& n);
  void async_dot(const NodeRef& n);
  void async_dot_wait(const NodeRef& n);
  void barrier_at(const NodeRef& n);
  void barrier_arrive(const NodeRef& n);
  void barrier_expect_bytes(const NodeRef& n);
  void barrier_wait(const NodeRef& n);
  void named_barrier(const NodeRef& n);
  void async_tasks(const NodeRef& n);
  void thread_index(const NodeRef& n);
  void read_clock(const NodeRef& n);
  void vote_ballot(const NodeRef& n);
  void task_replica_id(const NodeRef& n);

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
  std::unordered_map<const ir::Node*, Lazy> lazy_;
  std::unordered_set<const ir::Node*> fusible_;  // plan_fusion's choice
  std::shared_ptr<BlockPlan> block_;                         // null without block ops
  std::shared_ptr<const passes::KernelPlans> plans_;         // shared memory (with the buffers' column panels), tasks
  std::unordered_map<const ir::Node*, int32_t> alloc_index_;  // LocalAlloc/AllocBarriers -> BlockPlan index
};

#pragma GCC visibility pop

}  // namespace weft::codegen::cpu::detail
