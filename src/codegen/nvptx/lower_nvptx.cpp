// IR -> per-thread LLVM IR for NVPTX.
//
// Layout: a program instance is one block of T = 32 * num_warps threads. A tile of N elements (N and T
// powers of two) is spread over the threads in a blocked layout: thread t holds R = max(1, N / T)
// registers in chunks of V = clamp(N / T, 1, 8) consecutive elements; register r = c * V + j is flat
// element ((c * T + t) * V + j) mod N. A warp's chunk c is one contiguous run of memory when the tile is
// (16-byte accesses per thread), and when N < T threads hold copies. Every tile
// with the same element count has the same layout, so elementwise ops and reshapes need no data
// movement; broadcasts, permutes, reductions and dot exchange data through shared memory. Rank-0 values
// are uniform: every thread holds the same value, so control flow on them never diverges.
//
// Groups: tile operations run on a group of threads — the whole block, or inside async_tasks one task
// replica (its warps, renumbered from 0). A group syncs with bar.sync 0 (the block) or its own named
// barrier (id 15 - replica number) and has its own scratch shared memory for exchanges, after the user's
// allocations (passes/shared_memory_plan.h).
#include "codegen/nvptx/lower_nvptx.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "codegen/element_ops.h"
#include "codegen/llvm_builders.h"
#include "codegen/nvptx/debug_waits.h"
#include "codegen/nvptx/async_copy.h"
#include "codegen/nvptx/mma_tiles.h"
#include "codegen/nvptx/ptx_instructions.h"
#include "passes/access_patterns.h"
#include "passes/shared_layouts.h"
#include "passes/shared_memory_plan.h"
#include "passes/task_plan.h"

namespace weft::codegen::nvptx {
namespace {

using ir::NodeRef;
using ir::Op;
using llvm::Value;

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;
constexpr int64_t kMaxSharedBytes = passes::kMaxSharedBytesPerBlock;
constexpr int64_t kScratchAlign = 16;
constexpr int64_t kMaxVector = 8;                // consecutive elements per thread in the blocked layout
constexpr int64_t kMaxAccessBytes = 16;          // the widest global load/store of one thread

struct Regs {
  std::vector<Value*> v;  // see the layout above
  bool uniform = false;   // every register holds the same value (fits any layout)
  bool wgmma = false;     // the wgmma accumulator layout of a [rows, cols] tile instead (see wgmma_index)
  int64_t rows = 0, cols = 0;
};

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
bool is_descriptor(const ir::Node& param) { return param.type.kind == ir::Type::Kind::TensorDesc; }
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

std::vector<int64_t> strides(const ir::Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

class Lowering {
 public:
  Lowering(const ir::Function& f, llvm::LLVMContext& c, int num_warps, const ClusterDims& cluster,
           const std::string& symbol, const passes::WaitSites* debug_waits)
      : f_(f), c_(c), b_(c), ops_(b_, MathTarget::Nvptx, kGlobal), ptx_(b_), patterns_(f),
        tasks_(passes::plan_tasks(f, num_warps)), allocations_(passes::plan_shared_memory(f)),
        threads_(tasks_.threads()), wait_sites_(debug_waits), cluster_(cluster) {
    mod_ = std::make_unique<llvm::Module>(symbol, c);
    // Numbers and pointers travel as 64-bit slots; a TMA descriptor arrives by value (128 bytes, a
    // grid-constant .param whose address the TMA instructions take).
    std::vector<llvm::Type*> params;
    for (const NodeRef& p : f.params) params.push_back(is_descriptor(*p) ? static_cast<llvm::Type*>(llvm::PointerType::get(c, 0)) : b_.getInt64Ty());
    if (wait_sites_) params.insert(params.end(), 3, b_.getInt64Ty());  // debug mode: record, claim, timeout
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, *mod_);
    for (size_t i = 0; i < f.params.size(); ++i) {
      if (!is_descriptor(*f.params[i])) continue;
      llvm::AttrBuilder attrs(c);
      attrs.addByValAttr(llvm::ArrayType::get(b_.getInt8Ty(), 128));
      attrs.addAlignmentAttr(64);
      attrs.addAttribute("nvvm.grid_constant");
      fn_->addParamAttrs(static_cast<unsigned>(i), attrs);
    }
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(threads_));
    // setmaxnreg needs a register cap at entry, which one block per SM gives (launch_bounds(threads, 1)).
    if (tasks_.entry_regs) fn_->addFnAttr("nvvm.minctasm", "1");
    // .explicitcluster and .reqnctapercluster x, y, z: the kernel launches only in clusters of that shape.
    if (clustered())
      fn_->addFnAttr("nvvm.cluster_dim", fmt::format("{},{},{}", cluster_.x, cluster_.y, cluster_.z));
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    smem_ = new llvm::GlobalVariable(*mod_, llvm::ArrayType::get(b_.getInt8Ty(), 0), false,
                                     llvm::GlobalValue::ExternalLinkage, nullptr, "weft_shared", nullptr,
                                     llvm::GlobalValue::NotThreadLocal, kShared);
    smem_->setAlignment(llvm::Align(16));
    if (wait_sites_) debug_waits_ = std::make_unique<DebugWaits>(b_, fn_);
    entry_ = llvm::BasicBlock::Create(c, "entry", fn_);
    b_.SetInsertPoint(entry_);
    tid_ = block_tid_ = ptx_.thread_index();
    scratch_start_ = round_up(allocations_.bytes, kScratchAlign);
    scratch_ = i32c(scratch_start_);
    // The byte stride between task replicas' scratch areas: known once every task is lowered (run()).
    scratch_stride_ = new llvm::GlobalVariable(*mod_, b_.getInt32Ty(), true, llvm::GlobalValue::InternalLinkage,
                                               nullptr, "weft_scratch_stride");
  }

  LoweredKernel run() {
    for (size_t i = 0; i < f_.params.size(); ++i)
      regs_[f_.params[i].get()] = {{is_descriptor(*f_.params[i])
                                        ? b_.CreatePtrToInt(fn_->getArg(i), b_.getInt64Ty())
                                        : ops_.from_slot(f_.params[i]->type.dtype, fn_->getArg(i))}};
    for (bool changed = true; changed;) {
      changed = false;
      find_wgmma_vars(f_.body, changed);
    }
    init_barriers();
    defer_prologue_tiles();
    region(f_.body);
    // No block of the cluster exits (freeing its shared memory) while another may still arrive at its
    // barriers or multicast into it.
    if (clustered() && has_barriers_) ptx_.cluster_sync();
    b_.CreateRetVoid();
    int64_t stride = round_up(scratch_bytes_, kScratchAlign);
    scratch_stride_->setInitializer(b_.getInt32(static_cast<uint32_t>(stride)));
    int64_t total = scratch_start_ + (tasks_.tasks ? std::max<int64_t>(1, tasks_.fibers()) : 1) * stride;
    if (total > kMaxSharedBytes)
      throw Error(fmt::format("kernel '{}' needs {} bytes of shared memory per block but a block has at most {}: the "
                              "allocations take {} and the exchanges between threads {} per {}:{}\nuse fewer stages or "
                              "smaller tiles",
                              f_.name, total, kMaxSharedBytes, allocations_.bytes, stride,
                              tasks_.tasks ? "task replica" : "block", allocations_.table()),
                  f_.loc);
    std::string problems;
    llvm::raw_string_ostream os(problems);
    if (llvm::verifyModule(*mod_, &os))
      throw InternalError(fmt::format("NVPTX lowering of kernel '{}' produced invalid LLVM IR: {}", f_.name, problems));
    LoweredKernel out;
    out.symbol = fn_->getName().str();
    out.module = std::move(mod_);
    out.shared_bytes = total;
    out.threads = tasks_.threads();
    return out;
  }

 private:
  // ---- layout ------------------------------------------------------------------------------------------

  int64_t per_thread(int64_t n) const { return std::max<int64_t>(1, n / threads_); }
  int64_t vector_width(int64_t n) const { return std::clamp<int64_t>(n / threads_, 1, kMaxVector); }
  Value* i32c(int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); }
  // Flat element index of register r of this thread, in a tile of n elements.
  Value* flat_index(int64_t n, int64_t r) {
    if (n == 1) return i32c(0);
    int64_t v = vector_width(n), chunk = r / v, j = r % v;
    if (n < threads_ * v)  // threads hold copies: wrap around
      return b_.CreateAnd(b_.CreateAdd(b_.CreateMul(tid_, i32c(v)), i32c(chunk * threads_ * v + j)), i32c(n - 1));
    // No wrap-around, and no signed overflow (n <= 2^20): LLVM can then see that a chunk's elements are
    // consecutive, and fold the run-time check of the 16-byte accesses.
    return b_.CreateNSWAdd(b_.CreateNSWMul(tid_, i32c(v)), i32c(chunk * threads_ * v + j));
  }
  // Register r of x, or the first register of its run when the analysis proves the run holds one value
  // (a chunk's V registers are V consecutive flat elements from a multiple of V): a mask `cols < n` then
  // costs one compare per chunk, not one per element.
  Value* same_value_reg(const NodeRef& x, size_t r) {
    const std::vector<Value*>& v = regs(x).v;
    int64_t k = std::min(patterns_.of(x.get()).constancy, vector_width(x->type.numel()));
    if (k <= 1 || x->type.numel() < threads_ * vector_width(x->type.numel())) return v[r];
    return v[r - r % static_cast<size_t>(k)];
  }
  Regs splat(Value* v, int64_t n) { return {std::vector<Value*>(per_thread(n), v), true}; }
  // A value's registers in the blocked layout (a wgmma-layout operand of this node is converted first).
  const Regs& regs(const NodeRef& n) {
    auto it = converted_.find(n.get());
    return it != converted_.end() ? it->second : regs_.at(n.get());
  }
  // A value's registers in whatever layout it has.
  const Regs& raw(const NodeRef& n) { return regs_.at(n.get()); }

  // The wgmma accumulator layout of a [rows, cols] f32 tile on one warp group (128 threads): per 64 rows,
  // for each 8 columns c0, thread t (warp w, lane l) holds 4 registers: (16w + l/4, c0 + 2(l%4) + {0, 1})
  // and the same 8 rows lower (the D fragment of wgmma.m64nNk16 in the PTX ISA).
  Value* wgmma_index(int64_t cols, int64_t r) {
    int64_t per_block = cols / 2, block = r / per_block, q = r % per_block, i = q / 4, e = q % 4;
    Value* warp = b_.CreateLShr(tid_, i32c(5));
    Value* lane = b_.CreateAnd(tid_, i32c(31));
    Value* row = b_.CreateAdd(b_.CreateAdd(b_.CreateMul(warp, i32c(16)), b_.CreateLShr(lane, i32c(2))),
                              i32c(block * 64 + (e >= 2 ? 8 : 0)));
    Value* col = b_.CreateAdd(b_.CreateShl(b_.CreateAnd(lane, i32c(3)), i32c(1)), i32c(8 * i + (e & 1)));
    return b_.CreateAdd(b_.CreateMul(row, i32c(cols)), col);
  }
  Value* index_of(const Regs& r, int64_t n, int64_t k) { return r.wgmma ? wgmma_index(r.cols, k) : flat_index(n, k); }

  // The same tile in the other layout, through the group's scratch shared memory.
  Regs relayout(const Regs& src, DType d, const ir::Shape& shape, bool to_wgmma, SourceLoc loc) {
    int64_t n = shape.empty() ? 1 : shape[0] * (shape.size() > 1 ? shape[1] : 1);
    if (src.uniform) {
      Regs out = src;
      out.wgmma = to_wgmma;
      out.rows = shape[0];
      out.cols = shape.size() > 1 ? shape[1] : 1;
      return out;
    }
    llvm::Type* t = shared_type(d);
    reserve_shared(n * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
    for (size_t r = 0; r < src.v.size(); ++r) b_.CreateStore(to_shared(d, src.v[r]), shared_at(t, 0, index_of(src, n, r)));
    sync_group();
    Regs out;
    out.wgmma = to_wgmma;
    out.rows = shape[0];
    out.cols = shape.size() > 1 ? shape[1] : 1;
    for (int64_t r = 0; r < per_thread(n); ++r)
      out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, index_of(out, n, r)))));
    sync_group();
    return out;
  }

  // ---- shared memory -----------------------------------------------------------------------------------

  llvm::Type* shared_type(DType d) {  // pointers travel as integers
    return d.pointer ? b_.getInt64Ty() : ops_.compute_type(d)->isIntegerTy(1) ? b_.getInt8Ty() : ops_.compute_type(d);
  }
  Value* to_shared(DType d, Value* v) {
    if (d.pointer) return b_.CreatePtrToInt(v, b_.getInt64Ty());
    return v->getType()->isIntegerTy(1) ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
  }
  Value* from_shared(DType d, Value* v) {
    if (d.pointer) return b_.CreateIntToPtr(v, ops_.compute_type(d));
    return d.is_bool() ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }
  // Address of element `index` (i32) of an array of `t` starting `byte_offset` into shared memory.
  // The group's scratch shared memory.
  Value* scratch_base() { return b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(scratch_, b_.getInt64Ty())); }
  // Address of element `index` (i32) of an array of `t` starting `byte_offset` into the group's scratch.
  Value* shared_at(llvm::Type* t, int64_t byte_offset, Value* index) {
    return shared_element(t, b_.CreateAdd(scratch_, i32c(byte_offset)), index);
  }
  // Address of element `index` of an array of `t` at `byte_offset` (i32) of the block's shared memory.
  Value* shared_element(llvm::Type* t, Value* byte_offset, Value* index) {
    Value* base = b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(byte_offset, b_.getInt64Ty()));
    return b_.CreateInBoundsGEP(t, base, b_.CreateZExt(index, b_.getInt64Ty()));
  }
  int64_t reserve_shared(int64_t bytes, SourceLoc loc) {
    scratch_bytes_ = std::max(scratch_bytes_, bytes);
    if (scratch_start_ + scratch_bytes_ > kMaxSharedBytes)
      throw Error(fmt::format("this operation needs {} bytes of shared memory to exchange data between threads, and "
                              "the kernel's allocations {}: more than the {} a block can have; use smaller tiles",
                              bytes, allocations_.bytes, kMaxSharedBytes),
                  loc);
    return bytes;
  }
  // Shared memory from offset 0 for an operation that writes it first: threads still reading the partials
  // of the last whole-block reduction (which ends without a barrier) must be done.
  void claim_shared(int64_t bytes, SourceLoc loc) {
    settle_shared();
    reserve_shared(bytes, loc);
  }
  void settle_shared() {
    if (!partials_unsettled_) return;
    sync_group();
    partials_unsettled_ = false;
  }
  // Writes a tile's elements to shared memory (as `t`) starting at `byte_offset`.
  void stage(const Regs& src, DType d, int64_t n, int64_t byte_offset) {
    llvm::Type* t = shared_type(d);
    for (size_t r = 0; r < src.v.size(); ++r)
      b_.CreateStore(to_shared(d, src.v[r]), shared_at(t, byte_offset, flat_index(n, r)));
  }

  // Moves a tile into another layout: dst element i takes src element source_of(i).
  Regs exchange(const Regs& src, DType d, int64_t n_src, int64_t n_dst, const std::function<Value*(Value*)>& source_of,
                SourceLoc loc) {
    llvm::Type* t = shared_type(d);
    claim_shared(n_src * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
    stage(src, d, n_src, 0);
    sync_group();
    Regs out;
    for (int64_t r = 0; r < per_thread(n_dst); ++r)
      out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, source_of(flat_index(n_dst, r))))));
    sync_group();
    return out;
  }

  // ---- nodes -------------------------------------------------------------------------------------------

  void region(const ir::Region& r) {
    for (const NodeRef& n : r.body)
      if (!deferred_.count(n.get())) node(n);
  }

  // In a kernel with tasks, a tile made before async_tasks belongs to no group yet: its registers depend
  // on the group's layout. Such tiles are lowered again at the start of each task, in the task's own
  // layout (they are pure: values, not effects).
  void defer_prologue_tiles() {
    if (!tasks_.tasks) return;
    for (const NodeRef& n : f_.body.body) {
      if (n.get() == tasks_.tasks) break;
      if (n->type.kind == ir::Type::Kind::Var && !n->type.shape.empty())
        throw Error("a tile Var declared before async_tasks: each task holds tiles in its own layout, so declare it "
                    "inside the task that uses it",
                    n->loc);
      if (n->type.is_value() && !n->type.shape.empty()) {
        deferred_.insert(n.get());
        deferred_order_.push_back(n);
      }
    }
  }

  void elementwise(const NodeRef& n, const std::function<Value*(size_t r)>& element, bool wgmma = false) {
    Regs out;
    for (int64_t r = 0; r < per_thread(n->type.numel()); ++r) out.v.push_back(ops_.round(n->type.dtype, element(r)));
    if (wgmma) {
      out.wgmma = true;
      out.rows = n->type.shape[0];
      out.cols = n->type.shape[1];
    }
    regs_[n.get()] = std::move(out);
  }

  // ---- layouts -----------------------------------------------------------------------------------------

  static bool elementwise_op(Op op) {
    auto c = ir::op_category(op);
    return c == ir::OpCategory::Unary || c == ir::OpCategory::Binary || c == ir::OpCategory::Compare ||
           op == Op::Fma || op == Op::Select || op == Op::Cast;
  }
  static bool uniform_node(const ir::Node& n) {
    return n.op == Op::Constant || (n.op == Op::Broadcast && n.operands[0]->type.numel() == 1);
  }
  // Whether a node's value lives in the wgmma layout (decided before lowering, so that Vars get it too):
  // async_dot results, Vars assigned one, and elementwise ops on such values (with constants).
  bool produces_wgmma(const ir::Node& n) {
    if (n.op == Op::AsyncDot || n.op == Op::AsyncDotWait) return true;
    if (n.op == Op::VarGet) return wgmma_vars_.count(n.operands[0].get()) > 0;
    if (n.op == Op::Slice)
      return n.attrs.ints[0] == 1 && n.attrs.ints[1] % 8 == 0 && n.attrs.ints[2] % 8 == 0 && produces_wgmma(*n.operands[0]);
    if (!elementwise_op(n.op)) return false;
    bool any = false;
    for (const NodeRef& o : n.operands) {
      if (produces_wgmma(*o))
        any = true;
      else if (!uniform_node(*o))
        return false;
    }
    return any;
  }
  void find_wgmma_vars(const ir::Region& r, bool& changed) {
    for (const NodeRef& n : r.body) {
      if (n->op == Op::VarSet && produces_wgmma(*n->operands[1]) && wgmma_vars_.insert(n->operands[0].get()).second)
        changed = true;
      for (const ir::Region& inner : n->regions) find_wgmma_vars(inner, changed);
    }
  }

  // Converts this node's wgmma-layout operands to the blocked layout unless the node keeps them (then
  // returns whether its own result is in the wgmma layout).
  bool prepare_layouts(const NodeRef& n) {
    converted_.clear();
    const auto& o = n->operands;
    bool any = false, all = true;
    for (const NodeRef& x : o) {
      auto it = regs_.find(x.get());
      if (it == regs_.end()) continue;
      if (it->second.wgmma && !it->second.uniform)
        any = true;
      else if (!it->second.uniform)
        all = false;
    }
    if (!any) return false;
    if (elementwise_op(n->op) && all) return true;
    if (n->op == Op::AsyncDot || n->op == Op::AsyncDotWait || n->op == Op::VarSet || n->op == Op::VarDecl ||
        n->op == Op::LocalStore || n->op == Op::LocalStoreRemote || n->op == Op::Slice)
      return false;  // these handle the wgmma layout themselves
    for (const NodeRef& x : o) {
      const Regs& r = raw(x);
      if (r.wgmma && !r.uniform) converted_[x.get()] = relayout(r, x->type.dtype, x->type.shape, false, n->loc);
    }
    return false;
  }
  // `x`'s registers in the layout of Var `var`.
  Regs in_var_layout(const NodeRef& x, const ir::Node* var, SourceLoc loc) {
    const Regs& r = raw(x);
    bool want = wgmma_vars_.count(var) > 0;
    if (r.uniform || r.wgmma == want) {
      Regs out = r;
      out.wgmma = want;
      out.rows = want ? x->type.shape[0] : 0;
      out.cols = want ? x->type.shape[1] : 0;
      return out;
    }
    return relayout(r, x->type.dtype, x->type.shape, want, loc);
  }

  void node(const NodeRef& n) {
    if (n->type.is_value() && !n->type.shape.empty() && !is_pow2(threads_))
      throw Error(fmt::format("{} makes a tile outside async_tasks, where all {} warps of the block run it; tile "
                              "operations need a power-of-two number of warps: move it into a task",
                              ir::op_name(n->op), threads_ / 32),
                  n->loc);
    DType d = n->type.dtype;
    const auto& o = n->operands;
    bool keep_wgmma = prepare_layouts(n);
    // wgmma-layout registers are not in the blocked order the access-pattern analysis describes.
    auto at = [&](size_t i, size_t r) { return keep_wgmma ? regs(o[i]).v[r] : same_value_reg(o[i], r); };
    switch (ir::op_category(n->op)) {
      case ir::OpCategory::Unary:
        return elementwise(n, [&](size_t r) { return ops_.unary(n->op, d, at(0, r)); }, keep_wgmma);
      case ir::OpCategory::Binary:
        return elementwise(n, [&](size_t r) { return ops_.binary(n->op, d, at(0, r), at(1, r)); }, keep_wgmma);
      case ir::OpCategory::Compare:
        return elementwise(n, [&](size_t r) { return ops_.compare(n->op, o[0]->type.dtype, at(0, r), at(1, r)); },
                           keep_wgmma);
      default: break;
    }
    switch (n->op) {
      case Op::ProgramId: regs_[n.get()] = {{ptx_.block_index(n->axis())}}; return;
      case Op::NumPrograms: regs_[n.get()] = {{ptx_.grid_size(n->axis())}}; return;
      case Op::Constant: regs_[n.get()] = splat(ops_.constant(d, n->attrs.number), n->type.numel()); return;
      case Op::Arange: {
        int64_t start = n->attrs.ints[0];
        return elementwise(n, [&](size_t r) { return b_.CreateAdd(flat_index(n->type.numel(), r), i32c(start)); });
      }
      case Op::Fma: return elementwise(n, [&](size_t r) { return ops_.fma(at(0, r), at(1, r), at(2, r)); }, keep_wgmma);
      case Op::Select:
        return elementwise(n, [&](size_t r) { return b_.CreateSelect(at(0, r), at(1, r), at(2, r)); }, keep_wgmma);
      case Op::Cast: return elementwise(n, [&](size_t r) { return ops_.cast(o[0]->type.dtype, d, at(0, r)); }, keep_wgmma);
      case Op::PtrAdd: {
        llvm::Type* pointee = ops_.memory_type(DType{d.scalar, false});
        return elementwise(
            n, [&](size_t r) { return b_.CreateGEP(pointee, at(0, r), b_.CreateSExt(at(1, r), b_.getInt64Ty())); });
      }
      case Op::Reshape: regs_[n.get()] = regs(o[0]); return;  // same element count, same layout
      case Op::Broadcast: return broadcast(n);
      case Op::Permute: return permute(n);
      case Op::Slice: return slice(n);
      case Op::Load: return load(n);
      case Op::Store: return store(n);
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::ArgMax:
      case Op::ArgMin: return reduce(n);
      case Op::Dot: return dot(n);
      case Op::For: return for_loop(n);
      case Op::If: return if_else(n);
      case Op::VarDecl: {
        std::vector<Value*> slots;
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        for (Value* v : in_var_layout(o[0], n.get(), n->loc).v) {
          slots.push_back(eb.CreateAlloca(v->getType()));
          b_.CreateStore(v, slots.back());
        }
        vars_[n.get()] = std::move(slots);
        return;
      }
      case Op::VarGet: {
        Regs out;
        for (Value* slot : vars_.at(o[0].get())) out.v.push_back(b_.CreateLoad(ops_.compute_type(d), slot));
        if (wgmma_vars_.count(o[0].get())) {
          out.wgmma = true;
          out.rows = n->type.shape[0];
          out.cols = n->type.shape[1];
        }
        regs_[n.get()] = std::move(out);
        return;
      }
      case Op::VarSet: {
        const std::vector<Value*>& slots = vars_.at(o[0].get());
        Regs value = in_var_layout(o[1], o[0].get(), n->loc);
        for (size_t r = 0; r < slots.size(); ++r) b_.CreateStore(value.v[r], slots[r]);
        return;
      }
      default: return hopper_node(n);
    }
  }

  void broadcast(const NodeRef& n) {
    const NodeRef& src = n->operands[0];
    int64_t n_src = src->type.numel();
    if (n_src == 1) {
      regs_[n.get()] = splat(regs(src).v[0], n->type.numel());
      return;
    }
    const ir::Shape& to = n->type.shape;
    const ir::Shape& from = src->type.shape;
    std::vector<int64_t> to_st = strides(to), from_st = strides(from);
    size_t offset = to.size() - from.size();
    regs_[n.get()] = exchange(regs(src), n->type.dtype, n_src, n->type.numel(), [&](Value* i) {
      Value* j = i32c(0);
      for (size_t k = offset; k < to.size(); ++k) {
        if (from[k - offset] == 1) continue;
        Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(to_st[k])), i32c(to[k]));
        j = b_.CreateAdd(j, b_.CreateMul(c, i32c(from_st[k - offset])));
      }
      return j;
    }, n->loc);
  }

  // A static part of a tile. Columns of a wgmma-layout tile in steps of 8 are a subset of its registers;
  // anything else goes through shared memory.
  void slice(const NodeRef& n) {
    const NodeRef& src = n->operands[0];
    int64_t axis = n->attrs.ints[0], start = n->attrs.ints[1], size = n->attrs.ints[2];
    const Regs& r = raw(src);
    if (r.wgmma && !r.uniform && axis == 1 && start % 8 == 0 && size % 8 == 0) {
      Regs out;
      out.wgmma = true;
      out.rows = r.rows;
      out.cols = size;
      for (int64_t block = 0; block < r.rows / 64; ++block)
        for (int64_t k = 0; k < size / 2; ++k) out.v.push_back(r.v[block * r.cols / 2 + start / 2 + k]);
      regs_[n.get()] = std::move(out);
      return;
    }
    if (r.uniform) {
      regs_[n.get()] = splat(r.v[0], n->type.numel());
      return;
    }
    Regs blocked = r.wgmma ? relayout(r, src->type.dtype, src->type.shape, false, n->loc) : r;
    std::vector<int64_t> src_st = strides(src->type.shape), dst_st = strides(n->type.shape);
    regs_[n.get()] = exchange(blocked, n->type.dtype, src->type.numel(), n->type.numel(), [&](Value* i) {
      Value* j = i32c(0);
      for (size_t k = 0; k < n->type.shape.size(); ++k) {
        Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(dst_st[k])), i32c(n->type.shape[k]));
        if (static_cast<int64_t>(k) == axis) c = b_.CreateAdd(c, i32c(start));
        j = b_.CreateAdd(j, b_.CreateMul(c, i32c(src_st[k])));
      }
      return j;
    }, n->loc);
  }

  void permute(const NodeRef& n) {
    const NodeRef& src = n->operands[0];
    std::vector<int64_t> src_st = strides(src->type.shape), dst_st = strides(n->type.shape);
    regs_[n.get()] = exchange(regs(src), n->type.dtype, src->type.numel(), n->type.numel(), [&](Value* i) {
      Value* j = i32c(0);
      for (size_t k = 0; k < n->type.shape.size(); ++k) {
        Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(dst_st[k])), i32c(n->type.shape[k]));
        j = b_.CreateAdd(j, b_.CreateMul(c, i32c(src_st[n->attrs.ints[k]])));
      }
      return j;
    }, n->loc);
  }

  // Runs `body` only where `cond` holds; returns the phi of its value and `otherwise`.
  Value* guarded(Value* cond, const std::function<Value*()>& body, Value* otherwise) {
    auto* then_block = llvm::BasicBlock::Create(c_, "guarded", fn_);
    auto* join = llvm::BasicBlock::Create(c_, "guarded.end", fn_);
    llvm::BasicBlock* before = b_.GetInsertBlock();
    b_.CreateCondBr(cond, then_block, join);
    b_.SetInsertPoint(then_block);
    Value* v = body();
    llvm::BasicBlock* then_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    if (!otherwise) return nullptr;
    llvm::PHINode* phi = b_.CreatePHI(otherwise->getType(), 2);
    phi->addIncoming(v, then_end);
    phi->addIncoming(otherwise, before);
    return phi;
  }

  // One chunk of V registers accesses memory as whole 16-byte pieces when its pointers are consecutive,
  // the first is aligned and every mask is set; otherwise element by element. What the access-pattern
  // analysis proves (pointers from arange and 16-byte-aligned arguments) is not checked again at run time;
  // the rest is.
  struct Chunk {
    std::vector<Value*> ptrs;
    std::vector<Value*> masks;  // empty: unmasked
    bool one_mask = false;      // proven equal over the chunk (`cols < n`, n a multiple of it): masks[0] says all
  };
  int64_t piece_elems(DType d) { return std::max<int64_t>(1, kMaxAccessBytes / d.bytes()); }
  bool chunks_proven(const NodeRef& ptrs, DType d, int64_t width) {
    passes::AccessPattern p = patterns_.of(ptrs.get());
    int64_t align = std::min(width, piece_elems(d)) * d.bytes();
    return p.contiguity >= width && p.divisor % align == 0;
  }
  Value* whole_chunk_ok(const Chunk& c, DType d, bool proven) {
    Value* ok = b_.getTrue();
    for (Value* m : c.masks) {
      ok = b_.CreateAnd(ok, m);
      if (c.one_mask) break;
    }
    if (proven) return ok;
    int64_t width = static_cast<int64_t>(c.ptrs.size());
    int64_t align = std::min(width, piece_elems(d)) * d.bytes();
    Value* first = b_.CreatePtrToInt(c.ptrs[0], b_.getInt64Ty());
    ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateAnd(first, b_.getInt64(align - 1)), b_.getInt64(0)));
    for (int64_t j = 1; j < width; ++j) {
      Value* gap = b_.CreateSub(b_.CreatePtrToInt(c.ptrs[j], b_.getInt64Ty()), first);
      ok = b_.CreateAnd(ok, b_.CreateICmpEQ(gap, b_.getInt64(j * d.bytes())));
    }
    return ok;
  }
  // Element p of chunk `c` as a run of `width` consecutive pieces: calls f(piece pointer, piece type, first j).
  void for_each_piece(const Chunk& c, DType d, const std::function<void(Value*, llvm::FixedVectorType*, int64_t)>& f) {
    int64_t width = static_cast<int64_t>(c.ptrs.size()), per = std::min(width, piece_elems(d));
    auto* piece = llvm::FixedVectorType::get(ops_.memory_type(d), static_cast<unsigned>(per));
    for (int64_t j = 0; j < width; j += per) f(c.ptrs[j], piece, j);
  }
  Chunk chunk_of(const std::vector<NodeRef>& o, size_t mask_operand, int64_t first, int64_t width) {
    Chunk c;
    // A chunk is `width` consecutive flat elements starting at a multiple of `width`: the analysis's runs.
    c.one_mask = o.size() > mask_operand && patterns_.of(o[mask_operand].get()).constancy >= width;
    for (int64_t j = 0; j < width; ++j) {
      c.ptrs.push_back(regs(o[0]).v[first + j]);
      if (o.size() > mask_operand) c.masks.push_back(regs(o[mask_operand]).v[first + j]);
    }
    return c;
  }

  void load(const NodeRef& n) {
    DType d = n->type.dtype;
    const auto& o = n->operands;
    llvm::Type* mt = ops_.memory_type(d);
    int64_t width = vector_width(n->type.numel());
    Regs out;
    for (int64_t first = 0; first < per_thread(n->type.numel()); first += width) {
      Chunk c = chunk_of(o, 1, first, width);
      auto otherwise = [&](int64_t j) {
        return o.size() == 3 ? regs(o[2]).v[first + j] : llvm::Constant::getNullValue(ops_.compute_type(d));
      };
      auto element_wise = [&](std::vector<Value*>& vals) {
        for (int64_t j = 0; j < width; ++j) {
          auto read = [&] { return ops_.to_compute(d, b_.CreateLoad(mt, c.ptrs[j])); };
          vals.push_back(c.masks.empty() ? read() : guarded(c.masks[j], read, otherwise(j)));
        }
      };
      auto whole = [&](std::vector<Value*>& fast) {
        for_each_piece(c, d, [&](Value* p, llvm::FixedVectorType* piece, int64_t) {
          unsigned count = piece->getNumElements();
          llvm::Align align(count * d.bytes());
          if (d.bytes() != 2 || count % 2 != 0) {
            auto* load = b_.CreateAlignedLoad(piece, p, align);
            for (unsigned e = 0; e < count; ++e) fast.push_back(ops_.to_compute(d, b_.CreateExtractElement(load, e)));
            return;
          }
          // 16-bit elements as 32-bit words, halves taken with integer ops: bf16 -> f32 is then one shl
          // (low half) or and (high half) per element instead of an unpack, a zero extension and a shift.
          auto* words = b_.CreateAlignedLoad(llvm::FixedVectorType::get(b_.getInt32Ty(), count / 2), p, align);
          for (unsigned e = 0; e < count; ++e)
            fast.push_back(ops_.to_compute_half_of(d, b_.CreateExtractElement(words, e / 2), e % 2 == 1));
        });
      };
      std::vector<Value*> vals;
      bool proven = width > 1 && chunks_proven(o[0], d, width);
      if (width == 1)
        element_wise(vals);
      else if (proven && c.masks.empty())
        whole(vals);
      else if (proven && c.one_mask)  // all or nothing: no element-wise fallback
        vals = branch_values(c.masks[0], width, whole, [&](std::vector<Value*>& none) {
          for (int64_t j = 0; j < width; ++j) none.push_back(otherwise(j));
        });
      else
        vals = branch_values(whole_chunk_ok(c, d, proven), width, whole, element_wise);
      for (Value* v : vals) out.v.push_back(v);
    }
    regs_[n.get()] = std::move(out);
  }

  void store(const NodeRef& n) {
    const auto& o = n->operands;
    DType d = o[1]->type.dtype;
    int64_t width = vector_width(o[0]->type.numel());
    for (int64_t first = 0; first < per_thread(o[0]->type.numel()); first += width) {
      Chunk c = chunk_of(o, 2, first, width);
      auto value = [&](int64_t j) { return ops_.to_memory(d, regs(o[1]).v[first + j]); };
      auto element_wise = [&] {
        for (int64_t j = 0; j < width; ++j) {
          auto write = [&]() -> Value* {
            b_.CreateStore(value(j), c.ptrs[j]);
            return nullptr;
          };
          if (c.masks.empty())
            write();
          else
            guarded(c.masks[j], write, nullptr);
        }
      };
      auto whole = [&](std::vector<Value*>&) {
        for_each_piece(c, d, [&](Value* p, llvm::FixedVectorType* piece, int64_t j0) {
          unsigned count = piece->getNumElements();
          llvm::Align align(count * d.bytes());
          if (d.bytes() == 2 && count % 2 == 0) {  // as 32-bit words: bf16 pairs round in one cvt.rn.bf16x2.f32
            Value* words = llvm::PoisonValue::get(llvm::FixedVectorType::get(b_.getInt32Ty(), count / 2));
            for (unsigned e = 0; e < count; e += 2) {
              const std::vector<Value*>& v = regs(o[1]).v;
              words = b_.CreateInsertElement(words, ops_.to_memory_pair(d, v[first + j0 + e], v[first + j0 + e + 1]), e / 2);
            }
            b_.CreateAlignedStore(words, p, align);
            return;
          }
          Value* vec = llvm::PoisonValue::get(piece);
          for (unsigned e = 0; e < count; ++e) vec = b_.CreateInsertElement(vec, value(j0 + e), e);
          b_.CreateAlignedStore(vec, p, align);
        });
      };
      std::vector<Value*> none;
      bool proven = width > 1 && chunks_proven(o[0], d, width);
      if (width == 1)
        element_wise();
      else if (proven && c.masks.empty())
        whole(none);
      else if (proven && c.one_mask)
        guarded(c.masks[0], [&]() -> Value* {
          whole(none);
          return nullptr;
        }, nullptr);
      else
        branch_values(whole_chunk_ok(c, d, proven), 0, whole, [&](std::vector<Value*>&) { element_wise(); });
    }
  }

  // if (cond) fast(values) else slow(values); returns the `count` values merged by phis.
  std::vector<Value*> branch_values(Value* cond, int64_t count, const std::function<void(std::vector<Value*>&)>& fast,
                                    const std::function<void(std::vector<Value*>&)>& slow) {
    auto* fast_block = llvm::BasicBlock::Create(c_, "whole", fn_);
    auto* slow_block = llvm::BasicBlock::Create(c_, "by_element", fn_);
    auto* join = llvm::BasicBlock::Create(c_, "chunk.end", fn_);
    b_.CreateCondBr(cond, fast_block, slow_block);
    std::vector<Value*> fv, sv;
    b_.SetInsertPoint(fast_block);
    fast(fv);
    llvm::BasicBlock* fast_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(slow_block);
    slow(sv);
    llvm::BasicBlock* slow_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    std::vector<Value*> merged;
    for (int64_t j = 0; j < count; ++j) {
      llvm::PHINode* phi = b_.CreatePHI(fv[j]->getType(), 2);
      phi->addIncoming(fv[j], fast_end);
      phi->addIncoming(sv[j], slow_end);
      merged.push_back(phi);
    }
    return merged;
  }

  // ---- reductions --------------------------------------------------------------------------------------

  struct Partial {
    Value* value;
    Value* index;  // argmax/argmin only
  };

  Partial combine(Op op, DType d, Partial a, Partial b) {
    switch (op) {
      case Op::ReduceSum: return {ops_.binary(Op::Add, d, a.value, b.value), nullptr};
      case Op::ReduceMax: return {ops_.binary(Op::Max, d, a.value, b.value), nullptr};
      case Op::ReduceMin: return {ops_.binary(Op::Min, d, a.value, b.value), nullptr};
      default: {  // the extreme value, the first index on ties
        Value* strictly = ops_.compare(op == Op::ArgMax ? Op::Gt : Op::Lt, d, b.value, a.value);
        Value* tie = b_.CreateAnd(ops_.compare(Op::Eq, d, b.value, a.value), b_.CreateICmpSLT(b.index, a.index));
        Value* take_b = b_.CreateOr(strictly, tie);
        return {b_.CreateSelect(take_b, b.value, a.value), b_.CreateSelect(take_b, b.index, a.index)};
      }
    }
  }

  // A whole tile down to one value, when every element has a single owner (no copies): each thread
  // combines its own registers, each warp by shuffles, the warps through shared memory — no staging.
  void reduce_to_scalar(const NodeRef& n) {
    const NodeRef& x = n->operands[0];
    DType d = x->type.dtype;
    bool is_arg = n->op == Op::ArgMax || n->op == Op::ArgMin;
    int64_t total = x->type.numel();
    const Regs& xs = regs(x);
    Partial p{xs.v[0], is_arg ? flat_index(total, 0) : nullptr};
    for (size_t r = 1; r < xs.v.size(); ++r)
      p = combine(n->op, d, p, {xs.v[r], is_arg ? flat_index(total, static_cast<int64_t>(r)) : nullptr});
    for (int64_t lanes = 16; lanes >= 1; lanes /= 2)
      p = combine(n->op, d, p, {ptx_.shuffle_xor(p.value, lanes), is_arg ? ptx_.shuffle_xor(p.index, lanes) : nullptr});
    if (threads_ > 32) p = combine_block_warps(n->op, d, p, n->loc);
    regs_[n.get()] = {{ops_.round(n->type.dtype, is_arg ? p.index : p.value)}};
  }

  bool reduces_to_scalar(const ir::Node& n) const {
    bool reduction = n.op == Op::ReduceSum || n.op == Op::ReduceMax || n.op == Op::ReduceMin || n.op == Op::ArgMax ||
                     n.op == Op::ArgMin;
    return reduction && n.type.shape.empty() && n.operands[0]->type.numel() >= threads_;
  }
  bool has_block_reduction(const ir::Region& r) const {
    for (const NodeRef& n : r.body) {
      if (reduces_to_scalar(*n) && threads_ > 32) return true;
      for (const ir::Region& inner : n->regions)
        if (has_block_reduction(inner)) return true;
    }
    return false;
  }

  void reduce(const NodeRef& n) {
    const NodeRef& x = n->operands[0];
    if (reduces_to_scalar(*n)) return reduce_to_scalar(n);
    DType d = x->type.dtype;
    Op op = n->op;
    bool is_arg = op == Op::ArgMax || op == Op::ArgMin;
    int64_t total = x->type.numel(), len = x->type.shape[n->axis()], inner = 1;
    for (size_t k = n->axis() + 1; k < x->type.shape.size(); ++k) inner *= x->type.shape[k];
    int64_t outputs = total / len;
    llvm::Type* t = ops_.compute_type(d);
    int64_t elem_bytes = static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t));
    // Threads per output: the block splits each output's `len` inputs among `group` threads.
    int64_t group = outputs >= threads_ ? 1 : std::min(len, threads_ / outputs);
    int64_t partials_at = total * elem_bytes;
    claim_shared(partials_at + 2 * threads_ * 8, n->loc);
    stage(regs(x), d, total, 0);
    sync_group();

    std::vector<Partial> results;
    Value* part = group == 1 ? i32c(0) : b_.CreateURem(tid_, i32c(group));
    for (int64_t q = 0; q < per_thread(outputs); ++q) {
      Value* out = group == 1 ? flat_index(outputs, q) : b_.CreateURem(b_.CreateUDiv(tid_, i32c(group)), i32c(outputs));
      Value* base = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(out, i32c(inner)), i32c(len * inner)),
                                 b_.CreateURem(out, i32c(inner)));
      auto input = [&](Value* k) { return b_.CreateLoad(t, shared_at(t, 0, b_.CreateAdd(base, b_.CreateMul(k, i32c(inner))))); };
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      Value* acc = eb.CreateAlloca(t);
      Value* acc_index = eb.CreateAlloca(b_.getInt32Ty());
      b_.CreateStore(input(part), acc);
      b_.CreateStore(part, acc_index);
      counted_loop(b_.CreateAdd(part, i32c(group)), i32c(len), i32c(group), [&](Value* k) {
        Partial p = combine(op, d, {b_.CreateLoad(t, acc), b_.CreateLoad(b_.getInt32Ty(), acc_index)}, {input(k), k});
        b_.CreateStore(p.value, acc);
        if (p.index) b_.CreateStore(p.index, acc_index);
      });
      Partial p{b_.CreateLoad(t, acc), is_arg ? b_.CreateLoad(b_.getInt32Ty(), acc_index) : nullptr};
      for (int64_t lanes = std::min<int64_t>(group, 32) / 2; lanes >= 1; lanes /= 2)
        p = combine(op, d, p, {ptx_.shuffle_xor(p.value, lanes), is_arg ? ptx_.shuffle_xor(p.index, lanes) : nullptr});
      if (group > 32) p = combine_warps(op, d, p, group, partials_at);
      results.push_back(p);
    }
    sync_group();

    Regs out;
    for (const Partial& p : results) out.v.push_back(ops_.round(n->type.dtype, is_arg ? p.index : p.value));
    if (group > 1) {  // thread t computed output (t / group) mod outputs; the layout wants t mod outputs
      DType rd = n->type.dtype;
      llvm::Type* st = shared_type(rd);
      Value* out_index = b_.CreateURem(b_.CreateUDiv(tid_, i32c(group)), i32c(outputs));
      guarded(b_.CreateICmpEQ(part, i32c(0)), [&]() -> Value* {
        b_.CreateStore(to_shared(rd, out.v[0]), shared_at(st, 0, out_index));
        return nullptr;
      }, nullptr);
      sync_group();
      out.v[0] = from_shared(rd, b_.CreateLoad(st, shared_at(st, 0, flat_index(outputs, 0))));
      sync_group();
    }
    regs_[n.get()] = std::move(out);
  }

  // The per-warp partials of a whole-block reduction, combined with one barrier: every lane writes its
  // warp's partial (one value to one address: no branch), every thread reads them all. Two scratch
  // buffers take turns, so the next such reduction may write while slow threads still read this one
  // (its barrier then settles those reads); any other use of shared memory settles them first. The turn
  // is a run-time value (constant-folded outside loops), so a loop with one reduction per iteration
  // alternates too: unsettled reads are always on the buffer the turn does not point at.
  Partial combine_block_warps(Op op, DType d, Partial p, SourceLoc loc) {
    int64_t warps = threads_ / 32, slot = warps * 8;  // a value (or an index) per warp, at most 8 bytes
    reserve_shared(4 * slot, loc);
    llvm::Type* t = ops_.compute_type(d);
    llvm::Type* i32 = b_.getInt32Ty();
    if (!scratch_turn_) {
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      scratch_turn_ = eb.CreateAlloca(i32);
      eb.CreateStore(i32c(0), scratch_turn_);
    }
    Value* turn = b_.CreateLoad(i32, scratch_turn_);
    b_.CreateStore(b_.CreateXor(turn, i32c(1)), scratch_turn_);
    Value* values = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_base(), b_.CreateZExt(b_.CreateMul(turn, i32c(2 * slot)), b_.getInt64Ty()));
    Value* indices = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), values, slot);
    Value* warp = b_.CreateLShr(tid_, i32c(5));
    b_.CreateStore(p.value, b_.CreateInBoundsGEP(t, values, warp));
    if (p.index) b_.CreateStore(p.index, b_.CreateInBoundsGEP(i32, indices, warp));
    sync_group();
    partials_unsettled_ = true;
    auto partial_of = [&](int64_t w) -> Partial {
      return {b_.CreateLoad(t, b_.CreateConstInBoundsGEP1_64(t, values, w)),
              p.index ? b_.CreateLoad(i32, b_.CreateConstInBoundsGEP1_64(i32, indices, w)) : nullptr};
    };
    Partial r = partial_of(0);
    for (int64_t w = 1; w < warps; ++w) r = combine(op, d, r, partial_of(w));
    return r;
  }

  // Combines the per-warp partials of a group spanning several warps, through shared memory.
  Partial combine_warps(Op op, DType d, Partial p, int64_t group, int64_t at) {
    llvm::Type* t = ops_.compute_type(d);
    Value* warp = b_.CreateUDiv(tid_, i32c(32));
    int64_t values_at = at, indices_at = at + threads_ * 8;
    guarded(b_.CreateICmpEQ(b_.CreateURem(tid_, i32c(32)), i32c(0)), [&]() -> Value* {
      b_.CreateStore(p.value, shared_at(t, values_at, warp));
      if (p.index) b_.CreateStore(p.index, shared_at(b_.getInt32Ty(), indices_at, warp));
      return nullptr;
    }, nullptr);
    sync_group();
    int64_t warps = group / 32;
    Value* first = b_.CreateMul(b_.CreateUDiv(warp, i32c(warps)), i32c(warps));
    auto partial_of = [&](Value* w) -> Partial {
      return {b_.CreateLoad(t, shared_at(t, values_at, w)),
              p.index ? b_.CreateLoad(b_.getInt32Ty(), shared_at(b_.getInt32Ty(), indices_at, w)) : nullptr};
    };
    Partial r = partial_of(first);
    for (int64_t w = 1; w < warps; ++w) r = combine(op, d, r, partial_of(b_.CreateAdd(first, i32c(w))));
    sync_group();
    return r;
  }

  // ---- dot -------------------------------------------------------------------------------------------------

  void dot(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    ScalarType s = a->type.dtype.scalar;
    bool half = s == ScalarType::bf16 || s == ScalarType::f16;
    if (half && threads_ == 128 && M % 64 == 0 && N % 8 == 0 && N <= 256 && K % 16 == 0) return dot_wgmma(n);
    if (half && M % 16 == 0 && N % 8 == 0 && K % 16 == 0) return dot_tensor_cores(n);
    dot_cuda_cores(n);
  }

  // Hopper, on a group of one warp group: A [M, K] and B [K, N] staged in the group's scratch in wgmma's
  // plain (unswizzled) K-major layout — 8 x 8 core matrices of 16-byte rows, the two of each k16 step
  // side by side (LBO 128 bytes), 8-row groups K / 8 core matrices apart (SBO) — then one m64nNk16 per 64
  // rows and 16 of K, waited for at once. The result stays in the wgmma layout.
  void dot_wgmma(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    DType d = a->type.dtype;
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    int64_t sbo = K / 8 * 128, b_at = M * K * 2;
    // The accumulator first: its conversion uses the scratch the operands go to next.
    Regs acc = n->operands.size() == 3 ? raw(n->operands[2]) : splat(ops_.constant(DType{ScalarType::f32, false}, 0), M * N);
    if (!acc.uniform && !acc.wgmma) acc = relayout(acc, DType{ScalarType::f32, false}, n->type.shape, true, n->loc);
    claim_shared(b_at + N * K * 2, n->loc);
    llvm::Type* i16 = b_.getInt16Ty();
    // Byte offset of element (row, k) of a K-major operand with `rows` rows.
    auto core_offset = [&](Value* row, Value* k) {
      Value* across = b_.CreateAdd(b_.CreateMul(b_.CreateLShr(row, i32c(3)), i32c(sbo)),
                                   b_.CreateMul(b_.CreateLShr(k, i32c(3)), i32c(128)));
      return b_.CreateAdd(across, b_.CreateAdd(b_.CreateMul(b_.CreateAnd(row, i32c(7)), i32c(16)),
                                               b_.CreateMul(b_.CreateAnd(k, i32c(7)), i32c(2))));
    };
    auto put = [&](Value* v, Value* offset) {
      Value* at = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_base(), b_.CreateZExt(offset, b_.getInt64Ty()));
      b_.CreateStore(b_.CreateBitCast(ops_.to_memory(d, v), i16), at);
    };
    const Regs& ar = regs(a);
    for (size_t r = 0; r < ar.v.size(); ++r) {  // A[i][k]: row i
      Value* i = flat_index(M * K, static_cast<int64_t>(r));
      put(ar.v[r], core_offset(b_.CreateUDiv(i, i32c(K)), b_.CreateURem(i, i32c(K))));
    }
    const Regs& br = regs(bm);
    for (size_t r = 0; r < br.v.size(); ++r) {  // B[k][j]: row j of B^T
      Value* i = flat_index(K * N, static_cast<int64_t>(r));
      put(br.v[r], b_.CreateAdd(i32c(b_at), core_offset(b_.CreateURem(i, i32c(N)), b_.CreateUDiv(i, i32c(N)))));
    }
    ptx_.fence_proxy_async_shared();  // the staged operands, visible to the tensor cores
    sync_group();
    ptx_.wgmma_fence();
    Regs out;
    out.wgmma = true;
    out.rows = M;
    out.cols = N;
    Value* a_base = scratch_;
    Value* b_base = b_.CreateAdd(scratch_, i32c(b_at));
    for (int64_t block = 0; block < M / 64; ++block) {
      std::vector<Value*> acc_block(acc.v.begin() + block * N / 2, acc.v.begin() + (block + 1) * N / 2);
      for (int64_t k = 0; k < K / 16; ++k) {
        Value* a_desc = wgmma_descriptor_fields(b_.CreateAdd(a_base, i32c(block * 8 * sbo + k * 256)), 128, sbo, 0);
        Value* b_desc = wgmma_descriptor_fields(b_.CreateAdd(b_base, i32c(k * 256)), 128, sbo, 0);
        acc_block = ptx_.wgmma(d.scalar == ScalarType::bf16, static_cast<int>(N), a_desc, b_desc, acc_block, false);
      }
      out.v.insert(out.v.end(), acc_block.begin(), acc_block.end());
    }
    ptx_.wgmma_commit_group();
    ptx_.wgmma_wait_group(0);
    out.v = ptx_.fence_registers(out.v);
    sync_group();  // the scratch is read by the tensor cores until the wait
    regs_[n.get()] = std::move(out);
  }

  // Tensor cores: A and B staged in shared memory, each warp computes 16x8 tiles of C with mma.sync
  // m16n8k16 over K (mma_tiles.cpp), C goes back to the tile layout through shared memory. (The operands and the result
  // take a trip through shared memory because tiles keep one layout; Hopper's wgmma path keeps them put.)
  void dot_tensor_cores(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    DType d = a->type.dtype;
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    int64_t b_at = M * K * 2, c_at = (b_at + K * N * 2 + 15) / 16 * 16;
    claim_shared(c_at + M * N * 4, n->loc);
    llvm::Type* i16 = b_.getInt16Ty();
    llvm::Type* f32 = b_.getFloatTy();
    auto stage_bits = [&](const NodeRef& x, int64_t at) {  // 16-bit elements, as they are in memory
      const Regs& r = regs(x);
      for (size_t k = 0; k < r.v.size(); ++k)
        b_.CreateStore(b_.CreateBitCast(ops_.to_memory(d, r.v[k]), i16), shared_at(i16, at, flat_index(x->type.numel(), k)));
    };
    stage_bits(a, 0);
    stage_bits(bm, b_at);
    bool has_acc = n->operands.size() == 3;
    if (has_acc) stage(regs(n->operands[2]), DType{ScalarType::f32, false}, M * N, c_at);
    sync_group();
    emit_mma_tiles(b_, ptx_, {scratch_base(), entry_, tid_, threads_}, {M, N, K, 0, b_at, c_at, d.scalar == ScalarType::bf16, has_acc});
    sync_group();
    Regs out;
    for (int64_t r = 0; r < per_thread(M * N); ++r)
      out.v.push_back(b_.CreateLoad(f32, shared_at(f32, c_at, flat_index(M * N, r))));
    sync_group();
    regs_[n.get()] = std::move(out);
  }

  // CUDA cores: A and B staged in shared memory as f32, each thread computes its own elements of C.
  void dot_cuda_cores(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    llvm::Type* f32 = b_.getFloatTy();
    DType af{ScalarType::f32, false};
    int64_t b_at = M * K * 4;
    claim_shared(b_at + K * N * 4, n->loc);
    auto as_f32 = [&](const NodeRef& x) {
      Regs r;
      for (Value* v : regs(x).v) r.v.push_back(ops_.cast(x->type.dtype, af, v));
      return r;
    };
    stage(as_f32(a), af, M * K, 0);
    stage(as_f32(bm), af, K * N, b_at);
    sync_group();
    int64_t outputs = per_thread(M * N);
    std::vector<Value*> acc, row, col;
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    for (int64_t r = 0; r < outputs; ++r) {
      acc.push_back(eb.CreateAlloca(f32));
      Value* init = n->operands.size() == 3 ? regs(n->operands[2]).v[r] : llvm::ConstantFP::get(f32, 0.0);
      b_.CreateStore(init, acc[r]);
      Value* i = flat_index(M * N, r);
      row.push_back(b_.CreateMul(b_.CreateUDiv(i, i32c(N)), i32c(K)));
      col.push_back(b_.CreateURem(i, i32c(N)));
    }
    counted_loop(i32c(0), i32c(K), i32c(1), [&](Value* k) {
      Value* b_row = b_.CreateMul(k, i32c(N));
      for (int64_t r = 0; r < outputs; ++r) {
        Value* av = b_.CreateLoad(f32, shared_at(f32, 0, b_.CreateAdd(row[r], k)));
        Value* bv = b_.CreateLoad(f32, shared_at(f32, b_at, b_.CreateAdd(b_row, col[r])));
        b_.CreateStore(ops_.fma(av, bv, b_.CreateLoad(f32, acc[r])), acc[r]);
      }
    });
    sync_group();
    Regs out;
    for (int64_t r = 0; r < outputs; ++r) out.v.push_back(b_.CreateLoad(f32, acc[r]));
    regs_[n.get()] = std::move(out);
  }

  // ---- groups, shared buffers, mbarriers and tasks -----------------------------------------------------

  void sync_group() {
    if (group_barrier_)
      ptx_.barrier(group_barrier_, i32c(threads_));
    else
      ptx_.barrier();
  }

  // Thread 0 initializes every mbarrier before any user code; the fence and bar.sync publish them (in a
  // cluster, the cluster sync: other blocks arrive at and multicast to them).
  void init_barriers() {
    bool any = false;
    for (const passes::SharedAllocation& a : allocations_.allocations) any = any || a.node->op == Op::AllocBarriers;
    has_barriers_ = any;
    if (!any) return;
    guarded(b_.CreateICmpEQ(block_tid_, i32c(0)), [&]() -> Value* {
      for (const passes::SharedAllocation& a : allocations_.allocations) {
        if (a.node->op != Op::AllocBarriers) continue;
        for (int64_t i = 0; i < a.node->type.shape[0]; ++i)
          ptx_.mbarrier_init(shared_address(i32c(a.offset + i * passes::kMbarrierBytes)),
                             static_cast<int>(a.node->attrs.ints[1]));
      }
      ptx_.fence_mbarrier_init();
      return nullptr;
    }, nullptr);
    if (clustered())
      ptx_.cluster_sync();
    else
      ptx_.barrier();
  }

  bool clustered() const { return cluster_.blocks() > 1; }

  // The 32-bit shared-state-space address of byte `offset` of the block's shared memory.
  Value* shared_address(Value* offset) {
    return b_.CreateAdd(b_.CreatePtrToInt(smem_, b_.getInt32Ty()), offset);
  }

  // Runs `body` on one thread of the group after all of the group's threads got here: how a task replica
  // arrives once at an mbarrier.
  void once_per_group(const std::function<void()>& body) {
    sync_group();
    guarded(b_.CreateICmpEQ(tid_, i32c(0)), [&]() -> Value* {
      body();
      return nullptr;
    }, nullptr);
  }

  // Byte `byte` (i32) of a stage, where the buffer's swizzle puts it (passes/shared_layouts.h).
  Value* swizzle(Value* byte, int swizzle_bytes) {
    if (!swizzle_bytes) return byte;
    Value* row_bits = b_.CreateAnd(b_.CreateLShr(byte, i32c(7)), i32c(swizzle_bytes / 16 - 1));
    return b_.CreateXor(byte, b_.CreateShl(row_bits, i32c(4)));
  }

  // The shared-memory address of element `flat` (i32, row-major) of a view of a buffer stage, where the
  // buffer's layout puts it: transposed views, column panels and the swizzle (passes/shared_layouts.h).
  // `base`: the block's shared memory (or, for a remote store, the same memory in another block).
  Value* view_element(const NodeRef& view, DType d, Value* flat, Value* base = nullptr) {
    const passes::SharedAllocation& alloc = allocations_.of(passes::root_allocation(view.get()));
    bool transposed = view->op == Op::LocalTrans;
    // Panels: a view's columns are stored in [rows, P] blocks.
    const ir::Shape& stored = transposed ? view->operands[0]->type.shape : view->type.shape;
    int64_t panel = stored.size() == 2 && alloc.panel && alloc.panel < stored[1] ? alloc.panel : 0;
    if (transposed) {  // the view is [C, R] of storage [R, C]
      int64_t R = view->type.shape[1], C = view->type.shape[0];
      flat = b_.CreateAdd(b_.CreateMul(b_.CreateURem(flat, i32c(R)), i32c(C)), b_.CreateUDiv(flat, i32c(R)));
    }
    if (panel) {  // (r, c) -> (c / P) * R * P + r * P + c % P
      Value* r = b_.CreateUDiv(flat, i32c(stored[1]));
      Value* c = b_.CreateURem(flat, i32c(stored[1]));
      flat = b_.CreateAdd(b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(c, i32c(panel)), i32c(stored[0] * panel)),
                                       b_.CreateMul(r, i32c(panel))),
                          b_.CreateURem(c, i32c(panel)));
    }
    Value* byte = swizzle(b_.CreateMul(flat, i32c(d.bytes())), alloc.swizzle);
    return b_.CreateInBoundsGEP(b_.getInt8Ty(), base ? base : smem_,
                                b_.CreateZExt(b_.CreateAdd(regs(view).v[0], byte), b_.getInt64Ty()));
  }

  // Loads (or stores) a tile from (to) a stage of a shared buffer. In the blocked layout each chunk of V
  // consecutive elements is one aligned vector access of at most 16 bytes per piece (buffers are 1024-byte
  // aligned, a chunk starts at a multiple of V, and a swizzle moves whole 16-byte units); transposed views
  // and wgmma-layout values go element by element.
  // `remote_rank`: store into the same stage of that block of the cluster (st.shared::cluster).
  void shared_tile(const NodeRef& view, const NodeRef& n, DType d, int64_t numel, const Regs* value,
                   Value* remote_rank = nullptr) {
    Value* base = remote_rank ? ptx_.map_shared_pointer_to_rank(smem_, remote_rank) : smem_;
    int swz = allocations_.of(passes::root_allocation(view.get())).swizzle;
    bool transposed = view->op == Op::LocalTrans;
    llvm::Type* mt = ops_.memory_type(d);
    int64_t eb = d.bytes();
    // A wgmma-layout value holds pairs of neighbouring columns (registers 2i, 2i + 1): one access each.
    bool pairs = value && value->wgmma && !value->uniform && !transposed;
    int64_t width = transposed ? 1 : pairs ? 2 : vector_width(numel), per = std::min(width, piece_elems(d));
    auto* piece = llvm::FixedVectorType::get(mt, static_cast<unsigned>(per));
    llvm::Align align(static_cast<uint64_t>(per * eb));
    Regs out;
    if (value) sync_group();  // earlier reads of this group are done before anything is overwritten
    for (int64_t first = 0; first < per_thread(numel); first += width) {
      for (int64_t j = 0; j < width; j += per) {
        Value* at = view_element(view, d, value ? index_of(*value, numel, first + j) : flat_index(numel, first + j), base);
        if (value) {
          Value* vec = llvm::PoisonValue::get(piece);
          for (int64_t e = 0; e < per; ++e)
            vec = b_.CreateInsertElement(vec, ops_.to_memory(d, value->v[first + j + e]), static_cast<uint64_t>(e));
          b_.CreateAlignedStore(vec, at, align);
        } else {
          Value* vec = b_.CreateAlignedLoad(piece, at, align);
          for (int64_t e = 0; e < per; ++e)
            out.v.push_back(ops_.to_compute(d, b_.CreateExtractElement(vec, static_cast<uint64_t>(e))));
        }
      }
    }
    if (!value) {
      regs_[n.get()] = std::move(out);
      return;
    }
    // A swizzled buffer is read by TMA or wgmma (the async proxy): each thread fences its own writes
    // before the group syncs.
    if (swz && remote_rank)
      ptx_.fence_proxy_async_shared_cluster();
    else if (swz)
      ptx_.fence_proxy_async_shared();
    sync_group();  // the whole tile is written before any thread of the group reads it (or arrives)
  }

  // async_load (ptrs, view[, mask[, other]]): each thread copies its own chunks of the blocked layout
  // (async_copy.cpp), after the group's earlier reads of shared memory, as local_store does.
  void async_load(const NodeRef& n) {
    const auto& o = n->operands;
    DType d = o[1]->type.dtype;
    int64_t numel = o[0]->type.numel(), width = vector_width(numel);
    bool proven = width > 1 && chunks_proven(o[0], d, width);
    // A fill of constant +0 is cp.async's own zero-fill (-0.0 is not: its sign bit is set).
    auto positive_zero = [](const ir::Node& x) {
      const ir::Node& c = x.op == Op::Broadcast ? *x.operands[0] : x;
      return c.op == Op::Constant && c.attrs.number == 0 && !std::signbit(c.attrs.number);
    };
    bool zero_fill = o.size() < 4 || positive_zero(*o[3]);
    sync_group();
    for (int64_t first = 0; first < per_thread(numel); first += width) {
      Chunk c = chunk_of(o, 2, first, width);
      AsyncCopyChunk copy{d.bytes(), ops_.memory_type(d), c.ptrs, {}, c.masks, c.one_mask, proven, {}};
      for (int64_t j = 0; j < width; ++j) {
        copy.dst.push_back(view_element(o[1], d, flat_index(numel, first + j)));
        if (!zero_fill) copy.fill.push_back(ops_.to_memory(d, regs(o[3]).v[first + j]));
      }
      emit_async_copy(b_, ptx_, copy);
    }
  }

  void hopper_node(const NodeRef& n) {
    const auto& o = n->operands;
    switch (n->op) {
      case Op::LocalAlloc:
      case Op::AllocBarriers:
        regs_[n.get()] = {{i32c(allocations_.of(n.get()).offset)}};
        return;
      case Op::LocalView: {
        int64_t stage_bytes = allocations_.of(o[0].get()).stage_bytes;
        regs_[n.get()] = {{b_.CreateAdd(regs(o[0]).v[0], b_.CreateMul(regs(o[1]).v[0], i32c(stage_bytes)))}};
        return;
      }
      case Op::LocalTrans: regs_[n.get()] = regs(o[0]); return;  // the same bytes
      case Op::LocalCols: {  // whole panels: the first one's offset
        const passes::SharedAllocation& a = allocations_.of(passes::root_allocation(n.get()));
        int64_t rows = o[0]->type.shape[0], eb = n->type.dtype.bytes();
        int64_t first = n->attrs.ints[0], bytes = a.panel ? first / a.panel * rows * a.panel * eb : first * eb;
        regs_[n.get()] = {{b_.CreateAdd(regs(o[0]).v[0], i32c(bytes))}};
        return;
      }
      case Op::LocalRows: {  // rows are contiguous; a swizzled stage's rows come in groups of 8 (one pattern)
        int64_t row_bytes = o[0]->type.numel() / o[0]->type.shape[0] * o[0]->type.dtype.bytes();
        regs_[n.get()] = {{b_.CreateAdd(regs(o[0]).v[0], b_.CreateMul(regs(o[1]).v[0], i32c(row_bytes)))}};
        return;
      }
      case Op::AsyncDescriptorLoad:
      case Op::AsyncDescriptorLoadMulticast: {
        bool multicast = n->op == Op::AsyncDescriptorLoadMulticast;
        Value* desc = raw(o[0]).v[0];
        Value* smem = shared_address(regs(o[1]).v[0]);
        Value* bar = shared_address(regs(o[2]).v[0]);
        Value* mask = multicast ? b_.CreateTrunc(regs(o[3]).v[0], b_.getInt16Ty()) : nullptr;
        std::vector<Value*> coords;
        for (size_t i = o.size(); i-- > (multicast ? 4u : 3u);) coords.push_back(regs(o[i]).v[0]);  // innermost first
        guarded(b_.CreateICmpEQ(tid_, i32c(0)), [&]() -> Value* {
          if (multicast)
            ptx_.tma_load_multicast(smem, desc, coords, bar, mask);
          else
            ptx_.tma_load(smem, desc, coords, bar);
          return nullptr;
        }, nullptr);
        return;
      }
      case Op::AsyncDescriptorStore: {
        Value* desc = raw(o[0]).v[0];
        Value* smem = shared_address(regs(o[1]).v[0]);
        std::vector<Value*> coords;
        for (size_t i = o.size(); i-- > 2;) coords.push_back(regs(o[i]).v[0]);
        ptx_.fence_proxy_async_shared();  // this thread's writes to the stage, visible to the copy engine
        once_per_group([&] {
          ptx_.tma_store(desc, coords, smem);
          ptx_.bulk_commit_group();
        });
        return;
      }
      case Op::AsyncStoreWait:
        guarded(b_.CreateICmpEQ(tid_, i32c(0)), [&]() -> Value* {
          ptx_.bulk_wait_group_read(static_cast<int>(n->attrs.ints[0]));
          return nullptr;
        }, nullptr);
        sync_group();  // no thread overwrites the stage before the copy engine has read it
        return;
      case Op::FenceAsyncShared: ptx_.fence_proxy_async_shared(); return;
      case Op::AsyncLoad: return async_load(n);
      case Op::AsyncCommitGroup: ptx_.cp_async_commit_group(); return;
      case Op::AsyncWaitGroup:
        ptx_.cp_async_wait_group(static_cast<int>(n->attrs.ints[0]));
        sync_group();  // every thread's copies, visible to the whole group
        return;
      case Op::AsyncDot: return async_dot(n);
      case Op::AsyncDotWait: {
        ptx_.wgmma_wait_group(static_cast<int>(n->attrs.ints[0]));
        Regs out = raw(o[0]);
        out.v = ptx_.fence_registers(out.v);
        regs_[n.get()] = std::move(out);
        return;
      }
      case Op::LocalLoad: return shared_tile(o[0], n, n->type.dtype, n->type.numel(), nullptr);
      case Op::LocalStore: return shared_tile(o[0], n, o[1]->type.dtype, o[1]->type.numel(), &raw(o[1]));
      case Op::LocalStoreRemote:
        return shared_tile(o[0], n, o[1]->type.dtype, o[1]->type.numel(), &raw(o[1]), regs(o[2]).v[0]);
      case Op::BarrierAt:
        regs_[n.get()] = {{b_.CreateAdd(regs(o[0]).v[0], b_.CreateMul(regs(o[1]).v[0], i32c(passes::kMbarrierBytes)))}};
        return;
      case Op::BarrierArrive: {
        Value* bar = shared_address(regs(o[0]).v[0]);
        return once_per_group([&] { ptx_.mbarrier_arrive(bar); });
      }
      case Op::BarrierExpectBytes: {
        Value* bar = shared_address(regs(o[0]).v[0]);
        Value* bytes = regs(o[1]).v[0];
        return once_per_group([&] { ptx_.mbarrier_arrive_expect_tx(bar, bytes); });
      }
      case Op::BarrierWait: {
        Value* offset = regs(o[0]).v[0];
        Value* parity = b_.CreateAnd(regs(o[1]).v[0], i32c(1));
        if (debug_waits_) return debug_waits_->wait(shared_address(offset), offset, parity, wait_sites_->index.at(n.get()));
        return barrier_wait(shared_address(offset), parity);
      }
      case Op::NamedBarrierWait:
        ptx_.barrier(i32c(n->attrs.ints[0]), i32c(n->attrs.ints[1]));
        return;
      case Op::NamedBarrierArrive:
        ptx_.barrier_arrive(i32c(n->attrs.ints[0]), i32c(n->attrs.ints[1]));
        return;
      case Op::AsyncTasks: return async_tasks(n);
      case Op::TaskReplicaId: regs_[n.get()] = {{replica_}}; return;
      // Thread-block clusters: the ops are a line each; the cluster-wide syncs around the kernel body are in
      // the constructor (the cluster shape), init_barriers and run().
      case Op::ClusterCtaRank: regs_[n.get()] = {{ptx_.cluster_cta_rank()}}; return;
      case Op::ClusterSync: ptx_.cluster_sync(); return;
      case Op::BarrierArriveRemote: {
        Value* bar = shared_address(regs(o[0]).v[0]);
        Value* rank = regs(o[1]).v[0];
        return once_per_group([&] { ptx_.mbarrier_arrive_cluster(ptx_.map_shared_to_rank(bar, rank)); });
      }
      default: break;
    }
    throw InternalError(fmt::format("NVPTX lowering: no rule for op '{}'", ir::op_name(n->op)));
  }

  // The 64-bit wgmma descriptor of an operand in shared memory whose rows (its contiguous dimension) are
  // `row_bytes` long, swizzled as wide, starting at byte `offset` (PTX ISA, "Matrix Descriptor"): start
  // address >> 4; the leading byte offset: unused (16) for K-major operands, the distance between panels
  // (`panel_bytes`) for N-major ones; the stride byte offset: 8 rows; the swizzle mode.
  Value* wgmma_descriptor(Value* offset, int64_t row_bytes, int64_t panel_bytes = 16) {
    uint64_t mode = row_bytes == 128 ? 1 : row_bytes == 64 ? 2 : 3;
    return wgmma_descriptor_fields(offset, panel_bytes, 8 * row_bytes, mode);
  }
  // The descriptor from its fields: leading and stride byte offsets, swizzle mode (0: none, 1: 128 bytes,
  // 2: 64, 3: 32).
  Value* wgmma_descriptor_fields(Value* offset, int64_t lbo, int64_t sbo, uint64_t mode) {
    Value* address = b_.CreateZExt(b_.CreateLShr(b_.CreateAnd(shared_address(offset), i32c(0x3FFFF)), i32c(4)), b_.getInt64Ty());
    uint64_t fixed = (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (mode << 62);
    return b_.CreateOr(address, b_.getInt64(fixed));
  }

  // Two 16-bit elements (in their compute type) as one 32-bit register, the first in the low half.
  Value* pack_pair(DType d, Value* lo, Value* hi) {
    auto bits = [&](Value* v) { return b_.CreateZExt(b_.CreateBitCast(ops_.to_memory(d, v), b_.getInt16Ty()), b_.getInt32Ty()); };
    return b_.CreateOr(bits(lo), b_.CreateShl(bits(hi), i32c(16)));
  }

  // acc + a @ b with wgmma: per 64 rows of a and 16 of K one m64nNk16 instruction; a from swizzled
  // shared memory (K-major) or from registers, b stored [N, K] and seen through local_trans (K-major) or
  // stored [K, N] (N-major).
  void async_dot(const NodeRef& n) {
    const auto& o = n->operands;
    if (threads_ != 128)
      throw Error(fmt::format("async_dot runs on one warp group (4 warps), but here the group has {} warps; call it in a "
                              "task of 4 warps (or a kernel of num_warps = 4)",
                              threads_ / 32),
                  n->loc);
    int64_t M = n->type.shape[0], N = n->type.shape[1], K = o[0]->type.shape[1];
    // a in registers: wgmma's A fragments are the accumulator layout's registers of 16 consecutive
    // columns (8 per thread, in order), so a tile in the wgmma layout feeds them as it is.
    bool a_registers = o[0]->type.kind == ir::Type::Kind::Value;
    Regs a_regs;
    if (a_registers) {
      a_regs = raw(o[0]);
      if (!a_regs.wgmma || a_regs.uniform) a_regs = relayout(a_regs, o[0]->type.dtype, o[0]->type.shape, true, n->loc);
    }
    const passes::SharedAllocation* a_alloc =
        a_registers ? nullptr : &allocations_.of(passes::root_allocation(o[0].get()));
    const passes::SharedAllocation& b_alloc = allocations_.of(passes::root_allocation(o[1].get()));
    // b: stored [N, K] and seen through local_trans (K-major), or stored [K, N] (N-major: wgmma's
    // transposed B), in panels of the swizzle's width when N is wider.
    bool b_n_major = o[1]->op != Op::LocalTrans;
    int64_t elem = o[0]->type.dtype.bytes(), a_row = K * elem;
    int64_t b_row = b_n_major ? std::min<int64_t>(N * elem, 128) : K * elem;
    if ((a_alloc && a_alloc->swizzle != a_row) || b_alloc.swizzle != b_row)
      throw InternalError("async_dot: operand buffers without the swizzle of their row width");
    Regs acc = raw(o[2]);
    if (!acc.uniform && !acc.wgmma) acc = relayout(acc, o[2]->type.dtype, o[2]->type.shape, true, n->loc);
    bool bf16 = o[0]->type.dtype.scalar == ScalarType::bf16;
    Value* a_base = a_registers ? nullptr : regs(o[0]).v[0];
    Value* b_base = regs(o[1]).v[0];
    ptx_.wgmma_fence();
    Regs out;
    out.wgmma = true;
    out.rows = M;
    out.cols = N;
    for (int64_t block = 0; block < M / 64; ++block) {
      std::vector<Value*> d(acc.v.begin() + block * N / 2, acc.v.begin() + (block + 1) * N / 2);
      for (int64_t k = 0; k < K / 16; ++k) {
        Value* b_desc = b_n_major ? wgmma_descriptor(b_.CreateAdd(b_base, i32c(k * 16 * b_row)), b_row, K * b_row)
                                  : wgmma_descriptor(b_.CreateAdd(b_base, i32c(k * 32)), b_row);
        if (a_registers) {
          std::array<Value*, 4> fragment;
          for (int p = 0; p < 4; ++p) {
            size_t r = static_cast<size_t>(block * K / 2 + k * 8 + 2 * p);
            fragment[p] = pack_pair(o[0]->type.dtype, a_regs.v[r], a_regs.v[r + 1]);
          }
          d = ptx_.wgmma_a_registers(bf16, static_cast<int>(N), fragment, b_desc, d, b_n_major);
          continue;
        }
        Value* a_desc = wgmma_descriptor(b_.CreateAdd(a_base, i32c(block * 64 * a_row + k * 32)), a_row);
        d = ptx_.wgmma(bf16, static_cast<int>(N), a_desc, b_desc, d, b_n_major);
      }
      out.v.insert(out.v.end(), d.begin(), d.end());
    }
    ptx_.wgmma_commit_group();
    regs_[n.get()] = std::move(out);
  }

  // Every thread of the group polls until the phase of parity `parity` has completed.
  void barrier_wait(Value* bar, Value* parity) {
    auto* poll = llvm::BasicBlock::Create(c_, "mbarrier.wait", fn_);
    auto* done = llvm::BasicBlock::Create(c_, "mbarrier.done", fn_);
    b_.CreateBr(poll);
    b_.SetInsertPoint(poll);
    // In a cluster, arrivals may come from other blocks: acquire at cluster scope (their release is).
    b_.CreateCondBr(ptx_.mbarrier_try_wait_parity(bar, parity, clustered()), done, poll);
    b_.SetInsertPoint(done);
  }

  // Each task is a branch on the warp index; its replicas share the code, told apart at run time. Inside,
  // the group is the replica: its threads renumbered from 0, its own named barrier and scratch.
  void async_tasks(const NodeRef& n) {
    Value* warp = b_.CreateLShr(block_tid_, i32c(5));
    int fiber = 0;
    for (size_t t = 0; t < n->regions.size(); ++t) {
      const passes::TaskSlot& slot = tasks_.slots[t];
      int first = slot.first_warp, last = first + slot.warps * slot.replicas;
      Value* mine = b_.CreateAnd(b_.CreateICmpUGE(warp, i32c(first)), b_.CreateICmpULT(warp, i32c(last)));
      emit_if(b_, mine, [&] {
        if (slot.regs && slot.regs != tasks_.entry_regs) ptx_.set_max_registers(slot.regs > tasks_.entry_regs, slot.regs);
        Value* replica = b_.CreateUDiv(b_.CreateSub(warp, i32c(first)), i32c(slot.warps));
        Value* fiber_index = b_.CreateAdd(replica, i32c(fiber));
        Value* group_start = b_.CreateMul(b_.CreateAdd(b_.CreateMul(replica, i32c(slot.warps)), i32c(first)), i32c(32));
        auto saved = std::make_tuple(tid_, threads_, group_barrier_, replica_, scratch_, partials_unsettled_);
        partials_unsettled_ = false;
        tid_ = b_.CreateSub(block_tid_, group_start);
        threads_ = slot.warps * 32;
        group_barrier_ = b_.CreateSub(i32c(15), fiber_index);
        replica_ = replica;
        scratch_ = b_.CreateAdd(i32c(scratch_start_), b_.CreateMul(fiber_index, b_.CreateLoad(b_.getInt32Ty(), scratch_stride_)));
        for (const NodeRef& d : deferred_order_) node(d);
        region(n->regions[t]);
        for (const NodeRef& d : deferred_order_) regs_.erase(d.get());
        std::tie(tid_, threads_, group_barrier_, replica_, scratch_, partials_unsettled_) = saved;
      }, [] {});
      fiber += slot.replicas;
    }
  }

  // ---- control flow ------------------------------------------------------------------------------------

  // for (i = begin; i < end; i += step) body(i), on i32 values known to be uniform.
  void counted_loop(Value* begin, Value* end, Value* step, const std::function<void(Value*)>& body) {
    emit_loop(b_, begin, end, step, body);
  }

  // Whether reduction partials may be unread where control flow joins: wherever they may be on one path.
  void for_loop(const NodeRef& n) {
    auto bound = [&](size_t k) { return regs(n->operands[k]).v[0]; };
    bool before = partials_unsettled_, in_body = has_block_reduction(n->regions[0]);
    emit_for(b_, bound(0), bound(1), bound(2), [&](Value* i) {
      regs_[n->regions[0].args[0].get()] = {{i}};
      partials_unsettled_ = before || in_body;  // from before the loop or from the last iteration
      region(n->regions[0]);
    });
    partials_unsettled_ = partials_unsettled_ || before;  // the loop may not run
  }

  void if_else(const NodeRef& n) {
    bool before = partials_unsettled_, after_then = false;
    emit_if(b_, regs(n->operands[0]).v[0], [&] {
      region(n->regions[0]);
      after_then = partials_unsettled_;
      partials_unsettled_ = before;
    }, [&] {
      if (n->regions.size() > 1) region(n->regions[1]);
    });
    partials_unsettled_ = partials_unsettled_ || after_then;
  }

  const ir::Function& f_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  ElementOps ops_;
  PtxInstructions ptx_;
  passes::AccessPatterns patterns_;
  passes::TaskPlan tasks_;
  passes::SharedMemoryPlan allocations_;
  int64_t threads_;  // of the current group
  const passes::WaitSites* wait_sites_;        // debug mode only
  std::unique_ptr<DebugWaits> debug_waits_;    // debug mode only
  ClusterDims cluster_;  // blocks per cluster (1, 1, 1: no clusters)
  std::unique_ptr<llvm::Module> mod_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  bool has_barriers_ = false;         // the kernel allocates mbarriers
  Value* tid_ = nullptr;
  Value* block_tid_ = nullptr;        // %tid.x
  Value* group_barrier_ = nullptr;    // the group's named barrier id (i32); null: the whole block (bar.sync 0)
  Value* replica_ = nullptr;          // task_replica_id inside a task
  Value* scratch_ = nullptr;          // byte offset of the group's scratch in shared memory (i32)
  int64_t scratch_start_ = 0;         // where scratch begins: after the user's allocations
  int64_t scratch_bytes_ = 0;         // the most scratch any group needs
  llvm::GlobalVariable* scratch_stride_ = nullptr;
  Value* scratch_turn_ = nullptr;    // i32 slot: the buffer (0, 1) the next whole-group reduction writes
  bool partials_unsettled_ = false;  // threads may still read the last partials (no barrier since)
  std::unordered_map<const ir::Node*, Regs> regs_;
  std::unordered_map<const ir::Node*, Regs> converted_;  // this node's operands, converted to blocked
  std::unordered_set<const ir::Node*> wgmma_vars_;
  std::unordered_set<const ir::Node*> deferred_;  // prologue tiles, lowered in each task (defer_prologue_tiles)
  std::vector<NodeRef> deferred_order_;
  std::unordered_map<const ir::Node*, std::vector<Value*>> vars_;
};

}  // namespace

LoweredKernel lower_to_nvptx(const ir::Function& f, llvm::LLVMContext& context, int num_warps,
                             const ClusterDims& cluster, const std::string& symbol,
                             const passes::WaitSites* debug_waits) {
  return Lowering(f, context, num_warps, cluster, symbol, debug_waits).run();
}

}  // namespace weft::codegen::nvptx
