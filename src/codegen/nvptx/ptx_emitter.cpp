// weft's own PTX emitter (ptx_emitter.h): the module, values and registers, liveness. Block order and control
// flow are in ptx_emitter_control.cpp, the instructions in ptx_emitter_ops.cpp, intrinsics and inline asm in
// ptx_emitter_calls.cpp.
#include "codegen/nvptx/ptx_emitter.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>

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

std::string int_type(char kind, int bits) { return fmt::format(FMT_COMPILE("{}{}"), kind, bits); }

std::string float_type(llvm::Type* t) {
  return t->isBFloatTy() ? std::string("bf16") : fmt::format(FMT_COMPILE("f{}"), t->getPrimitiveSizeInBits().getFixedValue());
}

std::string float_immediate(uint64_t bits, int width) {
  return width == 32 ? fmt::format(FMT_COMPILE("0f{:08X}"), bits) : fmt::format(FMT_COMPILE("0d{:016X}"), bits);
}

Reg class_of_register(const std::string& name) {
  if (name.starts_with("%rd")) return Reg::b64;
  if (name.starts_with("%rs")) return Reg::b16;
  if (name.starts_with("%r")) return Reg::b32;
  if (name.starts_with("%p")) return Reg::pred;
  throw Unsupported("a register named " + name);
}

unsigned register_key(const std::string& name) {
  Reg cls = class_of_register(name);
  size_t at = std::char_traits<char>::length(kRegPrefix[static_cast<int>(cls)]);
  if (at == name.size() || name.size() - at > 7) throw Unsupported("a register named " + name);
  unsigned n = 0;
  for (; at < name.size(); ++at) {
    if (name[at] < '0' || name[at] > '9') throw Unsupported("a register named " + name);
    n = n * 10 + static_cast<unsigned>(name[at] - '0');
  }
  return static_cast<unsigned>(cls) << 28 | n;
}

int mov_bits(Reg cls) { return cls == Reg::b16 ? 16 : cls == Reg::b32 ? 32 : 64; }

std::string mov(Reg cls, const std::string& to, const std::string& from) {
  return cls == Reg::pred ? fmt::format(FMT_COMPILE("mov.pred {}, {}"), to, from) : fmt::format(FMT_COMPILE("mov.b{} {}, {}"), mov_bits(cls), to, from);
}

PtxEmitter::PtxEmitter(const llvm::Module& m, const PtxTarget& target)
    : m_(m), dl_(m.getDataLayout()), target_(target) {
  if (parsed_asm_cache().size() > 512) parsed_asm_cache().clear();  // a bound, not a policy: kernels reuse few
}

std::unordered_map<std::string, PtxEmitter::ParsedAsm>& PtxEmitter::parsed_asm_cache() {
  thread_local std::unordered_map<std::string, ParsedAsm> cache;
  return cache;
}

// ---- registers and operands -------------------------------------------------------------------------------

// As LLVM prints PTX, so that text written for its PTX reads this one the same: "\topcode \toperands;", a guard
// predicate ("@%p1 bra ...") staying with its opcode.
void PtxEmitter::line(std::string_view text) {
  size_t opcode = text[0] == '@' ? text.find(' ') + 1 : 0;
  size_t space = text.find(' ', opcode);
  body_ += '\t';
  if (space == std::string::npos) {
    body_ += text;
  } else {
    body_.append(text.substr(0, space));
    body_ += " \t";
    body_.append(text.substr(space + 1));
  }
  body_ += ";\n";
}

std::string PtxEmitter::fresh(Reg cls) {
  int i = static_cast<int>(cls);
  std::string name = kRegPrefix[i];  // by hand: fmt::format took 2.5 times as long
  name += std::to_string(next_[i]++);
  return name;
}

std::string PtxEmitter::extend_byte(const std::string& x, bool is_signed) {
  std::string w = fresh(Reg::b16);
  emit(FMT_COMPILE("cvt.{0}16.{0}8 {1}, {2}"), is_signed ? 's' : 'u', w, x);
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

RegClasses PtxEmitter::part_classes(llvm::Type* t) const {
  if (auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t)) {
    unsigned n = v->getNumElements();
    if (packed16(t)) {
      if (n % 2) throw Unsupported("a vector of an odd number of 16-bit lanes");
      return RegClasses(n / 2, Reg::b32);
    }
    return RegClasses(n, class_of(v->getElementType()));
  }
  if (auto* s = llvm::dyn_cast<llvm::StructType>(t)) {
    RegClasses out;
    for (llvm::Type* e : s->elements()) out.push_back(class_of(e));
    return out;
  }
  if (t->isVectorTy() || t->isArrayTy()) throw Unsupported("an array or scalable vector value");
  return {class_of(t)};
}

const Parts& PtxEmitter::define(const llvm::Value* v) {
  RegClasses classes = part_classes(v->getType());
  Parts p;
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(v); inst && classes.size() == 1 && !llvm::isa<llvm::PHINode>(inst))
    if (std::string r = phi_register_for_value(*inst, classes[0]); !r.empty()) p.push_back(r);
  if (p.empty())
    for (Reg cls : classes) p.push_back(fresh(cls));
  bind(v, std::move(p));
  return values_.find(v)->second;
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
          cast && part_classes(cast->getDestTy()) == RegClasses{cls} && cls != Reg::pred)
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
      for (const llvm::Value* holder : holders(r))
        if (free && holder != &inst && live_after(holder, &inst)) free = false;
      if (free) return r;
    }
  return "";
}

void PtxEmitter::bind(const llvm::Value* v, Parts parts) {
  for (const std::string& r : parts)
    if (!r.empty()) holders(r).push_back(v);
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
      emit(FMT_COMPILE("mov.u{} {}, {}"), bits_of(t), at->second, g->getName().str());
      std::swap(body_, entry_prologue_);
    }
    return at->second;
  }
  if (llvm::isa<llvm::ConstantPointerNull>(c) || llvm::isa<llvm::ConstantInt>(c) || llvm::isa<llvm::UndefValue>(c)) {
    std::string r = fresh(class_of(t));
    emit(FMT_COMPILE("mov.b{} {}, {}"), mov_bits(class_of(t)), r, llvm::isa<llvm::ConstantInt>(c) ? immediate(c) : "0");
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
    emit(FMT_COMPILE("add.s{} {}, {}, {}"), bits_of(t), r, base, offset.getSExtValue());
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
      emit(FMT_COMPILE("{}{} {}, {}, {}"), name, bits_of(t), r, a, b);
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
      emit(FMT_COMPILE("cvt.u{}.u{} {}, {}"), to, from, r, src);
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
    emit(FMT_COMPILE("cvt.u64.u32 {}, {}"), wide, addr);
  }
  std::string r = fresh(Reg::b64);
  emit(FMT_COMPILE("cvta{}.u64 {}, {}"), space_name(as), r, wide);
  return r;
}

Parts PtxEmitter::materialize(const llvm::Constant* c) {
  llvm::Type* t = c->getType();
  if (t->isPointerTy() || llvm::isa<llvm::ConstantExpr>(c)) return {constant_address(c)};
  if (t->isIntegerTy(1)) {
    std::string r = fresh(Reg::pred);
    bool value = !llvm::isa<llvm::UndefValue>(c) && !c->isNullValue();
    emit(FMT_COMPILE("setp.{}.s32 {}, 0, 0"), value ? "eq" : "ne", r);
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
    RegClasses classes = part_classes(t);
    bool pack = packed16(t);
    for (size_t p = 0; p < classes.size(); ++p) {
      std::string r = fresh(classes[p]);
      if (classes[p] == Reg::pred) {
        emit(FMT_COMPILE("setp.{}.s32 {}, 0, 0"), lane_bits(c->getAggregateElement(unsigned(p))) ? "eq" : "ne", r);
      } else {
        uint64_t bits = pack ? lane_bits(c->getAggregateElement(unsigned(2 * p))) |
                                   lane_bits(c->getAggregateElement(unsigned(2 * p + 1))) << 16
                             : lane_bits(c->getAggregateElement(unsigned(p)));
        emit(FMT_COMPILE("mov.b{} {}, {}"), mov_bits(classes[p]), r, bits);
      }
      out.push_back(r);
    }
    return out;
  }
  std::string r = fresh(class_of(t));
  std::string imm = immediate(c);
  if (imm.empty()) imm = fmt::format(FMT_COMPILE("{:#x}"), lane_bits(c));
  emit(FMT_COMPILE("mov.b{} {}, {}"), mov_bits(class_of(t)), r, imm);
  return {r};
}

Parts PtxEmitter::parts(const llvm::Value* v) { return parts_in_place(v); }

const Parts& PtxEmitter::parts_in_place(const llvm::Value* v) {
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
    for (const llvm::Value* holder : holders(r))
      if (llvm::isa<llvm::PHINode>(holder)) return false;
  }
  return true;
}

std::string PtxEmitter::reg(const llvm::Value* v) {
  std::string part;
  {
    const Parts& p = parts_in_place(v);
    if (p.size() != 1) throw Unsupported("a vector where a scalar was expected");
    part = p[0];
  }
  return defined_part(part, class_of(v->getType()));
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
    emit(FMT_COMPILE("setp.ne.s32 {}, 0, 0"), r);
  else
    emit(FMT_COMPILE("mov.b{} {}, 0"), mov_bits(cls), r);
  return r;
}

std::string PtxEmitter::space_of(const llvm::Value* ptr) const {
  return space_name(ptr->getType()->getPointerAddressSpace());
}

std::string PtxEmitter::label(const llvm::BasicBlock* bb) { return fmt::format(FMT_COMPILE("$L__BB{}"), labels_.at(bb)); }

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
      out += fmt::format(FMT_COMPILE(".extern .shared .align {} .b8 {}[];\n"), align, g.getName().str());
    else
      out += fmt::format(FMT_COMPILE(".shared .align {} .b8 {}[{}];\n"), align, g.getName().str(), size);
  }
}

std::string PtxEmitter::entry_signature(const llvm::Function& f) {
  std::string name = f.getName().str();
  std::string sig = fmt::format(FMT_COMPILE(".visible .entry {}(\n"), name);
  for (const llvm::Argument& a : f.args()) {
    std::string param = fmt::format(FMT_COMPILE("{}_param_{}"), name, a.getArgNo());
    std::string decl;
    if (a.hasByValAttr()) {
      if (!a.hasAttribute("nvvm.grid_constant")) throw Unsupported("a by-value parameter that is not a grid constant");
      uint64_t align = a.getParamAlign() ? a.getParamAlign()->value() : 4;
      decl = fmt::format(FMT_COMPILE(".param .align {} .b8 {}[{}]"), align, param, dl_.getTypeAllocSize(a.getParamByValType()));
      std::string addr = fresh(Reg::b64), generic = fresh(Reg::b64);
      emit(FMT_COMPILE("mov.b64 {}, {}"), addr, param);
      emit(FMT_COMPILE("cvta.param.u64 {}, {}"), generic, addr);
      bind(&a, {generic});
    } else {
      int bits = bits_of(a.getType());
      if (bits == 1) throw Unsupported("a predicate parameter");
      decl = fmt::format(FMT_COMPILE(".param .u{} {}"), bits, param);
      std::string r = fresh(class_of(a.getType()));
      emit(FMT_COMPILE("ld.param.b{} {}, [{}]"), bits, r, param);
      bind(&a, {r});
    }
    sig += fmt::format(FMT_COMPILE("\t{}{}\n"), decl, a.getArgNo() + 1 < f.arg_size() ? "," : "");
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
    if (i > 0) body_ += fmt::format(FMT_COMPILE("{}:\n"), label(order[i]));
    next_block_ = i + 1 < order.size() ? order[i + 1] : nullptr;
    emit_block(*order[i]);
  }

  std::string out = fmt::format(
      "//\n// Generated by weft's PTX emitter\n//\n\n.version {}.{}\n.target {}\n.address_size 64\n\n", major, minor,
      target_.arch);
  emit_globals(out);
  out += "\n" + signature + "{\n";
  for (int c = 0; c < kRegClasses; ++c)
    if (next_[c] > 1) out += fmt::format(FMT_COMPILE("\t.reg {} \t{}<{}>;\n"), kRegDecl[c], kRegPrefix[c], next_[c]);
  out += "\n" + entry_prologue_ + body_ + "}\n";
  return out;
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
