// NVPTX lowering: groups (sync_group), mbarriers, shared buffers' ops, TMA, thread-block clusters and
// async_tasks (hopper_node: every op the other sections do not lower).
#include "codegen/nvptx/lowering.h"

#include <fmt/format.h>

#include <tuple>

#include "codegen/llvm_builders.h"
#include "codegen/nvptx/redundant_syncs.h"
#include "ir/copy_hints.h"
#include "ir/walk.h"
#include "passes/shared_layouts.h"

namespace weft::codegen::nvptx::detail {

// Marked as the group's own sync: where the optimized code has two in a row, or a fence again after a fence
// and a sync, remove_redundant_syncs keeps one (one op's closing sync is often the next one's opening sync).
void Lowering::sync_group() {
  if (one_warp_) return ptx_.warp_sync();  // a task its first warp runs alone (TaskSlot::one_thread)
  mark_group_sync(group_barrier_ ? ptx_.barrier(group_barrier_, i32c(threads_)) : ptx_.barrier());
}

// Thread 0 initializes every mbarrier before any user code; the fence and bar.sync publish them (in a
// cluster, the cluster sync: other blocks arrive at and multicast to them).
// The barrier array (alloc_barriers) a barrier operand belongs to.
static const ir::Node* barrier_array(const NodeRef& bar) {
  return bar->op == Op::BarrierAt ? bar->operands[0].get() : bar.get();
}

// Barriers from alloc_warp_barriers, whose arrive count counts threads.
static bool per_thread_barriers(const ir::Node& array) {
  return array.attrs.ints.size() > 2 && array.attrs.ints[2] == 1;
}

// mbarriers that only ever see plain local arrivals (barrier_arrive; no expected bytes, no TMA, no remote
// arrivals), all from groups of one size: each warp arrives for itself (bar.warp.sync, then lane 0), so a
// replica's release costs no group-wide bar.sync. Their count is then arrivals x warps per group. What
// such a barrier counts is unchanged: a replica's arrival completes when all of its warps have arrived.
void Lowering::plan_warp_arrivals() {
  std::unordered_map<const ir::Node*, int64_t> warps;  // barrier array -> warps per arriving group; 0: no
  std::function<void(const ir::Region&, int64_t)> walk = [&](const ir::Region& r, int64_t group_warps) {
    for (const NodeRef& n : r.body) {
      switch (n->op) {
        case Op::BarrierArrive: {
          auto [it, added] = warps.emplace(barrier_array(n->operands[0]), group_warps);
          if ((!added && it->second != group_warps) || per_thread_barriers(*it->first)) it->second = 0;
          break;
        }
        case Op::BarrierExpectBytes:
        case Op::BarrierArriveRemote: warps[barrier_array(n->operands[0])] = 0; break;
        case Op::AsyncDescriptorLoad:
        case Op::AsyncDescriptorLoadMulticast:
        case Op::AsyncLoadBulk:
        case Op::AsyncRemoteShmemStore:
        case Op::AsyncRemoteShmemCopy: warps[barrier_array(n->operands[2])] = 0; break;
        default: break;
      }
      if (n->op == Op::AsyncTasks) {
        for (size_t t = 0; t < n->regions.size(); ++t)  // (a task run by one thread arrives once: group arrivals)
          walk(n->regions[t], tasks_.slots[t].one_thread ? 0 : tasks_.slots[t].warps);
        continue;
      }
      for (const ir::Region& inner : n->regions) walk(inner, group_warps);
    }
  };
  walk(f_.body, threads_ / 32);
  for (const auto& [array, w] : warps)
    if (w > 0) warp_arrivals_[array] = w;
}

void Lowering::init_barriers() {
  bool any = false;
  for (const passes::SharedAllocation& a : allocations_.allocations) any = any || a.node->op == Op::AllocBarriers;
  has_barriers_ = any;
  cluster_scope_sync_ = clustered() && writes_outside_block_shared_memory(f_.body);
  bool named = debug_waits_ && uses_named_barriers(f_.body);
  if (!any && !named) return;
  if (any) plan_warp_arrivals();
  if (named)
    debug_named_base_ = new llvm::GlobalVariable(*mod_, b_.getInt32Ty(), true, llvm::GlobalValue::InternalLinkage,
                                                 nullptr, "weft_debug_named_barriers");
  guarded(b_.CreateICmpEQ(block_tid_, i32c(0)), [&]() -> Value* {
    for (const passes::SharedAllocation& a : allocations_.allocations) {
      if (a.node->op != Op::AllocBarriers) continue;
      auto w = warp_arrivals_.find(a.node);
      int64_t count = a.node->attrs.ints[1] * (w != warp_arrivals_.end() ? w->second : 1);
      for (int64_t i = 0; i < a.node->type.shape[0]; ++i)
        ptx_.mbarrier_init(shared_address(i32c(a.offset + i * passes::kMbarrierBytes)), static_cast<int>(count));
    }
    if (any) ptx_.fence_mbarrier_init();
    for (int64_t id = 0; named && id < kNamedBarrierIds; ++id)
      b_.CreateAlignedStore(b_.getInt64(0), debug_named_barrier(i32c(id)), llvm::MaybeAlign(8));
    return nullptr;
  }, nullptr);
  if (clustered())
    ptx_.cluster_sync();
  else
    ptx_.barrier();
}

// Generic-proxy writes another block of the cluster could read: store() and atomics to global memory,
// local_store into another block's shared memory (TMA stores and bulk copies are async-proxy writes, ordered
// by their own completion, not by an mbarrier arrival's release).
bool Lowering::writes_outside_block_shared_memory(const ir::Region& r) {
  return ir::any_statement(r, [](const ir::Node& n) {
    return n.op == Op::Store || n.op == Op::LocalStoreRemote || n.op == Op::AtomicRmw || n.op == Op::AtomicCas;
  });
}

bool Lowering::uses_named_barriers(const ir::Region& r) {
  return ir::any_statement(
      r, [](const ir::Node& n) { return n.op == Op::NamedBarrierWait || n.op == Op::NamedBarrierArrive; });
}

// The thread of the group that performs what the group does once: thread 0, or in a task its first warp
// runs alone, the lane elect.sync picks (a warp-uniform choice, so that ptxas keeps the task's scalar work
// on the uniform datapath rather than in per-thread registers). `same_thread`: an operation whose effect
// belongs to the thread (a bulk async-group committed, then waited for): always thread 0.
Value* Lowering::one_thread_of_group(bool same_thread) {
  return one_warp_ && !same_thread ? ptx_.elect_one() : b_.CreateICmpEQ(tid_, i32c(0));
}

// GPU debug mode: the counter of named barrier `id` (an i64 in shared memory, after everything else; its
// offset is set in run()).
Value* Lowering::debug_named_barrier(Value* id) {
  Value* base = b_.CreateLoad(b_.getInt32Ty(), debug_named_base_);
  return shared_element(b_.getInt64Ty(), base, id);
}

// Runs `body` on one thread of the group after all of the group's threads got here: how a task replica
// arrives once at an mbarrier. (In a task its first warp runs alone, that warp's elected lane: its lanes
// cannot lag one another by a phase, so they need no sync first.)
void Lowering::once_per_group(const std::function<void()>& body, bool same_thread) {
  if (!one_warp_) sync_group();
  guarded(one_thread_of_group(same_thread), [&]() -> Value* {
    body();
    return nullptr;
  }, nullptr);
}

void Lowering::hopper_node(const NodeRef& n) {
  const auto& o = n->operands;
  switch (n->op) {
    case Op::LocalAlloc:
    case Op::AllocBarriers:
      regs_[n.get()] = {{i32c(allocations_.of(n.get()).offset)}};
      return;
    case Op::LocalView: {
      int64_t stage_bytes = allocations_.of(o[0].get()).stage_bytes;
      regs_[n.get()] = {{index_add(regs(o[0]).v[0], index_mul(regs(o[1]).v[0], stage_bytes), false)}};
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
      guarded(one_thread_of_group(), [&]() -> Value* {
        Value* policy = l2_policy(*n);
        if (multicast)
          ptx_.tma_load_multicast(smem, desc, coords, bar, mask, policy);
        else
          ptx_.tma_load(smem, desc, coords, bar, policy);
        return nullptr;
      }, nullptr);
      return;
    }
    case Op::AsyncDescriptorPrefetch: {  // one thread; nothing to wait for
      Value* desc = raw(o[0]).v[0];
      std::vector<Value*> coords;
      for (size_t i = o.size(); i-- > 1;) coords.push_back(regs(o[i]).v[0]);
      guarded(one_thread_of_group(), [&]() -> Value* {
        ptx_.tma_prefetch(desc, coords, l2_policy(*n));
        return nullptr;
      }, nullptr);
      return;
    }
    case Op::DescriptorPrefetch: {
      Value* desc = raw(o[0]).v[0];
      guarded(one_thread_of_group(), [&]() -> Value* {
        ptx_.prefetch_tensormap(desc);
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
        ptx_.tma_store(desc, coords, smem, l2_policy(*n), ir::store_reduce_name(ir::copy_hints(n->attrs).reduce));
        ptx_.bulk_commit_group();
      }, /*same_thread=*/true);  // the thread that waits for the group (AsyncStoreWait)
      return;
    }
    case Op::AsyncStoreWait:
      guarded(one_thread_of_group(/*same_thread=*/true), [&]() -> Value* {
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
      Regs out = raw(o[0]);
      out.v = ptx_.wgmma_wait_group(static_cast<int>(n->attrs.ints[0]), out.v);
      regs_[n.get()] = std::move(out);
      return;
    }
    case Op::LocalReinterpret: regs_[n.get()] = regs(o[0]); return;  // the same bytes (a buffer: its offset)
    case Op::LocalLoad: return shared_tile(o[0], n, n->type.dtype, n->type.numel(), nullptr);
    case Op::LocalStore: return shared_tile(o[0], n, o[1]->type.dtype, o[1]->type.numel(), &raw(o[1]));
    case Op::LocalStoreRemote:
      return shared_tile(o[0], n, o[1]->type.dtype, o[1]->type.numel(), &raw(o[1]), regs(o[2]).v[0]);
    case Op::LocalGather:
    case Op::LocalScatter: return local_gather_scatter(n);
    case Op::BarrierAt:
      regs_[n.get()] = {{b_.CreateAdd(regs(o[0]).v[0], b_.CreateMul(regs(o[1]).v[0], i32c(passes::kMbarrierBytes)))}};
      return;
    case Op::BarrierArrive: {
      Value* bar = shared_address(regs(o[0]).v[0]);
      // alloc_warp_barriers: each thread arrives for itself, its own accesses released by its arrival.
      if (per_thread_barriers(*barrier_array(o[0]))) return ptx_.mbarrier_arrive(bar);
      if (!warp_arrivals_.count(barrier_array(o[0]))) return once_per_group([&] { ptx_.mbarrier_arrive(bar); });
      ptx_.warp_sync();  // the warp's earlier accesses, ordered before its one arrival
      guarded(b_.CreateICmpEQ(lane(), i32c(0)), [&]() -> Value* {
        ptx_.mbarrier_arrive(bar);
        return nullptr;
      }, nullptr);
      return;
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
    case Op::NamedBarrierArrive: {
      int64_t threads = n->attrs.ints[1];
      Value* id = o.empty() ? i32c(n->attrs.ints[0]) : regs(o[0]).v[0];  // a constant, or computed (bar.sync %r)
      bool wait = n->op == Op::NamedBarrierWait;
      if (debug_waits_)  // counters in shared memory that can time out (debug_waits.h)
        return debug_waits_->named_barrier(debug_named_barrier(id), id, threads, wait,
                                           wait ? wait_sites_->index.at(n.get()) : 0);
      if (wait) ptx_.barrier(id, i32c(threads));
      else ptx_.barrier_arrive(id, i32c(threads));
      return;
    }
    case Op::AsyncTasks: return async_tasks(n);
    case Op::TaskReplicaId: regs_[n.get()] = {{replica_}}; return;
    case Op::ThreadIndex:
    case Op::ReadClock:
    case Op::Nanosleep:
    case Op::VoteBallot: return thread_identity_and_time(n);
    // Thread-block clusters: the ops are a line each; the cluster-wide syncs around the kernel body are in
    // the constructor (the cluster shape), init_barriers and run().
    case Op::ClusterCtaRank: regs_[n.get()] = {{ptx_.cluster_cta_rank()}}; return;
    case Op::ClusterSync: ptx_.cluster_sync(); return;
    case Op::BarrierArriveRemote: {
      Value* bar = shared_address(regs(o[0]).v[0]);
      Value* rank = regs(o[1]).v[0];
      return once_per_group(
          [&] { ptx_.mbarrier_arrive_cluster(ptx_.map_shared_to_rank(bar, rank), cluster_scope_sync()); });
    }
    case Op::AsyncLoadBulk:
    case Op::AsyncStoreBulk: return bulk_copy(n);
    case Op::AsyncRemoteShmemStore: return remote_store_async(n);
    case Op::AsyncRemoteShmemCopy: {
      // Every thread's writes to the source, visible to the async proxy; after the group's sync one thread
      // copies (the copy reads the source as the async proxy).
      Value* dst = shared_address(regs(o[0]).v[0]);
      Value* src = shared_address(regs(o[1]).v[0]);
      Value* bar = shared_address(regs(o[2]).v[0]);
      Value* rank = regs(o[3]).v[0];
      Value* bytes = i32c(o[1]->type.numel() * o[1]->type.dtype.bytes());
      ptx_.fence_proxy_async_shared();
      return once_per_group([&] {
        ptx_.bulk_copy_to_cluster(ptx_.map_shared_to_rank(dst, rank), src, bytes, ptx_.map_shared_to_rank(bar, rank));
      });
    }
    default: break;
  }
  throw InternalError(fmt::format("NVPTX lowering: no rule for op '{}'", ir::op_name(n->op)));
}

// The L2 cache policy of a TMA op with an eviction hint (ints[0], weft::Evict), else null.
Value* Lowering::l2_policy(const ir::Node& n) {
  const int evict = ir::copy_hints(n.attrs).evict;
  return evict ? ptx_.l2_eviction_policy(evict) : nullptr;
}

// Every thread of the group polls until the phase of parity `parity` has completed.
void Lowering::barrier_wait(Value* bar, Value* parity) {
  auto* poll = llvm::BasicBlock::Create(c_, "mbarrier.wait", fn_);
  auto* done = llvm::BasicBlock::Create(c_, "mbarrier.done", fn_);
  b_.CreateBr(poll);
  b_.SetInsertPoint(poll);
  // In a cluster, arrivals may come from other blocks: acquire at cluster scope (their release is).
  b_.CreateCondBr(ptx_.mbarrier_try_wait_parity(bar, parity, cluster_scope_sync()), done, poll);
  b_.SetInsertPoint(done);
}

// Each task is a branch on the warp index; its replicas share the code, told apart at run time. Inside,
// the group is the replica: its threads renumbered from 0, its own named barrier and scratch.
void Lowering::async_tasks(const NodeRef& n) {
  Value* warp = b_.CreateLShr(block_tid_, i32c(5));
  int fiber = 0;
  for (size_t t = 0; t < n->regions.size(); ++t) {
    const passes::TaskSlot& slot = tasks_.slots[t];
    int first = slot.first_warp, last = first + slot.warps * slot.replicas;
    Value* mine = b_.CreateAnd(b_.CreateICmpUGE(warp, i32c(first)), b_.CreateICmpULT(warp, i32c(last)));
    // Vars declared before async_tasks and assigned in the task: a phi each after the task's branch.
    std::vector<const ir::Node*> changed = vars_set_in(n->regions[t]);
    std::vector<std::vector<Value*>> at_start = var_values(changed), in_task;
    llvm::BasicBlock* task_end = nullptr;
    llvm::BasicBlock* other = nullptr;
    emit_if(b_, mine, [&] {
      if (slot.regs && slot.regs != tasks_.entry_regs) ptx_.set_max_registers(slot.regs > tasks_.entry_regs, slot.regs);
      Value* replica = b_.CreateUDiv(b_.CreateSub(warp, i32c(first)), i32c(slot.warps));
      Value* fiber_index = b_.CreateAdd(replica, i32c(fiber));
      Value* group_start = b_.CreateMul(b_.CreateAdd(b_.CreateMul(replica, i32c(slot.warps)), i32c(first)), i32c(32));
      auto saved = std::make_tuple(tid_, threads_, group_barrier_, replica_, scratch_, partials_unsettled_, task_registers_,
                                   one_warp_);
      partials_unsettled_ = false;
      task_registers_ = slot.regs;
      tid_ = b_.CreateSub(block_tid_, group_start);
      threads_ = slot.warps * 32;
      group_barrier_ = b_.CreateSub(i32c(15), fiber_index);
      replica_ = replica;
      TaskScratch ts;
      ts.slot = &slot;
      auto constant = [&](const char* name) {
        return new llvm::GlobalVariable(*mod_, b_.getInt32Ty(), true, llvm::GlobalValue::InternalLinkage, nullptr, name);
      };
      ts.base = constant("weft_scratch_base");
      ts.stride = constant("weft_scratch_stride");
      scratch_ = b_.CreateAdd(b_.CreateLoad(b_.getInt32Ty(), ts.base),
                              b_.CreateMul(replica, b_.CreateLoad(b_.getInt32Ty(), ts.stride)));
      int64_t outer_bytes = scratch_bytes_;
      scratch_bytes_ = 0;
      for (const NodeRef& d : deferred_order_) node(d);
      if (slot.one_thread) {
        // Scalar work around one-thread operations (passes::runs_on_one_thread): the replica's first warp runs
        // it alone, its one-thread operations on an elected lane, with no group bar.sync before them; the
        // other warps go to the task's end. (The warp index comes from lane 0 so that ptxas knows it uniform.)
        guarded(b_.CreateICmpEQ(ptx_.from_lane_zero(b_.CreateLShr(tid_, i32c(5))), i32c(0)), [&]() -> Value* {
          one_warp_ = true;
          region(n->regions[t]);
          return nullptr;
        }, nullptr);
      } else {
        region(n->regions[t]);
      }
      for (const NodeRef& d : deferred_order_) regs_.erase(d.get());
      ts.bytes = scratch_bytes_;
      task_scratch_.push_back(ts);
      scratch_bytes_ = outer_bytes;
      std::tie(tid_, threads_, group_barrier_, replica_, scratch_, partials_unsettled_, task_registers_, one_warp_) =
          saved;
      task_end = b_.GetInsertBlock();
      in_task = var_values(changed);
      set_vars(changed, at_start);
    }, [&] { other = b_.GetInsertBlock(); });
    join_vars(changed, in_task, task_end, at_start, other);
    fiber += slot.replicas;
  }
}

// Thread identity and time (weft/threads.h). A per-thread tile has one element per thread of the group,
// and in the blocked layout element t is thread t's only register: each thread reads its own clock.
void Lowering::thread_identity_and_time(const NodeRef& n) {
  if (n->op == Op::Nanosleep) {
    for (Value* ns : regs(n->operands[0]).v)
      ptx_.nanosleep(b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, ns, i32c(0)));  // negative: no sleep
    return;
  }
  if (n->op == Op::VoteBallot) {  // the whole warp votes; lanes outside the mask count as false
    Value* mask = i32c(static_cast<uint32_t>(n->attrs.ints[1]));
    if (n->type.shape.empty()) {
      regs_[n.get()] = {{b_.CreateSelect(regs(n->operands[0]).v[0], mask, i32c(0))}};
      return;
    }
    if (prepare_layouts(n) != Layout::Blocked || n->type.numel() != threads_)
      throw InternalError(fmt::format("NVPTX lowering: vote_ballot of {} threads in a group of {}, or not in the blocked "
                                      "layout", n->type.numel(), threads_));
    return elementwise(n, [&](size_t r) { return b_.CreateAnd(ptx_.vote_ballot(regs(n->operands[0]).v[r]), mask); });
  }
  int64_t threads = n->type.numel(), kind = n->attrs.ints[1];
  if (prepare_layouts(n) != Layout::Blocked || threads != threads_)
    throw InternalError(fmt::format("NVPTX lowering: {} of {} threads in a group of {}, or not in the blocked layout",
                                    ir::op_name(n->op), threads, threads_));
  if (n->op == Op::ReadClock)
    return elementwise(n, [&](size_t) { return kind == 0 ? ptx_.clock64() : ptx_.global_timer(); });
  elementwise(n, [&](size_t r) {
    static const int64_t shift[] = {0, 0, 5, 7};
    Value* t = flat_index(threads, static_cast<int64_t>(r));  // = tid_: one element per thread
    return kind == 1 ? b_.CreateAnd(t, i32c(31)) : b_.CreateLShr(t, i32c(shift[kind]));
  });
}

}  // namespace weft::codegen::nvptx::detail
