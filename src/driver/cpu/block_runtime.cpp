// The block runtime: see block_runtime.h for the semantics. The functions generated code calls run on a
// fiber's stack; when one finds an error it records the message in the block and suspends the fiber for
// good, so the scheduler (on the launching thread's own stack) can throw. Nothing those functions hold
// when they suspend owns memory, so abandoned fibers leak nothing.
#include "driver/cpu/block_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <numeric>
#include <string>
#include <unordered_map>

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

namespace {

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
  const detail::TensorDescData* desc = nullptr;  // null: a bulk copy of `bytes` from `src` (shared memory)
  char* smem = nullptr;
  int32_t coords[detail::TensorDescData::kMaxRank] = {};
  int32_t fiber = 0;
  const char* src = nullptr;
  int64_t bytes = 0;
};

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
void tma_copy(const TmaCopy& c, bool load) {
  if (!c.desc) {  // async_remote_shmem_copy: bytes as stored
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
      std::memcpy(global, shared, size_t(eb));
    }
  }
}

int64_t box_bytes(const detail::TensorDescData& d) {
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

void* aligned_or_throw(int64_t align, int64_t bytes, const char* what) {
  size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + align - 1) / align * align);
  void* p = std::aligned_alloc(static_cast<size_t>(align), rounded);
  if (!p) throw Error(fmt::format("the CPU backend could not allocate {} bytes of {}", rounded, what));
  return p;
}

// splitmix64: a small, portable generator, so that a seed gives the same order everywhere.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

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

ClusterState::ClusterState(const BlockPlan& p, KernelFn e, int64_t frame_bytes, const ClusterDims& d)
    : plan(p), entry(e), dims(d) {
  const int64_t align = codegen::cpu::kFrameAlign;
  const int64_t frame_stride = (frame_bytes + align - 1) / align * align;
  for (int32_t rank = 0; rank < dims.blocks(); ++rank) {
    int32_t first = static_cast<int32_t>(fibers.size());
    for (size_t t = 0; t < plan.tasks.size(); ++t)
      for (int32_t r = 0; r < plan.tasks[t].replicas; ++r) {
        FiberState f;
        f.ctx.task = static_cast<int32_t>(t);
        f.ctx.replica = r;
        f.ctx.fiber = static_cast<int32_t>(fibers.size());
        f.ctx.cluster_rank = rank;
        f.threads = plan.tasks[t].warps * 32;
        fibers.push_back(f);
      }
    blocks.push_back(std::make_unique<BlockState>(*this, rank, first, static_cast<int32_t>(fibers.size()) - first));
  }
  frames = static_cast<char*>(
      aligned_or_throw(codegen::cpu::kFrameAlign, frame_stride * int64_t(fibers.size()), "fiber frames"));
  for (size_t i = 0; i < fibers.size(); ++i) {
    fibers[i].frame = frames + frame_stride * int64_t(i);
    fibers[i].ctx.block = blocks[fibers[i].ctx.cluster_rank].get();
  }
}

ClusterState::~ClusterState() { std::free(frames); }

void ClusterState::reset() {
  for (auto& b : blocks) b->reset();
  for (FiberState& f : fibers) {
    f.started = f.finished = false;
    f.waiting = Waiting::Nothing;
    f.open_copies.clear();
    f.committed_copies.clear();
  }
  sync_arrived = 0;
  sync_generation = 0;
  failed = false;
  error.clear();
}

std::string ClusterState::fiber_name(int32_t fiber) const {
  const FiberState& f = fibers.at(fiber);
  std::string name = fmt::format("task '{}' replica {}", plan.tasks.at(f.ctx.task).name, f.ctx.replica);
  return clustered() ? block_of(fiber).block_label() + " " + name : name;
}

void ClusterState::set_error(const ProgramCtx* ctx, int32_t site, const std::string& message) {
  failed = true;
  const FiberState& f = fibers.at(ctx->fiber);
  error = fmt::format("{}, task '{}' replica {}: {}", block_of(ctx->fiber).block_name(), plan.tasks.at(f.ctx.task).name,
                      f.ctx.replica, message);
  error_loc = site_loc(site);
}

BlockState& ClusterState::block_at_rank(const ProgramCtx* ctx, int32_t site, int32_t rank, const char* op) {
  if (rank < 0 || rank >= static_cast<int32_t>(blocks.size())) {
    set_error(ctx, site, fmt::format("{} names cluster rank {}, but the kernel's cluster of ({}, {}, {}) has ranks 0 to {}",
                                     op, rank, dims.x, dims.y, dims.z, blocks.size() - 1));
    abandon();
  }
  return *blocks[rank];
}

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
  state_of(ctx).arrive(ctx, site, barrier, 0, "barrier_arrive", /*every_thread=*/true);
}

// The barrier at the same offset in the block of cluster rank `rank` (offsets are the same in every block).
void barrier_arrive_remote(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t rank) noexcept {
  BlockState& b = state_of(ctx);
  b.cluster.block_at_rank(ctx, site, rank, "barrier_arrive").arrive(ctx, site, barrier, 0, "barrier_arrive");
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
  state_of(ctx).named_arrive(ctx, site, id, threads, "named_barrier_arrive");
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
               const int32_t* coords) noexcept {
  TmaCopy c;
  c.desc = desc;
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

void run_fiber(void* arg, int i) {
  auto* c = static_cast<ClusterState*>(arg);
  FiberState& f = c->fibers[i];
  c->entry(c->args, &f.ctx, f.frame);
  c->block_of(i).retire_stores(f.ctx.fiber, 0);  // bulk stores complete before the kernel does
}

}  // namespace

// One line per fiber, in columns: who, what it waits on, for what, where; then the barriers involved.
std::string ClusterState::deadlock_report() const {
  struct Line {
    std::string who, on, until, where;
  };
  std::vector<Line> lines;
  std::vector<std::pair<const BlockState*, int32_t>> mbarriers_involved, named_involved;
  bool sync_involved = false;
  auto involve = [](std::vector<std::pair<const BlockState*, int32_t>>& list, const BlockState* b, int32_t x) {
    if (std::find(list.begin(), list.end(), std::make_pair(b, x)) == list.end()) list.emplace_back(b, x);
  };
  int64_t phases = 0;
  for (const auto& b : blocks) phases += b->phases_completed;
  for (size_t i = 0; i < fibers.size(); ++i) {
    const FiberState& f = fibers[i];
    const BlockState& b = block_of(static_cast<int32_t>(i));
    Line l{fiber_name(static_cast<int32_t>(i)), "", "", ""};
    if (f.finished) {
      l.on = "finished";
    } else if (f.waiting == Waiting::Mbarrier) {
      l.on = "waits on " + b.barrier_name(f.wait_on);
      l.until = fmt::format("for phase {}", f.wait_for);
      l.where = site_loc(f.wait_site).str();
      involve(mbarriers_involved, &b, f.wait_on);
    } else if (f.waiting == Waiting::Cluster) {
      l.on = "waits in cluster_sync";
      l.where = site_loc(f.wait_site).str();
      sync_involved = true;
    } else {
      l.on = fmt::format("waits on named barrier {}", f.wait_on);
      l.where = site_loc(f.wait_site).str();
      involve(named_involved, &b, f.wait_on);
    }
    lines.push_back(l);
  }
  size_t who_w = 0, on_w = 0, until_w = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    who_w = std::max(who_w, lines[i].who.size());
    if (fibers[i].finished) continue;
    on_w = std::max(on_w, lines[i].on.size());
    until_w = std::max(until_w, lines[i].until.size());
  }
  std::string where = blocks.front()->block_name();
  if (clustered()) {
    const int32_t* first = blocks.front()->program_id;
    const int32_t* last = blocks.back()->program_id;
    where = fmt::format("kernel '{}', the cluster of blocks ({}, {}, {}) to ({}, {}, {})", plan.kernel, first[0], first[1],
                        first[2], last[0], last[1], last[2]);
  }
  std::string out = fmt::format("deadlock in {}, after {} barrier phases completed:", where, phases);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (fibers[i].finished)
      out += fmt::format("\n  {:<{}}  {}", l.who, who_w, l.on);
    else
      out += fmt::format("\n  {:<{}}  {:<{}} {:<{}}   {}", l.who, who_w, l.on, on_w, l.until, until_w, l.where);
  }
  for (auto [b, slot] : mbarriers_involved) {
    const Mbarrier& m = b->mbarriers[slot];
    out += fmt::format("\n  {} has {} of {} arrivals in phase {}", b->barrier_name(slot), m.arrive_count - m.pending,
                       m.arrive_count, m.parity);
    if (m.bytes_pending > 0) out += fmt::format(" and still expects {} bytes", m.bytes_pending);
    if (m.last_fiber >= 0)
      out += fmt::format(" (last arrival: {}, {})", fiber_name(m.last_fiber), site_loc(m.last_site).str());
    else
      out += " (no arrival yet)";
  }
  for (auto [b, id] : named_involved) {
    out += fmt::format("\n  named barrier {}{} has {} of {} threads", id, clustered() ? " of " + b->block_label() : "",
                       b->named[id].arrived, b->named[id].expected);
  }
  if (sync_involved) out += fmt::format("\n  cluster_sync has {} of {} task replicas", sync_arrived, fibers.size());
  return out;
}

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
      {fn::kAsyncDot, reinterpret_cast<void*>(&async_dot)},
      {fn::kAsyncDotWait, reinterpret_cast<void*>(&async_dot_wait)},
      {fn::kTmaLoad, reinterpret_cast<void*>(&tma_load)},
      {fn::kTmaLoadMulticast, reinterpret_cast<void*>(&tma_load_multicast)},
      {fn::kTmaStore, reinterpret_cast<void*>(&tma_store)},
      {fn::kTmaStoreWait, reinterpret_cast<void*>(&tma_store_wait)},
      {fn::kAsyncLoad, reinterpret_cast<void*>(&async_load)},
      {fn::kAsyncCommitGroup, reinterpret_cast<void*>(&async_commit_group)},
      {fn::kAsyncWaitGroup, reinterpret_cast<void*>(&async_wait_group)},
  };
  return symbols;
}

ClusterRunner::ClusterRunner(const BlockPlan& plan, KernelFn entry, int64_t frame_bytes, const ClusterDims& cluster)
    : state_(std::make_unique<ClusterState>(plan, entry, frame_bytes, cluster)) {}

ClusterRunner::~ClusterRunner() = default;

void abandon_block(const ProgramCtx* ctx, const std::string& message, SourceLoc loc) noexcept {
  ClusterState& c = state_of(ctx).cluster;
  if (!c.failed) {
    c.failed = true;
    c.error = message + " (" + c.fiber_name(ctx->fiber) + ")";
    c.error_loc = loc;
  }
  c.abandon();
}

void ClusterRunner::run(const uint64_t* args, const int32_t first_block[3], const int32_t num_programs[3],
                        std::optional<uint64_t> seed, const codegen::cpu::LaunchChecks* checks) {
  ClusterState& c = *state_;
  c.reset();
  c.args = args;
  for (auto& b : c.blocks) {  // rank r: x fastest, as %cluster_ctarank counts
    const int32_t offset[3] = {b->rank % c.dims.x, (b->rank / c.dims.x) % c.dims.y, b->rank / (c.dims.x * c.dims.y)};
    for (int d = 0; d < 3; ++d) b->program_id[d] = first_block[d] + offset[d];
  }
  for (FiberState& f : c.fibers) {
    f.ctx.checks = checks;
    for (int d = 0; d < 3; ++d) {
      f.ctx.program_id[d] = c.block_of(f.ctx.fiber).program_id[d];
      f.ctx.num_programs[d] = num_programs[d];
    }
  }
  const int n = static_cast<int>(c.fibers.size());
  c.pool.start(n, &run_fiber, &c);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Each cluster its own sequence, whichever host thread runs it.
  const int32_t* p = first_block;
  uint64_t random = seed ? *seed ^ (0x2545f4914f6cdd1dull * uint64_t(p[0] + 1) + 0x9e37ull * uint64_t(p[1]) +
                                    uint64_t(p[2]) * 0x100000001b3ull)
                         : 0;
  for (;;) {
    if (seed)
      for (int i = n - 1; i > 0; --i) std::swap(order[i], order[next_random(random) % uint64_t(i + 1)]);
    c.progress = false;
    bool all_finished = true;
    for (int i : order) {
      FiberState& f = c.fibers[i];
      if (f.finished) continue;
      if (!f.started) c.progress = f.started = true;
      bool finished = c.pool.resume(i);
      if (c.failed) throw Error(c.error, c.error_loc);
      if (finished) {
        f.finished = c.progress = true;
      } else {
        all_finished = false;
      }
    }
    if (all_finished) return;
    if (!c.progress) throw Error(c.deadlock_report());
  }
}

}  // namespace weft::driver::cpu
