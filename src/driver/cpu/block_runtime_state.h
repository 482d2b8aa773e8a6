// The state the CPU block runtime works on (block_runtime.h has the semantics), private to src/driver/cpu/:
// ClusterState, the blocks of one thread-block cluster with their fibers and scheduler, and BlockState, one
// block's shared memory, mbarriers, named barriers and asynchronous operations in flight, with the operations
// on them. The functions generated code calls are in block_runtime_abi.cpp, the scheduler in block_runtime.cpp.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver/cpu/block_runtime.h"
#include "driver/cpu/fibers.h"
#include "driver/tensor_desc_data.h"
#include "passes/shared_layouts.h"      // paneled_index
#include "passes/shared_memory_plan.h"  // kMbarrierBytes
#include "weft/dtype.h"
#include "weft/error.h"

namespace weft::driver::cpu {

using codegen::cpu::BlockPlan;
using codegen::cpu::KernelFn;
using codegen::cpu::ProgramCtx;

constexpr int kNamedBarriers = 16;
constexpr int64_t kArenaAlign = 1024;  // the plan aligns buffers to 1024 bytes

struct Mbarrier {
  int32_t array = 0, element = 0;  // which alloc_barriers element this is
  int32_t arrive_count = 1;
  bool per_thread = false;   // alloc_warp_barriers: barrier_arrive is one arrival per thread of the fiber
  int32_t pending = 1;       // arrivals still missing in the current phase
  int64_t bytes_pending = 0;  // transaction bytes the current phase still expects
  int32_t parity = 0;        // of the current phase
  int32_t last_fiber = -1, last_site = -1;  // the last arrival
};

// An async_dot issued and not yet retired. Its operands are read from shared memory when it retires (as
// late as the hardware may read them), so overwriting them before async_dot_wait shows up in a test.
struct DotJob {
  int32_t id = 0, fiber = 0;
  const char *a = nullptr, *b = nullptr;
  bool a_transposed = false, b_transposed = false;
  ScalarType a_type = ScalarType::bf16, b_type = ScalarType::bf16;  // bf16, f16, f8e4m3 or f8e5m2
  int32_t a_panel = 0, b_panel = 0;  // operands stored in column panels of this width (0: plain)
  std::vector<char> a_registers;  // a from registers: its elements, copied at issue
  int32_t M = 0, N = 0, K = 0;
  std::vector<float> acc;
};

// A TMA copy in flight: a load lands when its barrier's phase completes, a store is performed at the
// async_store_wait that retires it (or when its fiber ends).
struct TmaCopy {
  const detail::TensorDescData* desc = nullptr;  // null: a bulk copy of `bytes` from `src` to `smem` (for
                                                 // async_store_bulk, `smem` is the global destination)
  char* smem = nullptr;
  int32_t coords[detail::TensorDescData::kMaxRank] = {};
  int32_t fiber = 0;
  const char* src = nullptr;
  int64_t bytes = 0;
  // async_remote_shmem_store: element i (of `element_bytes`) of `values`, taken at the call, lands at dsts[i].
  std::vector<char*> dsts;
  std::vector<char> values;
  int32_t element_bytes = 0;
  int32_t reduce = 0;  // a TMA store's StoreReduce: 0 none, 1 add, 2 min, 3 max
};

// A reducing TMA store's element: global = op(global, shared), atomically (blocks run on several host threads
// and may reduce into the same element). i32 adds wrap; f16 and bf16 combine in f32 and round back; min and max
// of floats return the number where one side is NaN. The verifier admits only these types.
// Replaces the element at `global` with next(its bits), by compare-and-swap: other blocks reduce into it too.
template <class Bits, class Next>
void update_atomically(char* global, Next next) {
  std::atomic_ref<Bits> g(*reinterpret_cast<Bits*>(global));
  Bits old = g.load();
  while (!g.compare_exchange_weak(old, next(old))) {
  }
}

inline void reduce_element(char* global, const char* shared, ScalarType type, int32_t op) {
  auto combine = [op](float a, float b) {
    if (op == 1) return a + b;
    if (std::isnan(a)) return b;
    if (std::isnan(b)) return a;
    return op == 2 ? std::min(a, b) : std::max(a, b);
  };
  if (type == ScalarType::i32) {
    int32_t v;
    std::memcpy(&v, shared, 4);
    update_atomically<uint32_t>(global, [&](uint32_t bits) {
      const int32_t x = std::bit_cast<int32_t>(bits);
      return op == 1 ? bits + static_cast<uint32_t>(v) : std::bit_cast<uint32_t>(op == 2 ? std::min(x, v) : std::max(x, v));
    });
  } else if (type == ScalarType::f32) {
    float v;
    std::memcpy(&v, shared, 4);
    update_atomically<uint32_t>(global, [&](uint32_t bits) {
      return std::bit_cast<uint32_t>(combine(std::bit_cast<float>(bits), v));
    });
  } else {  // f16, bf16
    const bool is_f16 = type == ScalarType::f16;
    auto to_float = [&](uint16_t bits) {
      return is_f16 ? static_cast<float>(weft::f16::from_bits(bits)) : static_cast<float>(weft::bf16::from_bits(bits));
    };
    auto to_bits = [&](float f) { return is_f16 ? weft::f16(f).bits : weft::bf16(f).bits; };
    uint16_t vbits;
    std::memcpy(&vbits, shared, 2);
    const float v = to_float(vbits);
    update_atomically<uint16_t>(global, [&](uint16_t bits) { return to_bits(combine(to_float(bits), v)); });
  }
}

// One element of an async_load: performed at the async_wait_group that retires its group.
struct AsyncCopyElement {
  char* dst = nullptr;
  const char* src = nullptr;  // null: masked off, the element becomes `fill`
  uint64_t fill = 0;          // its bytes
  int32_t bytes = 0;          // 8 at most
};
using AsyncCopyGroup = std::vector<AsyncCopyElement>;

// Copies the box of `c` at its coordinates between global memory and shared memory (row-major there).
// Elements outside the tensor read as zero and are not written.
inline void tma_copy(const TmaCopy& c, bool load) {
  if (!c.dsts.empty()) {  // async_remote_shmem_store: element by element, where the view keeps each
    for (size_t i = 0; i < c.dsts.size(); ++i)
      std::memcpy(c.dsts[i], c.values.data() + i * size_t(c.element_bytes), size_t(c.element_bytes));
    return;
  }
  if (!c.desc) {  // async_remote_shmem_copy, async_load_bulk, async_store_bulk: bytes as stored
    std::memcpy(c.smem, c.src, size_t(c.bytes));
    return;
  }
  const detail::TensorDescData& d = *c.desc;
  int64_t count = 1;
  for (int i = 0; i < d.rank; ++i) count *= d.box[i];
  const int64_t eb = d.element_bytes;
  for (int64_t e = 0; e < count; ++e) {
    int64_t rest = e, offset = 0;
    bool inside = true;
    for (int i = d.rank - 1; i >= 0; --i) {
      int64_t x = int64_t(c.coords[i]) + rest % d.box[i];
      rest /= d.box[i];
      inside = inside && x >= 0 && x < d.dims[i];
      offset += x * d.strides[i];
    }
    char* global = static_cast<char*>(d.base) + offset * eb;
    char* shared = c.smem + e * eb;
    if (load) {
      if (inside)
        std::memcpy(shared, global, size_t(eb));
      else
        std::memset(shared, 0, size_t(eb));
    } else if (inside) {
      if (c.reduce) reduce_element(global, shared, d.dtype, c.reduce);
      else std::memcpy(global, shared, size_t(eb));
    }
  }
}

inline int64_t box_bytes(const detail::TensorDescData& d) {
  int64_t n = d.element_bytes;
  for (int i = 0; i < d.rank; ++i) n *= d.box[i];
  return n;
}

// A pending async_dot result is all NaNs; these carry the job's id so that the value can travel (through
// Vars) to the async_dot_wait that retires it. Quiet NaNs with bit 21 set (weft's other poisons have it
// clear).
constexpr uint32_t kPendingTag = 0x7FE00000u, kPendingIdMask = 0x1FFFFFu;

struct NamedBarrier {
  int32_t arrived = 0;   // threads in the current generation
  int32_t expected = 0;  // the count the current generation's calls give
  uint32_t generation = 0;
};

enum class Waiting { Nothing, Mbarrier, NamedBarrier, Cluster };

struct FiberState {
  ProgramCtx ctx;  // ctx.block: its block's BlockState; ctx.fiber: its index in the cluster
  char* frame = nullptr;
  int32_t threads = 0;  // warps * 32 of its task
  bool started = false, finished = false;
  Waiting waiting = Waiting::Nothing;
  int32_t wait_site = -1;
  int32_t wait_on = -1;   // an mbarrier slot (of its own block) or a named barrier id
  int32_t wait_for = 0;   // the phase parity, or the named barrier's or cluster_sync's generation
  // async_loads: the group still open, and the committed groups not yet performed, oldest first.
  AsyncCopyGroup open_copies;
  std::deque<AsyncCopyGroup> committed_copies;
};

inline void* aligned_or_throw(int64_t align, int64_t bytes, const char* what) {
  size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + align - 1) / align * align);
  void* p = std::aligned_alloc(static_cast<size_t>(align), rounded);
  if (!p) throw Error(fmt::format("the CPU backend could not allocate {} bytes of {}", rounded, what));
  return p;
}

struct BlockState;

// The blocks of one thread-block cluster (one block without clusters) and what they share: the fibers of
// all of them, one scheduler, cluster_sync, and the error that abandons them.
struct ClusterState {
  ClusterState(const BlockPlan& plan, KernelFn entry, int64_t frame_bytes, const ClusterDims& dims);
  ~ClusterState();

  const BlockPlan& plan;
  KernelFn entry;
  ClusterDims dims;
  const uint64_t* args = nullptr;
  std::vector<std::unique_ptr<BlockState>> blocks;  // by cluster rank
  std::vector<FiberState> fibers;                   // every task replica of every block, block by block
  char* frames = nullptr;                           // theirs, one after the other
  FiberPool pool;
  int32_t sync_arrived = 0;      // fibers at the current cluster_sync
  uint32_t sync_generation = 0;  // cluster_syncs completed
  bool progress = false;  // in the current round: a fiber started, got past a wait or finished
  // With a schedule seed: fibers give way at random right after they arrive on a barrier (give_way()).
  bool preempt = false;
  uint64_t preempt_random = 0;
  bool failed = false;
  std::string error;
  SourceLoc error_loc;

  void reset();
  bool clustered() const { return blocks.size() > 1; }
  BlockState& block_of(int32_t fiber) const { return *static_cast<BlockState*>(fibers.at(fiber).ctx.block); }
  SourceLoc site_loc(int32_t site) const { return plan.sites.at(site).loc; }
  // "task 'producer' replica 0", preceded by its block in a cluster: "block (1, 0, 0) task 'producer' replica 0".
  std::string fiber_name(int32_t fiber) const;

  // Records the error; call abandon() next, outside the expression that built the message (so that no
  // temporary string is left on the fiber's stack).
  void set_error(const ProgramCtx* ctx, int32_t site, const std::string& message);
  [[noreturn]] void abandon() {
    pool.suspend();  // a failed cluster is never resumed
    std::abort();
  }

  // Suspends the calling fiber until `done()`; the scheduler's deadlock report reads what it waits for.
  template <class Done> void wait_until(const ProgramCtx* ctx, Waiting what, int32_t site, int32_t on, int32_t wait_for,
                                        Done done) {
    if (done()) return;
    FiberState& f = fibers[ctx->fiber];
    f.waiting = what;
    f.wait_site = site;
    f.wait_on = on;
    f.wait_for = wait_for;
    while (!done()) pool.suspend();
    f.waiting = Waiting::Nothing;
    progress = true;
  }

  // Called by a fiber right after it arrives on a barrier. With a schedule seed it suspends there half the
  // time (resumed in the next round), as a warp may be descheduled right after it signals: a stage released
  // while it is still read, or released without waiting for it first (the arrival then counts toward an
  // earlier phase), lets the producer overwrite it before the reader's asynchronous reads are done, and the
  // CPU result shows it. Without a seed fibers run on until they wait, as before.
  void give_way();

  // The block of cluster rank `rank`, for a remote operation of `op` at `site`; an error outside the cluster.
  BlockState& block_at_rank(const ProgramCtx* ctx, int32_t site, int32_t rank, const char* op);

  std::string deadlock_report() const;
};

// One block of a cluster: its shared memory, barriers and asynchronous operations.
struct BlockState {
  BlockState(ClusterState& c, int32_t r, int32_t first, int32_t count) : plan(c.plan), cluster(c), rank(r),
      first_fiber(first), fiber_count(count) {
    arena = static_cast<char*>(aligned_or_throw(kArenaAlign, plan.shared_bytes, "shared memory"));
    for (size_t a = 0; a < plan.barriers.size(); ++a) {
      first_slot.push_back(static_cast<int32_t>(mbarriers.size()));
      for (int32_t e = 0; e < plan.barriers[a].count; ++e) {
        Mbarrier m;
        m.array = static_cast<int32_t>(a);
        m.element = e;
        m.arrive_count = plan.barriers[a].arrive_count;
        m.per_thread = plan.barriers[a].per_thread;
        mbarriers.push_back(m);
      }
    }
  }
  ~BlockState() { std::free(arena); }

  const BlockPlan& plan;
  ClusterState& cluster;
  int32_t rank;                      // in its cluster
  int32_t first_fiber, fiber_count;  // its fibers in cluster.fibers
  int32_t program_id[3] = {};
  char* arena = nullptr;
  std::vector<int32_t> first_slot;  // per barrier array: its first element in `mbarriers`
  std::vector<Mbarrier> mbarriers;
  NamedBarrier named[kNamedBarriers];
  int64_t phases_completed = 0;
  std::unordered_map<int32_t, std::vector<TmaCopy>> tma_loads;  // by mbarrier slot: land when its phase completes
  std::vector<TmaCopy> tma_stores;                               // issued, not performed, in issue order
  std::vector<DotJob> dot_jobs;                                   // issued, not retired, in issue order
  std::unordered_map<int32_t, std::vector<float>> dot_results;    // retired, by job id
  int32_t next_dot = 0;

  void reset() {
    std::memset(arena, 0xFF, static_cast<size_t>(plan.shared_bytes));
    for (Mbarrier& m : mbarriers) {
      m.pending = m.arrive_count;
      m.bytes_pending = 0;
      m.parity = 0;
      m.last_fiber = m.last_site = -1;
    }
    for (NamedBarrier& n : named) n = {};
    phases_completed = 0;
    tma_loads.clear();
    tma_stores.clear();
    dot_jobs.clear();
    dot_results.clear();
    next_dot = 0;
  }

  // ---- names for messages ----

  std::string block_name() const {
    return fmt::format("kernel '{}', block ({}, {}, {})", plan.kernel, program_id[0], program_id[1], program_id[2]);
  }
  std::string block_label() const { return fmt::format("block ({}, {}, {})", program_id[0], program_id[1], program_id[2]); }
  // "'full[1]'", and in a cluster "'full[1]' of block (1, 0, 0)".
  std::string barrier_name(int32_t slot) const {
    const Mbarrier& m = mbarriers.at(slot);
    std::string name = fmt::format("'{}[{}]'", plan.barriers.at(m.array).name, m.element);
    return cluster.clustered() ? name + " of " + block_label() : name;
  }

  // ---- mbarriers ----

  int32_t slot_of(const ProgramCtx* ctx, int32_t site, int32_t offset) {
    for (size_t a = 0; a < plan.barriers.size(); ++a) {
      const auto& arr = plan.barriers[a];
      int64_t rel = offset - arr.offset;
      if (rel >= 0 && rel < arr.count * passes::kMbarrierBytes && rel % passes::kMbarrierBytes == 0)
        return first_slot[a] + static_cast<int32_t>(rel / passes::kMbarrierBytes);
    }
    cluster.set_error(ctx, site, fmt::format("no mbarrier at shared-memory offset {}", offset));
    cluster.abandon();
  }

  // An arrival by the fiber of `ctx` (of this block or, remotely, of another block of the cluster).
  // `every_thread`: barrier_arrive, which on a per-thread barrier is an arrival of each of the fiber's threads.
  void arrive(const ProgramCtx* ctx, int32_t site, int32_t offset, int64_t bytes, const char* op,
              bool every_thread = false) {
    int32_t slot = slot_of(ctx, site, offset);
    Mbarrier& m = mbarriers[slot];
    int32_t arrivals = every_thread && m.per_thread ? cluster.fibers[ctx->fiber].threads : 1;
    if (arrivals > 1 && m.pending < arrivals) {
      cluster.set_error(ctx, site,
                        fmt::format("{} on {}: the {} threads of this task replica arrive, but only {} of its {} "
                                    "arrivals are missing in phase {}; alloc_warp_barriers counts threads: give it the "
                                    "number of threads that arrive in each phase",
                                    op, barrier_name(slot), arrivals, m.pending, m.arrive_count, m.parity));
      cluster.abandon();
    }
    if (m.pending == 0) {
      // All arrivals are in and the phase waits for bytes only: on the GPU the count would underflow.
      cluster.set_error(ctx, site,
                        fmt::format("{} on {} is an arrival too many: its arrive count is {} and all {} arrivals of phase "
                                    "{} are in (the phase waits only for {} more bytes, expected with "
                                    "barrier_expect_bytes)",
                                    op, barrier_name(slot), m.arrive_count, m.arrive_count, m.parity, m.bytes_pending));
      cluster.abandon();
    }
    if (bytes < 0) {
      cluster.set_error(ctx, site,
                        fmt::format("{} on {} expects {} bytes; the count cannot be negative", op, barrier_name(slot), bytes));
      cluster.abandon();
    }
    m.pending -= arrivals;
    m.bytes_pending += bytes;
    m.last_fiber = ctx->fiber;
    m.last_site = site;
    complete_if_done(m);
  }
  void complete_if_done(Mbarrier& m) {
    if (m.pending > 0 || m.bytes_pending != 0) return;
    auto loads = tma_loads.find(static_cast<int32_t>(&m - mbarriers.data()));
    if (loads != tma_loads.end()) {  // the copies this phase waited for land now
      for (const TmaCopy& c : loads->second) tma_copy(c, true);
      tma_loads.erase(loads);
    }
    m.parity ^= 1;
    m.pending = m.arrive_count;
    ++phases_completed;
  }

  // A TMA load (issued by the fiber of `ctx`, maybe of another block) into `smem` of this block, signalling
  // the barrier at `offset` here: the box is poison until that barrier's phase completes.
  void receive_tma_load(const ProgramCtx* ctx, int32_t site, const detail::TensorDescData* desc, char* smem,
                        int32_t offset, const int32_t* coords) {
    int32_t slot = slot_of(ctx, site, offset);
    int64_t bytes = box_bytes(*desc);
    std::memset(smem, 0xFF, size_t(bytes));  // not there yet
    TmaCopy c;
    c.desc = desc;
    c.smem = smem;
    c.fiber = ctx->fiber;
    std::copy(coords, coords + desc->rank, c.coords);
    tma_loads[slot].push_back(c);
    Mbarrier& m = mbarriers[slot];
    m.bytes_pending -= bytes;  // complete_tx: the bytes are on their way
    complete_if_done(m);
  }

  // async_remote_shmem_copy from the fiber of `ctx` (of this block or another) into `dst` of this block,
  // completing its bytes on the barrier at `offset` here: like a TMA load, with `src` read at completion.
  void receive_bulk_copy(const ProgramCtx* ctx, int32_t site, char* dst, const char* src, int64_t bytes, int32_t offset) {
    int32_t slot = slot_of(ctx, site, offset);
    std::memset(dst, 0xFF, size_t(bytes));  // not there yet
    TmaCopy c;
    c.smem = dst;
    c.src = src;
    c.bytes = bytes;
    c.fiber = ctx->fiber;
    tma_loads[slot].push_back(c);
    Mbarrier& m = mbarriers[slot];
    m.bytes_pending -= bytes;
    complete_if_done(m);
  }

  // async_remote_shmem_store from the fiber of `ctx` (of another block) into this block: the elements'
  // places (`dsts`, addresses in this block's arena) are poison until the barrier at `offset` here completes
  // its phase; `values` were taken at the call.
  void receive_stores(const ProgramCtx* ctx, int32_t site, std::vector<char*> dsts, std::vector<char> values,
                      int32_t element_bytes, int32_t offset) {
    int32_t slot = slot_of(ctx, site, offset);
    for (char* d : dsts) std::memset(d, 0xFF, size_t(element_bytes));  // not there yet
    TmaCopy c;
    c.bytes = int64_t(dsts.size()) * element_bytes;
    c.dsts = std::move(dsts);
    c.values = std::move(values);
    c.element_bytes = element_bytes;
    c.fiber = ctx->fiber;
    Mbarrier& m = mbarriers[slot];
    m.bytes_pending -= c.bytes;
    tma_loads[slot].push_back(std::move(c));
    complete_if_done(m);
  }

  // ---- TMA stores ----

  // Takes the oldest operations of `fiber` out of `queue`, calling retire on each, until at most
  // `pending` of its operations are left (the rule of cp.async.bulk.wait_group and wgmma.wait_group).
  template <class Op, class Retire>
  static void retire_oldest(std::vector<Op>& queue, int32_t fiber, int32_t pending, Retire retire) {
    int32_t mine = 0;
    for (const Op& op : queue) mine += op.fiber == fiber;
    for (auto it = queue.begin(); it != queue.end() && mine > pending;) {
      if (it->fiber != fiber) {
        ++it;
        continue;
      }
      retire(*it);
      it = queue.erase(it);
      --mine;
    }
  }
  void retire_stores(int32_t fiber, int32_t pending) {
    retire_oldest(tma_stores, fiber, pending, [](const TmaCopy& c) { tma_copy(c, false); });
  }

  // ---- async dots ----

  static float element(const char* base, int64_t i, ScalarType type) {
    if (type == ScalarType::f8e4m3) return weft::f8e4m3::from_bits(static_cast<uint8_t>(base[i]));
    if (type == ScalarType::f8e5m2) return weft::f8e5m2::from_bits(static_cast<uint8_t>(base[i]));
    uint16_t bits;
    std::memcpy(&bits, base + 2 * i, 2);
    return type == ScalarType::f16 ? static_cast<float>(weft::f16::from_bits(bits))
                                   : static_cast<float>(weft::bf16::from_bits(bits));
  }
  std::vector<float> compute(const DotJob& j) const {
    std::vector<float> out(j.acc);
    uint32_t first;
    std::memcpy(&first, out.data(), 4);
    if ((first & ~kPendingIdMask) == kPendingTag) {  // chained on an earlier dot of this fiber (retired first)
      auto earlier = dot_results.find(static_cast<int32_t>(first & kPendingIdMask));
      if (earlier != dot_results.end()) out = earlier->second;
    }
    for (int32_t r = 0; r < j.M; ++r)
      for (int32_t c = 0; c < j.N; ++c) {
        // Exact products (of 16-bit or 8-bit floats), summed in double: more precisely than the tensor cores
        // (f32-like for 16-bit types, about 14 bits kept for fp8), rounded to f32 once per async_dot.
        double s = 0;
        for (int32_t k = 0; k < j.K; ++k) {
          const char* a = j.a_registers.empty() ? j.a : j.a_registers.data();
          int64_t a_at = j.a_transposed ? passes::paneled_index(k, r, j.K, j.M, j.a_panel)
                                        : passes::paneled_index(r, k, j.M, j.K, j.a_panel);
          float x = element(a, a_at, j.a_type);
          int64_t b_at = j.b_transposed ? passes::paneled_index(c, k, j.N, j.K, j.b_panel)
                                        : passes::paneled_index(k, c, j.K, j.N, j.b_panel);
          float y = element(j.b, b_at, j.b_type);
          s += double(x) * double(y);
        }
        out[size_t(r) * j.N + c] = static_cast<float>(double(out[size_t(r) * j.N + c]) + s);
      }
    return out;
  }
  void retire_dots(int32_t fiber, int32_t pending) {
    retire_oldest(dot_jobs, fiber, pending, [&](const DotJob& j) { dot_results[j.id] = compute(j); });
  }

  // ---- named barriers ----

  // Adds the calling fiber's threads to barrier `id`; returns the generation it arrived in.
  uint32_t named_arrive(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads, const char* op) {
    if (id < 0 || id >= kNamedBarriers) {  // (the verifier bounds ids computed in the kernel: a safety net)
      cluster.set_error(ctx, site, fmt::format("{}({}, {}): named barrier {} does not exist; the hardware has named "
                                               "barriers 0 to {}", op, id, threads, id, kNamedBarriers - 1));
      cluster.abandon();
    }
    NamedBarrier& n = named[id];
    int32_t mine = cluster.fibers[ctx->fiber].threads;
    if (n.arrived > 0 && n.expected != threads) {
      cluster.set_error(ctx, site,
                        fmt::format("{}({}, {}): other calls of this generation of named barrier {} count {} threads; "
                                    "every call must give the same count",
                                    op, id, threads, id, n.expected));
      cluster.abandon();
    }
    if (n.arrived + mine > threads) {
      // On the GPU the surplus warps would start the next generation; the CPU runs a replica's warps as
      // one, and such a split is almost always a wrong count.
      cluster.set_error(ctx, site,
                        fmt::format("{}({}, {}): {} threads would arrive at named barrier {} ({} already, {} of this "
                                    "task replica's {} warps), more than the {} it counts; a generation must take "
                                    "whole task replicas",
                                    op, id, threads, n.arrived + mine, id, n.arrived, mine, mine / 32, threads));
      cluster.abandon();
    }
    n.expected = threads;
    n.arrived += mine;
    uint32_t generation = n.generation;
    if (n.arrived == threads) {
      n.arrived = 0;
      ++n.generation;
    }
    return generation;
  }
};

}  // namespace weft::driver::cpu
