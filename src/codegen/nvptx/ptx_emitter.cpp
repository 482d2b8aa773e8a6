// weft's own PTX emitter (ptx_emitter.h): the module, values and registers, control flow, arithmetic, casts
// and memory. Intrinsics and inline asm are in ptx_emitter_calls.cpp.
#include "codegen/nvptx/ptx_emitter.h"

#include <fmt/format.h>
#include <llvm/ADT/PostOrderIterator.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/GetElementPtrTypeIterator.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>

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

// Two-lane groups of 16-bit lanes share a b32 register.
bool packed16(llvm::Type* t) {
  auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t);
  return v && v->getNumElements() > 1 && v->getScalarSizeInBits() == 16;
}

// Shared memory's addresses fit 32 bits (PTX takes a 32-bit register as a .shared address): the emitter keeps
// them in b32 registers whatever the data layout says, so their arithmetic is 32-bit as LLVM's narrowing makes it.
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

}  // namespace

std::string int_type(char kind, int bits) { return fmt::format("{}{}", kind, bits); }

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

void PtxEmitter::line(const std::string& text) {
  body_ += '\t';
  body_ += text;
  body_ += ";\n";
}

std::string PtxEmitter::fresh(Reg cls) {
  int i = static_cast<int>(cls);
  return fmt::format("{}{}", kRegPrefix[i], next_[i]++);
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
  Parts p;
  for (Reg cls : part_classes(v->getType())) p.push_back(fresh(cls));
  bind(v, p);
  return p;
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

bool PtxEmitter::live_after(const llvm::Value* v, const llvm::Instruction* at) const {
  const llvm::BasicBlock* here = at->getParent();
  for (const llvm::User* user : v->users())
    if (!llvm::isa<llvm::PHINode>(user) && llvm::cast<llvm::Instruction>(user)->getParent() == here &&
        at->comesBefore(llvm::cast<llvm::Instruction>(user)))
      return true;
  llvm::SmallPtrSet<const llvm::BasicBlock*, 16> in, out;
  live_blocks(v, in, out);
  return out.count(here) > 0;
}

bool PtxEmitter::live_into(const llvm::Value* v, const llvm::BasicBlock* bb) const {
  llvm::SmallPtrSet<const llvm::BasicBlock*, 16> in, out;
  live_blocks(v, in, out);
  return in.count(bb) > 0;
}

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
    if (t->isFloatTy()) return fmt::format("0f{:08X}", bits);
    if (t->isDoubleTy()) return fmt::format("0d{:016X}", bits);
  }
  return "";
}

std::string PtxEmitter::constant_address(const llvm::Constant* c) {
  llvm::Type* t = c->getType();
  if (auto* g = llvm::dyn_cast<llvm::GlobalVariable>(c)) {
    if (!valid_name(g->getName())) throw Unsupported("a global whose name PTX cannot spell");
    std::string r = fresh(class_of(t));
    line(fmt::format("mov.u{} {}, {}", bits_of(t), r, g->getName().str()));
    return r;
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
  if (auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t)) {
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
  // A constant's registers are made where it is used (the use may not be dominated by an earlier one).
  if (auto* c = llvm::dyn_cast<llvm::Constant>(v)) return materialize(c);
  throw Unsupported("a value used before the emitter saw its definition");
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
    line(fmt::format("mov.b{} {}, 0", cls == Reg::b16 ? 16 : cls == Reg::b32 ? 32 : 64, r));
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
      decl = fmt::format(".param .b{} {}", bits, param);
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

  // Blocks in the function's order when every block comes after its immediate dominator (so every value is
  // defined before the emitter meets its uses), else in reverse post-order.
  std::vector<const llvm::BasicBlock*> order;
  llvm::DominatorTree dom(const_cast<llvm::Function&>(*fn_));
  for (const llvm::BasicBlock& bb : *fn_) {
    labels_[&bb] = static_cast<int>(order.size());
    order.push_back(&bb);
  }
  bool dominance_order = true;
  for (const llvm::BasicBlock* bb : order) {
    llvm::DomTreeNode* node = dom.getNode(bb);
    if (!node) throw Unsupported("an unreachable block");
    if (node->getIDom() && labels_.at(node->getIDom()->getBlock()) > labels_.at(bb)) dominance_order = false;
  }
  if (!dominance_order) {
    order.clear();
    labels_.clear();
    for (const llvm::BasicBlock* bb : llvm::ReversePostOrderTraversal<const llvm::Function*>(fn_)) {
      labels_[bb] = static_cast<int>(order.size());
      order.push_back(bb);
    }
  }
  std::string signature = entry_signature(*fn_);
  for (const llvm::BasicBlock* bb : order)
    for (const llvm::PHINode& phi : bb->phis()) define(&phi);
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
  out += "\n" + body_ + "}\n";
  return out;
}

// ---- blocks and control flow ------------------------------------------------------------------------------

void PtxEmitter::emit_block(const llvm::BasicBlock& bb) {
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
  std::vector<std::pair<std::string, std::string>> copies;
  for (const llvm::PHINode& phi : to.phis()) {
    const llvm::Value* v = phi.getIncomingValueForBlock(&from);
    const Parts& dst = values_.at(&phi);
    std::vector<Reg> classes = part_classes(phi.getType());
    bool scalar = classes.size() == 1 && classes[0] != Reg::pred && !phi.getType()->isVectorTy();
    Parts src = scalar ? Parts{operand(v)} : parts(v);
    for (size_t i = 0; i < dst.size(); ++i) copies.emplace_back(dst[i], defined_part(src[i], classes[i]));
  }
  emit_parallel_copy(std::move(copies));
}

// The copies as if all at once: a register is written only after every copy reading it has run; a cycle
// (two phis swapping values) goes through a fresh register.
void PtxEmitter::emit_parallel_copy(std::vector<std::pair<std::string, std::string>> copies) {
  std::erase_if(copies, [](const auto& c) { return c.first == c.second; });
  while (!copies.empty()) {
    bool progress = false;
    for (size_t i = 0; i < copies.size(); ++i) {
      const std::string& to = copies[i].first;
      bool read_later = std::any_of(copies.begin(), copies.end(), [&](const auto& c) { return c.second == to; });
      if (read_later) continue;
      line(mov(class_of_register(to), to, copies[i].second));
      copies.erase(copies.begin() + static_cast<std::ptrdiff_t>(i));
      progress = true;
      break;
    }
    if (progress) continue;
    // Every destination is still read: save one, and let its readers read the copy.
    std::string held = copies[0].first;
    Reg cls = class_of_register(held);
    std::string saved = fresh(cls);
    line(mov(cls, saved, held));
    for (auto& c : copies)
      if (c.second == held) c.second = saved;
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
  bool yes_phis = !yes->phis().empty(), no_phis = !no->phis().empty();
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

// ---- instructions -----------------------------------------------------------------------------------------

void PtxEmitter::emit_instruction(const llvm::Instruction& inst) {
  using llvm::Instruction;
  if (auto* op = llvm::dyn_cast<llvm::BinaryOperator>(&inst)) return emit_binary(*op);
  if (auto* cmp = llvm::dyn_cast<llvm::CmpInst>(&inst)) return emit_compare(*cmp);
  if (auto* cast = llvm::dyn_cast<llvm::CastInst>(&inst)) return emit_cast(*cast);
  switch (inst.getOpcode()) {
    case Instruction::Select: return emit_select(llvm::cast<llvm::SelectInst>(inst));
    case Instruction::GetElementPtr: return emit_gep(llvm::cast<llvm::GetElementPtrInst>(inst));
    case Instruction::Load: return emit_load(llvm::cast<llvm::LoadInst>(inst));
    case Instruction::Store: return emit_store(llvm::cast<llvm::StoreInst>(inst));
    case Instruction::Call: return emit_call(llvm::cast<llvm::CallInst>(inst));
    case Instruction::InsertElement: return emit_insert_element(llvm::cast<llvm::InsertElementInst>(inst));
    case Instruction::ExtractElement: return emit_extract_element(llvm::cast<llvm::ExtractElementInst>(inst));
    case Instruction::ExtractValue: {
      auto& ev = llvm::cast<llvm::ExtractValueInst>(inst);
      if (ev.getNumIndices() != 1 || !ev.getType()->isSingleValueType() || ev.getType()->isVectorTy())
        throw Unsupported("an extractvalue of a nested aggregate");
      std::string field = parts(ev.getAggregateOperand()).at(ev.getIndices()[0]);
      // A phi's registers change on the edges into its block: a field still needed there gets its own copy.
      // (Else it shares the register: a copy could read a wgmma's accumulator while the wgmma is in flight.)
      if (auto* phi = llvm::dyn_cast<llvm::PHINode>(ev.getAggregateOperand()); phi && live_into(&ev, phi->getParent())) {
        Reg cls = class_of(ev.getType());
        line(mov(cls, define(&ev)[0], defined_part(field, cls)));
        return;
      }
      bind(&ev, {field});
      return;
    }
    case Instruction::FNeg: {
      llvm::Type* t = inst.getType();
      if (!t->isFloatTy() && !t->isDoubleTy()) throw Unsupported("fneg of a vector or 16-bit float");
      std::string a = reg(inst.getOperand(0));
      line(fmt::format("neg.f{} {}, {}", bits_of(t), define(&inst)[0], a));
      return;
    }
    case Instruction::Freeze: {
      Parts src = parts(inst.getOperand(0));
      Parts d = define(&inst);
      std::vector<Reg> classes = part_classes(inst.getType());
      for (size_t i = 0; i < d.size(); ++i) line(mov(classes[i], d[i], defined_part(src[i], classes[i])));
      return;
    }
    default: throw Unsupported(fmt::format("the instruction '{}'", inst.getOpcodeName()));
  }
}

void PtxEmitter::emit_binary(const llvm::BinaryOperator& op) {
  using llvm::Instruction;
  llvm::Type* t = op.getType();
  if (t->isVectorTy()) throw Unsupported(fmt::format("vector '{}'", op.getOpcodeName()));
  int bits = bits_of(t);
  auto opc = op.getOpcode();
  std::string d = define(&op)[0];
  if (bits == 1) {
    const char* name = opc == Instruction::And ? "and" : opc == Instruction::Or ? "or" : opc == Instruction::Xor ? "xor" : nullptr;
    if (!name) throw Unsupported(fmt::format("'{}' on predicates", op.getOpcodeName()));
    line(fmt::format("{}.pred {}, {}, {}", name, d, reg(op.getOperand(0)), reg(op.getOperand(1))));
    return;
  }
  if (t->isFloatingPointTy()) {
    if (bits == 16) throw Unsupported("16-bit float arithmetic");
    const char* name = nullptr;
    switch (opc) {
      case Instruction::FAdd: name = "add.rn"; break;
      case Instruction::FSub: name = "sub.rn"; break;
      case Instruction::FMul: name = "mul.rn"; break;
      case Instruction::FDiv: name = bits == 32 && op.hasApproxFunc() ? "div.approx" : "div.rn"; break;
      default: throw Unsupported(fmt::format("the float instruction '{}'", op.getOpcodeName()));
    }
    line(fmt::format("{}.f{} {}, {}, {}", name, bits, d, operand(op.getOperand(0)), operand(op.getOperand(1))));
    return;
  }
  std::string a = operand(op.getOperand(0)), b = operand(op.getOperand(1));
  if (bits == 8) {
    // Bytes are computed in 16 bits; where the upper bits would show, the operands are extended first.
    bool sign = opc == Instruction::AShr || opc == Instruction::SDiv || opc == Instruction::SRem;
    bool extend = sign || opc == Instruction::LShr || opc == Instruction::UDiv || opc == Instruction::URem;
    bits = 16;
    if (extend || op.isShift()) {
      auto widen = [&](std::string& x, bool is_signed) {
        if (llvm::isa<llvm::Constant>(op.getOperand(&x == &a ? 0 : 1))) return;
        std::string w = fresh(Reg::b16);
        line(fmt::format("cvt.{}16.{}8 {}, {}", is_signed ? 's' : 'u', is_signed ? 's' : 'u', w, x));
        x = w;
      };
      if (extend) widen(a, sign);
      widen(b, false);
    }
  }
  std::string type;
  const char* name = nullptr;
  switch (opc) {
    case Instruction::Add: name = "add", type = int_type('s', bits); break;
    case Instruction::Sub: name = "sub", type = int_type('s', bits); break;
    case Instruction::Mul: name = "mul.lo", type = int_type('s', bits); break;
    case Instruction::SDiv: name = "div", type = int_type('s', bits); break;
    case Instruction::UDiv: name = "div", type = int_type('u', bits); break;
    case Instruction::SRem: name = "rem", type = int_type('s', bits); break;
    case Instruction::URem: name = "rem", type = int_type('u', bits); break;
    case Instruction::And: name = "and", type = int_type('b', bits); break;
    case Instruction::Or: name = "or", type = int_type('b', bits); break;
    case Instruction::Xor: name = "xor", type = int_type('b', bits); break;
    case Instruction::Shl: name = "shl", type = int_type('b', bits); break;
    case Instruction::LShr: name = "shr", type = int_type('u', bits); break;
    case Instruction::AShr: name = "shr", type = int_type('s', bits); break;
    default: throw Unsupported(fmt::format("the instruction '{}'", op.getOpcodeName()));
  }
  // Division by a power of two: shifts (rounding toward zero for signed values), as LLVM's code generator does.
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(op.getOperand(1));
      c && bits >= 16 && c->getValue().isPowerOf2() && !c->isOne() && c->getValue().logBase2() < unsigned(bits - 1) &&
      (opc == Instruction::SDiv || opc == Instruction::UDiv || opc == Instruction::SRem || opc == Instruction::URem)) {
    unsigned k = c->getValue().logBase2();
    if (opc == Instruction::UDiv) return line(fmt::format("shr.u{} {}, {}, {}", bits, d, a, k));
    if (opc == Instruction::URem) return line(fmt::format("and.b{} {}, {}, {}", bits, d, a, (uint64_t(1) << k) - 1));
    // Signed: round toward zero by adding 2^k - 1 to negative values first.
    Reg cls = class_of(t);
    std::string sign = fresh(cls), bias = fresh(cls), biased = fresh(cls);
    line(fmt::format("shr.s{} {}, {}, {}", bits, sign, a, bits - 1));
    line(fmt::format("shr.u{} {}, {}, {}", bits, bias, sign, bits - int(k)));
    line(fmt::format("add.s{} {}, {}, {}", bits, biased, a, bias));
    if (opc == Instruction::SDiv) return line(fmt::format("shr.s{} {}, {}, {}", bits, d, biased, k));
    std::string rounded = fresh(cls);  // srem: a - (biased & -2^k)
    line(fmt::format("and.b{} {}, {}, {}", bits, rounded, biased, -(int64_t(1) << k)));
    return line(fmt::format("sub.s{} {}, {}, {}", bits, d, a, rounded));
  }
  if (op.isShift() && bits != 32 && !llvm::isa<llvm::Constant>(op.getOperand(1))) {
    // PTX shifts take a 32-bit amount.
    std::string amount = fresh(Reg::b32);
    line(fmt::format("cvt.u32.u{} {}, {}", bits, amount, b));
    b = amount;
  }
  line(fmt::format("{}.{} {}, {}, {}", name, type, d, a, b));
}

void PtxEmitter::emit_compare(const llvm::CmpInst& cmp) {
  using P = llvm::CmpInst::Predicate;
  llvm::Type* t = cmp.getOperand(0)->getType();
  if (t->isVectorTy()) throw Unsupported("a vector compare");
  int bits = bits_of(t);
  std::string d = define(&cmp)[0];
  if (auto* fc = llvm::dyn_cast<llvm::FCmpInst>(&cmp)) {
    if (bits == 16) throw Unsupported("a 16-bit float compare");
    const char* cc = nullptr;
    switch (fc->getPredicate()) {
      case P::FCMP_OEQ: cc = "eq"; break;
      case P::FCMP_ONE: cc = "ne"; break;
      case P::FCMP_OLT: cc = "lt"; break;
      case P::FCMP_OLE: cc = "le"; break;
      case P::FCMP_OGT: cc = "gt"; break;
      case P::FCMP_OGE: cc = "ge"; break;
      case P::FCMP_UEQ: cc = "equ"; break;
      case P::FCMP_UNE: cc = "neu"; break;
      case P::FCMP_ULT: cc = "ltu"; break;
      case P::FCMP_ULE: cc = "leu"; break;
      case P::FCMP_UGT: cc = "gtu"; break;
      case P::FCMP_UGE: cc = "geu"; break;
      case P::FCMP_ORD: cc = "num"; break;
      case P::FCMP_UNO: cc = "nan"; break;
      case P::FCMP_TRUE: line(fmt::format("setp.eq.s32 {}, 0, 0", d)); return;
      default: line(fmt::format("setp.ne.s32 {}, 0, 0", d)); return;
    }
    line(fmt::format("setp.{}.f{} {}, {}, {}", cc, bits, d, operand(cmp.getOperand(0)), operand(cmp.getOperand(1))));
    return;
  }
  if (bits == 1) {
    std::string a = reg(cmp.getOperand(0)), b = reg(cmp.getOperand(1));
    if (cmp.getPredicate() == P::ICMP_NE) {
      line(fmt::format("xor.pred {}, {}, {}", d, a, b));
    } else if (cmp.getPredicate() == P::ICMP_EQ) {
      std::string x = fresh(Reg::pred);
      line(fmt::format("xor.pred {}, {}, {}", x, a, b));
      line(fmt::format("not.pred {}, {}", d, x));
    } else {
      throw Unsupported("an ordered compare of predicates");
    }
    return;
  }
  std::string a = operand(cmp.getOperand(0)), b = operand(cmp.getOperand(1));
  if (bits == 8) {  // compare bytes as 16-bit values, extended by the predicate's signedness
    bool sign = cmp.isSigned();
    for (auto [x, v] : {std::pair{&a, cmp.getOperand(0)}, std::pair{&b, cmp.getOperand(1)}}) {
      if (llvm::isa<llvm::Constant>(v)) continue;
      std::string w = fresh(Reg::b16);
      line(fmt::format("cvt.{0}16.{0}8 {1}, {2}", sign ? 's' : 'u', w, *x));
      *x = w;
    }
    bits = 16;
  }
  const char* cc = nullptr;
  char kind = 's';
  switch (cmp.getPredicate()) {
    case P::ICMP_EQ: cc = "eq"; break;
    case P::ICMP_NE: cc = "ne"; break;
    case P::ICMP_SLT: cc = "lt"; break;
    case P::ICMP_SLE: cc = "le"; break;
    case P::ICMP_SGT: cc = "gt"; break;
    case P::ICMP_SGE: cc = "ge"; break;
    case P::ICMP_ULT: cc = "lt", kind = 'u'; break;
    case P::ICMP_ULE: cc = "le", kind = 'u'; break;
    case P::ICMP_UGT: cc = "gt", kind = 'u'; break;
    case P::ICMP_UGE: cc = "ge", kind = 'u'; break;
    default: throw Unsupported("an integer compare predicate");
  }
  line(fmt::format("setp.{}.{} {}, {}, {}", cc, int_type(kind, bits), d, a, b));
}

void PtxEmitter::emit_select(const llvm::SelectInst& sel) {
  if (sel.getCondition()->getType()->isVectorTy()) throw Unsupported("a select on a vector of conditions");
  std::string c = reg(sel.getCondition());
  llvm::Type* t = sel.getType();
  std::vector<Reg> classes = part_classes(t);
  Parts d = define(&sel);
  bool scalar = !t->isVectorTy();
  Parts a = scalar ? Parts{operand(sel.getTrueValue())} : parts(sel.getTrueValue());
  Parts b = scalar ? Parts{operand(sel.getFalseValue())} : parts(sel.getFalseValue());
  for (size_t i = 0; i < d.size(); ++i) {
    if (classes[i] == Reg::pred) {
      // d = c & a | !c & b
      std::string x = fresh(Reg::pred), y = fresh(Reg::pred), nc = fresh(Reg::pred);
      line(fmt::format("and.pred {}, {}, {}", x, c, defined_part(a[i], Reg::pred)));
      line(fmt::format("not.pred {}, {}", nc, c));
      line(fmt::format("and.pred {}, {}, {}", y, nc, defined_part(b[i], Reg::pred)));
      line(fmt::format("or.pred {}, {}, {}", d[i], x, y));
      continue;
    }
    line(fmt::format("selp.b{} {}, {}, {}, {}", mov_bits(classes[i]), d[i], defined_part(a[i], classes[i]),
                     defined_part(b[i], classes[i]), c));
  }
}

void PtxEmitter::emit_cast(const llvm::CastInst& cast) {
  using llvm::Instruction;
  llvm::Type *from_t = cast.getSrcTy(), *to_t = cast.getDestTy();
  auto opc = cast.getOpcode();
  if (opc == Instruction::BitCast) {
    std::vector<Reg> from_c = part_classes(from_t), to_c = part_classes(to_t);
    Parts src = parts(cast.getOperand(0));
    Parts d = define(&cast);
    auto bits = [](Reg r) { return r == Reg::b16 ? 16 : r == Reg::b32 ? 32 : 64; };
    if (from_c.size() == to_c.size() && from_c[0] == to_c[0] && from_c[0] != Reg::pred) {
      for (size_t i = 0; i < d.size(); ++i)
        line(fmt::format("mov.b{} {}, {}", bits(to_c[i]), d[i], defined_part(src[i], from_c[i])));
    } else if (to_c.size() == 1 && from_c.size() == 2 && bits(to_c[0]) == 2 * bits(from_c[0])) {
      line(fmt::format("mov.b{} {}, {{{}, {}}}", bits(to_c[0]), d[0], defined_part(src[0], from_c[0]),
                       defined_part(src[1], from_c[1])));
    } else if (from_c.size() == 1 && to_c.size() == 2 && bits(from_c[0]) == 2 * bits(to_c[0])) {
      line(fmt::format("mov.b{} {{{}, {}}}, {}", bits(from_c[0]), d[0], d[1], defined_part(src[0], from_c[0])));
    } else if (from_t->getScalarType()->isIntegerTy(8) && to_c.size() == 1 && to_c[0] != Reg::pred &&
               int(from_c.size()) * 8 == bits(to_c[0])) {
      // Bytes into one register: each lane zero-extended and shifted into place.
      int b = bits(to_c[0]);
      std::string acc;
      for (size_t i = 0; i < from_c.size(); ++i) {
        std::string lane = fresh(to_c[0]);
        line(fmt::format("cvt.u{}.u8 {}, {}", b, lane, defined_part(src[i], Reg::b16)));
        if (i > 0) {
          std::string shifted = fresh(to_c[0]);
          line(fmt::format("shl.b{} {}, {}, {}", b, shifted, lane, 8 * i));
          std::string merged = i + 1 == from_c.size() ? d[0] : fresh(to_c[0]);
          line(fmt::format("or.b{} {}, {}, {}", b, merged, acc, shifted));
          acc = merged;
        } else {
          acc = lane;
        }
      }
      if (from_c.size() == 1) line(fmt::format("mov.b{} {}, {}", b, d[0], acc));
    } else if (to_t->getScalarType()->isIntegerTy(8) && from_c.size() == 1 && from_c[0] != Reg::pred &&
               int(to_c.size()) * 8 == bits(from_c[0])) {
      int b = bits(from_c[0]);
      std::string x = defined_part(src[0], from_c[0]);
      for (size_t i = 0; i < to_c.size(); ++i) {
        std::string shifted = x;
        if (i > 0) {
          shifted = fresh(from_c[0]);
          line(fmt::format("shr.u{} {}, {}, {}", b, shifted, x, 8 * i));
        }
        line(b == 16 ? fmt::format("mov.b16 {}, {}", d[i], shifted) : fmt::format("cvt.u16.u{} {}, {}", b, d[i], shifted));
      }
    } else {
      throw Unsupported("a bitcast between these vector shapes");
    }
    return;
  }
  // fptrunc of f32 pairs to packed 16-bit floats: one cvt per pair, the upper lane first.
  if (opc == Instruction::FPTrunc && packed16(to_t)) {
    if (!from_t->getScalarType()->isFloatTy()) throw Unsupported("an fptrunc to 16-bit lanes from other than f32");
    Parts src = parts(cast.getOperand(0));
    Parts d = define(&cast);
    const char* type = to_t->getScalarType()->isBFloatTy() ? "bf16x2" : "f16x2";
    for (size_t i = 0; i < d.size(); ++i)
      line(fmt::format("cvt.rn.{}.f32 {}, {}, {}", type, d[i], defined_part(src[2 * i + 1], Reg::b32),
                       defined_part(src[2 * i], Reg::b32)));
    return;
  }
  if (from_t->isVectorTy() || to_t->isVectorTy()) throw Unsupported(fmt::format("a vector '{}'", cast.getOpcodeName()));
  int from = bits_of(from_t), to = bits_of(to_t);
  std::string d = define(&cast)[0];
  std::string a = opc == Instruction::ZExt || opc == Instruction::SExt || opc == Instruction::Trunc ||
                          opc == Instruction::PtrToInt || opc == Instruction::IntToPtr
                      ? operand(cast.getOperand(0))
                      : reg(cast.getOperand(0));
  auto float_name = [](llvm::Type* t) {
    return t->isBFloatTy() ? std::string("bf16") : fmt::format("f{}", t->getPrimitiveSizeInBits().getFixedValue());
  };
  switch (opc) {
    case Instruction::Trunc:
      if (to == 8) to = 16;  // a byte keeps the low bits of a 16-bit register
      if (from == 8) from = 16;
      if (to == from) {
        line(fmt::format("mov.b16 {}, {}", d, a));
      } else if (to == 1) {
        std::string low = fresh(class_of(from_t));
        line(fmt::format("and.b{} {}, {}, 1", from, low, a));
        line(fmt::format("setp.eq.b{} {}, {}, 1", from, d, low));
      } else {
        line(fmt::format("cvt.u{}.u{} {}, {}", to, from, d, a));
      }
      return;
    case Instruction::ZExt:
    case Instruction::SExt: {
      bool sign = opc == Instruction::SExt;
      if (to == 8) to = 16;  // from a predicate: the byte in a 16-bit register
      if (from == 1)
        line(fmt::format("selp.{} {}, {}, 0, {}", int_type(sign ? 's' : 'u', to), d, sign ? "-1" : "1", reg(cast.getOperand(0))));
      else
        line(fmt::format("cvt.{}.{} {}, {}", int_type(sign ? 's' : 'u', to), int_type(sign ? 's' : 'u', from), d, a));
      return;
    }
    case Instruction::PtrToInt:
    case Instruction::IntToPtr:
      if (from == to)
        line(fmt::format("mov.b{} {}, {}", to, d, a));
      else
        line(fmt::format("cvt.u{}.u{} {}, {}", to, from, d, a));
      return;
    case Instruction::FPTrunc:
      line(fmt::format("cvt.rn.{}.{} {}, {}", float_name(to_t), float_name(from_t), d, a));
      return;
    case Instruction::FPExt:
      line(fmt::format("cvt.{}.{} {}, {}", float_name(to_t), float_name(from_t), d, a));
      return;
    case Instruction::FPToSI:
    case Instruction::FPToUI:
      if (from == 16) throw Unsupported("a conversion from a 16-bit float to an integer");
      line(fmt::format("cvt.rzi.{}.f{} {}, {}", int_type(opc == Instruction::FPToSI ? 's' : 'u', to), from, d, a));
      return;
    case Instruction::SIToFP:
    case Instruction::UIToFP:
      if (to == 16 || from == 1) throw Unsupported("a conversion to a 16-bit float or from a predicate");
      line(fmt::format("cvt.rn.f{}.{} {}, {}", to, int_type(opc == Instruction::SIToFP ? 's' : 'u', from), d, a));
      return;
    case Instruction::AddrSpaceCast: {
      unsigned as_from = from_t->getPointerAddressSpace(), as_to = to_t->getPointerAddressSpace();
      if (as_to == 0 && as_from != 0) {
        line(fmt::format("mov.b64 {}, {}", d, generic_address(a, as_from)));
      } else if (as_from == 0 && as_to != 0) {
        std::string specific = to == 64 ? d : fresh(Reg::b64);
        line(fmt::format("cvta.to{}.u64 {}, {}", space_name(as_to), specific, a));
        if (to != 64) line(fmt::format("cvt.u32.u64 {}, {}", d, specific));
      } else {
        throw Unsupported("an address space cast between two specific spaces");
      }
      return;
    }
    default: throw Unsupported(fmt::format("the cast '{}'", cast.getOpcodeName()));
  }
}

void PtxEmitter::emit_gep(const llvm::GetElementPtrInst& gep) {
  if (gep.getType()->isVectorTy()) throw Unsupported("a vector of addresses");
  int bits = bits_of(gep.getType());
  std::string acc = reg(gep.getPointerOperand());
  int64_t offset = 0;
  for (auto it = llvm::gep_type_begin(gep), end = llvm::gep_type_end(gep); it != end; ++it) {
    const llvm::Value* index = it.getOperand();
    if (llvm::StructType* s = it.getStructTypeOrNull()) {
      offset += static_cast<int64_t>(
          dl_.getStructLayout(s)->getElementOffset(static_cast<unsigned>(llvm::cast<llvm::ConstantInt>(index)->getZExtValue())));
      continue;
    }
    int64_t size = static_cast<int64_t>(it.getSequentialElementStride(dl_).getFixedValue());
    if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(index)) {
      offset += c->getSExtValue() * size;
      continue;
    }
    // A 32-bit index widened for the address multiplies as 32 x 32 -> 64 bits (IMAD.WIDE), not in 64 bits; a
    // 32-bit (shared) address takes the index's low half.
    auto* ext = llvm::dyn_cast<llvm::CastInst>(index);
    bool narrow = ext && (llvm::isa<llvm::SExtInst>(ext) || llvm::isa<llvm::ZExtInst>(ext)) &&
                  ext->getSrcTy()->isIntegerTy(32);
    std::string next = fresh(class_of(gep.getType()));
    if (bits == 32) {
      std::string idx = narrow ? reg(ext->getOperand(0)) : reg(index);
      int index_bits = narrow ? 32 : bits_of(index->getType());
      if (index_bits != 32) {
        std::string low = fresh(Reg::b32);
        line(fmt::format("cvt.{}32.{}{} {}, {}", index_bits < 32 ? 's' : 'u', index_bits < 32 ? 's' : 'u', index_bits,
                         low, idx));
        idx = low;
      }
      line(fmt::format("mad.lo.s32 {}, {}, {}, {}", next, idx, size, acc));
    } else if (narrow) {
      std::string scaled = fresh(Reg::b64);
      line(fmt::format("mul.wide.{}32 {}, {}, {}", llvm::isa<llvm::SExtInst>(ext) ? 's' : 'u', scaled,
                       reg(ext->getOperand(0)), size));
      line(fmt::format("add.s64 {}, {}, {}", next, acc, scaled));
    } else {
      std::string idx = reg(index);
      int index_bits = bits_of(index->getType());
      if (index_bits != bits) {  // indices are signed
        std::string wide = fresh(class_of(gep.getType()));
        line(fmt::format("cvt.s{}.s{} {}, {}", bits, index_bits, wide, idx));
        idx = wide;
      }
      line(fmt::format("mad.lo.s{} {}, {}, {}, {}", bits, next, idx, size, acc));
    }
    acc = next;
  }
  std::string d = define(&gep)[0];
  line(offset ? fmt::format("add.s{} {}, {}, {}", bits, d, acc, offset) : fmt::format("mov.b{} {}, {}", bits, d, acc));
}

// Loads or stores `type` at `ptr` in accesses PTX allows: vectors of up to 16 bytes (v2, v4) aligned to their
// size, else smaller pieces; a part aligned below its size goes as two halves.
void PtxEmitter::emit_memory(bool is_load, const llvm::Value* ptr, llvm::Type* type, llvm::Align align,
                             bool is_volatile, const Parts& values, Parts* results) {
  std::vector<Reg> classes = part_classes(type);
  if (classes[0] == Reg::pred) throw Unsupported("a load or store of predicates");
  // Bytes live in 16-bit registers; memory sees 8 bits.
  int part_bits = type->getScalarType()->isIntegerTy(8) ? 8 : mov_bits(classes[0]);
  int part_bytes = part_bits / 8;
  std::string space = space_of(ptr);
  std::string addr = reg(ptr);
  std::string op = fmt::format("{}{}{}", is_load ? "ld" : "st", is_volatile ? ".volatile" : "", space);
  auto where = [&](uint64_t offset) { return offset ? fmt::format("[{}+{}]", addr, offset) : fmt::format("[{}]", addr); };
  size_t n = classes.size();
  for (size_t i = 0; i < n;) {
    uint64_t offset = i * part_bytes;
    uint64_t aligned = llvm::commonAlignment(align, offset).value();
    if (aligned < uint64_t(part_bytes)) {
      // Two halves (a 64-bit value at a 4-byte boundary, a packed pair at a 2-byte one).
      if (part_bits < 32 || aligned * 2 < uint64_t(part_bytes))
        throw Unsupported("a load or store less aligned than half its lanes");
      int half = part_bits / 2;
      Reg half_cls = half == 32 ? Reg::b32 : Reg::b16;
      std::string lo = fresh(half_cls), hi = fresh(half_cls);
      if (is_load) {
        line(fmt::format("{}.b{} {}, {}", op, half, lo, where(offset)));
        line(fmt::format("{}.b{} {}, {}", op, half, hi, where(offset + part_bytes / 2)));
        line(fmt::format("mov.b{} {}, {{{}, {}}}", part_bits, (*results)[i], lo, hi));
      } else {
        line(fmt::format("mov.b{} {{{}, {}}}, {}", part_bits, lo, hi, defined_part(values[i], classes[i])));
        line(fmt::format("{}.b{} {}, {}", op, half, where(offset), lo));
        line(fmt::format("{}.b{} {}, {}", op, half, where(offset + part_bytes / 2), hi));
      }
      ++i;
      continue;
    }
    size_t k = 1;
    for (size_t want : {size_t(4), size_t(2)})
      if (i + want <= n && want * part_bytes <= 16 && aligned >= want * part_bytes) {
        k = want;
        break;
      }
    std::string regs;
    for (size_t j = 0; j < k; ++j) {
      std::string r = is_load ? (*results)[i + j] : defined_part(values[i + j], classes[i + j]);
      regs += (j ? ", " : "") + r;
    }
    if (k > 1) regs = "{" + regs + "}";
    std::string vec = k > 1 ? fmt::format(".v{}", k) : "";
    line(is_load ? fmt::format("{}{}.b{} {}, {}", op, vec, part_bits, regs, where(offset))
                 : fmt::format("{}{}.b{} {}, {}", op, vec, part_bits, where(offset), regs));
    i += k;
  }
}

void PtxEmitter::emit_load(const llvm::LoadInst& load) {
  if (load.isAtomic()) throw Unsupported("an atomic load");
  Parts d = define(&load);
  emit_memory(true, load.getPointerOperand(), load.getType(), load.getAlign(), load.isVolatile(), {}, &d);
}

void PtxEmitter::emit_store(const llvm::StoreInst& store) {
  if (store.isAtomic()) throw Unsupported("an atomic store");
  const llvm::Value* v = store.getValueOperand();
  Parts values = v->getType()->isVectorTy() ? parts(v) : Parts{reg(v)};
  emit_memory(false, store.getPointerOperand(), v->getType(), store.getAlign(), store.isVolatile(), values, nullptr);
}

void PtxEmitter::emit_insert_element(const llvm::InsertElementInst& ins) {
  auto* index = llvm::dyn_cast<llvm::ConstantInt>(ins.getOperand(2));
  if (!index) throw Unsupported("an insertelement at a variable lane");
  unsigned lane = static_cast<unsigned>(index->getZExtValue());
  llvm::Type* t = ins.getType();
  const llvm::Value* base = ins.getOperand(0);
  bool base_poison = llvm::isa<llvm::UndefValue>(base);
  Parts out = base_poison ? Parts(part_classes(t).size()) : parts(base);
  std::string x = reg(ins.getOperand(1));
  if (packed16(t)) {
    std::string part = fresh(Reg::b32);
    std::string& old = out[lane / 2];
    // Both lanes of a pair rounded from f32: one cvt of the pair (F2FP packs two at once).
    auto* base_insert = llvm::dyn_cast<llvm::InsertElementInst>(base);
    auto* other_lane = base_insert ? llvm::dyn_cast<llvm::ConstantInt>(base_insert->getOperand(2)) : nullptr;
    auto* mine = llvm::dyn_cast<llvm::FPTruncInst>(ins.getOperand(1));
    auto* theirs = base_insert ? llvm::dyn_cast<llvm::FPTruncInst>(base_insert->getOperand(1)) : nullptr;
    if (mine && theirs && other_lane && other_lane->getZExtValue() == (lane ^ 1u) &&
        mine->getSrcTy()->isFloatTy() && theirs->getSrcTy()->isFloatTy() &&
        llvm::isa<llvm::UndefValue>(base_insert->getOperand(0))) {
      std::string x32 = reg(mine->getOperand(0)), y32 = reg(theirs->getOperand(0));
      line(fmt::format("cvt.rn.{}x2.f32 {}, {}, {}", t->getScalarType()->isBFloatTy() ? "bf16" : "f16", part,
                       lane % 2 ? x32 : y32, lane % 2 ? y32 : x32));
      old = part;
      bind(&ins, out);
      return;
    }
    if (old.empty()) {
      line(fmt::format("mov.b32 {}, {{{}, {}}}", part, x, x));
    } else {
      std::string lo = fresh(Reg::b16), hi = fresh(Reg::b16);
      line(fmt::format("mov.b32 {{{}, {}}}, {}", lo, hi, old));
      line(fmt::format("mov.b32 {}, {{{}, {}}}", part, lane % 2 ? lo : x, lane % 2 ? x : hi));
    }
    old = part;
  } else {
    // Lanes of a vector are registers defined once, so the new vector shares the old one's other lanes; the
    // inserted lane gets its own copy (x may be a phi's register, which changes at its block's start).
    std::string r = fresh(class_of(t->getScalarType()));
    Reg cls = class_of(t->getScalarType());
    line(mov(cls, r, x));
    // A phi's own lanes are copied too: they change at their block's start.
    if (!base_poison && llvm::isa<llvm::PHINode>(base)) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (i == lane || out[i].empty()) continue;
        std::string c = fresh(cls);
        line(mov(cls, c, out[i]));
        out[i] = c;
      }
    }
    out[lane] = r;
  }
  bind(&ins, out);
}

void PtxEmitter::emit_extract_element(const llvm::ExtractElementInst& ext) {
  auto* index = llvm::dyn_cast<llvm::ConstantInt>(ext.getIndexOperand());
  if (!index) throw Unsupported("an extractelement at a variable lane");
  unsigned lane = static_cast<unsigned>(index->getZExtValue());
  llvm::Type* vt = ext.getVectorOperandType();
  Parts src = parts(ext.getVectorOperand());
  std::string d = define(&ext)[0];
  if (packed16(vt)) {
    std::string lo = fresh(Reg::b16), hi = fresh(Reg::b16);
    line(fmt::format("mov.b32 {{{}, {}}}, {}", lo, hi, defined_part(src[lane / 2], Reg::b32)));
    line(fmt::format("mov.b16 {}, {}", d, lane % 2 ? hi : lo));
    return;
  }
  Reg cls = class_of(ext.getType());
  std::string s = defined_part(src[lane], cls);
  line(mov(cls, d, s));
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
