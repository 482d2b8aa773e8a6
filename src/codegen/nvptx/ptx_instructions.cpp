#include "codegen/nvptx/ptx_instructions.h"

#include <fmt/format.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <string>
#include <utility>
#include <vector>

#include "weft/error.h"

namespace weft::codegen::nvptx {

using llvm::Intrinsic::ID;

static llvm::Value* read_special(llvm::IRBuilder<>& b, ID id) { return b.CreateIntrinsic(b.getInt32Ty(), id, {}); }

// With its range (a block has at most 1024 threads) from the start, so that the lowering's known-bits questions
// (sext_splits) see thread indices as small and non-negative before nvvm-intr-range runs.
llvm::Value* PtxInstructions::thread_index() {
  auto* tid = llvm::cast<llvm::CallInst>(read_special(b_, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x));
  tid->addRetAttr(llvm::Attribute::get(b_.getContext(), llvm::Attribute::Range,
                                       llvm::ConstantRange(llvm::APInt(32, 0), llvm::APInt(32, 1024))));
  return tid;
}

llvm::Value* PtxInstructions::block_index(int axis) {
  static const ID ids[3] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                            llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
  return read_special(b_, ids[axis]);
}

llvm::Value* PtxInstructions::grid_size(int axis) {
  static const ID ids[3] = {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                            llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
  return read_special(b_, ids[axis]);
}

llvm::CallInst* PtxInstructions::barrier() {
  return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
}

llvm::CallInst* PtxInstructions::barrier(llvm::Value* id, llvm::Value* threads) {
  return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count, {}, {id, threads});
}

void PtxInstructions::barrier_arrive(llvm::Value* id, llvm::Value* threads) {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_arrive_aligned_count, {}, {id, threads});
}

void PtxInstructions::warp_sync() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_bar_warp_sync, {}, {b_.getInt32(0xffffffffu)});
}

void PtxInstructions::set_max_registers(bool increase, int regs) {
  b_.CreateIntrinsic(increase ? llvm::Intrinsic::nvvm_setmaxnreg_inc_sync_aligned_u32
                              : llvm::Intrinsic::nvvm_setmaxnreg_dec_sync_aligned_u32,
                     {}, {b_.getInt32(static_cast<uint32_t>(regs))});
}

// Inline PTX with side effects (barrier state changes must not be moved or merged).
static llvm::Value* asm_call(llvm::IRBuilder<>& b, llvm::Type* result, const std::string& text, const std::string& constraints,
                             std::vector<llvm::Value*> args) {
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) types.push_back(a->getType());
  auto* type = llvm::FunctionType::get(result, types, false);
  return b.CreateCall(llvm::InlineAsm::get(type, text, constraints, /*hasSideEffects=*/true), args);
}

llvm::Value* PtxInstructions::thread_index_in_place() {
  return asm_call(b_, b_.getInt32Ty(), "mov.u32 $0, %tid.x;", "=r", {});
}

llvm::Value* PtxInstructions::elect_one() {
  llvm::Value* elected = asm_call(b_, b_.getInt32Ty(),
                                  "{ .reg .pred p; elect.sync _|p, 0xffffffff; selp.u32 $0, 1, 0, p; }", "=r", {});
  return b_.CreateICmpNE(elected, b_.getInt32(0));
}

llvm::Value* PtxInstructions::from_lane_zero(llvm::Value* v) {
  return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_idx_i32, {},
                            {b_.getInt32(0xffffffffu), v, b_.getInt32(0), b_.getInt32(0x1f)});
}

void PtxInstructions::mbarrier_init(llvm::Value* bar, int arrivals) {
  asm_call(b_, b_.getVoidTy(), "mbarrier.init.shared::cta.b64 [$0], $1;", "r,n,~{memory}", {bar, b_.getInt32(arrivals)});
}

void PtxInstructions::fence_mbarrier_init() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_fence_mbarrier_init_release_cluster, llvm::ArrayRef<llvm::Type*>{},
                     llvm::ArrayRef<llvm::Value*>{});
}

void PtxInstructions::mbarrier_arrive(llvm::Value* bar) {
  asm_call(b_, b_.getVoidTy(), "{ .reg .b64 state; mbarrier.arrive.shared::cta.b64 state, [$0]; }", "r,~{memory}", {bar});
}

void PtxInstructions::mbarrier_arrive_expect_tx(llvm::Value* bar, llvm::Value* bytes) {
  asm_call(b_, b_.getVoidTy(), "{ .reg .b64 state; mbarrier.arrive.expect_tx.shared::cta.b64 state, [$0], $1; }",
           "r,r,~{memory}", {bar, bytes});
}

llvm::Value* PtxInstructions::mbarrier_try_wait_parity(llvm::Value* bar, llvm::Value* parity, bool cluster_scope) {
  std::string scope = cluster_scope ? ".acquire.cluster" : "";
  llvm::Value* done = asm_call(b_, b_.getInt32Ty(),
                               "{ .reg .pred p; mbarrier.try_wait.parity" + scope +
                                   ".shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }",
                               "=r,r,r,~{memory}", {bar, parity});
  return b_.CreateICmpNE(done, b_.getInt32(0));
}

llvm::Value* PtxInstructions::global_timer() {
  return b_.CreateIntrinsic(b_.getInt64Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_globaltimer, {});
}

llvm::Value* PtxInstructions::clock64() {
  return b_.CreateIntrinsic(b_.getInt64Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_clock64, {});
}

void PtxInstructions::nanosleep(llvm::Value* ns) {
  asm_call(b_, b_.getVoidTy(), "nanosleep.u32 $0;", "r,~{memory}", {ns});
}

// The register class of a 16-, 32- or 64-bit value as an integer of that width ("h", "r", "l"), or nothing.
static const char* int_constraint(unsigned bits) { return bits == 16 ? "h" : bits == 32 ? "r" : bits == 64 ? "l" : nullptr; }

// `instruction` executed where operand $k (a 32-bit integer) is not zero, through a predicate of its own.
static std::string predicated(int k, const std::string& instruction) {
  return fmt::format("{{ .reg .pred p; setp.ne.u32 p, ${}, 0; @p {}; }}", k, instruction);
}

llvm::Value* PtxInstructions::load_global_if(llvm::Value* pred, llvm::Type* type, llvm::Value* ptr) {
  unsigned bits = type->getPrimitiveSizeInBits();
  const char* c = int_constraint(bits);
  if (!c) return nullptr;
  llvm::Type* as_int = b_.getIntNTy(bits);
  llvm::Value* v = asm_call(b_, as_int,
                            predicated(1, fmt::format("ld.global.b{} $0, [$2]", bits)),
                            fmt::format("={},r,l,~{{memory}}", c), {b_.CreateZExt(pred, b_.getInt32Ty()), ptr});
  return type == as_int ? v : b_.CreateBitCast(v, type);
}

bool PtxInstructions::store_global_if(llvm::Value* pred, llvm::Value* value, llvm::Value* ptr) {
  unsigned bits = value->getType()->getPrimitiveSizeInBits();
  const char* c = int_constraint(bits);
  if (!c) return false;
  llvm::Value* as_int = value->getType()->isIntegerTy() ? value : b_.CreateBitCast(value, b_.getIntNTy(bits));
  asm_call(b_, b_.getVoidTy(),
           predicated(0, fmt::format("st.global.b{} [$1], $2", bits)),
           fmt::format("r,l,{},~{{memory}}", c), {b_.CreateZExt(pred, b_.getInt32Ty()), ptr, as_int});
  return true;
}

void PtxInstructions::store_global_block_if(llvm::Value* pred, const std::vector<llvm::Value*>& words, llvm::Value* ptr) {
  asm_call(b_, b_.getVoidTy(), predicated(0, "st.global.v4.b32 [$1], {$2, $3, $4, $5}"), "r,l,r,r,r,r,~{memory}",
           {b_.CreateZExt(pred, b_.getInt32Ty()), ptr, words[0], words[1], words[2], words[3]});
}

llvm::Value* PtxInstructions::vote_ballot(llvm::Value* pred) {
  return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_vote_ballot_sync, {}, {b_.getInt32(0xffffffffu), pred});
}

// The inline-asm constraint of a value of type t: .f32, .f64, .b64, .b16 or .b32 registers.
static const char* register_class(llvm::Type* t) {
  return t->isFloatTy() ? "f" : t->isDoubleTy() ? "d" : t->isIntegerTy(64) ? "l" : t->isIntegerTy(16) ? "h" : "r";
}

llvm::Value* PtxInstructions::atom(const char* op, const char* type, const char* order, const char* scope,
                                   llvm::Value* address, llvm::Value* value, llvm::Value* compare) {
  llvm::Type* t = value->getType();
  const char* reg = register_class(t);
  std::string text = std::string("atom.") + order + "." + scope + ".global." + op + "." + type + " $0, [$1], $2";
  std::string constraints = std::string("=") + reg + ",l," + reg;
  std::vector<llvm::Value*> args{b_.CreatePtrToInt(address, b_.getInt64Ty())};
  if (compare) {
    text += ", $3";
    constraints += std::string(",") + reg;
    args.push_back(compare);
  }
  args.push_back(value);
  return asm_call(b_, t, text + ";", constraints + ",~{memory}", args);
}

void PtxInstructions::red(const char* op, const char* type, const char* order, const char* scope,
                          llvm::Value* address, llvm::Value* value) {
  llvm::Type* t = value->getType();
  const char* reg = register_class(t);
  std::string text = std::string("red.") + order + "." + scope + ".global." + op + "." + type + " [$0], $1;";
  asm_call(b_, b_.getVoidTy(), text, std::string("l,") + reg + ",~{memory}",
           {b_.CreatePtrToInt(address, b_.getInt64Ty()), value});
}

void PtxInstructions::griddepcontrol_wait() { asm_call(b_, b_.getVoidTy(), "griddepcontrol.wait;", "~{memory}", {}); }

void PtxInstructions::griddepcontrol_launch_dependents() {
  asm_call(b_, b_.getVoidTy(), "griddepcontrol.launch_dependents;", "~{memory}", {});
}

void PtxInstructions::fence_acq_rel(const char* scope) {
  asm_call(b_, b_.getVoidTy(), std::string("fence.acq_rel.") + scope + ";", "~{memory}", {});
}

void PtxInstructions::fence_system() { asm_call(b_, b_.getVoidTy(), "fence.sc.sys;", "~{memory}", {}); }

void PtxInstructions::trap() { asm_call(b_, b_.getVoidTy(), "trap;", "~{memory}", {}); }

void PtxInstructions::exit_thread() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_exit, llvm::ArrayRef<llvm::Type*>{}, llvm::ArrayRef<llvm::Value*>{});
}

static std::string coordinate_list(size_t first, size_t count) {
  std::string s;
  for (size_t i = 0; i < count; ++i) s += (i ? ", $" : "$") + std::to_string(first + i);
  return s;
}

// An L2 cache policy as the copy's last operand: ".L2::cache_hint" for its text, ", $n" and an "l" operand.
static void add_policy(llvm::Value* policy, std::string& qualifiers, std::string& tail, std::string& constraints,
                       std::vector<llvm::Value*>& args) {
  if (!policy) return;
  qualifiers += ".L2::cache_hint";
  tail += ", $" + std::to_string(args.size());
  constraints += ",l";
  args.push_back(policy);
}

void PtxInstructions::tma_load(llvm::Value* smem, llvm::Value* desc, const std::vector<llvm::Value*>& coords,
                               llvm::Value* bar, llvm::Value* policy) {
  size_t rank = coords.size();
  std::vector<llvm::Value*> args{smem, desc, bar};
  args.insert(args.end(), coords.begin(), coords.end());
  std::string constraints = "r,l,r";
  for (size_t i = 0; i < rank; ++i) constraints += ",r";
  std::string hint, tail;
  add_policy(policy, hint, tail, constraints, args);
  std::string text = "cp.async.bulk.tensor." + std::to_string(rank) +
                     "d.shared::cluster.global.mbarrier::complete_tx::bytes" + hint + " [$0], [$1, {" +
                     coordinate_list(3, rank) + "}], [$2]" + tail + ";";
  asm_call(b_, b_.getVoidTy(), text, constraints + ",~{memory}", args);
}

void PtxInstructions::tma_prefetch(llvm::Value* desc, const std::vector<llvm::Value*>& coords, llvm::Value* policy) {
  size_t rank = coords.size();
  std::vector<llvm::Value*> args{desc};
  args.insert(args.end(), coords.begin(), coords.end());
  std::string constraints = "l";
  for (size_t i = 0; i < rank; ++i) constraints += ",r";
  std::string hint, tail;
  add_policy(policy, hint, tail, constraints, args);
  std::string text = "cp.async.bulk.prefetch.tensor." + std::to_string(rank) + "d.L2.global.tile" + hint + " [$0, {" +
                     coordinate_list(1, rank) + "}]" + tail + ";";
  asm_call(b_, b_.getVoidTy(), text, constraints + ",~{memory}", args);
}

void PtxInstructions::prefetch_tensormap(llvm::Value* desc) {
  asm_call(b_, b_.getVoidTy(), "prefetch.tensormap [$0];", "l,~{memory}", {desc});
}

llvm::Value* PtxInstructions::l2_eviction_policy(int evict) {
  static const char* const priority[] = {"", "evict_first", "evict_last", "evict_normal", "evict_unchanged"};
  std::string text = std::string("createpolicy.fractional.L2::") + priority[evict] + ".b64 $0, 1.0;";
  auto* type = llvm::FunctionType::get(b_.getInt64Ty(), {}, false);
  return b_.CreateCall(llvm::InlineAsm::get(type, text, "=l", /*hasSideEffects=*/false), {});
}

void PtxInstructions::bulk_copy_to_cluster(llvm::Value* dst, llvm::Value* src, llvm::Value* bytes, llvm::Value* bar) {
  asm_call(b_, b_.getVoidTy(),
           "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
           "r,r,r,r,~{memory}", {dst, src, bytes, bar});
}

void PtxInstructions::bulk_load(llvm::Value* smem, llvm::Value* global, llvm::Value* bytes, llvm::Value* bar) {
  asm_call(b_, b_.getVoidTy(), "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
           "r,l,r,r,~{memory}", {smem, b_.CreatePtrToInt(global, b_.getInt64Ty()), bytes, bar});
}

void PtxInstructions::bulk_store(llvm::Value* global, llvm::Value* smem, llvm::Value* bytes) {
  asm_call(b_, b_.getVoidTy(), "cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], $2;", "l,r,r,~{memory}",
           {b_.CreatePtrToInt(global, b_.getInt64Ty()), smem, bytes});
}

void PtxInstructions::store_matrices(llvm::Value* smem, int64_t offset, const std::vector<llvm::Value*>& words) {
  std::string text = fmt::format("stmatrix.sync.aligned.m8n8.x{}.shared.b16 [$0{}], {{", words.size(),
                                 offset ? fmt::format("+{}", offset) : "");
  std::string constraints = "r";
  std::vector<llvm::Value*> args{smem};
  for (size_t i = 0; i < words.size(); ++i) {
    text += fmt::format("{}${}", i ? ", " : "", i + 1);
    constraints += ",r";
    args.push_back(words[i]);
  }
  asm_call(b_, b_.getVoidTy(), text + "};", constraints + ",~{memory}", args);
}

void PtxInstructions::mbarrier_complete_tx(llvm::Value* bar, llvm::Value* bytes) {
  asm_call(b_, b_.getVoidTy(), "mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
           {bar, bytes});
}

void PtxInstructions::tma_load_multicast(llvm::Value* smem, llvm::Value* desc, const std::vector<llvm::Value*>& coords,
                                         llvm::Value* bar, llvm::Value* mask, llvm::Value* policy) {
  size_t rank = coords.size();
  std::vector<llvm::Value*> args{smem, desc, bar, mask};
  args.insert(args.end(), coords.begin(), coords.end());
  std::string constraints = "r,l,r,h";  // ctaMask is a 16-bit register
  for (size_t i = 0; i < rank; ++i) constraints += ",r";
  std::string hint, tail;
  add_policy(policy, hint, tail, constraints, args);
  std::string text = "cp.async.bulk.tensor." + std::to_string(rank) +
                     "d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster" + hint + " [$0], [$1, {" +
                     coordinate_list(4, rank) + "}], [$2], $3" + tail + ";";
  asm_call(b_, b_.getVoidTy(), text, constraints + ",~{memory}", args);
}

llvm::Value* PtxInstructions::cluster_cta_rank() {
  return read_special(b_, llvm::Intrinsic::nvvm_read_ptx_sreg_cluster_ctarank);
}

void PtxInstructions::cluster_sync() {
  // Not .aligned: correct whatever the warps' convergence, at no cost that matters for a cluster-wide sync.
  asm_call(b_, b_.getVoidTy(), "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;", "~{memory}", {});
}

llvm::Value* PtxInstructions::map_shared_to_rank(llvm::Value* addr, llvm::Value* rank) {
  return asm_call(b_, b_.getInt32Ty(), "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", {addr, rank});
}

llvm::Value* PtxInstructions::map_shared_pointer_to_rank(llvm::Value* pointer, llvm::Value* rank) {
  return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mapa_shared_cluster, {}, {pointer, rank});
}

void PtxInstructions::st_async(llvm::Value* addr, llvm::Value* value, llvm::Value* bar) {
  bool wide = value->getType()->isIntegerTy(64);
  asm_call(b_, b_.getVoidTy(),
           std::string("st.async.shared::cluster.mbarrier::complete_tx::bytes.") + (wide ? "b64" : "b32") +
               " [$0], $1, [$2];",
           std::string("r,") + register_class(value->getType()) + ",r,~{memory}", {addr, value, bar});
}

void PtxInstructions::fence_proxy_async_shared_cluster() {
  asm_call(b_, b_.getVoidTy(), "fence.proxy.async.shared::cluster;", "~{memory}", {});
}

void PtxInstructions::mbarrier_arrive_cluster(llvm::Value* bar, bool cluster_scope) {
  std::string sem = cluster_scope ? ".release.cluster" : "";
  asm_call(b_, b_.getVoidTy(), "mbarrier.arrive" + sem + ".shared::cluster.b64 _, [$0];", "r,~{memory}", {bar});
}

void PtxInstructions::tma_store(llvm::Value* desc, const std::vector<llvm::Value*>& coords, llvm::Value* smem,
                                llvm::Value* policy, const char* reduction) {
  size_t rank = coords.size();
  std::vector<llvm::Value*> args{desc, smem};
  args.insert(args.end(), coords.begin(), coords.end());
  std::string constraints = "l,r";
  for (size_t i = 0; i < rank; ++i) constraints += ",r";
  std::string hint, tail;
  add_policy(policy, hint, tail, constraints, args);
  std::string opcode = reduction ? "cp.reduce.async.bulk.tensor." + std::to_string(rank) + "d.global.shared::cta." +
                                       reduction + ".tile.bulk_group"
                                 : "cp.async.bulk.tensor." + std::to_string(rank) + "d.global.shared::cta.bulk_group";
  std::string text = opcode + hint + " [$0, {" + coordinate_list(2, rank) + "}], [$1]" + tail + ";";
  asm_call(b_, b_.getVoidTy(), text, constraints + ",~{memory}", args);
}

void PtxInstructions::bulk_commit_group() {
  asm_call(b_, b_.getVoidTy(), "cp.async.bulk.commit_group;", "~{memory}", {});
}

void PtxInstructions::bulk_wait_group_read(int pending) {
  asm_call(b_, b_.getVoidTy(), "cp.async.bulk.wait_group.read " + std::to_string(pending) + ";", "~{memory}", {});
}

void PtxInstructions::fence_proxy_async_shared() {
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_fence_proxy_async_shared_cta, llvm::ArrayRef<llvm::Type*>{},
                     llvm::ArrayRef<llvm::Value*>{});
}

void PtxInstructions::cp_async(llvm::Value* smem, llvm::Value* global, int bytes, llvm::Value* src_bytes,
                               llvm::Value* policy) {
  std::string hint = policy ? ".L2::cache_hint" : "", tail = policy ? ", $3;" : ";";
  std::string text = bytes == 16 ? "cp.async.cg.shared.global" + hint + " [$0], [$1], 16, $2" + tail
                                 : "cp.async.ca.shared.global" + hint + " [$0], [$1], " + std::to_string(bytes) + ", $2" + tail;
  std::vector<llvm::Value*> args{smem, global, src_bytes};
  if (policy) args.push_back(policy);
  asm_call(b_, b_.getVoidTy(), text, policy ? "r,l,r,l,~{memory}" : "r,l,r,~{memory}", args);
}

void PtxInstructions::cp_async_commit_group() { asm_call(b_, b_.getVoidTy(), "cp.async.commit_group;", "~{memory}", {}); }

void PtxInstructions::cp_async_wait_group(int pending) {
  asm_call(b_, b_.getVoidTy(), "cp.async.wait_group " + std::to_string(pending) + ";", "~{memory}", {});
}

static std::string float_outputs(size_t k);
static std::string tied_inputs(size_t k);

void PtxInstructions::wgmma_fence() { asm_call(b_, b_.getVoidTy(), "wgmma.fence.sync.aligned;", "~{memory}", {}); }

void PtxInstructions::wgmma_commit_group() {
  auto* commit = llvm::cast<llvm::CallInst>(asm_call(b_, b_.getVoidTy(), "wgmma.commit_group.sync.aligned;", "~{memory}", {}));
  last_commit_ = last_chain_ ? commit : nullptr;
}

// Whether `registers` are the results of `chain` in order, and the builder sits right after the chain, its
// results' extractvalues and `commit`, in the same block: then nothing can read or write them in between.
static bool chain_then_commit(llvm::IRBuilder<>& b, llvm::CallInst* chain, llvm::CallInst* commit,
                              const std::vector<llvm::Value*>& registers) {
  if (!chain || !commit || b.GetInsertBlock() != chain->getParent() || b.GetInsertPoint() != b.GetInsertBlock()->end())
    return false;
  if (registers.size() != llvm::cast<llvm::StructType>(chain->getType())->getNumElements()) return false;
  for (size_t i = 0; i < registers.size(); ++i) {
    auto* e = llvm::dyn_cast<llvm::ExtractValueInst>(registers[i]);
    if (!e || e->getAggregateOperand() != chain || e->getIndices()[0] != i) return false;
  }
  for (llvm::Instruction* i = chain->getNextNode(); i; i = i->getNextNode()) {
    auto* e = llvm::dyn_cast<llvm::ExtractValueInst>(i);
    if (i != commit && !(e && e->getAggregateOperand() == chain)) return false;
  }
  return true;
}

std::vector<llvm::Value*> PtxInstructions::wgmma_wait_group(int pending, const std::vector<llvm::Value*>& registers) {
  std::string text = "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";";
  llvm::CallInst* chain = std::exchange(last_chain_, nullptr);
  llvm::CallInst* commit = std::exchange(last_commit_, nullptr);
  if (!registers.empty() && chain_then_commit(b_, chain, commit, registers)) {
    auto* old = llvm::cast<llvm::InlineAsm>(chain->getCalledOperand());
    auto* joined = llvm::InlineAsm::get(old->getFunctionType(),
                                        old->getAsmString().str() + "\n\twgmma.commit_group.sync.aligned;\n\t" + text,
                                        old->getConstraintString(), /*hasSideEffects=*/true);
    chain->setCalledOperand(joined);
    commit->eraseFromParent();
    return registers;
  }
  if (registers.empty()) {
    asm_call(b_, b_.getVoidTy(), text, "~{memory}", {});
    return {};
  }
  std::vector<llvm::Type*> types;
  for (llvm::Value* v : registers) types.push_back(v->getType());
  auto* result = llvm::StructType::get(b_.getContext(), types);
  llvm::Value* d = asm_call(b_, result, text, float_outputs(registers.size()) + tied_inputs(registers.size()) + ",~{memory}",
                            registers);
  std::vector<llvm::Value*> out;
  for (size_t i = 0; i < registers.size(); ++i) out.push_back(b_.CreateExtractValue(d, static_cast<unsigned>(i)));
  return out;
}

// "=f,...,=f" for `k` f32 outputs, and ",0,...,k-1": inputs tied to them (LLVM's form of "+f").
static std::string float_outputs(size_t k) {
  std::string c;
  for (size_t i = 0; i < k; ++i) c += (i ? ",=f" : "=f");
  return c;
}
static std::string tied_inputs(size_t k) {
  std::string c;
  for (size_t i = 0; i < k; ++i) c += "," + std::to_string(i);
  return c;
}

static const char* wgmma_type_name(ScalarType s) {
  switch (s) {
    case ScalarType::bf16: return "bf16";
    case ScalarType::f16: return "f16";
    case ScalarType::f8e4m3: return "e4m3";
    case ScalarType::f8e5m2: return "e5m2";
    default: throw InternalError("wgmma: operand type " + DType{s, false}.str());
  }
}

std::vector<llvm::Value*> PtxInstructions::wgmma(WgmmaTypes types, int n, const std::vector<WgmmaStep>& steps,
                                                 const std::vector<llvm::Value*>& acc, bool trans_a, bool trans_b) {
  size_t k = acc.size();  // n / 2 registers
  std::vector<llvm::Value*> args;
  std::string constraints = float_outputs(k);
  auto operand = [&](llvm::Value* v, const char* constraint) {
    args.push_back(v);
    constraints += std::string(",") + constraint;
    return "$" + std::to_string(k + args.size() - 1);
  };
  std::string outs;
  for (size_t i = 0; i < k; ++i) outs += (i ? ",$" : "$") + std::to_string(i);
  if (types.fp8() && (trans_a || trans_b)) throw InternalError("wgmma: fp8 operands have no transposed form");
  const std::string type = std::string(wgmma_type_name(types.a)) + "." + wgmma_type_name(types.b);
  std::string scale_d[2];  // the operand holding 0 or 1, for the steps' setp: one register each, shared
  std::string text;
  for (const WgmmaStep& s : steps) {
    bool a_registers = s.a.size() == 4;
    if (a_registers && trans_a) throw InternalError("wgmma: A from registers has no transposed form");
    std::string a_text = a_registers ? "{" + operand(s.a[0], "r") + ", " + operand(s.a[1], "r") + ", " +
                                           operand(s.a[2], "r") + ", " + operand(s.a[3], "r") + "}"
                                     : operand(s.a.at(0), "l");
    std::string b_text = operand(s.b_desc, "l");
    std::string& flag = scale_d[s.accumulate];
    if (flag.empty()) flag = operand(b_.getInt32(s.accumulate ? 1 : 0), "r");
    // Operands: A, b_desc, then scale-d as the predicate p, imm-scale-a, imm-scale-b; for 16-bit types
    // imm-trans-a (only with A in shared memory) and imm-trans-b.
    std::string transposes = types.fp8() ? ""
                                         : std::string(", ") + (a_registers ? "" : trans_a ? "1, " : "0, ") +
                                               (trans_b ? "1" : "0");
    text += (text.empty() ? "" : "\n\t") + std::string("{ .reg .pred p; setp.ne.b32 p, ") + flag +
            ", 0; wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k" + std::to_string(types.k()) + ".f32." +
            type + " {" + outs + "}, " + a_text + ", " + b_text + ", p, 1, 1" + transposes + "; }";
  }
  if (!steps.empty() && steps.front().accumulate) {
    constraints += tied_inputs(k);
    args.insert(args.end(), acc.begin(), acc.end());
  }  // else not read: the registers are outputs only
  auto* result = llvm::StructType::get(b_.getContext(), std::vector<llvm::Type*>(k, b_.getFloatTy()));
  llvm::Value* d = asm_call(b_, result, text, constraints + ",~{memory}", args);
  last_chain_ = llvm::cast<llvm::CallInst>(d);
  last_commit_ = nullptr;
  std::vector<llvm::Value*> out;
  for (size_t i = 0; i < k; ++i) out.push_back(b_.CreateExtractValue(d, static_cast<unsigned>(i)));
  return out;
}

llvm::Value* PtxInstructions::shuffle(llvm::Value* v, const std::function<llvm::Value*(llvm::Value*)>& shuffle32) {
  llvm::Type* t = v->getType();
  unsigned bits = t->getPrimitiveSizeInBits();
  if (bits == 64) {
    llvm::Value* u = b_.CreateBitCast(v, b_.getInt64Ty());
    llvm::Value* lo = shuffle32(b_.CreateTrunc(u, b_.getInt32Ty()));
    llvm::Value* hi = shuffle32(b_.CreateTrunc(b_.CreateLShr(u, 32), b_.getInt32Ty()));
    llvm::Value* joined = b_.CreateOr(b_.CreateZExt(lo, b_.getInt64Ty()), b_.CreateShl(b_.CreateZExt(hi, b_.getInt64Ty()), 32));
    return b_.CreateBitCast(joined, t);
  }
  llvm::Value* as32 = t->isIntegerTy() ? b_.CreateSExtOrTrunc(v, b_.getInt32Ty()) : b_.CreateBitCast(v, b_.getInt32Ty());
  llvm::Value* moved = shuffle32(as32);
  return t->isIntegerTy() ? b_.CreateTrunc(moved, t) : b_.CreateBitCast(moved, t);
}

llvm::Value* PtxInstructions::shuffle_xor(llvm::Value* v, int64_t lane_mask) {
  return shuffle(v, [&](llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                              {b_.getInt32(0xffffffffu), x, b_.getInt32(static_cast<uint32_t>(lane_mask)), b_.getInt32(0x1f)});
  });
}

// (The c operand: 0 for up, which keeps lane 0's own value; 0x1f for down, which keeps lane 31's.)
llvm::Value* PtxInstructions::shuffle_up(llvm::Value* v, int64_t delta) {
  return shuffle(v, [&](llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_up_i32, {},
                              {b_.getInt32(0xffffffffu), x, b_.getInt32(static_cast<uint32_t>(delta)), b_.getInt32(0)});
  });
}

llvm::Value* PtxInstructions::shuffle_down(llvm::Value* v, int64_t delta) {
  return shuffle(v, [&](llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_down_i32, {},
                              {b_.getInt32(0xffffffffu), x, b_.getInt32(static_cast<uint32_t>(delta)), b_.getInt32(0x1f)});
  });
}

std::array<llvm::Value*, 4> PtxInstructions::mma_m16n8k16(bool bf16, const std::array<llvm::Value*, 4>& a,
                                                           const std::array<llvm::Value*, 2>& b,
                                                           const std::array<llvm::Value*, 4>& c) {
  llvm::Type* f32 = b_.getFloatTy();
  llvm::Type* i32 = b_.getInt32Ty();
  auto* result = llvm::StructType::get(b_.getContext(), {f32, f32, f32, f32});
  auto* type = llvm::FunctionType::get(result, {i32, i32, i32, i32, i32, i32, f32, f32, f32, f32}, false);
  std::string text = std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + (bf16 ? "bf16.bf16" : "f16.f16") +
                     ".f32 {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};";
  auto* mma = llvm::InlineAsm::get(type, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", /*hasSideEffects=*/false);
  llvm::Value* d = b_.CreateCall(mma, {a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]});
  return {b_.CreateExtractValue(d, 0), b_.CreateExtractValue(d, 1), b_.CreateExtractValue(d, 2),
          b_.CreateExtractValue(d, 3)};
}

}  // namespace weft::codegen::nvptx
