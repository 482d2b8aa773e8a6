// IR -> per-thread LLVM IR for NVPTX: the entry point, the Lowering's constructor and run(), node dispatch,
// elementwise ops and control flow. The layout, the groups and the class: lowering.h.
#include "codegen/nvptx/lower_nvptx.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Local.h>

#include "codegen/llvm_builders.h"
#include "codegen/nvptx/lowering.h"
#include "ir/atomics.h"

namespace weft::codegen::nvptx::detail {

Lowering::Lowering(const ir::Function& f, llvm::LLVMContext& c, int num_warps, const ClusterDims& cluster,
                   const std::string& symbol, const passes::WaitSites* debug_waits)
    : f_(f), c_(c), b_(c), ops_(b_, MathTarget::Nvptx, kGlobal), ptx_(b_), patterns_(f),
      plans_(passes::kernel_plans(f)), tasks_(plans_->tasks_for(num_warps)), allocations_(plans_->memory),
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
}

LoweredKernel Lowering::run() {
  for (size_t i = 0; i < f_.params.size(); ++i)
    regs_[f_.params[i].get()] = {{is_descriptor(*f_.params[i])
                                      ? b_.CreatePtrToInt(fn_->getArg(i), b_.getInt64Ty())
                                      : ops_.from_slot(f_.params[i]->type.dtype, fn_->getArg(i))}};
  decide_var_layouts();
  init_barriers();
  defer_prologue_tiles();
  region(f_.body);
  // No block of the cluster exits (freeing its shared memory) while another may still arrive at its
  // barriers or multicast into it.
  if (clustered() && has_barriers_) ptx_.cluster_sync();
  b_.CreateRetVoid();
  // Scratch: the block's own (code outside tasks), then each task's replicas.
  int64_t total = scratch_start_ + round_up(scratch_bytes_, kScratchAlign);
  std::string exchanges = fmt::format("{} for the whole block", round_up(scratch_bytes_, kScratchAlign));
  for (TaskScratch& ts : task_scratch_) {
    int64_t stride = round_up(ts.bytes, kScratchAlign);
    ts.base->setInitializer(b_.getInt32(static_cast<uint32_t>(total)));
    ts.stride->setInitializer(b_.getInt32(static_cast<uint32_t>(stride)));
    total += ts.slot->replicas * stride;
    exchanges += fmt::format(", {} x {} for task '{}'", ts.slot->replicas, stride, ts.slot->name);
  }
  if (debug_named_base_) {
    total = round_up(total, 8);
    debug_named_base_->setInitializer(b_.getInt32(static_cast<uint32_t>(total)));
    total += kNamedBarrierIds * 8;
    exchanges += fmt::format(", {} for GPU debug mode's named-barrier counters", kNamedBarrierIds * 8);
  }
  if (total > kMaxSharedBytes)
    throw Error(fmt::format("kernel '{}' needs {} bytes of shared memory per block but a block has at most {}: the "
                            "allocations take {} and the exchanges between threads {}:{}\nuse fewer stages or "
                            "smaller tiles",
                            f_.name, total, kMaxSharedBytes, allocations_.bytes, exchanges, allocations_.table()),
                f_.loc);
  // What the lowering made and nothing uses — most of it the f32 -> bf16 -> f32 rounding of values whose
  // packed conversion takes the unrounded f32 (pack_pair), a sixth of attention's instructions — goes before
  // any pass walks it (each block from its end, so that a chain dies whole).
  for (llvm::BasicBlock& bb : *fn_)
    for (auto it = bb.rbegin(); it != bb.rend();) {
      llvm::Instruction& inst = *it++;
      if (llvm::isInstructionTriviallyDead(&inst)) inst.eraseFromParent();
    }
  check_lowered_module(*mod_, "NVPTX", f_.name);
  LoweredKernel out;
  out.symbol = fn_->getName().str();
  out.module = std::move(mod_);
  out.shared_bytes = total;
  out.threads = tasks_.threads();
  return out;
}

// Each region starts tid_in_region afresh: a value of an enclosing region would be live across this one.
void Lowering::region(const ir::Region& r) {
  std::map<Value*, Value*> outer;
  std::swap(outer, region_tids_);
  llvm::BasicBlock* outer_statement = statement_block_;
  for (const NodeRef& n : r.body) {
    if (deferred_.count(n.get())) continue;
    statement_block_ = b_.GetInsertBlock();
    node(n);
  }
  region_tids_ = std::move(outer);
  statement_block_ = outer_statement;
}

// In a kernel with tasks, a tile made before async_tasks belongs to no group yet: its registers depend
// on the group's layout. Such tiles are lowered again at the start of each task, in the task's own
// layout (they are pure: values, not effects).
void Lowering::defer_prologue_tiles() {
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

void Lowering::elementwise(const NodeRef& n, const std::function<Value*(size_t r)>& element, Layout layout) {
  Regs out = empty_regs(layout, n->type.shape);
  for (int64_t r = 0; r < register_count(layout, n->type.shape); ++r)
    out.v.push_back(ops_.round(n->type.dtype, element(static_cast<size_t>(r))));
  regs_[n.get()] = std::move(out);
}

void Lowering::node(const NodeRef& n) {
  if (lazy(*n)) return;  // computed where it is used, in the user's layout (prepare_layouts)
  if (n->type.is_value() && !n->type.shape.empty() && !is_pow2(threads_))
    throw Error(fmt::format("{} makes a tile outside async_tasks, where all {} warps of the block run it; tile "
                            "operations need a power-of-two number of warps: move it into a task",
                            ir::op_name(n->op), threads_ / 32),
                n->loc);
  DType d = n->type.dtype;
  const auto& o = n->operands;
  Layout layout = prepare_layouts(n);
  // Acc and AccRows registers are not in the blocked order the access-pattern analysis describes.
  auto at = [&](size_t i, size_t r) {
    const Regs& x = regs(o[i]);
    return x.uniform ? x.v[0] : layout != Layout::Blocked ? x.v[r] : same_value_reg(o[i], r);
  };
  switch (ir::op_category(n->op)) {
    case ir::OpCategory::Unary:
      return elementwise(n, [&](size_t r) { return ops_.unary(n->op, d, at(0, r), approximate(*n)); }, layout);
    case ir::OpCategory::Binary:
      return elementwise(n, [&](size_t r) { return binary_element(n->op, d, at(0, r), at(1, r), n->type.numel() > 1); },
                         layout);
    case ir::OpCategory::Compare:
      return elementwise(n, [&](size_t r) { return ops_.compare(n->op, o[0]->type.dtype, at(0, r), at(1, r)); },
                         layout);
    default: break;
  }
  switch (n->op) {
    case Op::ProgramId: regs_[n.get()] = {{ptx_.block_index(n->axis())}}; return;
    case Op::NumPrograms: regs_[n.get()] = {{ptx_.grid_size(n->axis())}}; return;
    case Op::Constant: regs_[n.get()] = splat(ops_.constant(d, n->attrs), n->type.numel()); return;
    case Op::Arange: {
      int64_t start = n->attrs.ints[0];
      return elementwise(n, [&](size_t r) { return add_const(flat_index(n->type.numel(), r), start); });
    }
    case Op::Fma: return elementwise(n, [&](size_t r) { return ops_.fma(at(0, r), at(1, r), at(2, r)); }, layout);
    case Op::Select:
      return elementwise(n, [&](size_t r) { return b_.CreateSelect(at(0, r), at(1, r), at(2, r)); }, layout);
    case Op::Cast: return elementwise(n, [&](size_t r) { return ops_.cast(o[0]->type.dtype, d, at(0, r)); }, layout);
    case Op::PtrAdd: {
      llvm::Type* pointee = ops_.memory_type(DType{d.scalar, false});
      regs_[n.get()] = pointers_in_runs(*n, [&](int64_t r) {
        return pointer_add(pointee, at(0, r), at(1, r));
      });
      return;
    }
    case Op::Reshape: regs_[n.get()] = regs(o[0]); return;  // same element count, same layout
    case Op::Broadcast: return broadcast(n);
    case Op::Permute: return permute(n);
    case Op::Slice: return slice(n);
    case Op::Load: return load(n);
    case Op::Store: return store(n);
    case Op::AtomicRmw:
    case Op::AtomicCas: return atomic(n);
    case Op::WaitForPriorGrid: ptx_.griddepcontrol_wait(); return;
    case Op::LaunchDependentGrids: ptx_.griddepcontrol_launch_dependents(); return;
    case Op::Fence:  // every thread's accesses before, every thread's after (CUTLASS's semaphore does the same)
      sync_group();
      ptx_.fence_acq_rel(ir::scope_name(static_cast<MemScope>(n->attrs.ints[0])));
      sync_group();
      return;
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::ArgMax:
    case Op::ArgMin: return reduce(n);
    case Op::Dot: return dot(n);
    case Op::For: return for_loop(n);
    case Op::If: return if_else(n);
    case Op::While: return while_loop(n);
    case Op::LoopCondition: loop_condition_ = regs(o[0]).v[0]; return;
    case Op::VarDecl: vars_[n.get()] = var_words(n.get(), in_var_layout(o[0], n.get(), n->loc)); return;
    case Op::VarGet: {
      Regs out = empty_regs(var_layout(o[0].get()), n->type.shape);
      bool packed = packed_var(o[0].get());
      for (Value* word : vars_.at(o[0].get())) {
        if (!packed) {
          out.v.push_back(word);
          continue;
        }
        for (bool high : {false, true}) {
          out.v.push_back(ops_.to_compute_half_of(d, word, high));
          unpacked_halves_[out.v.back()] = {word, high};
        }
      }
      regs_[n.get()] = std::move(out);
      return;
    }
    case Op::VarSet: vars_.at(o[0].get()) = var_words(o[0].get(), in_var_layout(o[1], o[0].get(), n->loc)); return;
    default: return hopper_node(n);
  }
}

// A Var of f16/bf16 in the accumulator layout keeps each pair of neighbouring columns (registers 2i, 2i + 1)
// packed in one 32-bit word: half the registers while it waits (attention's P between steps), and the
// word is already what wgmma takes as its A operand (pack_pair finds it again).
bool Lowering::packed_var(const ir::Node* var) const {
  ScalarType s = var->type.dtype.scalar;
  return (s == ScalarType::bf16 || s == ScalarType::f16) && !var->type.dtype.pointer && var_layout(var) == Layout::Acc;
}

std::vector<Value*> Lowering::var_words(const ir::Node* var, const Regs& value) {
  if (!packed_var(var)) return value.v;
  std::vector<Value*> words;
  for (size_t r = 0; r + 1 < value.v.size(); r += 2) words.push_back(pack_pair(var->type.dtype, value.v[r], value.v[r + 1]));
  return words;
}

// for (i = begin; i < end; i += step) body(i), on i32 values known to be uniform.
void Lowering::counted_loop(Value* begin, Value* end, Value* step, const std::function<void(Value*)>& body) {
  emit_loop(b_, begin, end, step, body);
}

// Vars are SSA values: vars_ holds each Var's current words, and the lowering makes the phis where control
// flow joins (loop headers, the ends of ifs and of task branches) — what SROA and mem2reg used to make from
// an alloca per word, its loads and its stores (the optimizer's largest cleanup after instcombine).

// The Vars that region r assigns (VarSet, in nested regions too) and does not declare, in the order first
// assigned.
std::vector<const ir::Node*> Lowering::vars_set_in(const ir::Region& r) {
  std::unordered_set<const ir::Node*> declared, seen;
  std::vector<const ir::Node*> set;
  std::function<void(const ir::Region&)> walk = [&](const ir::Region& region) {
    for (const NodeRef& n : region.body) {
      if (n->op == Op::VarDecl) declared.insert(n.get());
      if (n->op == Op::VarSet && seen.insert(n->operands[0].get()).second) set.push_back(n->operands[0].get());
      for (const ir::Region& inner : n->regions) walk(inner);
    }
  };
  walk(r);
  std::vector<const ir::Node*> out;
  for (const ir::Node* v : set)
    if (!declared.count(v) && vars_.count(v)) out.push_back(v);
  return out;
}

// The Vars that any region of n assigns: region 0's first, then those only a later region assigns.
std::vector<const ir::Node*> Lowering::vars_set_in_any_region(const ir::Node& n) {
  std::vector<const ir::Node*> out;
  for (const ir::Region& r : n.regions)
    for (const ir::Node* v : vars_set_in(r))
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

std::vector<std::vector<Value*>> Lowering::var_values(const std::vector<const ir::Node*>& vars) {
  std::vector<std::vector<Value*>> out;
  for (const ir::Node* v : vars) out.push_back(vars_.at(v));
  return out;
}

void Lowering::set_vars(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& values) {
  for (size_t k = 0; k < vars.size(); ++k) vars_.at(vars[k]) = values[k];
}

// Where two paths join (the builder at the start of the join block): each word of `vars` that differs
// between the paths becomes a phi of the two.
void Lowering::join_vars(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& a,
                         llvm::BasicBlock* a_end, const std::vector<std::vector<Value*>>& b, llvm::BasicBlock* b_end) {
  for (size_t k = 0; k < vars.size(); ++k) {
    std::vector<Value*>& words = vars_.at(vars[k]);
    for (size_t w = 0; w < words.size(); ++w) {
      if (a[k][w] == b[k][w]) {
        words[w] = a[k][w];
        continue;
      }
      llvm::PHINode* phi = b_.CreatePHI(a[k][w]->getType(), 2);
      phi->addIncoming(a[k][w], a_end);
      phi->addIncoming(b[k][w], b_end);
      words[w] = phi;
    }
  }
}

// At a loop header: each word of `vars` becomes a phi at the top of `header`, its first incoming value the
// word from `pre` (before the loop). Returns the phis, which the Vars hold from here on.
std::vector<std::vector<Value*>> Lowering::carried_phis(const std::vector<const ir::Node*>& vars,
                                                        llvm::BasicBlock* header, llvm::BasicBlock* pre) {
  llvm::IRBuilder<> hb(header, header->begin());
  for (const ir::Node* v : vars)
    for (Value*& word : vars_.at(v)) {
      llvm::PHINode* phi = hb.CreatePHI(word->getType(), 2);
      phi->addIncoming(word, pre);
      word = phi;
    }
  return var_values(vars);
}

// At the end of a loop's body (`latch`): the Vars' words there are the header phis' other incoming values.
void Lowering::feed_back(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& phis,
                         llvm::BasicBlock* latch) {
  for (size_t k = 0; k < vars.size(); ++k)
    for (size_t w = 0; w < phis[k].size(); ++w)
      llvm::cast<llvm::PHINode>(phis[k][w])->addIncoming(vars_.at(vars[k])[w], latch);
}

// Whether reduction partials may be unread where control flow joins: wherever they may be on one path.
// The Vars the body assigns get a phi each in the loop header (before the counter's): the value from before
// the loop and the one at the end of the body; after the loop they hold the header's.
void Lowering::for_loop(const NodeRef& n) {
  auto bound = [&](size_t k) { return regs(n->operands[k]).v[0]; };
  bool before = partials_unsettled_, in_body = has_block_reduction(n->regions[0]);
  std::vector<const ir::Node*> carried = vars_set_in_any_region(*n);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  emit_for(b_, bound(0), bound(1), bound(2), [&](Value* i) {
    std::vector<std::vector<Value*>> at_header =
        carried_phis(carried, b_.GetInsertBlock()->getSinglePredecessor(), pre);
    regs_[n->regions[0].args[0].get()] = {{i}};
    partials_unsettled_ = before || in_body;  // from before the loop or from the last iteration
    region(n->regions[0]);
    feed_back(carried, at_header, b_.GetInsertBlock());
    set_vars(carried, at_header);
  });
  partials_unsettled_ = partials_unsettled_ || before;  // the loop may not run
}

// The test (region 0) runs at the header, the body (region 1) after it. The Vars either region assigns get
// a phi each at the header (the value from before the loop and the one at the end of the body); after the
// loop they hold what the last test left.
void Lowering::while_loop(const NodeRef& n) {
  bool before = partials_unsettled_;
  bool inside = has_block_reduction(n->regions[0]) || has_block_reduction(n->regions[1]);
  std::vector<const ir::Node*> carried = vars_set_in_any_region(*n);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  std::vector<std::vector<Value*>> at_header, after_test;
  bool unsettled_after_test = false;
  emit_while(b_, [&] {
    at_header = carried_phis(carried, b_.GetInsertBlock(), pre);
    partials_unsettled_ = before || inside;  // from before the loop or from the last iteration
    region(n->regions[0]);
    after_test = var_values(carried);
    unsettled_after_test = partials_unsettled_;
    return loop_condition_;
  }, [&] {
    region(n->regions[1]);
    feed_back(carried, at_header, b_.GetInsertBlock());
  });
  set_vars(carried, after_test);
  partials_unsettled_ = unsettled_after_test;
}

// The Vars either branch assigns get a phi each after the if (where their values differ).
void Lowering::if_else(const NodeRef& n) {
  bool before = partials_unsettled_, after_then = false;
  std::vector<const ir::Node*> changed = vars_set_in_any_region(*n);
  std::vector<std::vector<Value*>> at_start = var_values(changed), then_values, else_values;
  llvm::BasicBlock *then_end = nullptr, *else_end = nullptr;
  emit_if(b_, regs(n->operands[0]).v[0], [&] {
    region(n->regions[0]);
    after_then = partials_unsettled_;
    partials_unsettled_ = before;
    then_end = b_.GetInsertBlock();
    then_values = var_values(changed);
    set_vars(changed, at_start);  // the else branch starts from the values before the if
  }, [&] {
    if (n->regions.size() > 1) region(n->regions[1]);
    else_end = b_.GetInsertBlock();
    else_values = var_values(changed);
  });
  join_vars(changed, then_values, then_end, else_values, else_end);
  partials_unsettled_ = partials_unsettled_ || after_then;
}

}  // namespace weft::codegen::nvptx::detail

namespace weft::codegen::nvptx {

LoweredKernel lower_to_nvptx(const ir::Function& f, llvm::LLVMContext& context, int num_warps,
                             const ClusterDims& cluster, const std::string& symbol,
                             const passes::WaitSites* debug_waits) {
  return detail::Lowering(f, context, num_warps, cluster, symbol, debug_waits).run();
}

}  // namespace weft::codegen::nvptx
