// weft's own PTX emitter (ptx_emitter.h): the instructions (arithmetic, compares, selects, casts, addresses,
// loads and stores, vector lanes). Calls are in ptx_emitter_calls.cpp.
#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GetElementPtrTypeIterator.h>
#include <llvm/Support/DivisionByConstantInfo.h>

#include <string_view>
#include <unordered_map>
#include <utility>

#include "codegen/nvptx/ptx_emitter_impl.h"

namespace weft::codegen::nvptx::emitter {

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
    case Instruction::ShuffleVector: return emit_shuffle(llvm::cast<llvm::ShuffleVectorInst>(inst));
    case Instruction::ExtractValue: {
      auto& ev = llvm::cast<llvm::ExtractValueInst>(inst);
      if (ev.getNumIndices() != 1 || !ev.getType()->isSingleValueType() || ev.getType()->isVectorTy())
        throw Unsupported("an extractvalue of a nested aggregate");
      const Parts& fields = parts_in_place(ev.getAggregateOperand());
      if (ev.getIndices()[0] >= fields.size()) throw Unsupported("an extractvalue past its aggregate's fields");
      std::string field = fields[ev.getIndices()[0]];
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
      if (t->isVectorTy()) throw Unsupported("fneg of a vector");
      std::string a = reg(inst.getOperand(0));
      emit(FMT_COMPILE("neg.{} {}, {}"), float_type(t), define(&inst)[0], a);
      return;
    }
    case Instruction::Freeze: {
      Parts src = parts(inst.getOperand(0));
      Parts d = define(&inst);
      RegClasses classes = part_classes(inst.getType());
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
    emit(FMT_COMPILE("{}.pred {}, {}, {}"), name, d, reg(op.getOperand(0)), reg(op.getOperand(1)));
    return;
  }
  if (t->isFloatingPointTy()) {
    if (bits == 16) {  // add, sub and mul of f16 and bf16 have instructions; the rest computes in f32 first
      std::string type = float_type(t);
      if (opc == Instruction::FDiv) {  // in f32 (enough bits that rounding twice changes nothing), rounded back
        std::string a = fresh(Reg::b32), b = fresh(Reg::b32), q = fresh(Reg::b32);
        emit(FMT_COMPILE("cvt.f32.{} {}, {}"), type, a, reg(op.getOperand(0)));
        emit(FMT_COMPILE("cvt.f32.{} {}, {}"), type, b, reg(op.getOperand(1)));
        emit(FMT_COMPILE("div.rn.f32 {}, {}, {}"), q, a, b);
        emit(FMT_COMPILE("cvt.rn.{}.f32 {}, {}"), type, d, q);
        return;
      }
      const char* name = opc == Instruction::FAdd ? "add.rn" : opc == Instruction::FSub ? "sub.rn"
                         : opc == Instruction::FMul ? "mul.rn" : nullptr;
      if (!name) throw Unsupported(fmt::format("the 16-bit float instruction '{}'", op.getOpcodeName()));
      emit(FMT_COMPILE("{}.{} {}, {}, {}"), name, type, d, reg(op.getOperand(0)), reg(op.getOperand(1)));
      return;
    }
    if (opc == Instruction::FRem) {
      // x - trunc(x / y) * y, as one fma; x itself where y is infinite.
      std::string x = reg(op.getOperand(0)), y = reg(op.getOperand(1));
      std::string q = fresh(class_of(t)), whole = fresh(class_of(t)),
                  neg = fresh(class_of(t)), r = fresh(class_of(t)), inf = fresh(Reg::pred);
      emit(FMT_COMPILE("div.rn.f{0} {1}, {2}, {3}"), bits, q, x, y);
      emit(FMT_COMPILE("cvt.rzi.f{0}.f{0} {1}, {2}"), bits, whole, q);
      emit(FMT_COMPILE("neg.f{} {}, {}"), bits, neg, whole);
      emit(FMT_COMPILE("fma.rn.f{} {}, {}, {}, {}"), bits, r, neg, y, x);
      emit(FMT_COMPILE("testp.infinite.f{} {}, {}"), bits, inf, y);
      emit(FMT_COMPILE("selp.f{} {}, {}, {}, {}"), bits, d, x, r, inf);
      return;
    }
    const char* name = nullptr;
    switch (opc) {
      case Instruction::FAdd: name = "add.rn"; break;
      case Instruction::FSub: name = "sub.rn"; break;
      case Instruction::FMul: name = "mul.rn"; break;
      case Instruction::FDiv: name = bits == 32 && op.hasApproxFunc() ? "div.approx" : "div.rn"; break;
      default: throw Unsupported(fmt::format("the float instruction '{}'", op.getOpcodeName()));
    }
    // 1 / x rounded to nearest is one rcp.rn (the same value as div.rn, fewer instructions in SASS).
    if (auto* one = llvm::dyn_cast<llvm::ConstantFP>(op.getOperand(0));
        opc == Instruction::FDiv && std::string_view(name) == "div.rn" && one && one->isExactlyValue(1.0)) {
      emit(FMT_COMPILE("rcp.rn.f{} {}, {}"), bits, d, reg(op.getOperand(1)));
      return;
    }
    emit(FMT_COMPILE("{}.f{} {}, {}, {}"), name, bits, d, operand(op.getOperand(0)), operand(op.getOperand(1)));
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
        if (!llvm::isa<llvm::Constant>(op.getOperand(&x == &a ? 0 : 1))) x = extend_byte(x, is_signed);
      };
      if (extend) widen(a, sign);
      widen(b, sign && !op.isShift());  // a divisor as the dividend; a shift amount unsigned
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
    if (opc == Instruction::UDiv) return emit(FMT_COMPILE("shr.u{} {}, {}, {}"), bits, d, a, k);
    if (opc == Instruction::URem) return emit(FMT_COMPILE("and.b{} {}, {}, {}"), bits, d, a, (uint64_t(1) << k) - 1);
    // Signed: round toward zero by adding 2^k - 1 to negative values first.
    Reg cls = class_of(t);
    std::string sign = fresh(cls), bias = fresh(cls), biased = fresh(cls);
    emit(FMT_COMPILE("shr.s{} {}, {}, {}"), bits, sign, a, bits - 1);
    emit(FMT_COMPILE("shr.u{} {}, {}, {}"), bits, bias, sign, bits - int(k));
    emit(FMT_COMPILE("add.s{} {}, {}, {}"), bits, biased, a, bias);
    if (opc == Instruction::SDiv) return emit(FMT_COMPILE("shr.s{} {}, {}, {}"), bits, d, biased, k);
    std::string rounded = fresh(cls);  // srem: a - (biased & -2^k)
    emit(FMT_COMPILE("and.b{} {}, {}, {}"), bits, rounded, biased, -(int64_t(1) << k));
    return emit(FMT_COMPILE("sub.s{} {}, {}, {}"), bits, d, a, rounded);
  }
  // Division of 32-bit values by another constant: a high multiply by a magic number and shifts, as LLVM's code
  // generator does (ptxas keeps div.s32 by an immediate a full division: a reciprocal and a correction, ~20
  // instructions); a remainder takes the quotient's product off the dividend.
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(op.getOperand(1)); c && bits == 32 && division_by_constant(op, c, a, d))
    return;
  if (op.isShift() && bits != 32 && !llvm::isa<llvm::Constant>(op.getOperand(1))) {
    // PTX shifts take a 32-bit amount.
    std::string amount = fresh(Reg::b32);
    emit(FMT_COMPILE("cvt.u32.u{} {}, {}"), bits, amount, b);
    b = amount;
  }
  emit(FMT_COMPILE("{}.{} {}, {}, {}"), name, type, d, a, b);
}

bool PtxEmitter::division_by_constant(const llvm::BinaryOperator& op, const llvm::ConstantInt* c, const std::string& a,
                                      const std::string& d) {
  using llvm::Instruction;
  auto opc = op.getOpcode();
  bool is_signed = opc == Instruction::SDiv || opc == Instruction::SRem;
  if (!is_signed && opc != Instruction::UDiv && opc != Instruction::URem) return false;
  const llvm::APInt& divisor = c->getValue();
  // Zero, one, powers of two (shifts, above) and the most negative divisor stay as they are.
  if (divisor.isZero() || divisor.isOne() || divisor.isAllOnes() || divisor.isMinSignedValue()) return false;
  if (is_signed ? divisor.abs().isPowerOf2() : divisor.isPowerOf2()) return false;
  std::string q = opc == Instruction::SDiv || opc == Instruction::UDiv ? d : fresh(Reg::b32);
  if (is_signed) {
    auto magic = llvm::SignedDivisionByConstantInfo::get(divisor);
    int32_t m = static_cast<int32_t>(magic.Magic.getSExtValue());
    std::string high = fresh(Reg::b32);
    emit(FMT_COMPILE("mul.hi.s32 {}, {}, {}"), high, a, m);
    if (divisor.isStrictlyPositive() && m < 0) {
      std::string sum = fresh(Reg::b32);
      emit(FMT_COMPILE("add.s32 {}, {}, {}"), sum, high, a);
      high = sum;
    } else if (divisor.isNegative() && m > 0) {
      std::string difference = fresh(Reg::b32);
      emit(FMT_COMPILE("sub.s32 {}, {}, {}"), difference, high, a);
      high = difference;
    }
    std::string shifted = high, sign = fresh(Reg::b32);
    if (magic.ShiftAmount) {
      shifted = fresh(Reg::b32);
      emit(FMT_COMPILE("shr.s32 {}, {}, {}"), shifted, high, magic.ShiftAmount);
    }
    emit(FMT_COMPILE("shr.u32 {}, {}, 31"), sign, shifted);  // round toward zero: +1 for a negative quotient
    emit(FMT_COMPILE("add.s32 {}, {}, {}"), q, shifted, sign);
  } else {
    auto magic = llvm::UnsignedDivisionByConstantInfo::get(divisor);
    std::string x = a;
    if (magic.PreShift) {
      x = fresh(Reg::b32);
      emit(FMT_COMPILE("shr.u32 {}, {}, {}"), x, a, magic.PreShift);
    }
    std::string high = fresh(Reg::b32);
    emit(FMT_COMPILE("mul.hi.u32 {}, {}, {}"), high, x, static_cast<uint32_t>(magic.Magic.getZExtValue()));
    if (magic.IsAdd) {  // the magic number needs 33 bits: q = (((a - high) >> 1) + high) >> PostShift
      std::string rest = fresh(Reg::b32), half = fresh(Reg::b32), sum = fresh(Reg::b32);
      emit(FMT_COMPILE("sub.s32 {}, {}, {}"), rest, a, high);
      emit(FMT_COMPILE("shr.u32 {}, {}, 1"), half, rest);
      emit(FMT_COMPILE("add.s32 {}, {}, {}"), sum, half, high);
      high = sum;
    }
    if (magic.PostShift)
      emit(FMT_COMPILE("shr.u32 {}, {}, {}"), q, high, magic.PostShift);
    else
      emit(FMT_COMPILE("mov.b32 {}, {}"), q, high);
  }
  if (q == d) return true;
  std::string product = fresh(Reg::b32);  // remainder: a - q * divisor
  emit(FMT_COMPILE("mul.lo.s32 {}, {}, {}"), product, q, static_cast<int32_t>(divisor.getSExtValue()));
  emit(FMT_COMPILE("sub.s32 {}, {}, {}"), d, a, product);
  return true;
}

void PtxEmitter::emit_compare(const llvm::CmpInst& cmp) {
  using P = llvm::CmpInst::Predicate;
  llvm::Type* t = cmp.getOperand(0)->getType();
  if (t->isVectorTy()) throw Unsupported("a vector compare");
  int bits = bits_of(t);
  std::string d = define(&cmp)[0];
  if (auto* fc = llvm::dyn_cast<llvm::FCmpInst>(&cmp)) {
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
      case P::FCMP_TRUE: emit(FMT_COMPILE("setp.eq.s32 {}, 0, 0"), d); return;
      default: emit(FMT_COMPILE("setp.ne.s32 {}, 0, 0"), d); return;
    }
    // No 16-bit float immediates: 16-bit operands in registers.
    auto value = [&](const llvm::Value* v) { return bits == 16 ? reg(v) : operand(v); };
    std::string a = value(cmp.getOperand(0));
    emit(FMT_COMPILE("setp.{}.{} {}, {}, {}"), cc, float_type(t), d, a, value(cmp.getOperand(1)));
    return;
  }
  if (bits == 1) {
    std::string a = reg(cmp.getOperand(0)), b = reg(cmp.getOperand(1));
    if (cmp.getPredicate() == P::ICMP_NE) {
      emit(FMT_COMPILE("xor.pred {}, {}, {}"), d, a, b);
    } else if (cmp.getPredicate() == P::ICMP_EQ) {
      std::string x = fresh(Reg::pred);
      emit(FMT_COMPILE("xor.pred {}, {}, {}"), x, a, b);
      emit(FMT_COMPILE("not.pred {}, {}"), d, x);
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
      emit(FMT_COMPILE("cvt.{0}16.{0}8 {1}, {2}"), sign ? 's' : 'u', w, *x);
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
  emit(FMT_COMPILE("setp.{}.{} {}, {}, {}"), cc, int_type(kind, bits), d, a, b);
}

void PtxEmitter::emit_select(const llvm::SelectInst& sel) {
  if (sel.getCondition()->getType()->isVectorTy()) throw Unsupported("a select on a vector of conditions");
  std::string c = reg(sel.getCondition());
  llvm::Type* t = sel.getType();
  RegClasses classes = part_classes(t);
  Parts d = define(&sel);
  bool scalar = !t->isVectorTy();
  Parts a = scalar ? Parts{operand(sel.getTrueValue())} : parts(sel.getTrueValue());
  Parts b = scalar ? Parts{operand(sel.getFalseValue())} : parts(sel.getFalseValue());
  for (size_t i = 0; i < d.size(); ++i) {
    if (classes[i] == Reg::pred) {
      // d = c & a | !c & b
      std::string x = fresh(Reg::pred), y = fresh(Reg::pred), nc = fresh(Reg::pred);
      emit(FMT_COMPILE("and.pred {}, {}, {}"), x, c, defined_part(a[i], Reg::pred));
      emit(FMT_COMPILE("not.pred {}, {}"), nc, c);
      emit(FMT_COMPILE("and.pred {}, {}, {}"), y, nc, defined_part(b[i], Reg::pred));
      emit(FMT_COMPILE("or.pred {}, {}, {}"), d[i], x, y);
      continue;
    }
    // Floats select as floats, as LLVM's code generator writes them: ptxas makes selp.f32 an FSEL and selp.b32
    // an integer SEL, and attention's masks ran 0.5-1% slower as SELs (H100, benchmarks/NOTES.md session 17).
    llvm::Type* lane = t->getScalarType();
    std::string type = lane->isFloatTy() || lane->isDoubleTy() ? float_type(lane) : fmt::format(FMT_COMPILE("b{}"), mov_bits(classes[i]));
    emit(FMT_COMPILE("selp.{} {}, {}, {}, {}"), type, d[i], defined_part(a[i], classes[i]), defined_part(b[i], classes[i]),
                     c);
  }
}

void PtxEmitter::emit_cast(const llvm::CastInst& cast) {
  using llvm::Instruction;
  llvm::Type *from_t = cast.getSrcTy(), *to_t = cast.getDestTy();
  auto opc = cast.getOpcode();
  if (opc == Instruction::BitCast) {
    RegClasses from_c = part_classes(from_t), to_c = part_classes(to_t);
    Parts src = parts(cast.getOperand(0));
    if (from_c == to_c && from_c[0] != Reg::pred && shareable(src)) return bind(&cast, src);  // same registers
    Parts d = define(&cast);
    if (from_c.size() == to_c.size() && from_c[0] == to_c[0] && from_c[0] != Reg::pred) {
      for (size_t i = 0; i < d.size(); ++i)  // (a source computed into the phi register d took: no copy)
        if (d[i] != src[i]) emit(FMT_COMPILE("mov.b{} {}, {}"), mov_bits(to_c[i]), d[i], defined_part(src[i], from_c[i]));
    } else if (to_c.size() == 1 && from_c.size() == 2 && mov_bits(to_c[0]) == 2 * mov_bits(from_c[0])) {
      emit(FMT_COMPILE("mov.b{} {}, {{{}, {}}}"), mov_bits(to_c[0]), d[0], defined_part(src[0], from_c[0]),
                       defined_part(src[1], from_c[1]));
    } else if (from_c.size() == 1 && to_c.size() == 2 && mov_bits(from_c[0]) == 2 * mov_bits(to_c[0])) {
      emit(FMT_COMPILE("mov.b{} {{{}, {}}}, {}"), mov_bits(from_c[0]), d[0], d[1], defined_part(src[0], from_c[0]));
    } else if (from_t->getScalarType()->isIntegerTy(8) && to_c.size() == 1 && to_c[0] != Reg::pred &&
               int(from_c.size()) * 8 == mov_bits(to_c[0])) {
      // Bytes into one register: each lane zero-extended and shifted into place.
      int b = mov_bits(to_c[0]);
      std::string acc;
      for (size_t i = 0; i < from_c.size(); ++i) {
        std::string lane = fresh(to_c[0]);
        emit(FMT_COMPILE("cvt.u{}.u8 {}, {}"), b, lane, defined_part(src[i], Reg::b16));
        if (i > 0) {
          std::string shifted = fresh(to_c[0]);
          emit(FMT_COMPILE("shl.b{} {}, {}, {}"), b, shifted, lane, 8 * i);
          std::string merged = i + 1 == from_c.size() ? d[0] : fresh(to_c[0]);
          emit(FMT_COMPILE("or.b{} {}, {}, {}"), b, merged, acc, shifted);
          acc = merged;
        } else {
          acc = lane;
        }
      }
      if (from_c.size() == 1) emit(FMT_COMPILE("mov.b{} {}, {}"), b, d[0], acc);
    } else if (to_t->getScalarType()->isIntegerTy(8) && from_c.size() == 1 && from_c[0] != Reg::pred &&
               int(to_c.size()) * 8 == mov_bits(from_c[0])) {
      int b = mov_bits(from_c[0]);
      std::string x = defined_part(src[0], from_c[0]);
      for (size_t i = 0; i < to_c.size(); ++i) {
        std::string shifted = x;
        if (i > 0) {
          shifted = fresh(from_c[0]);
          emit(FMT_COMPILE("shr.u{} {}, {}, {}"), b, shifted, x, 8 * i);
        }
        if (b == 16)
          emit(FMT_COMPILE("mov.b16 {}, {}"), d[i], shifted);
        else
          emit(FMT_COMPILE("cvt.u16.u{} {}, {}"), b, d[i], shifted);
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
    std::string type = float_type(to_t->getScalarType()) + "x2";
    for (size_t i = 0; i < d.size(); ++i)
      emit(FMT_COMPILE("cvt.rn.{}.f32 {}, {}, {}"), type, d[i], defined_part(src[2 * i + 1], Reg::b32),
                       defined_part(src[2 * i], Reg::b32));
    return;
  }
  if (from_t->isVectorTy() || to_t->isVectorTy()) throw Unsupported(fmt::format("a vector '{}'", cast.getOpcodeName()));
  int from = bits_of(from_t), to = bits_of(to_t);
  std::string d = define(&cast)[0];
  std::string a = opc == Instruction::ZExt || opc == Instruction::SExt || opc == Instruction::Trunc ||
                          opc == Instruction::PtrToInt || opc == Instruction::IntToPtr
                      ? operand(cast.getOperand(0))
                      : reg(cast.getOperand(0));
  switch (opc) {
    case Instruction::Trunc:
      if (to == 8) to = 16;  // a byte keeps the low bits of a 16-bit register
      if (from == 8) from = 16;
      if (to == from) {
        emit(FMT_COMPILE("mov.b16 {}, {}"), d, a);
      } else if (to == 1) {
        std::string low = fresh(class_of(from_t));
        emit(FMT_COMPILE("and.b{} {}, {}, 1"), from, low, a);
        emit(FMT_COMPILE("setp.eq.b{} {}, {}, 1"), from, d, low);
      } else {
        emit(FMT_COMPILE("cvt.u{}.u{} {}, {}"), to, from, d, a);
      }
      return;
    case Instruction::ZExt:
    case Instruction::SExt: {
      bool sign = opc == Instruction::SExt;
      if (to == 8) to = 16;  // from a predicate: the byte in a 16-bit register
      if (from == 1)
        emit(FMT_COMPILE("selp.{} {}, {}, 0, {}"), int_type(sign ? 's' : 'u', to), d, sign ? "-1" : "1", reg(cast.getOperand(0)));
      else
        emit(FMT_COMPILE("cvt.{}.{} {}, {}"), int_type(sign ? 's' : 'u', to), int_type(sign ? 's' : 'u', from), d, a);
      return;
    }
    case Instruction::PtrToInt:
    case Instruction::IntToPtr:
      if (from == to)
        emit(FMT_COMPILE("mov.b{} {}, {}"), to, d, a);
      else
        emit(FMT_COMPILE("cvt.u{}.u{} {}, {}"), to, from, d, a);
      return;
    case Instruction::FPTrunc:
      emit(FMT_COMPILE("cvt.rn.{}.{} {}, {}"), float_type(to_t), float_type(from_t), d, a);
      return;
    case Instruction::FPExt:
      emit(FMT_COMPILE("cvt.{}.{} {}, {}"), float_type(to_t), float_type(from_t), d, a);
      return;
    case Instruction::FPToSI:
    case Instruction::FPToUI:
      if (from == 16) throw Unsupported("a conversion from a 16-bit float to an integer");
      emit(FMT_COMPILE("cvt.rzi.{}.f{} {}, {}"), int_type(opc == Instruction::FPToSI ? 's' : 'u', to), from, d, a);
      return;
    case Instruction::SIToFP:
    case Instruction::UIToFP:
    {
      bool sign = opc == Instruction::SIToFP;
      if (from == 1) {  // a predicate: 0 or 1 (-1 signed) as a 32-bit integer first
        std::string i = fresh(Reg::b32);
        emit(FMT_COMPILE("selp.b32 {}, {}, 0, {}"), i, sign ? "-1" : "1", a);
        a = i, from = 32;
      } else if (from == 8) {  // a byte: its 16-bit register's upper bits are not defined
        a = extend_byte(a, sign), from = 16;
      }
      emit(FMT_COMPILE("cvt.rn.{}.{} {}, {}"), float_type(to_t), int_type(sign ? 's' : 'u', from), d, a);
      return;
    }
    case Instruction::AddrSpaceCast: {
      unsigned as_from = from_t->getPointerAddressSpace(), as_to = to_t->getPointerAddressSpace();
      if (as_to == 0 && as_from != 0) {
        emit(FMT_COMPILE("mov.b64 {}, {}"), d, generic_address(a, as_from));
      } else if (as_from == 0 && as_to != 0) {
        std::string specific = to == 64 ? d : fresh(Reg::b64);
        emit(FMT_COMPILE("cvta.to{}.u64 {}, {}"), space_name(as_to), specific, a);
        if (to != 64) emit(FMT_COMPILE("cvt.u32.u64 {}, {}"), d, specific);
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
        emit(FMT_COMPILE("cvt.{}32.{}{} {}, {}"), index_bits < 32 ? 's' : 'u', index_bits < 32 ? 's' : 'u', index_bits,
                         low, idx);
        idx = low;
      }
      emit(FMT_COMPILE("mad.lo.s32 {}, {}, {}, {}"), next, idx, size, acc);
    } else if (narrow) {
      std::string scaled = fresh(Reg::b64);
      emit(FMT_COMPILE("mul.wide.{}32 {}, {}, {}"), llvm::isa<llvm::SExtInst>(ext) ? 's' : 'u', scaled,
                       reg(ext->getOperand(0)), size);
      emit(FMT_COMPILE("add.s64 {}, {}, {}"), next, acc, scaled);
    } else {
      std::string idx = reg(index);
      int index_bits = bits_of(index->getType());
      if (index_bits != bits) {  // indices are signed
        std::string wide = fresh(class_of(gep.getType()));
        emit(FMT_COMPILE("cvt.s{}.s{} {}, {}"), bits, index_bits, wide, idx);
        idx = wide;
      }
      emit(FMT_COMPILE("mad.lo.s{} {}, {}, {}, {}"), bits, next, idx, size, acc);
    }
    acc = next;
  }
  std::string d = define(&gep)[0];
  if (offset)
    emit(FMT_COMPILE("add.s{} {}, {}, {}"), bits, d, acc, offset);
  else
    emit(FMT_COMPILE("mov.b{} {}, {}"), bits, d, acc);
}

// Loads or stores `type` at `ptr` in accesses PTX allows: vectors of up to 16 bytes (v2, v4) aligned to their
// size, else smaller pieces; a part aligned below its size goes as two halves.
void PtxEmitter::emit_memory(bool is_load, const llvm::Value* ptr, llvm::Type* type, llvm::Align align,
                             bool is_volatile, const Parts& values, Parts* results) {
  RegClasses classes = part_classes(type);
  if (classes[0] == Reg::pred) throw Unsupported("a load or store of predicates");
  // Bytes live in 16-bit registers; memory sees 8 bits.
  int part_bits = type->getScalarType()->isIntegerTy(8) ? 8 : mov_bits(classes[0]);
  int part_bytes = part_bits / 8;
  std::string space = space_of(ptr);
  std::string addr = reg(ptr);
  std::string op = fmt::format(FMT_COMPILE("{}{}{}"), is_load ? "ld" : "st", is_volatile ? ".volatile" : "", space);
  auto where = [&](uint64_t offset) { return offset ? fmt::format(FMT_COMPILE("[{}+{}]"), addr, offset) : fmt::format(FMT_COMPILE("[{}]"), addr); };
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
        emit(FMT_COMPILE("{}.b{} {}, {}"), op, half, lo, where(offset));
        emit(FMT_COMPILE("{}.b{} {}, {}"), op, half, hi, where(offset + part_bytes / 2));
        emit(FMT_COMPILE("mov.b{} {}, {{{}, {}}}"), part_bits, (*results)[i], lo, hi);
      } else {
        emit(FMT_COMPILE("mov.b{} {{{}, {}}}, {}"), part_bits, lo, hi, defined_part(values[i], classes[i]));
        emit(FMT_COMPILE("{}.b{} {}, {}"), op, half, where(offset), lo);
        emit(FMT_COMPILE("{}.b{} {}, {}"), op, half, where(offset + part_bytes / 2), hi);
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
    std::string vec = k > 1 ? fmt::format(FMT_COMPILE(".v{}"), k) : "";
    if (is_load)
      emit(FMT_COMPILE("{}{}.b{} {}, {}"), op, vec, part_bits, regs, where(offset));
    else
      emit(FMT_COMPILE("{}{}.b{} {}, {}"), op, vec, part_bits, where(offset), regs);
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
      emit(FMT_COMPILE("cvt.rn.{}x2.f32 {}, {}, {}"), float_type(t->getScalarType()), part,
                       lane % 2 ? x32 : y32, lane % 2 ? y32 : x32);
      old = part;
      bind(&ins, out);
      return;
    }
    if (old.empty()) {
      emit(FMT_COMPILE("mov.b32 {}, {{{}, {}}}"), part, x, x);
    } else {
      std::string lo = fresh(Reg::b16), hi = fresh(Reg::b16);
      emit(FMT_COMPILE("mov.b32 {{{}, {}}}, {}"), lo, hi, old);
      emit(FMT_COMPILE("mov.b32 {}, {{{}, {}}}"), part, lane % 2 ? lo : x, lane % 2 ? x : hi);
    }
    old = part;
  } else {
    // Lanes of a vector are registers defined once, so the new vector shares the old one's other lanes, and the
    // inserted lane shares the register of an instruction's value (also defined once: a use in a later loop
    // iteration goes through a phi). A phi's register changes at its block's start and a constant is no
    // register: those get a copy.
    Reg cls = class_of(t->getScalarType());
    const llvm::Value* inserted = ins.getOperand(1);
    std::string r = x;
    if (!llvm::isa<llvm::Instruction>(inserted) || llvm::isa<llvm::PHINode>(inserted)) {
      r = fresh(cls);
      line(mov(cls, r, x));
    }
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

// A shuffle of two vectors by a constant mask: each lane of the result copied from the lane it names (16-bit
// lanes unpacked from and packed into their pairs); a lane the mask leaves undefined stays undefined.
void PtxEmitter::emit_shuffle(const llvm::ShuffleVectorInst& shuffle) {
  auto* in_t = llvm::cast<llvm::FixedVectorType>(shuffle.getOperand(0)->getType());
  llvm::Type* out_t = shuffle.getType();
  int n = static_cast<int>(in_t->getNumElements());
  bool packed = packed16(in_t);
  if (packed != packed16(out_t)) throw Unsupported("a shuffle between packed and unpacked lanes");
  const llvm::Value* inputs[2] = {shuffle.getOperand(0), shuffle.getOperand(1)};
  Reg lane_class = packed ? Reg::b16 : class_of(in_t->getElementType());
  // Lane m of the two inputs side by side ("" where undefined); a packed pair is unpacked once.
  std::unordered_map<int, std::pair<std::string, std::string>> unpacked;  // by the pair's first lane m
  auto lane = [&](int m) -> std::string {
    const llvm::Value* v = inputs[m / n];
    if (llvm::isa<llvm::UndefValue>(v)) return "";
    const Parts& p = parts_in_place(v);  // nothing gets registers while p is read
    int i = m % n;
    if (!packed) return p[i];
    if (p[i / 2].empty()) return "";
    auto [at, fresh_pair] = unpacked.try_emplace(m - i % 2);
    if (fresh_pair) {
      at->second = {fresh(Reg::b16), fresh(Reg::b16)};
      emit(FMT_COMPILE("mov.b32 {{{}, {}}}, {}"), at->second.first, at->second.second, p[i / 2]);
    }
    return i % 2 ? at->second.second : at->second.first;
  };
  llvm::ArrayRef<int> mask = shuffle.getShuffleMask();
  std::vector<std::string> lanes;
  for (int m : mask) lanes.push_back(m < 0 ? "" : lane(m));
  Parts d = define(&shuffle);
  for (size_t i = 0; i < d.size(); ++i) {
    if (!packed) {
      line(mov(lane_class, d[i], defined_part(lanes[i], lane_class)));
      continue;
    }
    emit(FMT_COMPILE("mov.b32 {}, {{{}, {}}}"), d[i], defined_part(lanes[2 * i], Reg::b16),
                     defined_part(lanes[2 * i + 1], Reg::b16));
  }
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
    emit(FMT_COMPILE("mov.b32 {{{}, {}}}, {}"), lo, hi, defined_part(src[lane / 2], Reg::b32));
    emit(FMT_COMPILE("mov.b16 {}, {}"), d, lane % 2 ? hi : lo);
    return;
  }
  Reg cls = class_of(ext.getType());
  std::string s = defined_part(src[lane], cls);
  line(mov(cls, d, s));
}

}  // namespace weft::codegen::nvptx::emitter
