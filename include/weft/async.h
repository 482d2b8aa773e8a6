// weft — explicit shared memory, mbarriers and warp-specialized tasks (the Hopper constructs).
//
// Names follow TLX where the concept is the same. Each operation says what it becomes on sm_90a; the
// CPU backend runs the same kernels with each task replica as a fiber (see README, "CPU semantics").
//
//   auto a_s  = local_alloc<bf16>({128, 64}, /*stages=*/4, "a_s");   // 4 x 16 KB of shared memory
//   auto full = alloc_barriers(4, /*arrive_count=*/1, "full");       // 4 mbarriers
//   async_tasks(
//     task("producer", {.warps = 4, .regs = 40}, [&] { ... barrier_arrive(full[i]); ... }),
//     task("consumer", {.warps = 4, .regs = 232, .replicas = 2}, [&] { ... barrier_wait(full[i], phase); ... }));
//
// Arrivals count task replicas: a replica arrives once when all of its threads have reached
// barrier_arrive (on the GPU its threads meet at a named barrier and one thread arrives).
//
// The asynchronous copies that fill shared memory (cp.async, TMA, bulk copies) are in weft/async_copies.h,
// which this header includes.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "weft/ops.h"

namespace weft {

// ---- shared memory ------------------------------------------------------------------------------------

namespace detail {
// Bytes of a tile of `shape` elements of T.
template <class T> int64_t bytes_of(const Shape& shape) {
  int64_t n = sizeof(T);
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace detail

template <class T> class SharedView;

// A shared-memory allocation of `stages` buffers of one tile shape (local_alloc). Index it with a stage to
// get a SharedView.
template <class T> class SharedBuffer {
 public:
  explicit SharedBuffer(detail::NodeRef n) : node_(std::move(n)) {}
  const detail::NodeRef& node() const { return node_; }
  int stages() const { return static_cast<int>(detail::node_shape(node_)[0]); }
  Shape stage_shape() const { return Shape(detail::node_shape(node_).begin() + 1, detail::node_shape(node_).end()); }
  int64_t stage_bytes() const { return detail::bytes_of<T>(stage_shape()); }
  SharedView<T> operator[](Operand<int32_t> stage) const;

 private:
  detail::NodeRef node_;
};

// One stage of a SharedBuffer.
template <class T> class SharedView {
 public:
  explicit SharedView(detail::NodeRef n) : node_(std::move(n)) {}
  const detail::NodeRef& node() const { return node_; }
  const Shape& shape() const { return detail::node_shape(node_); }
  int64_t bytes() const { return detail::bytes_of<T>(shape()); }
  // `count` rows of this stage starting at row `first` (a run-time value; count divides the rows). TLX:
  // local_slice along the first dimension.
  SharedView rows(Operand<int32_t> first, int count) const {
    detail::Attrs a;
    a.ints = {count};
    return SharedView(detail::emit(detail::Op::LocalRows, {node_, first.node}, std::move(a), first.loc));
  }
  // Columns [first, first + count) of a 2-D stage. The buffer then keeps its columns in panels of
  // `count`: each panel is its own row-major [rows, count] block (what one TMA box of that width fills),
  // so a view of whole panels is contiguous.
  SharedView cols(int first, int count, SourceLoc loc = SourceLoc::current()) const {
    detail::Attrs a;
    a.ints = {first, count};
    return SharedView(detail::emit(detail::Op::LocalCols, {node_}, std::move(a), loc));
  }

 private:
  detail::NodeRef node_;
};

// `stages` buffers of `shape` elements of T in the block's shared memory, for the whole block (call it at
// the top of the kernel body). `name` appears in errors and deadlock reports. The block's total must fit
// 227 KB; the error lists every allocation otherwise.
template <class T>
SharedBuffer<T> local_alloc(Shape shape, int stages = 1, std::string name = "smem", SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.shape = std::move(shape);
  a.shape.insert(a.shape.begin(), stages);
  a.dtype = dtype_of<T>;
  a.has_dtype = true;
  a.names = {std::move(name)};
  return SharedBuffer<T>(detail::emit(detail::Op::LocalAlloc, {}, std::move(a), loc));
}

// A buffer on the shared memory of `reuse` (TLX: local_alloc(..., reuse=...)): two views of the same
// bytes, for phases of a kernel that need them at different times (the kernel orders the phases). It must
// fit in `reuse`'s bytes.
template <class T, class U>
SharedBuffer<T> local_alloc(Shape shape, int stages, std::string name, const SharedBuffer<U>& reuse,
                            SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.shape = std::move(shape);
  a.shape.insert(a.shape.begin(), stages);
  a.dtype = dtype_of<T>;
  a.has_dtype = true;
  a.names = {std::move(name)};
  return SharedBuffer<T>(detail::emit(detail::Op::LocalAlloc, {reuse.node()}, std::move(a), loc));
}

// Stage `stage` of `buffer` (TLX: local_view; also buffer[stage]).
template <class T> SharedView<T> local_view(const SharedBuffer<T>& buffer, Operand<int32_t> stage) {
  return SharedView<T>(detail::emit(detail::Op::LocalView, {buffer.node(), stage.node}, {}, stage.loc));
}
template <class T> SharedView<T> SharedBuffer<T>::operator[](Operand<int32_t> stage) const {
  return local_view(*this, std::move(stage));
}

// The view's contents as a tile (ld.shared). Within one task, local_store before local_load needs no
// barrier (weft orders them); between tasks, order them with an mbarrier.
template <class T> Tile<T> local_load(const SharedView<T>& view, SourceLoc loc = SourceLoc::current()) {
  return Tile<T>(detail::emit(detail::Op::LocalLoad, {view.node()}, {}, loc));
}
// Writes a tile of the view's shape into it (st.shared). On sm_90a a 16-bit tile in the accumulator layout
// (an async_dot result, cast to bf16 / f16) is written with stmatrix, 16 bytes per lane per instruction,
// except in a task given fewer than 128 registers (stmatrix takes its sources as register quads).
template <class T> void local_store(const SharedView<T>& view, const Tile<T>& value, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::LocalStore, {view.node(), detail::node_of(value, loc)}, {}, loc);
}

// Elements of a view picked by index along one axis (TLX: local_gather; torch.gather's rule): `indices` is
// an i32 tile with the view's rank, at most the view's size along every other axis, and the result has its
// shape, with result[i, j] = view[indices[i, j], j] for axis 0 and view[i, indices[i, j]] for axis 1 (in
// general: the element's own position, its `axis` coordinate replaced by its index). Indices must lie in
// [0, view's size along `axis`): the CPU backend checks each one (an Error naming it); the GPU takes an
// index modulo that size (its low bits), so a bad one picks a wrong element of the view but never touches
// another buffer. Each thread reads its elements with ld.shared.
template <class T>
Tile<T> local_gather(const SharedView<T>& view, const Tile<int32_t>& indices, int axis = 0,
                     SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {axis};
  return Tile<T>(detail::emit(detail::Op::LocalGather, {view.node(), detail::node_of(indices, loc)}, std::move(a), loc));
}
// The reverse (TLX: local_scatter): view[... indices[i, j] along `axis` ...] = values[i, j] for every element
// of `values`, a tile of `indices`' shape and the view's element type; the rest of the view is unchanged.
// Indices as for local_gather. Where two elements have the same index, one of them is written (which one is
// not defined on the GPU; the CPU backend writes the later one in row-major order). Like local_store, the
// group's earlier reads of shared memory are done before it writes and its writes are visible to the whole
// group when it returns.
template <class T>
void local_scatter(const SharedView<T>& view, const Tile<T>& values, const Tile<int32_t>& indices, int axis = 0,
                   SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {axis};
  detail::emit(detail::Op::LocalScatter, {view.node(), detail::node_of(values, loc), detail::node_of(indices, loc)}, std::move(a), loc);
}

// Writes a tile of the view's shape into the same stage of block `remote_cta_rank` of this block's
// cluster (mapa.shared::cluster, then st.shared::cluster). Tell that block with an arrival on its barrier
// (barrier_arrive(bar, remote_cta_rank): its release orders these stores); it reads the tile after
// waiting on its own barrier. The stores of the whole group are done before the call returns.
template <class T>
void local_store(const SharedView<T>& view, const Tile<T>& value, Operand<int32_t> remote_cta_rank,
                 SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::LocalStoreRemote, {view.node(), detail::node_of(value, loc), remote_cta_rank.node}, {}, loc);
}

// The same bytes seen as elements of U in `shape` (TLX: local_reinterpret): a view of a stage, or of a whole
// buffer (its stages one after the other), row-major over the bytes as they are stored — so a buffer
// another use keeps in column panels cannot be reinterpreted (an Error), while a swizzled one can (the
// swizzle moves bytes, whatever their type). `shape` defaults to the stage's shape (for a whole buffer, the
// stages stacked along the first dimension); it must fit in the bytes. Use the view as any stage:
// local_load/store, TMA, async_load, gather; not as an async_dot operand (wgmma reads a buffer in its own
// declared shape: declare one of the shape it needs).
template <class U, class T>
SharedView<U> local_reinterpret(const SharedView<T>& view, Shape shape = {}, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.shape = shape.empty() ? view.shape() : std::move(shape);
  a.dtype = dtype_of<U>;
  a.has_dtype = true;
  return SharedView<U>(detail::emit(detail::Op::LocalReinterpret, {view.node()}, std::move(a), loc));
}
template <class U, class T>
SharedView<U> local_reinterpret(const SharedBuffer<T>& buffer, Shape shape = {}, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  if (shape.empty()) {
    shape = buffer.stage_shape();
    shape[0] *= buffer.stages();
  }
  a.shape = std::move(shape);
  a.dtype = dtype_of<U>;
  a.has_dtype = true;
  return SharedView<U>(detail::emit(detail::Op::LocalReinterpret, {buffer.node()}, std::move(a), loc));
}

// TLX's local_reshape: the view's bytes in another shape of the same element type.
template <class T>
SharedView<T> local_reshape(const SharedView<T>& view, Shape shape, SourceLoc loc = SourceLoc::current()) {
  return local_reinterpret<T>(view, std::move(shape), loc);
}

// The same bytes seen transposed: a [R, C] stage as [C, R] (TLX: local_trans). async_dot reads a B
// operand stored N x K (K contiguous) through local_trans as K x N, and an A operand stored K x M (M
// contiguous) through local_trans as M x K.
template <class T> SharedView<T> local_trans(const SharedView<T>& view, SourceLoc loc = SourceLoc::current()) {
  return SharedView<T>(detail::emit(detail::Op::LocalTrans, {view.node()}, {}, loc));
}

// ---- tensor cores (wgmma) -----------------------------------------------------------------------------

// acc + a @ b on the tensor cores, asynchronously: a is an [M, K] view, b a [K, N] view, bf16 or f16,
// accumulating in f32 (wgmma.fence; wgmma.mma_async.sync.aligned.m64nNk16 per 64 rows and 16 of K;
// wgmma.commit_group). Each operand is read as it is stored, in either order of its dimensions:
//   a: a stage stored [M, K] (K contiguous, "K-major": imm-trans-a 0), or local_trans of a stage stored
//      [K, M] (M contiguous, "M-major": wgmma's transposed A, imm-trans-a 1; M wider than 64 is kept in
//      64-column panels, one per 64-row block: fill it with TMA boxes of 64 columns through cols());
//   b: local_trans of a stage stored [N, K] (K-major: imm-trans-b 0), or a stage stored [K, N] (N-major:
//      imm-trans-b 1, 64-column panels when N is wider).
// The result is pending: read it only through async_dot_wait, and keep a and b unchanged until then. Runs
// on a group of exactly 4 warps (one warp group), e.g. a task of 4 warps.
// fp8 (f8e4m3 / f8e5m2, any mix of the two): m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2} per 64 rows and 32 of
// K; both operands K-major in shared memory (a a stage, b a stage stored [N, K] through local_trans), K
// a multiple of 32. The tensor cores add fp8 products with less precision than f32 (about 14 bits kept):
// accumulate a few k-steps, then add the result into an f32 tile of your own (examples/gemm_fp8.h).
// (acc: a Tile<float> or a Var<float>, read at the call.)
template <class TA, class TB, detail::TileLike C>
  requires(std::is_same_v<TA, TB> || (is_fp8_elem<TA> && is_fp8_elem<TB>)) && std::is_same_v<detail::elem_of<C>, float>
Tile<float> async_dot(const SharedView<TA>& a, const SharedView<TB>& b, const C& acc, SourceLoc loc = SourceLoc::current()) {
  return Tile<float>(detail::emit(detail::Op::AsyncDot, {a.node(), b.node(), detail::node_of(acc, loc)}, {}, loc));
}
// The same with a in registers (wgmma's A operand from registers: a tile made by an earlier async_dot and
// cast, e.g. attention's probabilities, moves into the A fragments without shared memory; any other tile
// is rearranged through shared memory first). A tile has no storage order: imm-trans-a does not apply.
template <detail::TileLike A, class T, detail::TileLike C>
  requires std::is_same_v<detail::elem_of<A>, T> && std::is_same_v<detail::elem_of<C>, float>
Tile<float> async_dot(const A& a, const SharedView<T>& b, const C& acc, SourceLoc loc = SourceLoc::current()) {
  return Tile<float>(
      detail::emit(detail::Op::AsyncDot, {detail::node_of(a, loc), b.node(), detail::node_of(acc, loc)}, {}, loc));
}
// Waits until at most `pending` groups of this warp group's async_dots are in flight
// (wgmma.wait_group.sync.aligned pending) and returns the finished value of `result`, an async_dot's.
inline Tile<float> async_dot_wait(int pending, const Tile<float>& result, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {pending};
  return Tile<float>(detail::emit(detail::Op::AsyncDotWait, {detail::node_of(result, loc)}, std::move(a), loc));
}
inline Tile<float> async_dot_wait(int pending, const Var<float>& result, SourceLoc loc = SourceLoc::current()) {
  return async_dot_wait(pending, result.read(loc), loc);
}

// ---- mbarriers ----------------------------------------------------------------------------------------

// One mbarrier (an element of alloc_barriers).
class Barrier {
 public:
  explicit Barrier(detail::NodeRef n) : node_(std::move(n)) {}
  const detail::NodeRef& node() const { return node_; }

 private:
  detail::NodeRef node_;
};

// An array of mbarriers in shared memory, each completing a phase after `arrive_count` arrivals (plus any
// bytes expected with barrier_expect_bytes).
class Barriers {
 public:
  explicit Barriers(detail::NodeRef n) : node_(std::move(n)) {}
  const detail::NodeRef& node() const { return node_; }
  int size() const { return static_cast<int>(detail::node_shape(node_)[0]); }
  Barrier operator[](Operand<int32_t> i) const {
    return Barrier(detail::emit(detail::Op::BarrierAt, {node_, i.node}, {}, i.loc));
  }

 private:
  detail::NodeRef node_;
};

// `count` mbarriers initialized for `arrive_count` arrivals per phase (mbarrier.init.shared.b64, by one
// thread at the start of the block, before any user code).
inline Barriers alloc_barriers(int count, int arrive_count = 1, std::string name = "bar",
                               SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {count, arrive_count};
  a.names = {std::move(name)};
  return Barriers(detail::emit(detail::Op::AllocBarriers, {}, std::move(a), loc));
}

// `count` mbarriers whose phases complete after `arrive_threads` arrivals of single threads (TLX:
// alloc_warp_barrier): barrier_arrive on one of them is an arrival of every thread of the calling task
// replica, each on its own (mbarrier.arrive.shared::cta.b64 by every thread, no bar.sync before it: each
// thread's arrival releases its own earlier accesses), so a replica of 4 warps gives 128 arrivals.
// barrier_expect_bytes, TMA loads and remote arrivals still count one arrival each. The CPU backend counts
// a fiber's threads (warps * 32) at once; more threads than the phase still misses is an Error.
inline Barriers alloc_warp_barriers(int count, int arrive_threads, std::string name = "warp_bar",
                                    SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {count, arrive_threads, 1};
  a.names = {std::move(name)};
  return Barriers(detail::emit(detail::Op::AllocBarriers, {}, std::move(a), loc));
}

// Arrives once and adds `bytes` to the bytes the current phase waits for (mbarrier.arrive.expect_tx): the
// phase completes when its arrivals are in and asynchronous copies signalling this barrier have
// delivered that many bytes.
inline void barrier_expect_bytes(const Barrier& bar, Operand<int32_t> bytes) {
  detail::emit(detail::Op::BarrierExpectBytes, {bar.node(), bytes.node}, {}, bytes.loc);
}
// One arrival of this task replica (mbarrier.arrive.shared.b64 by one thread, after the replica's threads
// meet at a named barrier). A barrier that only ever receives barrier_arrive — no expected bytes, no TMA,
// no remote arrivals — from task replicas of one size is counted per warp on sm_90a instead: each warp
// arrives once after bar.warp.sync, and the replica's arrival is complete when all of its warps are in.
inline void barrier_arrive(const Barrier& bar, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::BarrierArrive, {bar.node()}, {}, loc);
}
// One arrival of this task replica on the mbarrier at the same shared-memory offset in block
// `remote_cta_rank` of this block's thread-block cluster (see cluster_cta_rank): one thread maps the
// address with mapa.shared::cluster.u32 and arrives with mbarrier.arrive.shared::cluster.b64, after the
// replica's threads meet. The release is at cluster scope (mbarrier.arrive.release.cluster, and waits in
// the kernel acquire at cluster scope) when the kernel writes memory with store() or local_store(..., rank)
// that another block may read after its wait; otherwise (every write another block sees is a TMA's or a
// bulk copy's, which complete on the barrier themselves: a multicast ring) it is the default CTA-scope
// release, as CUTLASS's (ptxas puts a MEMBAR.ALL.GPU before a cluster-scope release: benchmarks/NOTES.md,
// "clusters"). The rank may be this block's own. Only arrivals reach another block: waiting on a remote
// barrier is not possible (PTX waits on the own block's barriers only), so each block waits on its own and
// the others arrive there.
inline void barrier_arrive(const Barrier& bar, Operand<int32_t> remote_cta_rank) {
  detail::emit(detail::Op::BarrierArriveRemote, {bar.node(), remote_cta_rank.node}, {}, remote_cta_rank.loc);
}
// Waits until the phase of parity `phase` (0 or 1) has completed (mbarrier.try_wait.parity in a loop).
// A fresh barrier is in phase 0: waiting for parity 1 returns at once, which is how a producer's first
// pass over its empty buffers goes through.
inline void barrier_wait(const Barrier& bar, Operand<int32_t> phase) {
  detail::emit(detail::Op::BarrierWait, {bar.node(), phase.node}, {}, phase.loc);
}

// Named (hardware) barriers 0-15 among `threads` threads (bar.arrive / bar.sync). weft uses id 0 for the
// whole block and the highest ids for each task replica's own syncs: the verifier says which are free.
// The id may also be an i32 scalar computed in the kernel, as ping-pong consumers pick the barrier of their
// turn (`named_barrier_wait(1 + task_replica_id(), 256)`: one bar.sync on a register, not a branch per
// replica). Such an id must be built from constants and task_replica_id() with +, -, *, min, max, where and %
// or / by a positive constant, so that the verifier can bound it and check that every id it can take is free.
inline void named_barrier_arrive(int id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {id, threads};
  detail::emit(detail::Op::NamedBarrierArrive, {}, std::move(a), loc);
}
inline void named_barrier_wait(int id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {id, threads};
  detail::emit(detail::Op::NamedBarrierWait, {}, std::move(a), loc);
}
namespace detail {
// A named barrier whose id is computed: ints = {-1, threads}, the id its operand.
inline void named_barrier_at(Op op, const NodeRef& id, int threads, SourceLoc loc) {
  Attrs a;
  a.ints = {-1, threads};
  emit(op, {id}, std::move(a), loc);
}
}  // namespace detail
inline void named_barrier_arrive(const Tile<int32_t>& id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::named_barrier_at(detail::Op::NamedBarrierArrive, detail::node_of(id, loc), threads, loc);
}
inline void named_barrier_arrive(const Var<int32_t>& id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::named_barrier_at(detail::Op::NamedBarrierArrive, detail::node_of(id, loc), threads, loc);
}
inline void named_barrier_wait(const Tile<int32_t>& id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::named_barrier_at(detail::Op::NamedBarrierWait, detail::node_of(id, loc), threads, loc);
}
inline void named_barrier_wait(const Var<int32_t>& id, int threads, SourceLoc loc = SourceLoc::current()) {
  detail::named_barrier_at(detail::Op::NamedBarrierWait, detail::node_of(id, loc), threads, loc);
}

// A position in a ring of `stages` buffers: the stage index and the phase parity of its barriers. User
// code never does phase arithmetic: wait/acquire/release act on the current stage, advance() moves on
// (flipping the phase when the ring wraps). Lives in Vars, so it can be carried through loops.
class Pipeline {
 public:
  explicit Pipeline(int stages, SourceLoc loc = SourceLoc::current()) : stages_(stages), index_(0, loc), phase_(0, loc) {}
  Int index() const { return index_.read(); }
  Int phase() const { return phase_.read(); }
  // Consumer: wait until the current stage is full.
  void wait(const Barriers& full, SourceLoc loc = SourceLoc::current()) const {
    barrier_wait(full[Operand<int32_t>(index_, loc)], Operand<int32_t>(phase(), loc));
  }
  // Producer: wait until consumers released the current stage (the first pass through the ring goes
  // straight through).
  void acquire(const Barriers& empty, SourceLoc loc = SourceLoc::current()) const {
    barrier_wait(empty[Operand<int32_t>(index_, loc)], Operand<int32_t>(phase() ^ 1, loc));
  }
  // Consumer: release the current stage to the producer.
  void release(const Barriers& empty, SourceLoc loc = SourceLoc::current()) const {
    barrier_arrive(empty[Operand<int32_t>(index_, loc)], loc);
  }
  // Consumer in a cluster: release the current stage to the producer of the block of cluster rank
  // `cta_rank` (e.g. the one whose multicast filled it).
  void release(const Barriers& empty, Operand<int32_t> cta_rank) const {
    barrier_arrive(empty[Operand<int32_t>(index_, cta_rank.loc)], std::move(cta_rank));
  }
  void advance(SourceLoc loc = SourceLoc::current()) {
    Int next = index_.read(loc) + 1;
    Bool wrap = next == stages_;
    index_ = Operand<int32_t>(where(wrap, 0, next), loc);
    phase_ = Operand<int32_t>(where(wrap, phase_.read(loc) ^ 1, phase_.read(loc)), loc);
  }
  // Moves on `steps` stages at once (steps >= 0, a run-time value): where `steps` calls of advance() would
  // leave it (the ring wraps (index + steps) / stages times, each wrap flipping the phase). For a task that
  // shares a ring with others and passes over their stages without touching them: the ping-pong GEMM's
  // consumers take alternate tiles of one ring, each skipping the other's k-steps.
  void advance(Operand<int32_t> steps) {
    SourceLoc loc = steps.loc;
    Int position = index_.read(loc) + Int(steps.node);
    index_ = Operand<int32_t>(position % stages_, loc);
    phase_ = Operand<int32_t>(phase_.read(loc) ^ (position / stages_ % 2), loc);
  }

 private:
  int stages_;
  Var<int32_t> index_, phase_;
};

// ---- thread-block clusters ------------------------------------------------------------------------------
// A kernel declared with KernelOptions::cluster runs its blocks in clusters (kernel.h). With more than one
// block per cluster and any alloc_barriers, weft syncs the cluster after initializing the barriers (so no
// block arrives at, or multicasts to, a barrier not yet initialized) and again before the blocks exit (so
// no block's shared memory goes away while another may still arrive there or copy into it).

// This block's rank in its cluster, 0 .. blocks per cluster - 1, x fastest: (x % cx) + (y % cy) * cx +
// (z % cz) * cx * cy of its program ids (mov.u32 %r, %cluster_ctarank). 0 without clusters.
inline Int cluster_cta_rank(SourceLoc loc = SourceLoc::current()) {
  return Int(detail::emit(detail::Op::ClusterCtaRank, {}, {}, loc));
}
// Waits until every thread of every block of the cluster got here, and makes the shared-memory writes
// before it visible to all of them (barrier.cluster.arrive.release + barrier.cluster.wait.acquire, by
// every thread). Every task replica of every block must call it the same number of times.
inline void cluster_sync(SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::ClusterSync, {}, {}, loc);
}
// TLX's name for cluster_sync.
inline void cluster_barrier(SourceLoc loc = SourceLoc::current()) { cluster_sync(loc); }

// Copies the bytes of `src` (this block's shared memory) into `dst` of block `remote_cta_rank` of this
// block's cluster — `dst` names a view of this block; the copy lands at the same offset there — and
// completes that many bytes of the transaction count of `bar` there (the barrier at bar's offset in that
// block); TLX: async_remote_shmem_copy. The receiving block expects the bytes on its own barrier
// (barrier_expect_bytes) and waits there; the copy is not an arrival. The sender learns nothing of when
// the copy has read `src`: do not overwrite it until the receiver says so (e.g. with barrier_arrive(bar,
// sender_rank) after its wait). `src` and `dst` have one element type and shape, a multiple of 16 bytes,
// in buffers of one layout; the kernel runs in clusters (KernelOptions::cluster).
//
// On sm_90a every thread of the group fences its shared-memory writes for the async proxy
// (fence.proxy.async.shared::cta), the group syncs, and one thread maps dst and bar to the other block
// (mapa.shared::cluster.u32) and issues cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx
// ::bytes [dst], [src], bytes, [bar]. On the CPU backend `dst` is poison until the barrier's phase
// completes; `src` is read then, so an early overwrite changes the result there too.
template <class T>
void async_remote_shmem_copy(const SharedView<T>& dst, const SharedView<T>& src, Operand<int32_t> remote_cta_rank,
                             const Barrier& bar, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncRemoteShmemCopy, {dst.node(), src.node(), bar.node(), remote_cta_rank.node}, {}, loc);
}

// A tile from registers into view `dst` of block `remote_cta_rank` of the cluster (the same offset there),
// its bytes completing on `bar` there (TLX: async_remote_shmem_store): each element is stored once, by the
// thread that holds it, with st.async.shared::cluster.mbarrier::complete_tx::bytes.{b32|b64} [mapa(dst)],
// value, [mapa(bar)] — no arrival: the receiver barrier_expect_bytes(bar, dst.bytes()) and waits. Elements
// of 4 or 8 bytes (i32, f32, i64, f64: what st.async stores); a cluster kernel; a barrier array that some
// barrier_expect_bytes names — each an Error at the call otherwise. CPU: the tile is taken at the call, and
// `dst` there is poison until the barrier's phase completes.
template <class T>
void async_remote_shmem_store(const SharedView<T>& dst, const Tile<T>& src, Operand<int32_t> remote_cta_rank,
                              const Barrier& bar, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncRemoteShmemStore,
               {dst.node(), detail::node_of(src, loc), bar.node(), remote_cta_rank.node}, {}, loc);
}

// ---- persistent kernels --------------------------------------------------------------------------------

// The tiles of an M x N grid of output tiles, spread over the programs of a persistent launch (a grid of
// Device::multiprocessors() programs): program p takes tiles p, p + programs, ... In grouped order:
// `group` rows of tiles are walked column by column, so that the programs running at once share A's rows
// and B's columns in L2.
class TileScheduler {
 public:
  TileScheduler(Int tiles_m, Int tiles_n, int group = 8) : tiles_m_(tiles_m), tiles_n_(tiles_n), group_(group) {}
  // body(m, n) for each tile of this program, in order: tile(t) for t = program, program + programs, ...
  template <class Body> void for_each(Body&& body, SourceLoc loc = SourceLoc::current()) const {
    Int total = count();
    for_range(program_id(0), total, num_programs(0), [&](Int t) {
      auto [m, n] = tile(t, loc);
      body(m, n);
    }, loc);
  }
  // The number of tiles, tiles_m * tiles_n.
  Int count() const { return tiles_m_ * tiles_n_; }
  // Tile t (0 <= t < count()) of the grouped order as (m, n): for loops of one's own over a program's tiles
  // (e.g. two consumers that take turns: one takes t = program, program + 2 * programs, ..., the other the
  // rest).
  std::pair<Int, Int> tile(const Int& t, SourceLoc loc = SourceLoc::current()) const {
    Int per_group = tiles_n_ * group_;
    Int first_m = (t / per_group) * group_;
    Int rows = minimum(tiles_m_ - first_m, Int(scalar<int32_t>(group_, loc)));
    Int within = t % per_group;
    // n's nodes before m's: the order in which for_each built them before tile() existed (its call
    // body(m, n) evaluated the arguments right to left), which kernels' code and cache keys depend on.
    Int n = within / rows;
    Int m = first_m + within % rows;
    return {m, n};
  }

 private:
  Int tiles_m_, tiles_n_;
  int group_;
};

// ---- warp-specialized tasks ---------------------------------------------------------------------------

struct TaskOptions {
  int warps = 4;     // per replica
  int regs = 0;      // registers per thread (setmaxnreg); 0 keeps the compiler's cap
  int replicas = 1;  // copies of the task, each on its own warps (task_replica_id tells them apart)
};

struct Task {
  detail::TaskSpec spec;
  SourceLoc loc;
};

// One task of async_tasks: `body` runs on its own warps, `replicas` times.
template <class Body>
Task task(std::string name, TaskOptions options, Body&& body, SourceLoc loc = SourceLoc::current()) {
  return Task{{std::move(name), options.warps, options.regs, options.replicas, std::function<void()>(std::forward<Body>(body)), loc},
              loc};
}

// Runs the tasks side by side, each on its own warps of the block (warp-group branches with setmaxnreg on
// sm_90a). Call once, at the top of the kernel body; code before it runs on every warp.
template <class... T>
  requires(std::is_same_v<std::remove_cvref_t<T>, Task> && ...)
void async_tasks(const Task& first, const T&... rest) {
  std::vector<detail::TaskSpec> specs{first.spec, rest.spec...};
  detail::trace_tasks(specs, first.loc);
}

// Which replica of its task this code runs as (0 .. replicas - 1).
inline Int task_replica_id(SourceLoc loc = SourceLoc::current()) {
  return Int(detail::emit(detail::Op::TaskReplicaId, {}, {}, loc));
}
// TLX's name for task_replica_id.
inline Int async_task_replica_id(SourceLoc loc = SourceLoc::current()) { return task_replica_id(loc); }

}  // namespace weft

// The asynchronous copies (cp.async, TMA, bulk copies) and their cache hints.
#include "weft/async_copies.h"
