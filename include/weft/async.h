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

// ---- asynchronous copies into shared memory (cp.async) ------------------------------------------------
//
// Each thread of the group copies its own elements of the tile, so a copy is waited for by the threads
// that issued it: a ring of stages double-buffered by one group goes
//
//   async_load(x + offs(0), buf[0]); async_commit_group();
//   for_range(0, n, [&](Int i) {
//     async_load(x + offs(i + 1), buf[(i + 1) % 2]); async_commit_group();  // the next tile in flight
//     async_wait_group(1);                                                  // tile i has landed
//     ... local_load(buf[i % 2]) ...
//   });
//
// On the CPU backend the copies are queued per task replica and land at the async_wait_group that
// retires their group; until then the stage reads as poison (NaN), so a missing wait fails a test.

// Starts copying the elements `ptrs` point to into `view` (a stage of a buffer, or rows/cols of one), a
// tile of pointers of the view's shape (TLX: async_load). Where `mask` is false nothing is read and the
// element becomes `other` (default 0). The copy belongs to the thread's current group: close the group
// with async_commit_group and wait for it with async_wait_group before reading the view. Like
// local_store, it first waits for the group's earlier reads of shared memory (a sync of the group).
//
// On sm_90a each thread copies its chunks of the blocked layout: cp.async.cg.shared.global [dst], [src],
// 16, src-size for 16 bytes of consecutive elements when the pointers are proven consecutive and aligned
// (else checked at run time), otherwise cp.async.ca.shared.global with 4 or 8 bytes per element. A
// masked-off element is a src-size of 0 (cp.async zero-fills it), or, with a non-zero `other`, no copy
// and an st.shared of `other`. Elements of 1 or 2 bytes that cannot go in runs of 4 to 16 bytes (cp.async
// moves 4, 8 or 16) are copied synchronously instead: ld.global, then st.shared.
template <detail::PointerTile P>
void async_load(const P& ptrs, const SharedView<detail::pointee<P>>& view, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncLoad, {detail::node_of(ptrs, loc), view.node()}, {}, loc);
}
template <detail::PointerTile P, class M, class O>
  requires std::is_same_v<detail::elem_of<M>, bool> && detail::TileOrLiteral<O>
void async_load(const P& ptrs, const SharedView<detail::pointee<P>>& view, const M& mask, const O& other,
                SourceLoc loc = SourceLoc::current()) {
  using T = detail::pointee<P>;
  detail::emit(detail::Op::AsyncLoad,
               {detail::node_of(ptrs, loc), view.node(), detail::node_of(mask, loc), detail::value_of<T>(other, loc)}, {},
               loc);
}
template <detail::PointerTile P, class M>
  requires std::is_same_v<detail::elem_of<M>, bool>
void async_load(const P& ptrs, const SharedView<detail::pointee<P>>& view, const M& mask,
                SourceLoc loc = SourceLoc::current()) {
  async_load(ptrs, view, mask, 0, loc);
}
// Closes this thread's group of async_loads issued since the last commit (cp.async.commit_group).
inline void async_commit_group(SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncCommitGroup, {}, {}, loc);
}
// Waits until at most the `pending` newest committed groups of this thread are in flight
// (cp.async.wait_group pending), then syncs the group (bar.sync on its barrier) so that every thread's
// copies are visible to all of them: the views those groups filled can then be read with local_load.
// Copies not yet committed are not waited for. Before wgmma or TMA reads such a view, fence_async_shared.
inline void async_wait_group(int pending, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {pending};
  detail::emit(detail::Op::AsyncWaitGroup, {}, std::move(a), loc);
}
// TLX's names for the two above.
inline void async_load_commit_group(SourceLoc loc = SourceLoc::current()) { async_commit_group(loc); }
inline void async_load_wait_group(int pending, SourceLoc loc = SourceLoc::current()) { async_wait_group(pending, loc); }

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

// ---- TMA (the tensor memory accelerator) -------------------------------------------------------------

// A kernel parameter: a TMA descriptor of a global tensor of T, passed at launch as a host-built
// descriptor (weft::tma, see tma.h). Its box — the tile one copy moves — and swizzle are part of the
// kernel's specialization, so the kernel knows them while it is traced. `Rank` (1 to 5), when given,
// is checked against the descriptor at launch; 0 takes a descriptor of any rank.
template <class T, int Rank = 0> class TensorDesc {
  static_assert(Rank >= 0 && Rank <= 5, "TensorDesc<T, Rank>: a TMA descriptor has rank 1 to 5 (0: any rank)");

 public:
  explicit TensorDesc(detail::NodeRef n) : node_(std::move(n)) {}
  const detail::NodeRef& node() const { return node_; }
  const Shape& box() const { return detail::node_shape(node_); }
  int64_t box_bytes() const { return detail::bytes_of<T>(box()); }

 private:
  detail::NodeRef node_;
};

namespace detail {
template <class T> std::vector<NodeRef> coordinate_nodes(std::initializer_list<Operand<int32_t>> coords) {
  std::vector<NodeRef> out;
  for (const Operand<int32_t>& c : coords) out.push_back(c.node);
  return out;
}
}  // namespace detail

// Copies the box of `desc` at element coordinates `coords` (outermost first) into `view`, completing
// `bytes` of `bar`'s expected transaction count (cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::
// complete_tx::bytes, issued by one thread of the group). Out-of-bounds elements read as zero.
template <class T, int Rank>
void async_descriptor_load(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                           const Barrier& bar, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node(), bar.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorLoad, std::move(o), {}, loc);
}
// TMA multicast: the box lands in `view` of every block of the cluster whose bit is set in
// `multicast_mask` (bit r: the block of cluster_cta_rank r; 16 bits), at the same shared-memory offset, and
// completes the box's bytes on each one's barrier at the offset of `bar`: every receiving block expects
// the bytes on its own barrier (barrier_expect_bytes) and waits there. One thread of the group issues
// cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster with the
// mask as its 16-bit ctaMask.
template <class T, int Rank>
void async_descriptor_load(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                           const Barrier& bar, Operand<int32_t> multicast_mask, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node(), bar.node(), multicast_mask.node};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorLoadMulticast, std::move(o), {}, loc);
}
// Copies `view` to the box of `desc` at `coords` (cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group,
// one thread of the group, after fence.proxy.async and a sync of the group); out-of-bounds elements are
// not written. Wait with async_store_wait before overwriting `view`.
template <class T, int Rank>
void async_descriptor_store(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                            SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorStore, std::move(o), {}, loc);
}
// ---- L2 cache hints and prefetch ---------------------------------------------------------------------
//
// An L2 eviction priority for the lines a TMA copy moves: evict_first for data read once (a streamed
// operand), evict_last for data many blocks read again (the operand tiles a grid shares). The copy issuer
// makes a policy (createpolicy.fractional.L2::evict_first.b64 policy, 1.0 — for the whole access) and
// passes it to the copy with .L2::cache_hint. A hint changes no value: on the CPU backend it is checked
// like the GPU's and otherwise ignored.
enum class Evict : int {
  none = 0,       // no hint (the default)
  first = 1,      // .L2::evict_first: evicted before other lines
  last = 2,       // .L2::evict_last: kept longer than other lines
  normal = 3,     // .L2::evict_normal
  unchanged = 4,  // .L2::evict_unchanged: leaves the lines' priority as it is
};

namespace detail {
inline Attrs eviction_attrs(Evict e) {
  Attrs a;
  if (e != Evict::none) a.ints = {static_cast<int64_t>(e)};
  return a;
}
}  // namespace detail

// async_descriptor_load with an L2 eviction priority for the box's lines (....mbarrier::complete_tx::bytes
// .L2::cache_hint [smem], [desc, {coords}], [bar], policy).
template <class T, int Rank>
void async_descriptor_load(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                           const Barrier& bar, Evict evict, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node(), bar.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorLoad, std::move(o), detail::eviction_attrs(evict), loc);
}
// The multicast load with an eviction priority (....multicast::cluster.L2::cache_hint ..., mask, policy).
template <class T, int Rank>
void async_descriptor_load(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                           const Barrier& bar, Operand<int32_t> multicast_mask, Evict evict,
                           SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node(), bar.node(), multicast_mask.node};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorLoadMulticast, std::move(o), detail::eviction_attrs(evict), loc);
}
// async_descriptor_store with an eviction priority for the lines it writes (....bulk_group.L2::cache_hint
// [desc, {coords}], [smem], policy).
template <class T, int Rank>
void async_descriptor_store(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                            Evict evict, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorStore, std::move(o), detail::eviction_attrs(evict), loc);
}
// TLX's store_reduce: a TMA store that combines each element of the box with the one in global memory, each
// element atomically (cp.reduce.async.bulk.tensor.Nd.global.shared::cta.{add,min,max}.tile.bulk_group): blocks
// may reduce into the same tile. add: i32 (wrapping), f32, f16, bf16 (the sum rounded to the element type);
// min and max: i32, f16, bf16 (a NaN loses to a number). Elements outside the tensor are not touched. Other
// element types are an Error. Wait with async_store_wait as for a store.
enum class StoreReduce : int { none = 0, add = 1, min = 2, max = 3 };

template <class T, int Rank>
void async_descriptor_store(const TensorDesc<T, Rank>& desc, const SharedView<T>& view, std::initializer_list<Operand<int32_t>> coords,
                            StoreReduce reduce, Evict evict = Evict::none, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node(), view.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::Attrs a = detail::eviction_attrs(evict);
  if (reduce != StoreReduce::none) a.ints = {static_cast<int64_t>(evict), static_cast<int64_t>(reduce)};
  detail::emit(detail::Op::AsyncDescriptorStore, std::move(o), a, loc);
}
// async_load with an L2 eviction priority on its copies (cp.async.cg.shared.global.L2::cache_hint [dst],
// [src], 16, src_size, policy; .ca for 4 or 8 bytes); 1- and 2-byte elements copied synchronously take none.
template <detail::PointerTile P>
void async_load(const P& ptrs, const SharedView<detail::pointee<P>>& view, Evict evict, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncLoad, {detail::node_of(ptrs, loc), view.node()}, detail::eviction_attrs(evict), loc);
}
template <detail::PointerTile P, class M, class O>
  requires std::is_same_v<detail::elem_of<M>, bool> && detail::TileOrLiteral<O>
void async_load(const P& ptrs, const SharedView<detail::pointee<P>>& view, const M& mask, const O& other, Evict evict,
                SourceLoc loc = SourceLoc::current()) {
  using T = detail::pointee<P>;
  detail::emit(detail::Op::AsyncLoad,
               {detail::node_of(ptrs, loc), view.node(), detail::node_of(mask, loc), detail::value_of<T>(other, loc)},
               detail::eviction_attrs(evict), loc);
}
// Starts bringing the box of `desc` at `coords` into L2, to be loaded soon by this or another block (TLX:
// async_descriptor_prefetch_tensor): cp.async.bulk.prefetch.tensor.Nd.L2.global.tile [desc, {coords}],
// issued by one thread of the group (with .L2::cache_hint and a policy when `evict` is given). Nothing
// waits for it and nothing is written to shared memory; out-of-bounds parts are ignored. A no-op on the CPU.
template <class T, int Rank>
void async_descriptor_prefetch(const TensorDesc<T, Rank>& desc, std::initializer_list<Operand<int32_t>> coords,
                               Evict evict = Evict::none, SourceLoc loc = SourceLoc::current()) {
  std::vector<detail::NodeRef> o{desc.node()};
  for (const detail::NodeRef& c : detail::coordinate_nodes<T>(coords)) o.push_back(c);
  detail::emit(detail::Op::AsyncDescriptorPrefetch, std::move(o), detail::eviction_attrs(evict), loc);
}
// Brings the 128-byte TMA descriptor itself into the cache its copies read it from, so that the first
// copy does not wait for it (prefetch.tensormap [desc], by one thread of the group; desc is the generic
// address of the grid-constant kernel parameter). Call it at the start of the task that issues the
// copies. A no-op on the CPU.
template <class T, int Rank>
void prefetch_descriptor(const TensorDesc<T, Rank>& desc, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::DescriptorPrefetch, {desc.node()}, {}, loc);
}

// ---- bulk copies between global and shared memory (no descriptor) --------------------------------------

// The bytes of `view` read from global memory at `src` (TLX: async_load(src, buf, bulk=True, barrier=bar)):
// one thread of the group issues cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [view],
// [src], bytes, [bar], and the bytes complete on `bar` like a TMA load's: barrier_expect_bytes(bar,
// view.bytes()) first, barrier_wait before reading the view. The view is filled in its row-major order with
// src[0], src[1], ... (so its buffer may not be swizzled or kept in panels by other uses: an Error names
// them), and its bytes must be a multiple of 16 (an Error otherwise). cp.async.bulk needs `src` 16-byte
// aligned: where weft cannot prove it (a pointer argument seen 16-byte aligned, offsets of 16-byte
// multiples), the issuing thread tests the address and copies a misaligned one itself, element by element,
// reporting the bytes on `bar` (mbarrier.complete_tx): slower, never a fault. The CPU backend's bounds
// checks cover the bytes read.
template <class T>
void async_load_bulk(const Ptr<T>& src, const SharedView<T>& view, const Barrier& bar,
                     SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncLoadBulk, {detail::node_of(src, loc), view.node(), bar.node()}, {}, loc);
}
// The bytes of `view` written to global memory at `dst` (TLX: async_store(dst, buf, size)): every thread of
// the group fences its writes for the async proxy, the group syncs, one thread issues cp.async.bulk.global
// .shared::cta.bulk_group [dst], [view], bytes and commits the group. Wait with async_store_wait before the
// view is written again and before the task ends, as for TMA stores. The rules of async_load_bulk, for `dst`.
template <class T>
void async_store_bulk(const Ptr<T>& dst, const SharedView<T>& view, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::AsyncStoreBulk, {detail::node_of(dst, loc), view.node()}, {}, loc);
}

// Waits until at most `pending` of this group's TMA stores and bulk stores still read shared memory
// (cp.async.bulk.wait_group.read pending).
inline void async_store_wait(int pending = 0, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {pending};
  detail::emit(detail::Op::AsyncStoreWait, {}, std::move(a), loc);
}
// TLX's name for async_store_wait.
inline void async_descriptor_store_wait(int pending = 0, SourceLoc loc = SourceLoc::current()) {
  async_store_wait(pending, loc);
}
// Orders this thread's earlier shared-memory writes before later asynchronous-proxy accesses (TMA, wgmma):
// fence.proxy.async.shared::cta.
inline void fence_async_shared(SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::FenceAsyncShared, {}, {}, loc);
}

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
