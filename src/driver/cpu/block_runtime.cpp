// The block runtime's scheduler (see block_runtime.h for the semantics): ClusterRunner, which resumes the
// fibers of a cluster round after round until all have finished, throws the error a fiber recorded
// (block_runtime_abi.cpp) or reports a deadlock when a round makes no progress; and ClusterState's members
// (block_runtime_state.h).
#include "driver/cpu/block_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "driver/cpu/block_runtime_state.h"

namespace weft::driver::cpu {

namespace {

// splitmix64: a small, portable generator, so that a seed gives the same order everywhere.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void run_fiber(void* arg, int i) {
  auto* c = static_cast<ClusterState*>(arg);
  FiberState& f = c->fibers[i];
  c->entry(c->args, &f.ctx, f.frame);
  c->block_of(i).retire_stores(f.ctx.fiber, 0);  // bulk stores complete before the kernel does
}

}  // namespace

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

void ClusterState::give_way() {
  if (!preempt || (next_random(preempt_random) & 1) == 0) return;
  pool.suspend();
  // Resumed: what it does from here on (arrivals included) is this round's progress, as a fiber's first steps
  // after a wait are.
  progress = true;
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

ClusterRunner::ClusterRunner(const BlockPlan& plan, KernelFn entry, int64_t frame_bytes, const ClusterDims& cluster)
    : state_(std::make_unique<ClusterState>(plan, entry, frame_bytes, cluster)) {}

ClusterRunner::~ClusterRunner() = default;

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
  c.preempt = seed.has_value();
  c.preempt_random = random ^ 0x5851f42d4c957f2dull;
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
