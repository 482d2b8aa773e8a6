// The calling convention between the CPU backend's generated code and its runtime (no LLVM here).
//
//   void kernel(const uint64_t* args, const ProgramCtx* ctx, char* frame);
//
// `args` holds one 64-bit slot per Tile parameter; `ctx` says which program instance runs; `frame` is
// scratch memory of `frame_bytes` (64-byte aligned) where the kernel keeps its tiles, one frame per
// concurrently running program instance.
//
// Kernels that use shared memory, mbarriers, named barriers or async_tasks (the "block" ops) run each
// program instance as a block of fibers, one per task replica (driver/cpu/block_runtime.h): every fiber
// calls the kernel with its own frame and a ctx naming its task, replica and the block's runtime state.
// The generated code reaches that state only through the C functions listed under BlockRuntimeFn, each
// given the ctx and the index of its call site in BlockPlan::sites (what the runtime names in errors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/error.h"

namespace weft::codegen::cpu {

struct ProgramCtx {
  int32_t program_id[3];
  int32_t num_programs[3];
  // Set for kernels with block ops only (the fast path leaves them 0 / null).
  int32_t task = 0;       // which task of async_tasks this fiber runs (0: the only one, without async_tasks)
  int32_t replica = 0;    // which replica of that task
  int32_t fiber = 0;      // the fiber's index in its block
  int32_t cluster_rank = 0;  // the block's rank in its thread-block cluster (0 without clusters)
  void* block = nullptr;  // the block's runtime state (driver/cpu/block_runtime_state.h)
  const struct LaunchChecks* checks = nullptr;  // kernels compiled with bounds checks only
};

// ---- bounds checks (WEFT_DEBUG=1, WEFT_CHECK_BOUNDS=1, KernelOptions::debug) -------------------------
//
// A kernel compiled with checks tests, before every load, store and async_load, each element's address
// (masked-off elements excepted) against the allocation of the pointer argument it derives from:
// extents[2 * slot] <= address and address + element bytes <= extents[2 * slot + 1]. A pointer whose
// argument cannot be told statically (it went through where() or a Var) may lie in any pointer
// argument's allocation. The first element outside calls kOutOfBounds and the program instance returns
// at once: nothing is read or written out of bounds.
struct LaunchChecks {
  const uint64_t* extents = nullptr;  // two per argument slot; a pointer of unknown extent: 0, UINT64_MAX
  void* report = nullptr;             // where the runtime records the first violation (driver/cpu)
};

// One checked access of the kernel, for the report.
struct AccessSite {
  SourceLoc loc;
  std::string op;             // "load", "store", "async_load", "atomic_add", …
  std::string element;        // its element type, "f32"
  int64_t elements = 0;       // elements of the access (its pointer tile)
  int64_t element_bytes = 0;
  std::vector<int32_t> slots;  // the argument slots its pointers may derive from
};

// void (const ProgramCtx*, i32 site, i64 element, i64 address): element `element` of access `site` is
// outside its allocation. Records the report and returns (the kernel then returns); in a fiber, abandons
// the block as the block runtime's errors do.
inline constexpr const char* kOutOfBoundsFn = "weft_cpu_out_of_bounds";

using KernelFn = void (*)(const uint64_t* args, const ProgramCtx* ctx, char* frame);

constexpr int64_t kFrameAlign = 64;

// ---- block ops --------------------------------------------------------------------------------------

// The run-time functions the generated code calls, with their C signatures. `site` indexes
// BlockPlan::sites; barriers are named by their byte offset in the block's shared memory (as on the GPU,
// where an mbarrier is its shared address). A function that finds an error never returns: it records
// the error and abandons the fiber (no unwinding through generated code).
namespace block_fn {
// char* (const ProgramCtx*, i32 site, i32 stage): the address of a buffer's stage; the stage is checked.
inline constexpr const char* kLocalView = "weft_cpu_local_view";
// i32 (const ProgramCtx*, i32 site, i32 index): the offset of element `index` of a barrier array; checked.
inline constexpr const char* kBarrierAt = "weft_cpu_barrier_at";
// void (const ProgramCtx*, i32 site, i32 barrier)
inline constexpr const char* kBarrierArrive = "weft_cpu_barrier_arrive";
// void (const ProgramCtx*, i32 site, i32 barrier, i32 bytes)
inline constexpr const char* kBarrierExpectBytes = "weft_cpu_barrier_expect_bytes";
// void (const ProgramCtx*, i32 site, i32 barrier, i32 phase)
inline constexpr const char* kBarrierWait = "weft_cpu_barrier_wait";
// void (const ProgramCtx*, i32 site, i32 id, i32 threads)
inline constexpr const char* kNamedBarrierArrive = "weft_cpu_named_barrier_arrive";
inline constexpr const char* kNamedBarrierWait = "weft_cpu_named_barrier_wait";
// void (const ProgramCtx*, i32 site, const char* a, i32 a_transposed, const char* b, i32 b_transposed,
//       i32 b_panel, i32 M, i32 N, i32 K, i32 types, const float* acc, float* out); types: a's ScalarType
//       | b's << 8 (bf16, f16, f8e4m3, f8e5m2); b_panel: the column
//       panels of b stored [K, N] (0: none); a_transposed 2: a is a tile in registers, copied at issue: queues acc + a @ b (read from
// shared memory when the dot retires) and fills `out` with NaNs that name the queued job.
inline constexpr const char* kAsyncDot = "weft_cpu_async_dot";
// void (const ProgramCtx*, i32 site, i32 pending, const float* value, float* out, i32 count): retires all
// but the `pending` newest dots of the fiber; `out` is `value`, or the result of the job it names.
inline constexpr const char* kAsyncDotWait = "weft_cpu_async_dot_wait";
// void (const ProgramCtx*, i32 site, const TensorDescData* desc, char* smem, i32 barrier, const i32* coords):
// a TMA load; its bytes count toward the barrier now, the data lands when the barrier's phase completes.
inline constexpr const char* kTmaLoad = "weft_cpu_tma_load";
// void (const ProgramCtx*, i32 site, const TensorDescData* desc, char* smem, i32 barrier, i32 mask, const i32* coords):
// a TMA multicast: tma_load into each block of the cluster whose bit is set in `mask`, at the same `smem` offset
// and on the barrier at the same offset there.
inline constexpr const char* kTmaLoadMulticast = "weft_cpu_tma_load_multicast";
// void (const ProgramCtx*, i32 site, const TensorDescData* desc, const char* smem, const i32* coords, i32 reduce):
// a TMA store, performed (reading shared memory) at the async_store_wait that retires it, or when the fiber ends;
// `reduce` (StoreReduce: 0 none, 1 add, 2 min, 3 max) combines each element with global memory's, atomically.
inline constexpr const char* kTmaStore = "weft_cpu_tma_store";
// void (const ProgramCtx*, i32 site, i32 pending)
inline constexpr const char* kTmaStoreWait = "weft_cpu_tma_store_wait";
// void (const ProgramCtx*, i32 site, i32 barrier, i32 rank): an arrival at the barrier at that offset in the
// block of cluster rank `rank`.
inline constexpr const char* kBarrierArriveRemote = "weft_cpu_barrier_arrive_remote";
// char* (const ProgramCtx*, i32 site, const char* address, i32 rank): the same shared-memory address (of the
// calling block's arena) in the block of cluster rank `rank`; the rank is checked.
inline constexpr const char* kSharedAtRank = "weft_cpu_shared_at_rank";
// void (const ProgramCtx*, i32 site, char* dst, const char* src, i32 bytes, i32 barrier, i32 rank):
// async_remote_shmem_copy: `bytes` from `src` into `dst` (addresses of the calling block's arena) at the same
// offset in the block of cluster rank `rank`, completed on the barrier at offset `barrier` there. Like a TMA
// load, the bytes count now; the destination is poison until the phase completes, and `src` is read then.
inline constexpr const char* kBulkCopyRemote = "weft_cpu_bulk_copy_remote";
// void (const ProgramCtx*, i32 site, i32 count, i32 element_bytes, char* const* dst, const char* values,
//       i32 barrier, i32 rank): async_remote_shmem_store: element i of `values` (taken now) to dst[i] (an
//       address of the calling block's arena) at the same offset in the block of cluster rank `rank`, the
//       bytes completed on the barrier at offset `barrier` there; the destinations are poison until then.
inline constexpr const char* kRemoteStore = "weft_cpu_remote_store";
// void (const ProgramCtx*, i32 site): waits until every fiber of every block of the cluster got here.
inline constexpr const char* kClusterSync = "weft_cpu_cluster_sync";
// void (const ProgramCtx*, i32 site, i32 count, i32 element_bytes, char* const* dst, const char* const* src,
//       const uint8_t* mask, const char* fill): an async_load of `count` elements, dst[i] <- *src[i] (or
//       fill[i], or zeros without fill, where mask[i] is 0; mask null: all set). The destinations are
//       poisoned now; the copy joins the fiber's open group and is performed, reading global memory then,
//       at the async_wait_group that retires its group.
inline constexpr const char* kAsyncLoad = "weft_cpu_async_load";
// void (const ProgramCtx*, i32 site): closes the fiber's open group of async_loads.
inline constexpr const char* kAsyncCommitGroup = "weft_cpu_async_commit_group";
// void (const ProgramCtx*, i32 site, i32 pending): performs the fiber's oldest committed groups until at
// most `pending` are left.
inline constexpr const char* kAsyncWaitGroup = "weft_cpu_async_wait_group";
// void (const ProgramCtx*, i32 site, char* dst, const char* src, i32 bytes, i32 barrier): async_load_bulk:
// `bytes` from global `src` into `dst` of this block, completed on the barrier at offset `barrier`; like a
// TMA load, the bytes count now, `dst` is poison until the phase completes, and `src` is read then.
inline constexpr const char* kBulkLoad = "weft_cpu_bulk_load";
// void (const ProgramCtx*, i32 site, char* dst, const char* src, i32 bytes): async_store_bulk: `bytes` from
// `src` in this block's shared memory to global `dst`, performed (reading shared memory then) at the
// async_store_wait that retires it, or when the fiber ends, as a TMA store is.
inline constexpr const char* kBulkStore = "weft_cpu_bulk_store";
// void (const ProgramCtx*, i32 site, i64 element, i32 index, i32 axis, i32 extent, i32 scatter): element
// `element` of a local_gather (scatter 0) or local_scatter (1) has an index outside [0, extent) along `axis`
// of the site's target buffer. Records the error and abandons the block (never returns).
inline constexpr const char* kLocalIndexError = "weft_cpu_local_index_error";
}  // namespace block_fn

// What the runtime needs to know about a kernel's block ops: the shared-memory layout, the tasks, and
// every call site (its source line and what it refers to). Made by the lowering, kept with the code.
struct SharedBufferInfo {
  std::string name;
  int64_t offset = 0;       // bytes into the block's shared memory
  int64_t stage_bytes = 0;
  int32_t stages = 0;
  SourceLoc loc;            // the local_alloc
};

struct BarrierArrayInfo {
  std::string name;
  int64_t offset = 0;       // bytes into the block's shared memory (8 per mbarrier)
  int32_t count = 0;
  int32_t arrive_count = 0;
  SourceLoc loc;            // the alloc_barriers
  bool per_thread = false;  // alloc_warp_barriers: barrier_arrive counts each thread of the arriving fiber
};

struct TaskInfo {
  std::string name;
  int32_t warps = 0;        // per replica; a fiber counts as warps * 32 threads at named barriers
  int32_t replicas = 1;
};

struct BlockSite {
  SourceLoc loc;            // the user's line of the call
  int32_t target = -1;      // LocalView: index into buffers; BarrierAt: index into barriers; else unused
};

struct BlockPlan {
  std::string kernel;
  int64_t shared_bytes = 0;
  std::vector<SharedBufferInfo> buffers;
  std::vector<BarrierArrayInfo> barriers;
  std::vector<TaskInfo> tasks;  // one implicit task without async_tasks
  std::vector<BlockSite> sites;
};

}  // namespace weft::codegen::cpu
