// The block runtime's functions generated code calls (cpu_abi.h, block_fn), and abandon_block: see
// block_runtime.h for the semantics, block_runtime_state.h for the state they work on. They run on a
// fiber's stack; when one finds an error it records the message in the block and suspends the fiber for
// good, so the scheduler (block_runtime.cpp, on the launching thread's own stack) can throw. Nothing those
// functions hold when they suspend owns memory, so abandoned fibers leak nothing.
#include "driver/cpu/block_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "driver/cpu/block_runtime_state.h"

namespace weft::driver::cpu {

namespace {

BlockState& state_of(const ProgramCtx* ctx) { return *static_cast<BlockState*>(ctx->block); }

// ---- the functions generated code calls (cpu_abi.h, block_fn) ----

char* local_view(const ProgramCtx* ctx, int32_t site, int32_t stage) noexcept {
  BlockState& b = state_of(ctx);
  const auto& buf = b.plan.buffers.at(b.plan.sites.at(site).target);
  if (stage < 0 || stage >= buf.stages) {
    b.cluster.set_error(ctx, site, fmt::format("stage {} of '{}' does not exist: it has {} stages (0 to {})", stage,
                                               buf.name, buf.stages, buf.stages - 1));
    b.cluster.abandon();
  }
  return b.arena + buf.offset + int64_t(stage) * buf.stage_bytes;
}

int32_t barrier_at(const ProgramCtx* ctx, int32_t site, int32_t index) noexcept {
  BlockState& b = state_of(ctx);
  const auto& arr = b.plan.barriers.at(b.plan.sites.at(site).target);
  if (index < 0 || index >= arr.count) {
    b.cluster.set_error(ctx, site, fmt::format("barrier {} of '{}' does not exist: it has {} barriers (0 to {})", index,
                                               arr.name, arr.count, arr.count - 1));
    b.cluster.abandon();
  }
  return static_cast<int32_t>(arr.offset + index * passes::kMbarrierBytes);
}

void barrier_arrive(const ProgramCtx* ctx, int32_t site, int32_t barrier) noexcept {
  BlockState& b = state_of(ctx);
  b.arrive(ctx, site, barrier, 0, "barrier_arrive", /*every_thread=*/true);
  b.cluster.give_way();
}

// The barrier at the same offset in the block of cluster rank `rank` (offsets are the same in every block).
void barrier_arrive_remote(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t rank) noexcept {
  BlockState& b = state_of(ctx);
  b.cluster.block_at_rank(ctx, site, rank, "barrier_arrive").arrive(ctx, site, barrier, 0, "barrier_arrive");
  b.cluster.give_way();
}

char* shared_at_rank(const ProgramCtx* ctx, int32_t site, const char* address, int32_t rank) noexcept {
  BlockState& b = state_of(ctx);
  return b.cluster.block_at_rank(ctx, site, rank, "local_store").arena + (address - b.arena);
}

void bulk_copy_remote(const ProgramCtx* ctx, int32_t site, char* dst, const char* src, int32_t bytes, int32_t barrier,
                      int32_t rank) noexcept {
  BlockState& b = state_of(ctx);
  BlockState& to = b.cluster.block_at_rank(ctx, site, rank, "async_remote_shmem_copy");
  to.receive_bulk_copy(ctx, site, to.arena + (dst - b.arena), src, bytes, barrier);
}

void remote_store(const ProgramCtx* ctx, int32_t site, int32_t count, int32_t element_bytes, char* const* dst,
                  const char* values, int32_t barrier, int32_t rank) noexcept {
  BlockState& b = state_of(ctx);
  BlockState& to = b.cluster.block_at_rank(ctx, site, rank, "async_remote_shmem_store");
  std::vector<char*> there(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) there[size_t(i)] = to.arena + (dst[i] - b.arena);
  to.receive_stores(ctx, site, std::move(there), std::vector<char>(values, values + int64_t(count) * element_bytes),
                    element_bytes, barrier);
  b.cluster.give_way();
}

void bulk_load(const ProgramCtx* ctx, int32_t site, char* dst, const char* src, int32_t bytes, int32_t barrier) noexcept {
  state_of(ctx).receive_bulk_copy(ctx, site, dst, src, bytes, barrier);
}

void bulk_store(const ProgramCtx* ctx, int32_t, char* dst, const char* src, int32_t bytes) noexcept {
  TmaCopy c;  // no descriptor: `bytes` from `src` to `smem` (here the global destination) when it retires
  c.smem = dst;
  c.src = src;
  c.bytes = bytes;
  c.fiber = ctx->fiber;
  state_of(ctx).tma_stores.push_back(c);
}

void barrier_expect_bytes(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t bytes) noexcept {
  state_of(ctx).arrive(ctx, site, barrier, bytes, "barrier_expect_bytes");
}

void barrier_wait(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t phase) noexcept {
  BlockState& b = state_of(ctx);
  int32_t slot = b.slot_of(ctx, site, barrier);
  int32_t parity = phase & 1;
  const Mbarrier& m = b.mbarriers[slot];
  b.cluster.wait_until(ctx, Waiting::Mbarrier, site, slot, parity, [&] { return m.parity != parity; });
}

void named_barrier_arrive(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads) noexcept {
  BlockState& b = state_of(ctx);
  b.named_arrive(ctx, site, id, threads, "named_barrier_arrive");
  b.cluster.give_way();
}

void named_barrier_wait(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads) noexcept {
  BlockState& b = state_of(ctx);
  uint32_t generation = b.named_arrive(ctx, site, id, threads, "named_barrier_wait");
  const NamedBarrier& n = b.named[id];
  b.cluster.wait_until(ctx, Waiting::NamedBarrier, site, id, static_cast<int32_t>(generation),
                       [&] { return n.generation != generation; });
}

// A fiber stands for all threads of its task replica: the sync completes when every fiber of the cluster
// has arrived (a fiber that finished without arriving leaves the others waiting: a deadlock report).
void cluster_sync(const ProgramCtx* ctx, int32_t site) noexcept {
  ClusterState& c = state_of(ctx).cluster;
  uint32_t generation = c.sync_generation;
  if (++c.sync_arrived == static_cast<int32_t>(c.fibers.size())) {
    c.sync_arrived = 0;
    ++c.sync_generation;
  }
  c.wait_until(ctx, Waiting::Cluster, site, -1, static_cast<int32_t>(generation),
               [&] { return c.sync_generation != generation; });
}

void async_dot(const ProgramCtx* ctx, int32_t, const char* a, int32_t a_transposed, int32_t a_panel, const char* b,
               int32_t b_transposed, int32_t b_panel, int32_t M, int32_t N, int32_t K, int32_t types,
               const float* acc, float* out) noexcept {
  BlockState& s = state_of(ctx);
  DotJob j;
  j.id = s.next_dot++;
  j.fiber = ctx->fiber;
  j.a = a;
  j.b = b;
  j.a_transposed = a_transposed == 1;
  j.a_type = static_cast<ScalarType>(types & 0xff);
  j.b_type = static_cast<ScalarType>((types >> 8) & 0xff);
  if (a_transposed == 2) j.a_registers.assign(a, a + size_t(M) * K * DType{j.a_type, false}.bytes());
  j.b_transposed = b_transposed != 0;
  j.a_panel = a_transposed == 2 ? 0 : a_panel;
  j.b_panel = b_panel;
  j.M = M;
  j.N = N;
  j.K = K;
  j.acc.assign(acc, acc + size_t(M) * N);  // registers: read at issue
  uint32_t tag = kPendingTag | (static_cast<uint32_t>(j.id) & kPendingIdMask);
  for (size_t i = 0; i < size_t(M) * N; ++i) std::memcpy(&out[i], &tag, 4);
  s.dot_jobs.push_back(std::move(j));
}

void async_dot_wait(const ProgramCtx* ctx, int32_t, int32_t pending, const float* value, float* out,
                    int32_t count) noexcept {
  BlockState& s = state_of(ctx);
  s.retire_dots(ctx->fiber, pending);
  uint32_t first;
  std::memcpy(&first, value, 4);
  auto done = s.dot_results.find(static_cast<int32_t>(first & kPendingIdMask));
  if ((first & ~kPendingIdMask) == kPendingTag && done != s.dot_results.end())
    std::memcpy(out, done->second.data(), size_t(count) * 4);
  else
    std::memmove(out, value, size_t(count) * 4);  // a finished value, or one still in flight (NaNs)
}

void tma_load(const ProgramCtx* ctx, int32_t site, const detail::TensorDescData* desc, char* smem, int32_t barrier,
              const int32_t* coords) noexcept {
  state_of(ctx).receive_tma_load(ctx, site, desc, smem, barrier, coords);
}

// The same copy into every block of the mask, at the same offsets there as `smem` and `barrier` here.
void tma_load_multicast(const ProgramCtx* ctx, int32_t site, const detail::TensorDescData* desc, char* smem,
                        int32_t barrier, int32_t mask, const int32_t* coords) noexcept {
  BlockState& b = state_of(ctx);
  ClusterState& c = b.cluster;
  const int32_t blocks = static_cast<int32_t>(c.blocks.size());
  if (mask <= 0 || mask >= (1 << blocks)) {
    c.set_error(ctx, site, fmt::format("async_descriptor_load's multicast mask {:#x} {}: the kernel's cluster of ({}, {}, "
                                       "{}) has ranks 0 to {}, so the mask takes bits 0 to {} and at least one of them",
                                       static_cast<uint32_t>(mask), mask == 0 ? "selects no block" : "names a block outside the cluster",
                                       c.dims.x, c.dims.y, c.dims.z, blocks - 1, blocks - 1));
    c.abandon();
  }
  const int64_t offset = smem - b.arena;
  for (int32_t rank = 0; rank < blocks; ++rank)
    if (mask & (1 << rank)) c.blocks[rank]->receive_tma_load(ctx, site, desc, c.blocks[rank]->arena + offset, barrier, coords);
}

void tma_store(const ProgramCtx* ctx, int32_t, const detail::TensorDescData* desc, const char* smem,
               const int32_t* coords, int32_t reduce) noexcept {
  TmaCopy c;
  c.desc = desc;
  c.reduce = reduce;
  c.smem = const_cast<char*>(smem);
  c.fiber = ctx->fiber;
  std::copy(coords, coords + desc->rank, c.coords);
  state_of(ctx).tma_stores.push_back(c);
}

void tma_store_wait(const ProgramCtx* ctx, int32_t, int32_t pending) noexcept {
  state_of(ctx).retire_stores(ctx->fiber, pending);
}

void async_load(const ProgramCtx* ctx, int32_t, int32_t count, int32_t element_bytes, char* const* dst,
                const char* const* src, const uint8_t* mask, const char* fill) noexcept {
  FiberState& f = state_of(ctx).cluster.fibers[ctx->fiber];
  for (int32_t i = 0; i < count; ++i) {
    AsyncCopyElement e;
    e.dst = dst[i];
    e.bytes = element_bytes;
    if (!mask || mask[i])
      e.src = src[i];
    else if (fill)
      std::memcpy(&e.fill, fill + int64_t(i) * element_bytes, size_t(element_bytes));
    std::memset(e.dst, 0xFF, size_t(element_bytes));  // not there yet: poison until the wait
    f.open_copies.push_back(e);
  }
}

void async_commit_group(const ProgramCtx* ctx, int32_t) noexcept {
  FiberState& f = state_of(ctx).cluster.fibers[ctx->fiber];
  f.committed_copies.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}

void async_wait_group(const ProgramCtx* ctx, int32_t, int32_t pending) noexcept {
  FiberState& f = state_of(ctx).cluster.fibers[ctx->fiber];
  while (f.committed_copies.size() > size_t(pending)) {
    for (const AsyncCopyElement& e : f.committed_copies.front())
      std::memcpy(e.dst, e.src ? e.src : reinterpret_cast<const char*>(&e.fill), size_t(e.bytes));
    f.committed_copies.pop_front();
  }
}

void local_index_error(const ProgramCtx* ctx, int32_t site, int64_t element, int32_t index, int32_t axis,
                       int32_t extent, int32_t scatter) noexcept {
  BlockState& b = state_of(ctx);
  const auto& buf = b.plan.buffers.at(b.plan.sites.at(site).target);
  b.cluster.set_error(ctx, site,
                      fmt::format("{}: index {} (element {} of the indices) is outside buffer '{}' along axis {}, "
                                  "which has {} elements there (0 to {}); nothing was {}",
                                  scatter ? "local_scatter" : "local_gather", index, element, buf.name, axis, extent,
                                  extent - 1, scatter ? "written" : "read"));
  b.cluster.abandon();
}

}  // namespace

const std::vector<RuntimeSymbol>& block_runtime_symbols() {
  namespace fn = codegen::cpu::block_fn;
  static const std::vector<RuntimeSymbol> symbols = {
      {fn::kLocalView, reinterpret_cast<void*>(&local_view)},
      {fn::kBarrierAt, reinterpret_cast<void*>(&barrier_at)},
      {fn::kBarrierArrive, reinterpret_cast<void*>(&barrier_arrive)},
      {fn::kBarrierArriveRemote, reinterpret_cast<void*>(&barrier_arrive_remote)},
      {fn::kBarrierExpectBytes, reinterpret_cast<void*>(&barrier_expect_bytes)},
      {fn::kBarrierWait, reinterpret_cast<void*>(&barrier_wait)},
      {fn::kNamedBarrierArrive, reinterpret_cast<void*>(&named_barrier_arrive)},
      {fn::kNamedBarrierWait, reinterpret_cast<void*>(&named_barrier_wait)},
      {fn::kClusterSync, reinterpret_cast<void*>(&cluster_sync)},
      {fn::kSharedAtRank, reinterpret_cast<void*>(&shared_at_rank)},
      {fn::kBulkCopyRemote, reinterpret_cast<void*>(&bulk_copy_remote)},
      {fn::kBulkLoad, reinterpret_cast<void*>(&bulk_load)},
      {fn::kRemoteStore, reinterpret_cast<void*>(&remote_store)},
      {fn::kBulkStore, reinterpret_cast<void*>(&bulk_store)},
      {fn::kAsyncDot, reinterpret_cast<void*>(&async_dot)},
      {fn::kAsyncDotWait, reinterpret_cast<void*>(&async_dot_wait)},
      {fn::kTmaLoad, reinterpret_cast<void*>(&tma_load)},
      {fn::kTmaLoadMulticast, reinterpret_cast<void*>(&tma_load_multicast)},
      {fn::kTmaStore, reinterpret_cast<void*>(&tma_store)},
      {fn::kTmaStoreWait, reinterpret_cast<void*>(&tma_store_wait)},
      {fn::kAsyncLoad, reinterpret_cast<void*>(&async_load)},
      {fn::kAsyncCommitGroup, reinterpret_cast<void*>(&async_commit_group)},
      {fn::kAsyncWaitGroup, reinterpret_cast<void*>(&async_wait_group)},
      {fn::kLocalIndexError, reinterpret_cast<void*>(&local_index_error)},
  };
  return symbols;
}

void abandon_block(const ProgramCtx* ctx, const std::string& message, SourceLoc loc) noexcept {
  ClusterState& c = state_of(ctx).cluster;
  if (!c.failed) {
    c.failed = true;
    c.error = message + " (" + c.fiber_name(ctx->fiber) + ")";
    c.error_loc = loc;
  }
  c.abandon();
}

}  // namespace weft::driver::cpu
