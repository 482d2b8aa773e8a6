// The class behind emit_ptx (ptx_emitter.h), shared by its three files: ptx_emitter.cpp (the module, values,
// liveness, control flow), ptx_emitter_ops.cpp (instructions) and ptx_emitter_calls.cpp (intrinsics, inline asm).
#pragma once

#include <fmt/compile.h>
#include <fmt/format.h>
#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>

#include <deque>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/nvptx/compile_ptx.h"

namespace llvm {
class DominatorTree;
}

namespace weft::codegen::nvptx::emitter {

// What the emitter does not handle: emit_ptx returns nothing and the caller runs LLVM's code generator.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// PTX virtual registers by size; f32 and f64 live in b32 and b64 registers as LLVM's NVPTX back end keeps them.
enum class Reg : int { pred, b16, b32, b64 };
constexpr int kRegClasses = 4;
// The classes of a value's parts (one for a scalar).
using RegClasses = llvm::SmallVector<Reg, 4>;
// A register's class and number in one integer (Unsupported for a name that is not a register's).
unsigned register_key(const std::string& name);

// A value's registers. A scalar has one part. A vector has one part per lane, except 16-bit lanes, which go
// two to a b32 part (as wgmma, cvt.rn.bf16x2 and the stores take them). An aggregate (inline asm's results)
// has one part per field. "" stands for a lane nobody defined (poison), made 0 where it is read.
using Parts = llvm::SmallVector<std::string, 1>;

class PtxEmitter {
 public:
  PtxEmitter(const llvm::Module& m, const PtxTarget& target);
  std::string run();  // throws Unsupported

 private:
  // ptx_emitter.cpp
  void emit_globals(std::string& out);
  std::string entry_signature(const llvm::Function& f);
  void coalesce_phis(const std::vector<const llvm::BasicBlock*>& order);
  void emit_block(const llvm::BasicBlock& bb);
  void emit_phi_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& to);
  bool division_by_constant(const llvm::BinaryOperator& op, const llvm::ConstantInt* c, const std::string& a,
                            const std::string& d);
  void hoist_shared_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& side, const llvm::BasicBlock& join,
                           const llvm::Instruction& branch);
  bool takes_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& to) const;
  void emit_parallel_copy(std::vector<std::pair<std::string, std::string>> copies);  // (to, from)
  std::string fresh_label();
  void emit_terminator(const llvm::Instruction& inst);

  // ptx_emitter_ops.cpp
  void emit_instruction(const llvm::Instruction& inst);
  void emit_binary(const llvm::BinaryOperator& op);
  void emit_compare(const llvm::CmpInst& cmp);
  void emit_select(const llvm::SelectInst& sel);
  void emit_cast(const llvm::CastInst& cast);
  void emit_gep(const llvm::GetElementPtrInst& gep);
  void emit_load(const llvm::LoadInst& load);
  void emit_store(const llvm::StoreInst& store);
  void emit_insert_element(const llvm::InsertElementInst& ins);
  void emit_extract_element(const llvm::ExtractElementInst& ext);
  void emit_shuffle(const llvm::ShuffleVectorInst& shuffle);
  void emit_memory(bool is_load, const llvm::Value* ptr, llvm::Type* type, llvm::Align align, bool is_volatile,
                   const Parts& values, Parts* results);

  // ptx_emitter_calls.cpp
  void emit_call(const llvm::CallInst& call);
  void emit_intrinsic(const llvm::IntrinsicInst& call);
  void emit_inline_asm(const llvm::CallInst& call);
  // An inline asm statement's constraints and its text split at the operands it names.
  struct ParsedAsm {
    llvm::InlineAsm::ConstraintInfoVector constraints;
    std::vector<std::pair<std::string, int>> pieces;  // text up to an operand, then that operand (-1: the end)
    std::vector<bool> named;                          // which operands the text names
  };
  const ParsedAsm& parse_asm(const llvm::InlineAsm& ia);  // cached in parsed_asm_ and parsed_asm_cache()
  static std::unordered_map<std::string, ParsedAsm>& parsed_asm_cache();  // this thread's, by text and constraints
  void emit_saturating_conversion(const llvm::CallInst& call, bool is_signed);  // llvm.fpto[su]i.sat
  void emit_f64_maximum(const llvm::CallInst& call, bool is_max);               // llvm.maximum/minimum.f64
  void emit_fpclass_test(const llvm::CallInst& call);                           // llvm.is.fpclass

  // Registers and operands (ptx_emitter.cpp).
  std::string fresh(Reg cls);
  // A byte's 16-bit register (whose upper bits are not defined) extended by the byte's sign or with zeros:
  // cvt.{s,u}16.{s,u}8 into a fresh register.
  std::string extend_byte(const std::string& x, bool is_signed);
  Reg class_of(llvm::Type* scalar) const;          // Unsupported for types without a register class
  int bits_of(llvm::Type* scalar) const;           // 1, 16, 32 or 64
  RegClasses part_classes(llvm::Type* t) const;
  // Registers for v's parts: a phi's (below) or fresh ones. The reference is valid until the next value gets
  // registers (as parts_in_place's).
  const Parts& define(const llvm::Value* v);
  std::string phi_register_for_value(const llvm::Instruction& inst, Reg cls);
  void bind(const llvm::Value* v, Parts parts);    // v's parts are these registers (they are defined once)
  Parts parts(const llvm::Value* v);              // v's registers, a constant made into registers
  // The same in place: valid until the next value or constant gets registers (bind, parts of a constant).
  const Parts& parts_in_place(const llvm::Value* v);
  bool shareable(const Parts& registers);          // whether another value may be bound to these registers
  std::string reg(const llvm::Value* v);           // a scalar's register
  std::string operand(const llvm::Value* v);       // a scalar as an immediate where it is a constant
  std::string immediate(const llvm::Constant* c) const;  // a constant scalar's PTX immediate
  Parts materialize(const llvm::Constant* c);
  std::string constant_address(const llvm::Constant* c);  // a register holding a constant pointer / integer
  std::string space_of(const llvm::Value* ptr) const;     // ".shared", ".global", "" (generic), ...
  std::string generic_address(const std::string& addr, unsigned as);  // cvta from address space `as`
  std::string defined_part(const std::string& part, Reg cls);
  std::string label(const llvm::BasicBlock* bb);
  void live_blocks(const llvm::Value* v, llvm::SmallPtrSetImpl<const llvm::BasicBlock*>& in,
                   llvm::SmallPtrSetImpl<const llvm::BasicBlock*>& out) const;
  struct Liveness {
    llvm::SmallPtrSet<const llvm::BasicBlock*, 8> in, out;  // blocks v is live into and out of
  };
  const Liveness& liveness(const llvm::Value* v);  // computed once per value (the IR does not change)
  bool live_after(const llvm::Value* v, const llvm::Instruction* at);  // v used after `at` runs
  bool live_into(const llvm::Value* v, const llvm::BasicBlock* bb);    // v used after bb's start
  // A register for inline asm output `k` of `call`: the register of the phi it flows into when that costs no
  // copy's worth of interference, else "".
  std::string phi_register_for_output(const llvm::CallInst& call, unsigned k, Reg cls,
                                      const llvm::DenseSet<unsigned>& taken,
                                      const llvm::DenseMap<unsigned, int>& input_reads);
  void line(std::string_view text);
  // One instruction formatted by a compiled format (FMT_COMPILE: the format string is not parsed at each line)
  // and written as line() writes it.
  template <typename Format, typename... Args>
  void emit(const Format& format, const Args&... args) {
    fmt::memory_buffer text;
    fmt::format_to(std::back_inserter(text), format, args...);
    line(std::string_view(text.data(), text.size()));
  }

  const llvm::Module& m_;
  const llvm::DataLayout& dl_;
  PtxTarget target_;
  const llvm::Function* fn_ = nullptr;
  const llvm::BasicBlock* next_block_ = nullptr;  // the block emitted after the current one
  std::string body_;
  std::string entry_prologue_;  // written before the entry block: the addresses of globals (constant_address)
  llvm::DenseMap<const llvm::GlobalVariable*, std::string> global_addresses_;
  // Phi copies already made on an edge into the phi's block, by its predecessor (hoist_shared_copies).
  llvm::DenseSet<std::pair<const llvm::BasicBlock*, const llvm::PHINode*>> copied_early_;
  int next_[kRegClasses] = {1, 1, 1, 1};
  llvm::DenseMap<const llvm::Value*, Parts> values_;
  llvm::DenseMap<const llvm::BasicBlock*, int> labels_;
  int next_label_ = 0;
  llvm::DenseMap<const llvm::Constant*, Parts> block_constants_;  // constants made into registers in this block
  // Each value's liveness once computed, by index (a Liveness is two small sets: a map of them costs more to
  // grow than to compute; a deque's elements stay where they are).
  llvm::DenseMap<const llvm::Value*, unsigned> liveness_index_;
  std::deque<Liveness> liveness_;
  // The values each register holds (an extractvalue shares its aggregate's register; an inline asm's output
  // may take over the register of an input that dies there: emit_inline_asm), by register_key.
  llvm::DenseMap<unsigned, llvm::SmallVector<const llvm::Value*, 2>> register_values_;
  llvm::SmallVector<const llvm::Value*, 2>& holders(const std::string& reg) { return register_values_[register_key(reg)]; }
  llvm::DenseMap<const llvm::InlineAsm*, const ParsedAsm*> parsed_asm_;
};

// Two-lane groups of 16-bit lanes share a b32 register.
bool packed16(llvm::Type* t);

// Shared memory's addresses fit 32 bits (PTX takes a 32-bit register as a .shared address): the emitter keeps
// them in b32 registers whatever the data layout says, so their arithmetic is 32-bit as LLVM's narrowing makes it.
bool shared_space(unsigned as);

// ".global", ".shared", "" (generic), ...; Unsupported for an address space PTX code here never uses.
const char* space_name(unsigned as);

// "s32", "u64", "b16": PTX type suffixes.
std::string int_type(char kind, int bits);
// "f16", "bf16", "f32", "f64": a float type's suffix.
std::string float_type(llvm::Type* t);
// "0f3F800000", "0d3FF0000000000000": a 32- or 64-bit float's bits as a PTX immediate.
std::string float_immediate(uint64_t bits, int width);

// A register's class from its name (%p, %rs, %r, %rd) and the bits of a mov on it.
Reg class_of_register(const std::string& name);
int mov_bits(Reg cls);

// "mov.b32 %r1, %r2" or "mov.pred %p1, %p2".
std::string mov(Reg cls, const std::string& to, const std::string& from);

// The order the blocks of `fn` are written in (ptx_emitter_control.cpp).
std::vector<const llvm::BasicBlock*> block_layout(const llvm::Function& fn, llvm::DominatorTree& dom);

}  // namespace weft::codegen::nvptx::emitter
