// weft's own PTX emitter (ptx_emitter.h): the module, values and registers, liveness, control flow. The
// instructions are in ptx_emitter_ops.cpp, intrinsics and inline asm in ptx_emitter_calls.cpp.
#include "codegen/nvptx/ptx_emitter.h"

#include <fmt/format.h>
#include <llvm/ADT/PostOrderIterator.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>

#include <functional>
#include <queue>
#include <unordered_map>

#include "codegen/nvptx/ptx_emitter_impl.h"

namespace weft::codegen::nvptx {
namespace emitter {
namespace {

constexpr const char* kRegPrefix[kRegClasses] = {"%p", "%rs", "%r", "%rd"};
constexpr const char* kRegDecl[kRegClasses] = {".pred", ".b16", ".b32", ".b64"};

bool valid_name(llvm::StringRef name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$')) return false;
  return true;
}

// The order blocks are written in: every loop's blocks together, and otherwise the function's own order as far
// as the forward edges allow (a topological order of the control flow without its back edges, so each block
// comes after its immediate dominator and every value is defined before the emitter meets a use). The
// lowering's block order can put blocks that run once (a loop's first step, a branch taken at its end) between
// the blocks of a loop; ptxas schedules the loop as LLVM's block placement hands it over, contiguous. An
// irreducible flow (not produced by weft's lowering) gets reverse post-order.
std::vector<const llvm::BasicBlock*> block_layout(const llvm::Function& fn, llvm::DominatorTree& dom) {
  llvm::LoopInfo loops(dom);
  llvm::DenseMap<const llvm::BasicBlock*, int> position;
  for (const llvm::BasicBlock& bb : fn) position[&bb] = static_cast<int>(position.size());
  std::vector<const llvm::BasicBlock*> out;
  bool reducible = true;
  // Places the blocks of `region` (a loop, or the whole function for null); a loop nested in it is one node,
  // named by its header, placed whole where its header goes.
  std::function<void(const llvm::Loop*)> place = [&](const llvm::Loop* region) {
    const llvm::BasicBlock* entry = region ? region->getHeader() : &fn.getEntryBlock();
    auto node_of = [&](const llvm::BasicBlock* b) -> const llvm::BasicBlock* {
      if (region && !region->contains(b)) return nullptr;
      const llvm::Loop* l = loops.getLoopFor(b);
      if (l == region) return b;
      while (l->getParentLoop() != region) l = l->getParentLoop();
      return l->getHeader();
    };
    auto inner_loop = [&](const llvm::BasicBlock* node) -> const llvm::Loop* {
      const llvm::Loop* l = loops.getLoopFor(node);
      return l == region ? nullptr : l;
    };
    std::vector<const llvm::BasicBlock*> nodes;
    for (const llvm::BasicBlock& bb : fn)
      if (node_of(&bb) == &bb) nodes.push_back(&bb);
    llvm::DenseMap<const llvm::BasicBlock*, std::vector<const llvm::BasicBlock*>> next;
    llvm::DenseMap<const llvm::BasicBlock*, int> waiting;  // forward edges into a node not yet placed
    for (const llvm::BasicBlock* n : nodes) {
      llvm::SmallPtrSet<const llvm::BasicBlock*, 8> seen;
      auto edge = [&](const llvm::BasicBlock* to) {
        const llvm::BasicBlock* m = node_of(to);
        if (m && m != n && m != entry && seen.insert(m).second) {
          next[n].push_back(m);
          ++waiting[m];
        }
      };
      if (const llvm::Loop* l = inner_loop(n)) {
        for (const llvm::BasicBlock* b : l->blocks())
          for (const llvm::BasicBlock* s : llvm::successors(b))
            if (!l->contains(s)) edge(s);
      } else {
        for (const llvm::BasicBlock* s : llvm::successors(n)) edge(s);
      }
    }
    auto later = [&](const llvm::BasicBlock* a, const llvm::BasicBlock* b) { return position[a] > position[b]; };
    std::priority_queue<const llvm::BasicBlock*, std::vector<const llvm::BasicBlock*>, decltype(later)> ready(later);
    ready.push(entry);
    size_t placed = 0;
    while (!ready.empty()) {
      const llvm::BasicBlock* n = ready.top();
      ready.pop();
      ++placed;
      if (const llvm::Loop* l = inner_loop(n))
        place(l);
      else
        out.push_back(n);
      for (const llvm::BasicBlock* m : next[n])
        if (--waiting[m] == 0) ready.push(m);
    }
    if (placed != nodes.size()) reducible = false;
  };
  place(nullptr);
  if (reducible && out.size() == fn.size()) return out;
  out.clear();
  for (const llvm::BasicBlock* bb : llvm::ReversePostOrderTraversal<const llvm::Function*>(&fn)) out.push_back(bb);
  return out;
}

}  // namespace

bool packed16(llvm::Type* t) {
  auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t);
  return v && v->getNumElements() > 1 && v->getScalarSizeInBits() == 16;
}

bool shared_space(unsigned as) { return as == 3 || as == 7; }

const char* space_name(unsigned as) {
  switch (as) {
    case 0: return "";
    case 1: return ".global";
    case 3: return ".shared";
    case 4: return ".const";
    case 5: return ".local";
    case 7: return ".shared::cluster";
    case 101: return ".param";
  }
  throw Unsupported(fmt::format("a pointer in address space {}", as));
}

std::string int_type(char kind, int bits) { return fmt::format("{}{}", kind, bits); }

std::string float_type(llvm::Type* t) {
  return t->isBFloatTy() ? std::string("bf16") : fmt::format("f{}", t->getPrimitiveSizeInBits().getFixedValue());
}

std::string float_immediate(uint64_t bits, int width) {
  return width == 32 ? fmt::format("0f{:08X}", bits) : fmt::format("0d{:016X}", bits);
}

Reg class_of_register(const std::string& name) {
  if (name.starts_with("%rd")) return Reg::b64;
  if (name.starts_with("%rs")) return Reg::b16;
  if (name.starts_with("%r")) return Reg::b32;
  if (name.starts_with("%p")) return Reg::pred;
  throw Unsupported("a register named " + name);
}

int mov_bits(Reg cls) { return cls == Reg::b16 ? 16 : cls == Reg::b32 ? 32 : 64; }

std::string mov(Reg cls, const std::string& to, const std::string& from) {
  return cls == Reg::pred ? fmt::format("mov.pred {}, {}", to, from) : fmt::format("mov.b{} {}, {}", mov_bits(cls), to, from);
}

PtxEmitter::PtxEmitter(const llvm::Module& m, const PtxTarget& target)
    : m_(m), dl_(m.getDataLayout()), target_(target) {}

// ---- registers and operands -------------------------------------------------------------------------------

// As LLVM prints PTX, so that text written for its PTX reads this one the same: "\topcode \toperands;", a guard
// predicate ("@%p1 bra ...") staying with its opcode.
void PtxEmitter::line(const std::string& text) {
  size_t opcode = text[0] == '@' ? text.find(' ') + 1 : 0;
  size_t space = text.find(' ', opcode);
  body_ += '\t';
  if (space == std::string::npos) {
    body_ += text;
  } else {
    body_.append(text, 0, space);
    body_ += " \t";
    body_.append(text, space + 1, std::string::npos);
  }
  body_ += ";\n";
}

std::string PtxEmitter::fresh(Reg cls) {
  int i = static_cast<int>(cls);
  return fmt::format("{}{}", kRegPrefix[i], next_[i]++);
}

std::string PtxEmitter::extend_byte(const std::string& x, bool is_signed) {
  std::string w = fresh(Reg::b16);
  line(fmt::format("cvt.{0}16.{0}8 {1}, {2}", is_signed ? 's' : 'u', w, x));
  return w;
}

int PtxEmitter::bits_of(llvm::Type* t) const {
  if (t->isIntegerTy(1)) return 1;
  if (t->isIntegerTy(8)) return 8;
  if (t->isPointerTy()) return shared_space(t->getPointerAddressSpace()) ? 32 : static_cast<int>(dl_.getPointerSizeInBits(t->getPointerAddressSpace()));
  if (t->isIntegerTy(16) || t->isHalfTy() || t->isBFloatTy()) return 16;
  if (t->isIntegerTy(32) || t->isFloatTy()) return 32;
  if (t->isIntegerTy(64) || t->isDoubleTy()) return 64;
  std::string name;
  llvm::raw_string_ostream os(name);
  t->print(os);
  throw Unsupported("a value of type " + name);
}

Reg PtxEmitter::class_of(llvm::Type* t) const {
  switch (bits_of(t)) {
    case 1: return Reg::pred;
    case 8:  // bytes in 16-bit registers, their upper bits undefined
    case 16: return Reg::b16;
    case 32: return Reg::b32;
    default: return Reg::b64;
  }
}

std::vector<Reg> PtxEmitter::part_classes(llvm::Type* t) const {
  if (auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t)) {
    unsigned n = v->getNumElements();
    if (packed16(t)) {
      if (n % 2) throw Unsupported("a vector of an odd number of 16-bit lanes");
      return std::vector<Reg>(n / 2, Reg::b32);
    }
    return std::vector<Reg>(n, class_of(v->getElementType()));
  }
  if (auto* s = llvm::dyn_cast<llvm::StructType>(t)) {
    std::vector<Reg> out;
    for (llvm::Type* e : s->elements()) out.push_back(class_of(e));
    return out;
  }
  if (t->isVectorTy() || t->isArrayTy()) throw Unsupported("an array or scalable vector value");
  return {class_of(t)};
}

Parts PtxEmitter::define(const llvm::Value* v) {
  std::vector<Reg> classes = part_classes(v->getType());
  Parts p;
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(v); inst && classes.size() == 1 && !llvm::isa<llvm::PHINode>(inst))
    if (std::string r = phi_register_for_value(*inst, classes[0]); !r.empty()) p.push_back(r);
  if (p.empty())
    for (Reg cls : classes) p.push_back(fresh(cls));
  bind(v, p);
  return p;
}

// A value carried into a phi is computed straight into the phi's register when the phi's current value is not
// needed after this point and the value is not needed past the phi's block entry (each instruction's
// expansion writes its result last, so reading the old value in the same instruction is fine). The value may
// reach the phi through bitcasts that keep its register (a packed pair of 16-bit floats taken as an i32).
std::string PtxEmitter::phi_register_for_value(const llvm::Instruction& inst, Reg cls) {
  llvm::SmallVector<const llvm::Value*, 4> same;  // inst and the bitcasts that will share its register
  same.push_back(&inst);
  for (size_t i = 0; i < same.size(); ++i)
    for (const llvm::User* u : same[i]->users())
      if (auto* cast = llvm::dyn_cast<llvm::BitCastInst>(u);
          cast && part_classes(cast->getDestTy()) == std::vector<Reg>{cls} && cls != Reg::pred)
        same.push_back(cast);
  for (const llvm::Value* v : same)
    for (const llvm::User* u : v->users()) {
      auto* phi = llvm::dyn_cast<llvm::PHINode>(u);
      if (!phi) continue;
      auto it = values_.find(phi);
      if (it == values_.end() || it->second.size() != 1 || class_of_register(it->second[0]) != cls) continue;
      const std::string& r = it->second[0];
      bool free = true;
      for (const llvm::Value* x : same)
        if (free && live_into(x, phi->getParent())) free = false;
      for (const llvm::Value* holder : register_values_[r])
        if (free && holder != &inst && live_after(holder, &inst)) free = false;
      if (free) return r;
    }
  return "";
}

void PtxEmitter::bind(const llvm::Value* v, Parts parts) {
  for (const std::string& r : parts)
    if (!r.empty()) register_values_[r].push_back(v);
  values_[v] = std::move(parts);
}

// Liveness of one value, by walking back from its uses to its definition: the blocks it is live into and out of.
void PtxEmitter::live_blocks(const llvm::Value* v, llvm::SmallPtrSetImpl<const llvm::BasicBlock*>& in,
                             llvm::SmallPtrSetImpl<const llvm::BasicBlock*>& out) const {
  const llvm::BasicBlock* def =
      llvm::isa<llvm::Instruction>(v) ? llvm::cast<llvm::Instruction>(v)->getParent() : &fn_->getEntryBlock();
  llvm::SmallVector<const llvm::BasicBlock*, 16> work;
  auto live_in = [&](const llvm::BasicBlock* b) {
    if (b != def && in.insert(b).second) work.push_back(b);
  };
  for (const llvm::Use& u : v->uses()) {
    auto* user = llvm::cast<llvm::Instruction>(u.getUser());
    if (auto* phi = llvm::dyn_cast<llvm::PHINode>(user)) {
      const llvm::BasicBlock* from = phi->getIncomingBlock(u);
      out.insert(from);
      live_in(from);
    } else {
      live_in(user->getParent());
    }
  }
  while (!work.empty()) {
    const llvm::BasicBlock* b = work.pop_back_val();
    for (const llvm::BasicBlock* p : llvm::predecessors(b)) {
      out.insert(p);
      live_in(p);
    }
  }
}

const PtxEmitter::Liveness& PtxEmitter::liveness(const llvm::Value* v) {
  auto [it, fresh_entry] = liveness_index_.try_emplace(v, static_cast<unsigned>(liveness_.size()));
  if (!fresh_entry) return liveness_[it->second];
  Liveness& l = liveness_.emplace_back();
  live_blocks(v, l.in, l.out);
  return l;
}

bool PtxEmitter::live_after(const llvm::Value* v, const llvm::Instruction* at) {
  const llvm::BasicBlock* here = at->getParent();
  for (const llvm::User* user : v->users())
    if (!llvm::isa<llvm::PHINode>(user) && llvm::cast<llvm::Instruction>(user)->getParent() == here &&
        at->comesBefore(llvm::cast<llvm::Instruction>(user)))
      return true;
  return liveness(v).out.count(here) > 0;
}

bool PtxEmitter::live_into(const llvm::Value* v, const llvm::BasicBlock* bb) { return liveness(v).in.count(bb) > 0; }

std::string PtxEmitter::immediate(const llvm::Constant* c) const {
  llvm::Type* t = c->getType();
  if (t->isIntegerTy(1) || t->isHalfTy() || t->isBFloatTy()) return "";
  if (llvm::isa<llvm::UndefValue>(c) || c->isNullValue()) {
    if (t->isFloatTy()) return "0f00000000";
    if (t->isDoubleTy()) return "0d0000000000000000";
    if (t->isIntegerTy()) return "0";
    return "";
  }
  if (auto* i = llvm::dyn_cast<llvm::ConstantInt>(c)) return std::to_string(i->getSExtValue());
  if (auto* f = llvm::dyn_cast<llvm::ConstantFP>(c)) {
    uint64_t bits = f->getValueAPF().bitcastToAPInt().getZExtValue();
    if (t->isFloatTy() || t->isDoubleTy()) return float_immediate(bits, bits_of(t));
  }
  return "";
}

std::string PtxEmitter::constant_address(const llvm::Constant* c) {
  llvm::Type* t = c->getType();
  if (auto* g = llvm::dyn_cast<llvm::GlobalVariable>(c)) {
    if (!valid_name(g->getName())) throw Unsupported("a global whose name PTX cannot spell");
    // Taken once, at the kernel's start (which dominates every use), as LLVM's code generator hoists it: taken
    // in each block, ptxas left the shared window's base computation (S2UR, ULEA) inside the loops.
    auto [at, made] = global_addresses_.try_emplace(g);
    if (made) {
      at->second = fresh(class_of(t));
      std::swap(body_, entry_prologue_);
      line(fmt::format("mov.u{} {}, {}", bits_of(t), at->second, g->getName().str()));
      std::swap(body_, entry_prologue_);
    }
    return at->second;
  }
  if (llvm::isa<llvm::ConstantPointerNull>(c) || llvm::isa<llvm::ConstantInt>(c) || llvm::isa<llvm::UndefValue>(c)) {
    std::string r = fresh(class_of(t));
    line(fmt::format("mov.b{} {}, {}", mov_bits(class_of(t)), r, llvm::isa<llvm::ConstantInt>(c) ? immediate(c) : "0"));
    return r;
  }
  auto* e = llvm::dyn_cast<llvm::ConstantExpr>(c);
  if (!e) throw Unsupported("a constant of an unexpected kind");
  if (auto* gep = llvm::dyn_cast<llvm::GEPOperator>(e)) {
    llvm::APInt offset(dl_.getIndexTypeSizeInBits(t), 0);
    if (!gep->accumulateConstantOffset(dl_, offset)) throw Unsupported("a constant address with a variable index");
    std::string base = constant_address(llvm::cast<llvm::Constant>(gep->getPointerOperand()));
    if (offset.isZero()) return base;
    std::string r = fresh(class_of(t));
    line(fmt::format("add.s{} {}, {}, {}", bits_of(t), r, base, offset.getSExtValue()));
    return r;
  }
  if (e->getNumOperands() == 2 && e->getType()->isIntegerTy() && !e->getType()->isIntegerTy(1)) {
    // Arithmetic on addresses, e.g. add (ptrtoint @weft_shared), 163840.
    static const std::pair<unsigned, const char*> kOps[] = {
        {llvm::Instruction::Add, "add.s"}, {llvm::Instruction::Sub, "sub.s"}, {llvm::Instruction::Mul, "mul.lo.s"},
        {llvm::Instruction::And, "and.b"}, {llvm::Instruction::Or, "or.b"},   {llvm::Instruction::Xor, "xor.b"},
        {llvm::Instruction::Shl, "shl.b"}};
    for (auto [opcode, name] : kOps) {
      if (e->getOpcode() != opcode) continue;
      auto side = [&](unsigned i) {
        auto* c = llvm::cast<llvm::Constant>(e->getOperand(i));
        std::string imm = llvm::isa<llvm::ConstantInt>(c) ? immediate(c) : "";
        return imm.empty() ? constant_address(c) : imm;
      };
      std::string a = side(0), b = side(1);
      std::string r = fresh(class_of(t));
      line(fmt::format("{}{} {}, {}, {}", name, bits_of(t), r, a, b));
      return r;
    }
  }
  std::string src = constant_address(llvm::cast<llvm::Constant>(e->getOperand(0)));
  int from = bits_of(e->getOperand(0)->getType()), to = bits_of(t);
  switch (e->getOpcode()) {
    case llvm::Instruction::PtrToInt:
    case llvm::Instruction::IntToPtr: {
      if (from == to) return src;
      std::string r = fresh(class_of(t));
      line(fmt::format("cvt.u{}.u{} {}, {}", to, from, r, src));
      return r;
    }
    case llvm::Instruction::AddrSpaceCast: {
      unsigned as_from = e->getOperand(0)->getType()->getPointerAddressSpace(), as_to = t->getPointerAddressSpace();
      if (as_to != 0 || as_from == 0) throw Unsupported("a constant address space cast");
      return generic_address(src, as_from);
    }
    default: throw Unsupported(fmt::format("a constant expression ({})", e->getOpcodeName()));
  }
}

std::string PtxEmitter::generic_address(const std::string& addr, unsigned as) {
  std::string wide = addr;
  if (class_of_register(addr) == Reg::b32) {
    wide = fresh(Reg::b64);
    line(fmt::format("cvt.u64.u32 {}, {}", wide, addr));
  }
  std::string r = fresh(Reg::b64);
  line(fmt::format("cvta{}.u64 {}, {}", space_name(as), r, wide));
  return r;
}

Parts PtxEmitter::materialize(const llvm::Constant* c) {
  llvm::Type* t = c->getType();
  if (t->isPointerTy() || llvm::isa<llvm::ConstantExpr>(c)) return {constant_address(c)};
  if (t->isIntegerTy(1)) {
    std::string r = fresh(Reg::pred);
    bool value = !llvm::isa<llvm::UndefValue>(c) && !c->isNullValue();
    line(fmt::format("setp.{}.s32 {}, 0, 0", value ? "eq" : "ne", r));
    return {r};
  }
  auto lane_bits = [&](const llvm::Constant* lane) -> uint64_t {
    if (!lane || llvm::isa<llvm::UndefValue>(lane) || lane->isNullValue()) return 0;
    if (auto* i = llvm::dyn_cast<llvm::ConstantInt>(lane)) return i->getZExtValue();
    if (auto* f = llvm::dyn_cast<llvm::ConstantFP>(lane)) return f->getValueAPF().bitcastToAPInt().getZExtValue();
    throw Unsupported("a vector constant of an unexpected kind");
  };
  if (t->isVectorTy()) {
    Parts out;
    std::vector<Reg> classes = part_classes(t);
    bool pack = packed16(t);
    for (size_t p = 0; p < classes.size(); ++p) {
      std::string r = fresh(classes[p]);
      if (classes[p] == Reg::pred) {
        line(fmt::format("setp.{}.s32 {}, 0, 0", lane_bits(c->getAggregateElement(unsigned(p))) ? "eq" : "ne", r));
      } else {
        uint64_t bits = pack ? lane_bits(c->getAggregateElement(unsigned(2 * p))) |
                                   lane_bits(c->getAggregateElement(unsigned(2 * p + 1))) << 16
                             : lane_bits(c->getAggregateElement(unsigned(p)));
        line(fmt::format("mov.b{} {}, {}", mov_bits(classes[p]), r, bits));
      }
      out.push_back(r);
    }
    return out;
  }
  std::string r = fresh(class_of(t));
  std::string imm = immediate(c);
  if (imm.empty()) imm = fmt::format("{:#x}", lane_bits(c));
  line(fmt::format("mov.b{} {}, {}", mov_bits(class_of(t)), r, imm));
  return {r};
}

Parts PtxEmitter::parts(const llvm::Value* v) {
  auto it = values_.find(v);
  if (it != values_.end()) return it->second;
  // A constant's registers are made where it is used (the use may not be dominated by an earlier one), once
  // per block.
  if (auto* c = llvm::dyn_cast<llvm::Constant>(v)) {
    auto [at, made] = block_constants_.try_emplace(c);
    if (made) at->second = materialize(c);
    return at->second;
  }
  throw Unsupported("a value used before the emitter saw its definition");
}

// Registers a value can share with another: all but a phi's, which change on the edges into its block (a
// register defined by an instruction keeps its value until that instruction runs again, and by then every
// use of the value sharing it has come: its definition dominates them).
bool PtxEmitter::shareable(const Parts& registers) {
  for (const std::string& r : registers) {
    if (r.empty()) return false;
    for (const llvm::Value* holder : register_values_[r])
      if (llvm::isa<llvm::PHINode>(holder)) return false;
  }
  return true;
}

std::string PtxEmitter::reg(const llvm::Value* v) {
  Parts p = parts(v);
  if (p.size() != 1) throw Unsupported("a vector where a scalar was expected");
  return defined_part(p[0], class_of(v->getType()));
}

std::string PtxEmitter::operand(const llvm::Value* v) {
  if (auto* c = llvm::dyn_cast<llvm::Constant>(v); c && !llvm::isa<llvm::ConstantExpr>(c) && !v->getType()->isVectorTy())
    if (std::string imm = immediate(c); !imm.empty()) return imm;
  return reg(v);
}

std::string PtxEmitter::defined_part(const std::string& part, Reg cls) {
  if (!part.empty()) return part;
  std::string r = fresh(cls);
  if (cls == Reg::pred)
    line(fmt::format("setp.ne.s32 {}, 0, 0", r));
  else
    line(fmt::format("mov.b{} {}, 0", mov_bits(cls), r));
  return r;
}

std::string PtxEmitter::space_of(const llvm::Value* ptr) const {
  return space_name(ptr->getType()->getPointerAddressSpace());
}

std::string PtxEmitter::label(const llvm::BasicBlock* bb) { return fmt::format("$L__BB{}", labels_.at(bb)); }

// ---- the module -------------------------------------------------------------------------------------------

void PtxEmitter::emit_globals(std::string& out) {
  for (const llvm::GlobalVariable& g : m_.globals()) {
    if (g.use_empty()) continue;
    if (!valid_name(g.getName())) throw Unsupported("a global whose name PTX cannot spell");
    if (g.getAddressSpace() != 3 || g.hasInitializer())
      throw Unsupported(fmt::format("the global '{}' (only shared memory is emitted)", g.getName().str()));
    uint64_t size = dl_.getTypeAllocSize(g.getValueType());
    uint64_t align = g.getAlign() ? g.getAlign()->value() : 1;
    if (size == 0)
      out += fmt::format(".extern .shared .align {} .b8 {}[];\n", align, g.getName().str());
    else
      out += fmt::format(".shared .align {} .b8 {}[{}];\n", align, g.getName().str(), size);
  }
}

std::string PtxEmitter::entry_signature(const llvm::Function& f) {
  std::string name = f.getName().str();
  std::string sig = fmt::format(".visible .entry {}(\n", name);
  for (const llvm::Argument& a : f.args()) {
    std::string param = fmt::format("{}_param_{}", name, a.getArgNo());
    std::string decl;
    if (a.hasByValAttr()) {
      if (!a.hasAttribute("nvvm.grid_constant")) throw Unsupported("a by-value parameter that is not a grid constant");
      uint64_t align = a.getParamAlign() ? a.getParamAlign()->value() : 4;
      decl = fmt::format(".param .align {} .b8 {}[{}]", align, param, dl_.getTypeAllocSize(a.getParamByValType()));
      std::string addr = fresh(Reg::b64), generic = fresh(Reg::b64);
      line(fmt::format("mov.b64 {}, {}", addr, param));
      line(fmt::format("cvta.param.u64 {}, {}", generic, addr));
      bind(&a, {generic});
    } else {
      int bits = bits_of(a.getType());
      if (bits == 1) throw Unsupported("a predicate parameter");
      decl = fmt::format(".param .u{} {}", bits, param);
      std::string r = fresh(class_of(a.getType()));
      line(fmt::format("ld.param.b{} {}, [{}]", bits, r, param));
      bind(&a, {r});
    }
    sig += fmt::format("\t{}{}\n", decl, a.getArgNo() + 1 < f.arg_size() ? "," : "");
  }
  sig += ")\n";
  for (const llvm::Attribute& attr : f.getAttributes().getFnAttrs()) {
    if (!attr.isStringAttribute()) continue;
    llvm::StringRef key = attr.getKindAsString(), value = attr.getValueAsString();
    if (!key.starts_with("nvvm.")) continue;
    std::string list = value.str();
    for (size_t i = 0; (i = list.find(',', i)) != std::string::npos; i += 2) list.replace(i, 1, ", ");
    if (key == "nvvm.maxntid") sig += ".maxntid " + list + "\n";
    else if (key == "nvvm.reqntid") sig += ".reqntid " + list + "\n";
    else if (key == "nvvm.minctasm") sig += ".minnctapersm " + list + "\n";
    else if (key == "nvvm.maxnreg") sig += ".maxnreg " + list + "\n";
    else if (key == "nvvm.cluster_dim") sig += ".explicitcluster\n.reqnctapercluster " + list + "\n";
    else throw Unsupported("the kernel attribute " + key.str());
  }
  return sig;
}

std::string PtxEmitter::run() {
  for (const llvm::Function& f : m_) {
    if (f.isDeclaration()) {
      if (!f.isIntrinsic() && !f.use_empty()) throw Unsupported("a call to the function " + f.getName().str());
      continue;
    }
    if (fn_ || f.getCallingConv() != llvm::CallingConv::PTX_Kernel)
      throw Unsupported("a device function ('" + f.getName().str() + "')");
    fn_ = &f;
  }
  if (!fn_) throw Unsupported("a module without a kernel");
  if (!valid_name(fn_->getName())) throw Unsupported("a kernel whose name PTX cannot spell");
  if (fn_->hasFnAttribute("denormal-fp-math-f32") || fn_->hasFnAttribute("denormal-fp-math"))
    throw Unsupported("a denormal mode");
  int major = 0, minor = 0;
  if (size_t at = target_.features.find("+ptx"); at != std::string::npos) {
    int v = std::atoi(target_.features.c_str() + at + 4);
    major = v / 10, minor = v % 10;
  }
  if (major == 0) throw Unsupported("a target without a PTX version (" + target_.features + ")");

  llvm::DominatorTree dom(const_cast<llvm::Function&>(*fn_));
  for (const llvm::BasicBlock& bb : *fn_)
    if (!dom.getNode(&bb)) throw Unsupported("an unreachable block");
  std::vector<const llvm::BasicBlock*> order = block_layout(*fn_, dom);
  for (const llvm::BasicBlock* bb : order) labels_[bb] = static_cast<int>(labels_.size());
  // Sized once for every value of the kernel: growing them was a tenth of the emitter's time on attention.
  size_t values = fn_->arg_size() + fn_->getInstructionCount();
  values_.reserve(values);
  register_values_.reserve(values);
  std::string signature = entry_signature(*fn_);
  for (const llvm::BasicBlock* bb : order)
    for (const llvm::PHINode& phi : bb->phis()) define(&phi);
  coalesce_phis(order);
  for (size_t i = 0; i < order.size(); ++i) {
    if (i > 0) body_ += fmt::format("{}:\n", label(order[i]));
    next_block_ = i + 1 < order.size() ? order[i + 1] : nullptr;
    emit_block(*order[i]);
  }

  std::string out = fmt::format(
      "//\n// Generated by weft's PTX emitter\n//\n\n.version {}.{}\n.target {}\n.address_size 64\n\n", major, minor,
      target_.arch);
  emit_globals(out);
  out += "\n" + signature + "{\n";
  for (int c = 0; c < kRegClasses; ++c)
    if (next_[c] > 1) out += fmt::format("\t.reg {} \t{}<{}>;\n", kRegDecl[c], kRegPrefix[c], next_[c]);
  out += "\n" + entry_prologue_ + body_ + "}\n";
  return out;
}

// Phis that take one another's values around loop nests (an accumulator handed from an outer loop's phi to
// an inner loop's) share a register where their lives do not overlap, so the edge between them needs no
// copy. Two phis in different blocks overlap exactly when one is live into the other's block (both blocks
// dominate any point where both are live); phis of one block always overlap.
void PtxEmitter::coalesce_phis(const std::vector<const llvm::BasicBlock*>& order) {
  std::unordered_map<std::string, std::vector<const llvm::PHINode*>> members;
  for (const llvm::BasicBlock* bb : order)
    for (const llvm::PHINode& phi : bb->phis())
      if (values_.at(&phi).size() == 1) members[values_.at(&phi)[0]].push_back(&phi);
  auto disjoint = [&](const llvm::PHINode* a, const llvm::PHINode* b) {
    return a->getParent() != b->getParent() && !live_into(a, b->getParent()) && !live_into(b, a->getParent());
  };
  for (const llvm::BasicBlock* bb : order)
    for (const llvm::PHINode& phi : bb->phis()) {
      if (values_.at(&phi).size() != 1) continue;
      for (const llvm::Value* in : phi.incoming_values()) {
        auto* other = llvm::dyn_cast<llvm::PHINode>(in);
        if (!other || values_.at(other).size() != 1) continue;
        std::string mine = values_.at(&phi)[0], theirs = values_.at(other)[0];
        if (mine == theirs || class_of_register(mine) != class_of_register(theirs)) continue;
        std::vector<const llvm::PHINode*>&a = members[mine], &b = members[theirs];
        bool ok = true;
        for (const llvm::PHINode* x : a)
          for (const llvm::PHINode* y : b)
            if (ok && !disjoint(x, y)) ok = false;
        if (!ok) continue;
        for (const llvm::PHINode* y : b) {
          values_[y] = {mine};
          a.push_back(y);
        }
        register_values_[mine].insert(register_values_[mine].end(), register_values_[theirs].begin(),
                                      register_values_[theirs].end());
        register_values_.erase(theirs);
        members.erase(theirs);
      }
    }
}

// ---- blocks and control flow ------------------------------------------------------------------------------

void PtxEmitter::emit_block(const llvm::BasicBlock& bb) {
  block_constants_.clear();
  for (const llvm::Instruction& inst : bb) {
    if (llvm::isa<llvm::PHINode>(inst)) continue;  // written by the predecessors (emit_phi_copies)
    if (inst.isTerminator())
      emit_terminator(inst);
    else
      emit_instruction(inst);
  }
}

std::string PtxEmitter::fresh_label() { return fmt::format("$L__E{}", next_label_++); }

// Out of SSA: a phi's register is written on each edge into its block, by copies that run only on that
// edge (emit_terminator splits the edges of conditional branches), so no other path sees the new value.
void PtxEmitter::emit_phi_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& to) {
  block_constants_.clear();  // each edge's copies run on that edge alone
  std::vector<std::pair<std::string, std::string>> copies;
  for (const llvm::PHINode& phi : to.phis()) {
    if (copied_early_.contains({&from, &phi})) continue;
    const llvm::Value* v = phi.getIncomingValueForBlock(&from);
    const Parts& dst = values_.at(&phi);
    std::vector<Reg> classes = part_classes(phi.getType());
    bool scalar = classes.size() == 1 && classes[0] != Reg::pred && !phi.getType()->isVectorTy();
    Parts src = scalar ? Parts{operand(v)} : parts(v);
    for (size_t i = 0; i < dst.size(); ++i) copies.emplace_back(dst[i], defined_part(src[i], classes[i]));
  }
  emit_parallel_copy(std::move(copies));
}

bool PtxEmitter::takes_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& to) const {
  for (const llvm::PHINode& phi : to.phis())
    if (!copied_early_.contains({&from, &phi})) return true;
  return false;
}

// A branch around a side block that rejoins (from -> side -> join, and from -> join; e.g. the elected thread's
// TMA issue in `if (elected) { ... }`): a phi of the join that takes the same value over both edges is copied
// once, before the branch, and not on either edge. The join then has one definition of it, made before the
// branch, as LLVM's phi elimination places it; with a copy on each edge, ptxas took the value as per-thread
// when the branch diverges (a producer's ring index in vector registers, its TMA address made uniform again
// in a loop per issue).
void PtxEmitter::hoist_shared_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& side,
                                     const llvm::BasicBlock& join, const llvm::Instruction& branch) {
  if (side.getSinglePredecessor() != &from || side.getSingleSuccessor() != &join || !side.phis().empty()) return;
  std::vector<std::pair<std::string, std::string>> copies;
  std::unordered_set<std::string> read_by_branch;
  for (const llvm::Value* op : branch.operands())
    if (auto it = values_.find(op); it != values_.end())
      for (const std::string& r : it->second) read_by_branch.insert(r);
  for (const llvm::PHINode& phi : join.phis()) {
    const llvm::Value* v = phi.getIncomingValueForBlock(&from);
    if (phi.getIncomingValueForBlock(&side) != v) continue;
    const Parts& dst = values_.at(&phi);
    std::vector<Reg> classes = part_classes(phi.getType());
    if (dst.size() != 1 || classes[0] == Reg::pred || phi.getType()->isVectorTy()) continue;
    const std::string& r = dst[0];
    if (read_by_branch.count(r)) continue;
    // Nothing else held in the phi's register may be needed past the branch (on either path).
    bool free = true;
    for (const llvm::Value* holder : register_values_[r])
      if (free && holder != v && liveness(holder).out.count(&from)) free = false;
    if (!free) continue;
    copies.emplace_back(r, defined_part(operand(v), classes[0]));
    copied_early_.insert({&from, &phi});
    copied_early_.insert({&side, &phi});
  }
  emit_parallel_copy(std::move(copies));
}

// The copies as if all at once: a register is written only after every copy reading it has run; a cycle
// (two phis swapping values) goes through a fresh register.
void PtxEmitter::emit_parallel_copy(std::vector<std::pair<std::string, std::string>> copies) {
  std::erase_if(copies, [](const auto& c) { return c.first == c.second; });
  // A copy is ready when no pending copy reads its destination; the ready one listed first goes next.
  std::unordered_map<std::string, int> reads;
  std::unordered_map<std::string, size_t> writer;  // destination -> its copy
  for (size_t i = 0; i < copies.size(); ++i) {
    ++reads[copies[i].second];
    writer[copies[i].first] = i;
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < copies.size(); ++i)
    if (!reads.count(copies[i].first)) ready.push(i);
  std::vector<bool> done(copies.size(), false);
  size_t left = copies.size(), first_pending = 0;
  auto release = [&](const std::string& source) {  // one reader of `source` fewer
    if (--reads[source] == 0)
      if (auto w = writer.find(source); w != writer.end() && !done[w->second]) ready.push(w->second);
  };
  while (left > 0) {
    if (ready.empty()) {
      // Every destination is still read (a cycle): save one, and let its readers read the copy.
      while (done[first_pending]) ++first_pending;
      std::string held = copies[first_pending].first;
      Reg cls = class_of_register(held);
      std::string saved = fresh(cls);
      line(mov(cls, saved, held));
      for (size_t i = 0; i < copies.size(); ++i)
        if (!done[i] && copies[i].second == held) copies[i].second = saved;
      reads[saved] = reads[held];
      reads[held] = 0;
      ready.push(first_pending);
      continue;
    }
    size_t i = ready.top();
    ready.pop();
    line(mov(class_of_register(copies[i].first), copies[i].first, copies[i].second));
    done[i] = true;
    --left;
    release(copies[i].second);
  }
}

void PtxEmitter::emit_terminator(const llvm::Instruction& inst) {
  if (llvm::isa<llvm::ReturnInst>(inst)) {
    if (inst.getNumOperands()) throw Unsupported("a kernel returning a value");
    line("ret");
    return;
  }
  if (llvm::isa<llvm::UnreachableInst>(inst)) {
    line("trap");
    return;
  }
  const llvm::BasicBlock& from = *inst.getParent();
  auto go = [&](const llvm::BasicBlock* to) {
    emit_phi_copies(from, *to);
    if (to != next_block_) line("bra.uni " + label(to));
  };
  if (auto* sw = llvm::dyn_cast<llvm::SwitchInst>(&inst)) {
    // A test per case; each taken edge gets its own copies.
    llvm::Type* t = sw->getCondition()->getType();
    std::string x = reg(sw->getCondition());
    for (const auto& c : sw->cases()) {
      std::string other = fresh_label(), differs = fresh(Reg::pred);
      line(fmt::format("setp.ne.b{} {}, {}, {}", mov_bits(class_of(t)), differs, x, immediate(c.getCaseValue())));
      line(fmt::format("@{} bra {}", differs, other));
      emit_phi_copies(from, *c.getCaseSuccessor());
      line("bra.uni " + label(c.getCaseSuccessor()));
      body_ += other + ":\n";
    }
    return go(sw->getDefaultDest());
  }
  auto* br = llvm::dyn_cast<llvm::BranchInst>(&inst);
  if (!br) throw Unsupported(fmt::format("the terminator '{}'", inst.getOpcodeName()));
  if (br->isUnconditional() || br->getSuccessor(0) == br->getSuccessor(1)) return go(br->getSuccessor(0));
  std::string cond = reg(br->getCondition());
  const llvm::BasicBlock *yes = br->getSuccessor(0), *no = br->getSuccessor(1);
  if (yes->getSingleSuccessor() == no)
    hoist_shared_copies(from, *yes, *no, inst);
  else if (no->getSingleSuccessor() == yes)
    hoist_shared_copies(from, *no, *yes, inst);
  bool yes_phis = takes_copies(from, *yes), no_phis = takes_copies(from, *no);
  if (!yes_phis && (no_phis || yes != next_block_)) {
    line(fmt::format("@{} bra {}", cond, label(yes)));
    return go(no);
  }
  if (!no_phis) {
    line(fmt::format("@!{} bra {}", cond, label(no)));
    return go(yes);
  }
  // Both successors take values: the no-edge's copies get a block of their own.
  std::string no_edge = fresh_label();
  line(fmt::format("@!{} bra {}", cond, no_edge));
  emit_phi_copies(from, *yes);
  line("bra.uni " + label(yes));
  body_ += no_edge + ":\n";
  go(no);
}

}  // namespace emitter

std::optional<std::string> emit_ptx(const llvm::Module& m, const PtxTarget& target, std::string* unsupported) {
  try {
    return emitter::PtxEmitter(m, target).run();
  } catch (const emitter::Unsupported& e) {
    if (unsupported) *unsupported = e.what();
    return std::nullopt;
  }
}

}  // namespace weft::codegen::nvptx
