// weft — asynchronous copies between global and shared memory: cp.async (each thread its own elements), TMA
// (a descriptor's box, by one thread, completing on an mbarrier) with its L2 cache hints and prefetches, and
// bulk copies without a descriptor. Part of <weft/async.h>, which includes it; the shared-memory views and
// mbarriers the copies fill and complete on are defined there.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "weft/async.h"

namespace weft {
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

}  // namespace weft
