// Pass: what GPU debug mode (WEFT_DEBUG=1, KernelOptions::debug) needs to explain a barrier wait that timed
// out.
//
// In debug mode every mbarrier wait and every named_barrier_wait of the GPU code carries a site number
// (its index here). A wait that
// times out writes a WaitTimeoutRecord to host memory and traps (codegen/nvptx/debug_waits.h); the host
// puts it into words with this table: the site's source line, the task and replica that the waiting thread
// runs (from the task plan and the thread index: the code needs no task names), and the barrier array and
// index at the barrier's shared-memory offset (from the shared-memory plan). The table is made from the IR
// alone, so that a kernel loaded from the compile cache gets the same one without being lowered again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/node.h"
#include "passes/task_plan.h"

namespace weft::passes {

// What the first thread whose wait timed out writes (pinned host memory mapped into the device; 32-bit
// words so that every store is one plain st.u32). Only one thread writes it: the one that wins an atomic
// CAS 0 -> 1 on a claim word in device memory (device atomics on host memory need PCIe atomics, which a
// host may lack). `complete` is set last, after a system-scope fence, so the host reads no half record.
struct WaitTimeoutRecord {
  uint32_t complete = 0;
  uint32_t site = 0;      // index into WaitSites::sites
  uint32_t barrier = 0;   // the mbarrier's byte offset in the block's shared memory, or kNamedBarrierFlag | id
  uint32_t parity = 0;    // the phase parity it waited for; at a named barrier: the threads that had arrived
  uint32_t thread = 0;    // %tid.x of the waiting thread
  uint32_t block[3] = {}; // %ctaid.{x,y,z}
};
// The word the code generator stores each field at (offsetof / 4), so both sides agree on one layout.
enum WaitTimeoutWord : int {
  kCompleteWord = offsetof(WaitTimeoutRecord, complete) / 4,
  kSiteWord = offsetof(WaitTimeoutRecord, site) / 4,
  kBarrierWord = offsetof(WaitTimeoutRecord, barrier) / 4,
  kParityWord = offsetof(WaitTimeoutRecord, parity) / 4,
  kThreadWord = offsetof(WaitTimeoutRecord, thread) / 4,
  kBlockWord = offsetof(WaitTimeoutRecord, block) / 4,  // x; y and z follow
};
static_assert(sizeof(WaitTimeoutRecord) == 32);
// WaitTimeoutRecord::barrier of a named barrier's wait: this bit, or'd with the barrier's id.
constexpr uint32_t kNamedBarrierFlag = 0x80000000u;

struct BarrierArrayInfo {
  std::string name;
  int64_t offset = 0;  // bytes, in the block's shared memory
  int64_t count = 0;
};

struct WaitSites {
  std::string kernel;
  std::vector<SourceLoc> sites;                          // the user's line of each barrier_wait
  std::vector<int32_t> named_threads;                    // per site: the named barrier's thread count, or 0
  std::unordered_map<const ir::Node*, uint32_t> index;  // BarrierWait / NamedBarrierWait node -> its site
  std::vector<BarrierArrayInfo> barriers;
  std::vector<TaskSlot> tasks;                           // where each task's replicas run

  // "'full[1]'" for the mbarrier at byte `offset`.
  std::string barrier_name(uint32_t offset) const;
  // "task 'consumer' replica 1" for the thread `thread` of the block.
  std::string thread_name(uint32_t thread) const;
  // The Error message for a wait that gave up after `timeout_ms`.
  std::string describe(const WaitTimeoutRecord& r, int64_t timeout_ms) const;
  SourceLoc site_loc(uint32_t site) const { return site < sites.size() ? sites[site] : SourceLoc{}; }
};

// Every BarrierWait and NamedBarrierWait of `f`, numbered in program order, with the barrier arrays and the task plan
// (`num_warps`: the block's warps when `f` has no async_tasks, as for plan_tasks).
WaitSites plan_wait_sites(const ir::Function& f, int num_warps);

}  // namespace weft::passes
