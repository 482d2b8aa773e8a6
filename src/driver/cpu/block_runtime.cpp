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
  bool a_transposed = false, b_transposed = false, f16 = false;
  int32_t b_panel = 0;  // b stored [K, N] in column panels of this width (0: plain)
  int32_t M = 0, N = 0, K = 0;
  std::vector<float> acc;
};

// A TMA copy in flight: a load lands when its barrier's phase completes, a store is performed at the
// async_store_wait that retires it (or when its fiber ends).
struct TmaCopy {
  const detail::TensorDescData* desc = nullptr;
  char* smem = nullptr;
  int32_t coords[detail::TensorDescData::kMaxRank] = {};
  int32_t fiber = 0;
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

enum class Waiting { Nothing, Mbarrier, NamedBarrier };

struct FiberState {
  ProgramCtx ctx;
  char* frame = nullptr;
  int32_t threads = 0;  // warps * 32 of its task
  bool started = false, finished = false;
  Waiting waiting = Waiting::Nothing;
  int32_t wait_site = -1;
  int32_t wait_on = -1;   // an mbarrier slot or a named barrier id
  int32_t wait_for = 0;   // the phase parity, or the named barrier's generation
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

struct BlockState {
  BlockState(const BlockPlan& p, KernelFn e, int64_t frame_bytes) : plan(p), entry(e) {
    const int64_t align = codegen::cpu::kFrameAlign;
    frame_stride = (frame_bytes + align - 1) / align * align;
    for (size_t t = 0; t < plan.tasks.size(); ++t)
      for (int32_t r = 0; r < plan.tasks[t].replicas; ++r) {
        FiberState f;
        f.ctx.task = static_cast<int32_t>(t);
        f.ctx.replica = r;
        f.ctx.fiber = static_cast<int32_t>(fibers.size());
        f.ctx.block = this;
        f.threads = plan.tasks[t].warps * 32;
        fibers.push_back(f);
      }
    frames = static_cast<char*>(
        aligned_or_throw(codegen::cpu::kFrameAlign, frame_stride * int64_t(fibers.size()), "fiber frames"));
    for (size_t i = 0; i < fibers.size(); ++i) fibers[i].frame = frames + frame_stride * int64_t(i);
    arena = static_cast<char*>(aligned_or_throw(kArenaAlign, plan.shared_bytes, "shared memory"));
    for (size_t a = 0; a < plan.barriers.size(); ++a) {
      first_slot.push_back(static_cast<int32_t>(mbarriers.size()));
      for (int32_t e = 0; e < plan.barriers[a].count; ++e) {
        Mbarrier m;
        m.array = static_cast<int32_t>(a);
        m.element = e;
        m.arrive_count = plan.barriers[a].arrive_count;
        mbarriers.push_back(m);
      }
    }
  }
  ~BlockState() {
    std::free(frames);
    std::free(arena);
  }

  const BlockPlan& plan;
  KernelFn entry;
  const uint64_t* args = nullptr;
  int64_t frame_stride = 0;
  char* frames = nullptr;
  char* arena = nullptr;
  std::vector<FiberState> fibers;
  FiberPool pool;
  std::vector<int32_t> first_slot;  // per barrier array: its first element in `mbarriers`
  std::vector<Mbarrier> mbarriers;
  NamedBarrier named[kNamedBarriers];
  int64_t phases_completed = 0;
  std::unordered_map<int32_t, std::vector<TmaCopy>> tma_loads;  // by mbarrier slot: land when its phase completes
  std::vector<TmaCopy> tma_stores;                               // issued, not performed, in issue order
  std::vector<DotJob> dot_jobs;                                   // issued, not retired, in issue order
  std::unordered_map<int32_t, std::vector<float>> dot_results;    // retired, by job id
  int32_t next_dot = 0;
  bool progress = false;  // in the current round: a fiber started, got past a wait or finished
  bool failed = false;
  std::string error;
  SourceLoc error_loc;

  void reset() {
    std::memset(arena, 0xFF, static_cast<size_t>(plan.shared_bytes));
    for (Mbarrier& m : mbarriers) {
      m.pending = m.arrive_count;
      m.bytes_pending = 0;
      m.parity = 0;
      m.last_fiber = m.last_site = -1;
    }
    for (NamedBarrier& n : named) n = {};
    for (FiberState& f : fibers) {
      f.started = f.finished = false;
      f.waiting = Waiting::Nothing;
      f.open_copies.clear();
      f.committed_copies.clear();
    }
    phases_completed = 0;
    tma_loads.clear();
    tma_stores.clear();
    dot_jobs.clear();
    dot_results.clear();
    next_dot = 0;
    failed = false;
    error.clear();
  }

  // ---- names for messages ----

  std::string block_name() const {
    const int32_t* p = fibers.at(0).ctx.program_id;
    return fmt::format("kernel '{}', block ({}, {}, {})", plan.kernel, p[0], p[1], p[2]);
  }
  std::string fiber_name(int32_t i) const {
    const FiberState& f = fibers.at(i);
    return fmt::format("task '{}' replica {}", plan.tasks.at(f.ctx.task).name, f.ctx.replica);
  }
  std::string barrier_name(int32_t slot) const {
    const Mbarrier& m = mbarriers.at(slot);
    return fmt::format("'{}[{}]'", plan.barriers.at(m.array).name, m.element);
  }
  SourceLoc site_loc(int32_t site) const { return plan.sites.at(site).loc; }

  // ---- errors inside fibers ----

  // Records the error; call abandon() next, outside the expression that built the message (so that no
  // temporary string is left on the fiber's stack).
  void set_error(const ProgramCtx* ctx, int32_t site, const std::string& message) {
    failed = true;
    error = fmt::format("{}, {}: {}", block_name(), fiber_name(ctx->fiber), message);
    error_loc = site_loc(site);
  }
  [[noreturn]] void abandon() {
    pool.suspend();  // a failed block is never resumed
    std::abort();
  }

  // ---- waiting ----

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

  // ---- mbarriers ----

  int32_t slot_of(const ProgramCtx* ctx, int32_t site, int32_t offset) {
    for (size_t a = 0; a < plan.barriers.size(); ++a) {
      const auto& arr = plan.barriers[a];
      int64_t rel = offset - arr.offset;
      if (rel >= 0 && rel < arr.count * passes::kMbarrierBytes && rel % passes::kMbarrierBytes == 0)
        return first_slot[a] + static_cast<int32_t>(rel / passes::kMbarrierBytes);
    }
    set_error(ctx, site, fmt::format("no mbarrier at shared-memory offset {}", offset));
    abandon();
  }

  void arrive(const ProgramCtx* ctx, int32_t site, int32_t offset, int64_t bytes, const char* op) {
    int32_t slot = slot_of(ctx, site, offset);
    Mbarrier& m = mbarriers[slot];
    if (m.pending == 0) {
      // All arrivals are in and the phase waits for bytes only: on the GPU the count would underflow.
      set_error(ctx, site,
                fmt::format("{} on {} is an arrival too many: its arrive count is {} and all {} arrivals of phase {} are "
                            "in (the phase waits only for {} more bytes, expected with barrier_expect_bytes)",
                            op, barrier_name(slot), m.arrive_count, m.arrive_count, m.parity, m.bytes_pending));
      abandon();
    }
    if (bytes < 0) {
      set_error(ctx, site, fmt::format("{} on {} expects {} bytes; the count cannot be negative", op, barrier_name(slot), bytes));
      abandon();
    }
    --m.pending;
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

  // ---- TMA stores ----

  // Performs the oldest stores of `fiber` until at most `pending` are left.
  void retire_stores(int32_t fiber, int32_t pending) {
    int32_t mine = 0;
    for (const TmaCopy& c : tma_stores) mine += c.fiber == fiber;
    for (auto it = tma_stores.begin(); it != tma_stores.end() && mine > pending;) {
      if (it->fiber != fiber) {
        ++it;
        continue;
      }
      tma_copy(*it, false);
      it = tma_stores.erase(it);
      --mine;
    }
  }

  // ---- async dots ----

  static float element(const char* base, int64_t i, bool f16) {
    uint16_t bits;
    std::memcpy(&bits, base + 2 * i, 2);
    return f16 ? static_cast<float>(weft::f16::from_bits(bits)) : static_cast<float>(weft::bf16::from_bits(bits));
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
        double s = 0;  // exact products of 16-bit floats, summed more precisely than the tensor cores do
        for (int32_t k = 0; k < j.K; ++k) {
          float x = element(j.a, j.a_transposed ? int64_t(k) * j.M + r : int64_t(r) * j.K + k, j.f16);
          int64_t b_at = j.b_transposed ? int64_t(c) * j.K + k
                         : j.b_panel     ? passes::paneled_index(k, c, j.K, j.N, j.b_panel)
                                         : int64_t(k) * j.N + c;
          float y = element(j.b, b_at, j.f16);
          s += double(x) * double(y);
        }
        out[size_t(r) * j.N + c] = static_cast<float>(double(out[size_t(r) * j.N + c]) + s);
      }
    return out;
  }
  // Retires the oldest dots of `fiber` until at most `pending` are left.
  void retire_dots(int32_t fiber, int32_t pending) {
    int32_t mine = 0;
    for (const DotJob& j : dot_jobs) mine += j.fiber == fiber;
    for (auto it = dot_jobs.begin(); it != dot_jobs.end() && mine > pending;) {
      if (it->fiber != fiber) {
        ++it;
        continue;
      }
      dot_results[it->id] = compute(*it);
      it = dot_jobs.erase(it);
      --mine;
    }
  }

  // ---- named barriers ----

  // Adds the calling fiber's threads to barrier `id`; returns the generation it arrived in.
  uint32_t named_arrive(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads, const char* op) {
    NamedBarrier& n = named[id];
    int32_t mine = fibers[ctx->fiber].threads;
    if (n.arrived > 0 && n.expected != threads) {
      set_error(ctx, site, fmt::format("{}({}, {}): other calls of this generation of named barrier {} count {} threads; "
                                       "every call must give the same count", op, id, threads, id, n.expected));
      abandon();
    }
    if (n.arrived + mine > threads) {
      // On the GPU the surplus warps would start the next generation; the CPU runs a replica's warps as
      // one, and such a split is almost always a wrong count.
      set_error(ctx, site, fmt::format("{}({}, {}): {} threads would arrive at named barrier {} ({} already, {} of this "
                                       "task replica's {} warps), more than the {} it counts; a generation must take "
                                       "whole task replicas",
                                       op, id, threads, n.arrived + mine, id, n.arrived, mine, mine / 32, threads));
      abandon();
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

  // ---- the scheduler ----

  std::string deadlock_report() const;
};

namespace {

BlockState& state_of(const ProgramCtx* ctx) { return *static_cast<BlockState*>(ctx->block); }

// ---- the functions generated code calls (cpu_abi.h, block_fn) ----

char* local_view(const ProgramCtx* ctx, int32_t site, int32_t stage) noexcept {
  BlockState& b = state_of(ctx);
  const auto& buf = b.plan.buffers.at(b.plan.sites.at(site).target);
  if (stage < 0 || stage >= buf.stages) {
    b.set_error(ctx, site, fmt::format("stage {} of '{}' does not exist: it has {} stages (0 to {})", stage, buf.name,
                                       buf.stages, buf.stages - 1));
    b.abandon();
  }
  return b.arena + buf.offset + int64_t(stage) * buf.stage_bytes;
}

int32_t barrier_at(const ProgramCtx* ctx, int32_t site, int32_t index) noexcept {
  BlockState& b = state_of(ctx);
  const auto& arr = b.plan.barriers.at(b.plan.sites.at(site).target);
  if (index < 0 || index >= arr.count) {
    b.set_error(ctx, site, fmt::format("barrier {} of '{}' does not exist: it has {} barriers (0 to {})", index,
                                       arr.name, arr.count, arr.count - 1));
    b.abandon();
  }
  return static_cast<int32_t>(arr.offset + index * passes::kMbarrierBytes);
}

void barrier_arrive(const ProgramCtx* ctx, int32_t site, int32_t barrier) noexcept {
  state_of(ctx).arrive(ctx, site, barrier, 0, "barrier_arrive");
}

void barrier_expect_bytes(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t bytes) noexcept {
  state_of(ctx).arrive(ctx, site, barrier, bytes, "barrier_expect_bytes");
}

void barrier_wait(const ProgramCtx* ctx, int32_t site, int32_t barrier, int32_t phase) noexcept {
  BlockState& b = state_of(ctx);
  int32_t slot = b.slot_of(ctx, site, barrier);
  int32_t parity = phase & 1;
  const Mbarrier& m = b.mbarriers[slot];
  b.wait_until(ctx, Waiting::Mbarrier, site, slot, parity, [&] { return m.parity != parity; });
}

void named_barrier_arrive(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads) noexcept {
  state_of(ctx).named_arrive(ctx, site, id, threads, "named_barrier_arrive");
}

void named_barrier_wait(const ProgramCtx* ctx, int32_t site, int32_t id, int32_t threads) noexcept {
  BlockState& b = state_of(ctx);
  uint32_t generation = b.named_arrive(ctx, site, id, threads, "named_barrier_wait");
  const NamedBarrier& n = b.named[id];
  b.wait_until(ctx, Waiting::NamedBarrier, site, id, static_cast<int32_t>(generation),
               [&] { return n.generation != generation; });
}

void async_dot(const ProgramCtx* ctx, int32_t, const char* a, int32_t a_transposed, const char* b,
               int32_t b_transposed, int32_t b_panel, int32_t M, int32_t N, int32_t K, int32_t is_f16,
               const float* acc, float* out) noexcept {
  BlockState& s = state_of(ctx);
  DotJob j;
  j.id = s.next_dot++;
  j.fiber = ctx->fiber;
  j.a = a;
  j.b = b;
  j.a_transposed = a_transposed != 0;
  j.b_transposed = b_transposed != 0;
  j.b_panel = b_panel;
  j.f16 = is_f16 != 0;
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

TmaCopy make_copy(const ProgramCtx* ctx, const detail::TensorDescData* desc, char* smem, const int32_t* coords) {
  TmaCopy c;
  c.desc = desc;
  c.smem = smem;
  c.fiber = ctx->fiber;
  std::copy(coords, coords + desc->rank, c.coords);
  return c;
}

void tma_load(const ProgramCtx* ctx, int32_t site, const detail::TensorDescData* desc, char* smem, int32_t barrier,
              const int32_t* coords) noexcept {
  BlockState& b = state_of(ctx);
  int32_t slot = b.slot_of(ctx, site, barrier);
  int64_t bytes = box_bytes(*desc);
  std::memset(smem, 0xFF, size_t(bytes));  // not there yet: poison until the phase completes
  b.tma_loads[slot].push_back(make_copy(ctx, desc, smem, coords));
  Mbarrier& m = b.mbarriers[slot];
  m.bytes_pending -= bytes;  // complete_tx: the bytes are on their way
  b.complete_if_done(m);
}

void tma_store(const ProgramCtx* ctx, int32_t, const detail::TensorDescData* desc, const char* smem,
               const int32_t* coords) noexcept {
  state_of(ctx).tma_stores.push_back(make_copy(ctx, desc, const_cast<char*>(smem), coords));
}

void tma_store_wait(const ProgramCtx* ctx, int32_t, int32_t pending) noexcept {
  state_of(ctx).retire_stores(ctx->fiber, pending);
}

void async_load(const ProgramCtx* ctx, int32_t, int32_t count, int32_t element_bytes, char* const* dst,
                const char* const* src, const uint8_t* mask, const char* fill) noexcept {
  FiberState& f = state_of(ctx).fibers[ctx->fiber];
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
  FiberState& f = state_of(ctx).fibers[ctx->fiber];
  f.committed_copies.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}

void async_wait_group(const ProgramCtx* ctx, int32_t, int32_t pending) noexcept {
  FiberState& f = state_of(ctx).fibers[ctx->fiber];
  while (f.committed_copies.size() > size_t(pending)) {
    for (const AsyncCopyElement& e : f.committed_copies.front())
      std::memcpy(e.dst, e.src ? e.src : reinterpret_cast<const char*>(&e.fill), size_t(e.bytes));
    f.committed_copies.pop_front();
  }
}

void run_fiber(void* arg, int i) {
  auto* b = static_cast<BlockState*>(arg);
  FiberState& f = b->fibers[i];
  b->entry(b->args, &f.ctx, f.frame);
  b->retire_stores(f.ctx.fiber, 0);  // bulk stores complete before the kernel does
}

}  // namespace

// One line per fiber, in columns: who, what it waits on, for what, where; then the barriers involved.
std::string BlockState::deadlock_report() const {
  struct Line {
    std::string who, on, until, where;
  };
  std::vector<Line> lines;
  std::vector<int32_t> mbarriers_involved, named_involved;
  auto involve = [](std::vector<int32_t>& list, int32_t x) {
    if (std::find(list.begin(), list.end(), x) == list.end()) list.push_back(x);
  };
  for (size_t i = 0; i < fibers.size(); ++i) {
    const FiberState& f = fibers[i];
    Line l{fiber_name(static_cast<int32_t>(i)), "", "", ""};
    if (f.finished) {
      l.on = "finished";
    } else if (f.waiting == Waiting::Mbarrier) {
      l.on = "waits on " + barrier_name(f.wait_on);
      l.until = fmt::format("for phase {}", f.wait_for);
      l.where = site_loc(f.wait_site).str();
      involve(mbarriers_involved, f.wait_on);
    } else {
      l.on = fmt::format("waits on named barrier {}", f.wait_on);
      l.where = site_loc(f.wait_site).str();
      involve(named_involved, f.wait_on);
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
  std::string out = fmt::format("deadlock in {}, after {} barrier phases completed:", block_name(), phases_completed);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (fibers[i].finished)
      out += fmt::format("\n  {:<{}}  {}", l.who, who_w, l.on);
    else
      out += fmt::format("\n  {:<{}}  {:<{}} {:<{}}   {}", l.who, who_w, l.on, on_w, l.until, until_w, l.where);
  }
  for (int32_t slot : mbarriers_involved) {
    const Mbarrier& m = mbarriers[slot];
    out += fmt::format("\n  {} has {} of {} arrivals in phase {}", barrier_name(slot), m.arrive_count - m.pending,
                       m.arrive_count, m.parity);
    if (m.bytes_pending > 0) out += fmt::format(" and still expects {} bytes", m.bytes_pending);
    if (m.last_fiber >= 0)
      out += fmt::format(" (last arrival: {}, {})", fiber_name(m.last_fiber), site_loc(m.last_site).str());
    else
      out += " (no arrival yet)";
  }
  for (int32_t id : named_involved)
    out += fmt::format("\n  named barrier {} has {} of {} threads", id, named[id].arrived, named[id].expected);
  return out;
}

const std::vector<RuntimeSymbol>& block_runtime_symbols() {
  namespace fn = codegen::cpu::block_fn;
  static const std::vector<RuntimeSymbol> symbols = {
      {fn::kLocalView, reinterpret_cast<void*>(&local_view)},
      {fn::kBarrierAt, reinterpret_cast<void*>(&barrier_at)},
      {fn::kBarrierArrive, reinterpret_cast<void*>(&barrier_arrive)},
      {fn::kBarrierExpectBytes, reinterpret_cast<void*>(&barrier_expect_bytes)},
      {fn::kBarrierWait, reinterpret_cast<void*>(&barrier_wait)},
      {fn::kNamedBarrierArrive, reinterpret_cast<void*>(&named_barrier_arrive)},
      {fn::kNamedBarrierWait, reinterpret_cast<void*>(&named_barrier_wait)},
      {fn::kAsyncDot, reinterpret_cast<void*>(&async_dot)},
      {fn::kAsyncDotWait, reinterpret_cast<void*>(&async_dot_wait)},
      {fn::kTmaLoad, reinterpret_cast<void*>(&tma_load)},
      {fn::kTmaStore, reinterpret_cast<void*>(&tma_store)},
      {fn::kTmaStoreWait, reinterpret_cast<void*>(&tma_store_wait)},
      {fn::kAsyncLoad, reinterpret_cast<void*>(&async_load)},
      {fn::kAsyncCommitGroup, reinterpret_cast<void*>(&async_commit_group)},
      {fn::kAsyncWaitGroup, reinterpret_cast<void*>(&async_wait_group)},
  };
  return symbols;
}

BlockRunner::BlockRunner(const BlockPlan& plan, KernelFn entry, int64_t frame_bytes)
    : state_(std::make_unique<BlockState>(plan, entry, frame_bytes)) {}

BlockRunner::~BlockRunner() = default;

void BlockRunner::run(const uint64_t* args, const int32_t program_id[3], const int32_t num_programs[3],
                      std::optional<uint64_t> seed) {
  BlockState& b = *state_;
  b.reset();
  b.args = args;
  for (FiberState& f : b.fibers)
    for (int d = 0; d < 3; ++d) {
      f.ctx.program_id[d] = program_id[d];
      f.ctx.num_programs[d] = num_programs[d];
    }
  const int n = static_cast<int>(b.fibers.size());
  b.pool.start(n, &run_fiber, &b);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Each block its own sequence, whichever host thread runs it.
  uint64_t random = seed ? *seed ^ (0x2545f4914f6cdd1dull * uint64_t(program_id[0] + 1) + 0x9e37ull * uint64_t(program_id[1]) +
                                    uint64_t(program_id[2]) * 0x100000001b3ull)
                         : 0;
  for (;;) {
    if (seed)
      for (int i = n - 1; i > 0; --i) std::swap(order[i], order[next_random(random) % uint64_t(i + 1)]);
    b.progress = false;
    bool all_finished = true;
    for (int i : order) {
      FiberState& f = b.fibers[i];
      if (f.finished) continue;
      if (!f.started) b.progress = f.started = true;
      bool finished = b.pool.resume(i);
      if (b.failed) throw Error(b.error, b.error_loc);
      if (finished) {
        f.finished = b.progress = true;
      } else {
        all_finished = false;
      }
    }
    if (all_finished) return;
    if (!b.progress) throw Error(b.deadlock_report());
  }
}

}  // namespace weft::driver::cpu
