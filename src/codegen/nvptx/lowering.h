// IR -> per-thread LLVM IR for NVPTX: the class that lowers one kernel (private to src/codegen/nvptx/), its
// member functions in one file per section, as Halide splits its simplifier:
//   lower_nvptx.cpp             the entry point, node dispatch, elementwise ops and control flow
//   lower_nvptx_index_math.cpp  32-bit index arithmetic and pointers in instcombine's form
//   lower_nvptx_layouts.cpp     the blocked and wgmma layouts, and tiles moved between layouts
//   lower_nvptx_memory.cpp      the group's scratch, global loads and stores, atomics
//   lower_nvptx_shared.cpp      shared buffers and their views, bulk copies, async_load
//   lower_nvptx_reductions.cpp  reductions
//   lower_nvptx_dot.cpp         dot (wgmma, mma.sync, CUDA cores) and async_dot
//   lower_nvptx_tasks.cpp       groups, mbarriers, TMA, clusters and async_tasks
//
// Layout: a program instance is one block of T = 32 * num_warps threads. A tile of N elements (N and T
// powers of two) is spread over the threads in a blocked layout: thread t holds R = max(1, N / T)
// registers in chunks of V = clamp(N / T, 1, 8) consecutive elements; register r = c * V + j is flat
// element ((c * T + t) * V + j) mod N. A warp's chunk c is one contiguous run of memory when the tile is
// (16-byte accesses per thread), and when N < T threads hold copies. Every tile
// with the same element count has the same layout, so elementwise ops and reshapes need no data
// movement; broadcasts, permutes, reductions and dot exchange data through shared memory. Rank-0 values
// are uniform: every thread holds the same value, so control flow on them never diverges.
//
// Groups: tile operations run on a group of threads — the whole block, or inside async_tasks one task
// replica (its warps, renumbered from 0). A group syncs with bar.sync 0 (the block) or its own named
// barrier (id 15 - replica number) and has its own scratch shared memory for exchanges, after the user's
// allocations (passes/shared_memory_plan.h).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/element_ops.h"
#include "codegen/nvptx/debug_waits.h"
#include "codegen/nvptx/lower_nvptx.h"
#include "codegen/nvptx/ptx_instructions.h"
#include "passes/access_patterns.h"
#include "passes/kernel_plans.h"
#include "passes/shared_memory_plan.h"
#include "passes/task_plan.h"

namespace weft::codegen::nvptx::detail {

// Internal to libweft (cmake/weft.map would export these names otherwise).
#pragma GCC visibility push(hidden)

using ir::NodeRef;
using ir::Op;
using llvm::Value;

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;
constexpr int64_t kMaxSharedBytes = passes::kMaxSharedBytesPerBlock;
constexpr int64_t kScratchAlign = 16;
constexpr int64_t kMaxVector = 8;                // consecutive elements per thread in the blocked layout
constexpr int64_t kMaxAccessBytes = 16;          // the widest global load/store of one thread
constexpr int64_t kNamedBarrierIds = 16;          // bar.sync ids 0-15
constexpr int kStmatrixMinRegisters = 128;        // store_acc_matrices: tasks held to fewer store per pair

// Which element each register of a value holds.
enum class Layout : uint8_t {
  Blocked,  // the blocked layout above
  Acc,      // wgmma's accumulator layout of a [rows, cols] tile on one warp group (see acc_index): what
            // async_dot produces, kept through elementwise ops, column slices, Vars and row broadcasts
  AccRows,  // one value per row of an Acc tile, a [rows] or [rows, 1] tile held where the accumulator
            // holds that row (2 registers per 64 rows, the 4 lanes of a row alike): what a row reduction
            // of an Acc tile gives, and what broadcasts back along the rows without moving data
};

struct Regs {
  std::vector<Value*> v;  // see the layouts above
  bool uniform = false;   // every register holds the same value (fits any layout)
  Layout layout = Layout::Blocked;
  int64_t rows = 0, cols = 0;  // Acc: [rows, cols]; AccRows: rows
  bool in(Layout l) const { return !uniform && layout == l; }
};

inline bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }
inline bool is_descriptor(const ir::Node& param) { return param.type.kind == ir::Type::Kind::TensorDesc; }
inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

inline int64_t numel(const ir::Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

inline std::vector<int64_t> strides(const ir::Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

class Lowering {
 public:
  Lowering(const ir::Function& f, llvm::LLVMContext& c, int num_warps, const ClusterDims& cluster,
           const std::string& symbol, const passes::WaitSites* debug_waits);
  LoweredKernel run();

 private:
  // ---- used by every section -------------------------------------------------------------------------

  int64_t per_thread(int64_t n) const { return std::max<int64_t>(1, n / threads_); }
  int64_t vector_width(int64_t n) const { return std::clamp<int64_t>(n / threads_, 1, kMaxVector); }
  Value* i32c(int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); }
  Regs splat(Value* v, int64_t n) { return {std::vector<Value*>(per_thread(n), v), true}; }
  // A value's registers in the blocked layout (a wgmma-layout operand of this node is converted first).
  const Regs& regs(const NodeRef& n) {
    auto it = converted_.find(n.get());
    return it != converted_.end() ? it->second : regs_.at(n.get());
  }
  // Register r of an operand in the blocked layout, or its only register (a rank-0 value serves every r).
  Value* reg_at(const NodeRef& x, int64_t r) {
    const Regs& x_regs = regs(x);
    return x_regs.v.size() == 1 ? x_regs.v[0] : x_regs.v.at(static_cast<size_t>(r));
  }
  // A value's registers in whatever layout it has (an index tile: as this node's operand).
  const Regs& raw(const NodeRef& n) {
    auto it = regs_.find(n.get());
    return it != regs_.end() ? it->second : converted_.at(n.get());
  }
  bool clustered() const { return cluster_.blocks() > 1; }
  // Whether mbarrier arrivals from other blocks and waits on them must order ordinary (generic-proxy)
  // memory accesses at cluster scope: in a cluster kernel that writes global memory with store() or
  // another block's shared memory with local_store(..., rank), whose data another block may read after
  // waiting. Elsewhere (every write another block sees comes from TMA or bulk copies, which signal the
  // barrier themselves) the arrival is the CTA-scope release CUTLASS uses: ptxas turns a .release.cluster
  // arrival into MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before the arrive, and an .acquire.cluster wait into
  // one more CCTL.IVALL, the cost of a GPU-scope fence on every release of a multicast stage.
  bool cluster_scope_sync() const { return cluster_scope_sync_; }

  // ---- nodes, elementwise ops and control flow (lower_nvptx.cpp) ---------------------------------------

  void region(const ir::Region& r);
  void defer_prologue_tiles();
  void elementwise(const NodeRef& n, const std::function<Value*(size_t r)>& element, Layout layout = Layout::Blocked);
  void node(const NodeRef& n);
  void counted_loop(Value* begin, Value* end, Value* step, const std::function<void(Value*)>& body);
  void for_loop(const NodeRef& n);
  void if_else(const NodeRef& n);
  void while_loop(const NodeRef& n);
  bool packed_var(const ir::Node* var) const;
  std::vector<Value*> var_words(const ir::Node* var, const Regs& value);
  // Vars as SSA values across control flow: which Vars a construct assigns, their words now, phis where
  // paths join or a loop comes back.
  std::vector<const ir::Node*> vars_set_in(const ir::Region& r);
  std::vector<const ir::Node*> vars_set_in_any_region(const ir::Node& n);
  std::vector<std::vector<Value*>> var_values(const std::vector<const ir::Node*>& vars);
  void set_vars(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& values);
  void join_vars(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& a, llvm::BasicBlock* a_end,
                 const std::vector<std::vector<Value*>>& b, llvm::BasicBlock* b_end);
  std::vector<std::vector<Value*>> carried_phis(const std::vector<const ir::Node*>& vars, llvm::BasicBlock* header,
                                                llvm::BasicBlock* pre);
  void feed_back(const std::vector<const ir::Node*>& vars, const std::vector<std::vector<Value*>>& phis,
                 llvm::BasicBlock* latch);

  // ---- index arithmetic (lower_nvptx_index_math.cpp) ---------------------------------------------------

  Value* add_const(Value* x, int64_t c, bool nsw = false);
  Value* disjoint_or(Value* a, Value* b);
  const llvm::APInt& known_zeros(Value* x);
  std::pair<Value*, int64_t> split_offset(Value* v, bool sext_exact = false);
  Value* index_add(Value* a, Value* b, bool subtract);
  Value* index_mul(Value* a, int64_t k);
  Value* linear_index(const std::vector<Value*>& coords, const std::vector<int64_t>& strides);
  Value* binary_element(ir::Op op, DType d, Value* a, Value* b, bool tile);
  bool sext_splits(llvm::BinaryOperator* op);
  Value* pointer_add(llvm::Type* pointee, Value* p, Value* offset);

  // ---- layouts (lower_nvptx_layouts.cpp) ---------------------------------------------------------------

  // What thread_value makes (its `kind`).
  enum ThreadValue : int {
    kLane, kWarp, kTidTimes, kTidTimesNsw, kAccRowBase, kAccColBase, kAccRow, kAccCol, kAccStoreBase, kTidInRegion,
    kAccIndexBase, kBlockedCoordinate
  };
  Value* thread_value(int kind, int64_t arg, const std::function<Value*()>& make);
  Value* lane();
  Value* warp();
  Value* tid_in_region();
  Value* group_start();
  bool group_starts_at_multiple_of(int64_t n);
  Value* flat_index(int64_t n, int64_t r);
  Value* same_value_reg(const NodeRef& x, size_t r);
  struct RunStep {
    int64_t from;   // the register this one is computed from (itself: in full)
    int64_t delta;  // elements past it
  };
  std::vector<RunStep> run_steps(int64_t n, int64_t contiguity);
  Regs pointers_in_runs(const ir::Node& n, const std::function<Value*(int64_t r)>& pointer);
  Value* acc_row(int64_t block, bool lower_half);
  Value* acc_col(int64_t eighth, int64_t e);
  Value* acc_index(int64_t cols, int64_t r);
  Value* index_of(const Regs& r, int64_t n, int64_t k);
  std::optional<std::pair<Value*, int64_t>> index_parts(const Regs& r, int64_t n, int64_t k);
  int64_t register_count(Layout layout, const ir::Shape& shape) const;
  Regs empty_regs(Layout layout, const ir::Shape& shape) const;
  Regs splat_in(Value* v, Layout layout, const ir::Shape& shape) const;
  std::vector<Value*> coordinates(Layout layout, const ir::Shape& shape, int64_t r);
  std::optional<std::vector<Value*>> blocked_coordinates(const ir::Shape& shape, int64_t r);
  Regs relayout(const Regs& src, DType d, const ir::Shape& shape, Layout to, SourceLoc loc);
  Regs exchange(const Regs& src, DType d, int64_t n_src, const ir::Shape& dst,
                const std::function<Value*(const std::vector<Value*>&)>& source_of,
                SourceLoc loc);
  static bool elementwise_op(Op op);
  static bool uniform_node(const ir::Node& n);
  bool index_tile(const ir::Node& n);
  bool index_tile_of(const ir::Node& n);
  bool lazy(const ir::Node& n);
  using ElementRequest = std::pair<const ir::Node*, std::vector<Value*>>;  // a node's element at coordinates
  Value* element_at(const NodeRef& x, const std::vector<Value*>& coords);
  std::vector<ElementRequest> element_reads(const ir::Node& n, const std::vector<Value*>& coords);
  Value* compute_element(const ir::Node& n, const std::vector<Value*>& coords, const std::vector<Value*>& args);
  Regs materialize(const NodeRef& x, Layout layout);
  Layout layout_of(const ir::Node& n);
  std::optional<Layout> layout_or_unknown(const ir::Node& n);
  std::optional<Layout> infer_layout(const ir::Node& n);
  Layout var_layout(const ir::Node* var) const;
  void decide_var_layouts();
  void find_var_layouts(const ir::Region& r, bool& changed);
  std::optional<Layout> operand_layout(const ir::Node& n, size_t i, Layout result);
  Layout prepare_layouts(const NodeRef& n);
  Regs in_var_layout(const NodeRef& x, const ir::Node* var, SourceLoc loc);
  void broadcast(const NodeRef& n);
  void slice(const NodeRef& n);
  void permute(const NodeRef& n);

  // ---- scratch, global loads and stores, atomics (lower_nvptx_memory.cpp); shared views and copies into
  // shared buffers (lower_nvptx_shared.cpp, from shared_address on) ----------------------------------------

  llvm::Type* shared_type(DType d);
  Value* to_shared(DType d, Value* v);
  Value* from_shared(DType d, Value* v);
  Value* scratch_base();
  Value* shared_at(llvm::Type* t, int64_t byte_offset, Value* index);
  Value* scratch_register(llvm::Type* t, int64_t byte_offset, const Regs& r, int64_t n, int64_t k);
  Value* shared_element(llvm::Type* t, Value* byte_offset, Value* index);
  int64_t reserve_shared(int64_t bytes, SourceLoc loc);
  void claim_shared(int64_t bytes, SourceLoc loc);
  void settle_shared();
  void stage(const Regs& src, DType d, int64_t n, int64_t byte_offset);
  Value* guarded(Value* cond, const std::function<Value*()>& body, Value* otherwise);
  // One chunk of V registers accesses memory as whole 16-byte pieces when its pointers are consecutive,
  // the first is aligned and every mask is set; otherwise element by element. What the access-pattern
  // analysis proves (pointers from arange and 16-byte-aligned arguments) is not checked again at run time;
  // the rest is.
  struct Chunk {
    std::vector<Value*> ptrs;
    std::vector<Value*> masks;  // empty: unmasked
    bool one_mask = false;      // proven equal over the chunk (`cols < n`, n a multiple of it): masks[0] says all
    bool consecutive = false;   // ptrs proven consecutive (pointers_in_runs made them one address plus constants)
  };
  int64_t piece_elems(DType d);
  bool global_pointer(Value* p);  // in global memory (address space 1): predicated accesses apply
  bool chunks_proven(const NodeRef& ptrs, DType d, int64_t width);
  bool chunks_consecutive(const NodeRef& ptrs, int64_t width);
  void shifted_chunk(const Chunk& c, DType d, std::vector<Value*>& out, bool may_be_aligned);
  std::vector<Value*> funnel_words(const std::vector<Value*>& w, Value* offset);
  void store_across_lanes(const Chunk& c, DType d, const std::vector<Value*>& words,
                          const std::function<Value*(int64_t)>& value);
  Value* whole_chunk_ok(const Chunk& c, DType d, bool proven);
  void for_each_piece(const Chunk& c, DType d, const std::function<void(Value*, llvm::FixedVectorType*, int64_t)>& f);
  Chunk chunk_of(const std::vector<NodeRef>& o, size_t mask_operand, int64_t first, int64_t width);
  void load(const NodeRef& n);
  void store(const NodeRef& n);
  bool store_from_rows(const ir::Node& n);
  void atomic(const NodeRef& n);
  bool value_used(const ir::Node& n);
  std::vector<Value*> branch_values(Value* cond, int64_t count, const std::function<void(std::vector<Value*>&)>& fast,
                                    const std::function<void(std::vector<Value*>&)>& slow);
  Value* shared_address(Value* offset);
  Value* swizzle(Value* byte, int swizzle_bytes);
  Value* view_element(const NodeRef& view, DType d, Value* flat, Value* base = nullptr);
  struct AccPairOffset {
    int64_t ka = 0, kx = 0, key = 0;  // the register's byte in its stage: (tx ^ kx) + ka (+ the stage's offset)
    Value* tx = nullptr;
    bool disjoint = false;            // kx has no bit of tx: an or
  };
  enum class AccStore : uint8_t { Pairs, Matrices2, Matrices4 };  // st.shared per column pair, stmatrix .x2 / .x4
  std::optional<AccPairOffset> acc_pair_offset(const NodeRef& view, DType d, const Regs& value, int64_t r,
                                               AccStore how = AccStore::Pairs);
  Value* acc_in_stage(const AccPairOffset& at);
  bool store_acc_matrices(const NodeRef& view, DType d, const Regs& value);
  void shared_tile(const NodeRef& view, const NodeRef& n, DType d, int64_t numel, const Regs* value,
                   Value* remote_rank = nullptr);
  void async_load(const NodeRef& n);
  void local_gather_scatter(const NodeRef& n);
  void bulk_copy(const NodeRef& n);
  void remote_store_async(const NodeRef& n);
  void copy_bytes_one_thread(Value* global, Value* shared_offset, int64_t bytes, DType d, bool to_shared);

  // ---- reductions (lower_nvptx_reductions.cpp) ---------------------------------------------------------

  struct Partial {
    Value* value;
    Value* index;  // argmax/argmin only
  };
  Partial combine(Op op, DType d, Partial a, Partial b);
  void reduce_to_scalar(const NodeRef& n);
  bool reduces_to_scalar(const ir::Node& n) const;
  bool has_block_reduction(const ir::Region& r) const;
  void reduce(const NodeRef& n);
  void reduce_acc_rows(const NodeRef& n);
  Partial combine_block_warps(Op op, DType d, Partial p, SourceLoc loc);
  Partial combine_warps(Op op, DType d, Partial p, int64_t group, int64_t at);

  // ---- dot (lower_nvptx_dot.cpp) -----------------------------------------------------------------------

  void dot(const NodeRef& n);
  void dot_wgmma(const NodeRef& n);
  void dot_tensor_cores(const NodeRef& n);
  void dot_cuda_cores(const NodeRef& n);
  Value* wgmma_descriptor(Value* offset, int64_t row_bytes, int64_t panel_bytes = 16);
  Value* wgmma_descriptor_fields(Value* offset, int64_t lbo, int64_t sbo, uint64_t mode);
  Value* wgmma_descriptor_plus(Value* desc, int64_t bytes);
  Value* descriptor_words(Value* low, Value* high);
  Value* pack_pair(DType d, Value* lo, Value* hi);
  void async_dot(const NodeRef& n);

  // ---- groups, mbarriers, TMA, clusters and tasks (lower_nvptx_tasks.cpp) ------------------------------

  void sync_group();
  void plan_warp_arrivals();
  void init_barriers();
  static bool uses_named_barriers(const ir::Region& r);
  static bool writes_outside_block_shared_memory(const ir::Region& r);
  Value* debug_named_barrier(Value* id);
  void once_per_group(const std::function<void()>& body, bool same_thread = false);
  Value* one_thread_of_group(bool same_thread = false);  // i1: this thread performs what its group does once
  Value* l2_policy(const ir::Node& n);  // a TMA op's L2 eviction policy, or null without a hint
  void hopper_node(const NodeRef& n);
  void thread_identity_and_time(const NodeRef& n);
  void barrier_wait(Value* bar, Value* parity);
  void async_tasks(const NodeRef& n);

  const ir::Function& f_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  ElementOps ops_;
  PtxInstructions ptx_;
  passes::AccessPatterns patterns_;
  std::shared_ptr<const passes::KernelPlans> plans_;  // made after tracing (passes/kernel_plans.h)
  passes::TaskPlan tasks_;
  const passes::SharedMemoryPlan& allocations_;  // plans_->memory
  int64_t threads_;  // of the current group
  const passes::WaitSites* wait_sites_;        // debug mode only
  std::unique_ptr<DebugWaits> debug_waits_;    // debug mode only
  // Debug mode, when the kernel uses named barriers: i32 constant, the byte offset of their counters in
  // shared memory (kNamedBarrierIds i64s after everything else; set in run()).
  llvm::GlobalVariable* debug_named_base_ = nullptr;
  ClusterDims cluster_;  // blocks per cluster (1, 1, 1: no clusters)
  bool cluster_scope_sync_ = false;   // see cluster_scope_sync()
  std::unique_ptr<llvm::Module> mod_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  bool has_barriers_ = false;         // the kernel allocates mbarriers
  std::unordered_map<const ir::Node*, int64_t> warp_arrivals_;  // barrier arrays each warp arrives at: warps per group
  Value* tid_ = nullptr;
  Value* block_tid_ = nullptr;        // %tid.x
  Value* group_barrier_ = nullptr;    // the group's named barrier id (i32); null: the whole block (bar.sync 0)
  Value* replica_ = nullptr;          // task_replica_id inside a task
  Value* scratch_ = nullptr;          // byte offset of the group's scratch in shared memory (i32)
  int64_t scratch_start_ = 0;         // where scratch begins: after the user's allocations
  int64_t scratch_bytes_ = 0;         // the most scratch the current group (so far) needs
  // Each task's scratch: its replicas' areas follow the block's own, sized by what that task exchanges
  // (a task that exchanges nothing takes none). Offsets are known once every task is lowered (run()).
  struct TaskScratch {
    const passes::TaskSlot* slot = nullptr;
    int64_t bytes = 0;                        // per replica
    llvm::GlobalVariable* base = nullptr;     // i32 constants, set in run()
    llvm::GlobalVariable* stride = nullptr;
  };
  std::vector<TaskScratch> task_scratch_;
  Value* scratch_turn_ = nullptr;    // i32 slot: the buffer (0, 1) the next whole-group reduction writes
  bool partials_unsettled_ = false;  // threads may still read the last partials (no barrier since)
  int task_registers_ = 0;           // the setmaxnreg budget of the task being lowered (0: none set)
  bool one_warp_ = false;            // the task being lowered runs on its first warp alone (TaskSlot::one_thread)
  std::unordered_map<const ir::Node*, Regs> regs_;
  std::unordered_map<const ir::Node*, Regs> converted_;  // this node's operands, converted to blocked
  std::unordered_map<const ir::Node*, Layout> var_layouts_;  // Vars not in the blocked layout
  std::unordered_map<const ir::Node*, std::optional<Layout>> layout_memo_;  // layout_or_unknown
  bool deciding_vars_ = false;  // decide_var_layouts is running: undecided Vars are unknown
  std::unordered_map<const ir::Node*, bool> index_memo_, lazy_memo_;
  std::map<std::pair<const ir::Node*, std::vector<Value*>>, Value*> element_memo_;  // within one materialize
  std::unordered_set<const ir::Node*> deferred_;  // prologue tiles, lowered in each task (defer_prologue_tiles)
  std::vector<NodeRef> deferred_order_;
  std::unordered_map<const ir::Node*, std::vector<Value*>> vars_;  // each Var's current words (SSA values)
  std::unordered_map<Value*, std::pair<Value*, bool>> unpacked_halves_;  // value -> (its packed word, high half)
  // A wgmma descriptor's words: low = address field + constant (the fields above it, steps), high.
  struct DescriptorParts {
    Value* address;
    int64_t constant;
    Value* high;
  };
  std::unordered_map<Value*, DescriptorParts> descriptor_parts_;
  // thread_value's memo: (block, tid_, kind, argument) -> value.
  std::map<std::tuple<llvm::BasicBlock*, Value*, int, int64_t>, Value*> thread_values_;
  std::map<std::tuple<llvm::BasicBlock*, Value*, Value*, bool>, Value*> index_sums_;  // index_add's x + y
  std::map<std::tuple<llvm::BasicBlock*, Value*, int64_t>, Value*> index_products_;   // index_mul's x k
  std::unordered_map<Value*, llvm::APInt> known_zeros_;                                  // known_zeros' memo
  // tid_in_region's memo for the region being lowered (tid_ -> value), and the block its current
  // statement began in.
  std::map<Value*, Value*> region_tids_;
  llvm::BasicBlock* statement_block_ = nullptr;
  Value* loop_condition_ = nullptr;  // the test of the while loop being lowered (its region 0's last statement)
  std::optional<std::unordered_set<const ir::Node*>> used_values_;  // value_used's memo
};

#pragma GCC visibility pop

}  // namespace weft::codegen::nvptx::detail
