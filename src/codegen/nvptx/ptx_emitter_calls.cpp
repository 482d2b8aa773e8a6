// weft's own PTX emitter (ptx_emitter.h): calls, that is the intrinsics weft's lowering uses and inline asm.
#include <fmt/format.h>
#include <llvm/IR/InlineAsm.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "codegen/nvptx/ptx_emitter_impl.h"

namespace weft::codegen::nvptx::emitter {
namespace {

bool starts(llvm::StringRef s, llvm::StringRef prefix) { return s.starts_with(prefix); }

// The special register an llvm.nvvm.read.ptx.sreg.<name> intrinsic reads: "tid.x" -> %tid.x,
// "cluster.ctarank" -> %cluster_ctarank, "lanemask.eq" -> %lanemask_eq.
std::string special_register(llvm::StringRef name) {
  std::string s = name.str();
  for (const char* group : {"cluster.", "lanemask."})
    if (s.starts_with(group)) s[std::string(group).size() - 1] = '_';
  return "%" + s;
}

}  // namespace

void PtxEmitter::emit_call(const llvm::CallInst& call) {
  if (call.isInlineAsm()) return emit_inline_asm(call);
  if (auto* intrinsic = llvm::dyn_cast<llvm::IntrinsicInst>(&call)) return emit_intrinsic(*intrinsic);
  const llvm::Function* callee = call.getCalledFunction();
  throw Unsupported("a call to " + (callee ? callee->getName().str() : std::string("a function pointer")));
}

void PtxEmitter::emit_intrinsic(const llvm::IntrinsicInst& call) {
  llvm::StringRef name = call.getCalledFunction()->getName();
  auto arg = [&](unsigned i) { return operand(call.getArgOperand(i)); };
  auto result = [&] { return define(&call)[0]; };
  llvm::Type* t = call.getType();

  // No code.
  for (const char* skip : {"llvm.assume", "llvm.lifetime.", "llvm.experimental.noalias.scope.decl", "llvm.dbg.",
                           "llvm.donothing", "llvm.sideeffect"})
    if (starts(name, skip)) return;

  if (starts(name, "llvm.nvvm.read.ptx.sreg.")) {
    llvm::StringRef reg_name = name.drop_front(std::strlen("llvm.nvvm.read.ptx.sreg."));
    emit(FMT_COMPILE("mov.u{} {}, {}"), bits_of(t), result(), special_register(reg_name));
    return;
  }

  // Barriers and fences.
  if (starts(name, "llvm.nvvm.barrier.cta.")) {
    llvm::StringRef rest = name.drop_front(std::strlen("llvm.nvvm.barrier.cta."));  // sync.aligned.all, ...
    bool aligned = rest.contains(".aligned"), arrive = rest.starts_with("arrive");
    std::string op = fmt::format(FMT_COMPILE("{}.{}"), aligned ? "bar" : "barrier", arrive ? "arrive" : "sync");
    if (rest.ends_with(".count"))
      emit(FMT_COMPILE("{} {}, {}"), op, arg(0), arg(1));
    else if (rest.ends_with(".all"))
      emit(FMT_COMPILE("{} {}"), op, arg(0));
    else
      throw Unsupported("the intrinsic " + name.str());
    return;
  }
  if (name == "llvm.nvvm.barrier0") return line("bar.sync 0");
  if (name == "llvm.nvvm.bar.warp.sync") return emit(FMT_COMPILE("bar.warp.sync {}"), arg(0));
  if (starts(name, "llvm.nvvm.barrier.cluster.")) return line(name.drop_front(std::strlen("llvm.nvvm.")).str());
  static const std::pair<const char*, const char*> kFences[] = {
      {"llvm.nvvm.fence.proxy.async.shared_cta", "fence.proxy.async.shared::cta"},
      {"llvm.nvvm.fence.proxy.async.shared_cluster", "fence.proxy.async.shared::cluster"},
      {"llvm.nvvm.fence.proxy.async.global", "fence.proxy.async.global"},
      {"llvm.nvvm.fence.proxy.async", "fence.proxy.async"},
      {"llvm.nvvm.fence.mbarrier_init.release.cluster", "fence.mbarrier_init.release.cluster"},
      {"llvm.nvvm.fence.sc.cluster", "fence.sc.cluster"},
      {"llvm.nvvm.fence.acq_rel.cluster", "fence.acq_rel.cluster"},
      {"llvm.nvvm.membar.cta", "membar.cta"},
      {"llvm.nvvm.membar.gl", "membar.gl"},
      {"llvm.nvvm.membar.sys", "membar.sys"},
  };
  for (auto [intrinsic, ptx] : kFences)
    if (name == intrinsic) return line(ptx);
  if (starts(name, "llvm.nvvm.setmaxnreg.")) {
    emit(FMT_COMPILE("{} {}"), name.drop_front(std::strlen("llvm.nvvm.")).str(), arg(0));
    return;
  }

  // Warp exchanges.
  if (starts(name, "llvm.nvvm.shfl.sync.")) {
    llvm::StringRef rest = name.drop_front(std::strlen("llvm.nvvm.shfl.sync."));  // bfly.i32, idx.f32, ...
    auto [mode, type] = rest.split('.');
    if (type != "i32" && type != "f32") throw Unsupported("the intrinsic " + name.str());
    emit(FMT_COMPILE("shfl.sync.{}.b32 {}, {}, {}, {}, {}"), mode.str(), result(), arg(1), arg(2), arg(3), arg(0));
    return;
  }
  if (name == "llvm.nvvm.vote.ballot.sync") {
    emit(FMT_COMPILE("vote.sync.ballot.b32 {}, {}, {}"), result(), reg(call.getArgOperand(1)), arg(0));
    return;
  }
  if (name.starts_with("llvm.nvvm.vote.") && name.ends_with(".sync")) {  // any, all, uni
    llvm::StringRef mode = name.drop_front(std::strlen("llvm.nvvm.vote.")).drop_back(std::strlen(".sync"));
    if (mode != "any" && mode != "all" && mode != "uni") throw Unsupported("the intrinsic " + name.str());
    emit(FMT_COMPILE("vote.sync.{}.pred {}, {}, {}"), mode.str(), result(), reg(call.getArgOperand(1)), arg(0));
    return;
  }

  // fp8 conversions: pairs of f32 into two bytes (ff.to.<fp8>.rn[.relu]), two bytes into a pair of f16
  // (<fp8>.to.f16x2.rn[.relu]).
  for (const char* fp8 : {"e4m3x2", "e5m2x2"}) {
    llvm::StringRef rest = name;
    if (rest.consume_front("llvm.nvvm.ff.to.") && rest.consume_front(fp8) && rest.consume_front(".rn") &&
        (rest.empty() || rest == ".relu")) {
      emit(FMT_COMPILE("cvt.rn.satfinite{}.{}.f32 {}, {}, {}"), rest.str(), fp8, result(), reg(call.getArgOperand(0)),
                       reg(call.getArgOperand(1)));
      return;
    }
    rest = name;
    if (rest.consume_front("llvm.nvvm.") && rest.consume_front(fp8) && rest.consume_front(".to.f16x2.rn") &&
        (rest.empty() || rest == ".relu")) {
      emit(FMT_COMPILE("cvt.rn{}.f16x2.{} {}, {}"), rest.str(), fp8, result(), reg(call.getArgOperand(0)));
      return;
    }
  }
  if (name == "llvm.nvvm.mapa.shared.cluster" || name == "llvm.nvvm.mapa") {
    const char* space = name == "llvm.nvvm.mapa" ? "" : ".shared::cluster";
    emit(FMT_COMPILE("mapa{}.u{} {}, {}, {}"), space, bits_of(t), result(), reg(call.getArgOperand(0)), arg(1));
    return;
  }

  // Arithmetic.
  if (t->isVectorTy()) throw Unsupported("the vector intrinsic " + name.str());
  int bits = t->isVoidTy() ? 0 : bits_of(t);
  if (name == "llvm.is.fpclass.f32" || name == "llvm.is.fpclass.f64") {
    emit_fpclass_test(call);
    return;
  }
  if (name.starts_with("llvm.fptosi.sat.") || name.starts_with("llvm.fptoui.sat.")) {
    emit_saturating_conversion(call, name.starts_with("llvm.fptosi"));
    return;
  }
  // "llvm.fma.f32" is "llvm.fma" for a 32-bit result.
  const std::pair<llvm::StringRef, llvm::StringRef> split = name.rsplit('.');
  const llvm::StringRef base = split.first, suffix = split.second;
  bool typed = bits && suffix.size() > 1 && (suffix[0] == 'f' || suffix[0] == 'i') &&
               suffix.drop_front() == llvm::StringRef(std::to_string(bits));
  auto base_is = [&](const char* intrinsic) { return typed && base == intrinsic; };
  struct Unary {
    const char* intrinsic;
    const char* ptx;
  };
  if (t->isFloatTy() || t->isDoubleTy()) {
    static const Unary kFloat[] = {{"llvm.fabs", "abs"},         {"llvm.sqrt", "sqrt.rn"},  {"llvm.floor", "cvt.rmi"},
                                   {"llvm.ceil", "cvt.rpi"},     {"llvm.trunc", "cvt.rzi"}, {"llvm.rint", "cvt.rni"},
                                   {"llvm.nearbyint", "cvt.rni"}, {"llvm.roundeven", "cvt.rni"}};
    for (const Unary& u : kFloat)
      if (base_is(u.intrinsic)) {
        bool cvt = starts(u.ptx, "cvt");
        if (cvt)
          emit(FMT_COMPILE("{}.f{}.f{} {}, {}"), u.ptx, bits, bits, result(), reg(call.getArgOperand(0)));
        else
          emit(FMT_COMPILE("{}.f{} {}, {}"), u.ptx, bits, result(), reg(call.getArgOperand(0)));
        return;
      }
    static const Unary kBinary[] = {{"llvm.maxnum", "max"}, {"llvm.minnum", "min"}, {"llvm.maximum", "max.NaN"},
                                    {"llvm.minimum", "min.NaN"}};
    for (const Unary& u : kBinary)
      if (base_is(u.intrinsic)) {
        if (bits == 64 && std::strchr(u.ptx, '.')) {
          emit_f64_maximum(call, u.ptx[1] == 'a');
          return;
        }
        emit(FMT_COMPILE("{}.f{} {}, {}, {}"), u.ptx, bits, result(), arg(0), arg(1));
        return;
      }
    if (base_is("llvm.fma") || base_is("llvm.fmuladd")) {
      emit(FMT_COMPILE("fma.rn.f{} {}, {}, {}, {}"), bits, result(), arg(0), arg(1), arg(2));
      return;
    }
    // llvm.nvvm.<op>.approx[.ftz].f[32]: the PTX instruction of that name.
    llvm::StringRef op = base;
    if (bits == 32 && (suffix == "f" || suffix == "f32") && op.consume_front("llvm.nvvm.")) {
      bool ftz = op.consume_back(".ftz");
      if (op.consume_back(".approx"))
        for (const char* known : {"ex2", "lg2", "rsqrt", "sqrt", "sin", "cos", "rcp", "tanh"})
          if (op == known) {
            emit(FMT_COMPILE("{}.approx{}.f32 {}, {}"), known, ftz ? ".ftz" : "", result(), reg(call.getArgOperand(0)));
            return;
          }
    }
  }
  if (name == "llvm.fabs.f16" || name == "llvm.fabs.bf16") {
    emit(FMT_COMPILE("abs.{} {}, {}"), float_type(t), result(), reg(call.getArgOperand(0)));
    return;
  }
  if (t->isIntegerTy() && bits >= 8) {
    static const Unary kInt[] = {{"llvm.smin", "min.s"}, {"llvm.smax", "max.s"}, {"llvm.umin", "min.u"},
                                 {"llvm.umax", "max.u"}};
    // Bytes: in 16-bit registers whose upper bits are not defined, extended by the operation's signedness.
    auto int_arg = [&](unsigned i, bool is_signed) {
      std::string x = arg(i);
      return bits != 8 || llvm::isa<llvm::Constant>(call.getArgOperand(i)) ? x : extend_byte(x, is_signed);
    };
    int width = bits == 8 ? 16 : bits;
    for (const Unary& u : kInt)
      if (base_is(u.intrinsic)) {
        bool is_signed = u.ptx[4] == 's';
        std::string a = int_arg(0, is_signed), b = int_arg(1, is_signed);
        emit(FMT_COMPILE("{}{} {}, {}, {}"), u.ptx, width, result(), a, b);
        return;
      }
    if (base_is("llvm.abs")) {
      std::string a = bits == 8 ? int_arg(0, true) : reg(call.getArgOperand(0));
      emit(FMT_COMPILE("abs.s{} {}, {}"), width, result(), a);
      return;
    }
    if ((base_is("llvm.ctpop") || base_is("llvm.ctlz")) && bits >= 32) {
      const char* op = base_is("llvm.ctpop") ? "popc" : "clz";
      std::string d = result();
      std::string count = bits == 32 ? d : fresh(Reg::b32);
      emit(FMT_COMPILE("{}.b{} {}, {}"), op, bits, count, reg(call.getArgOperand(0)));
      if (bits == 64) emit(FMT_COMPILE("cvt.u64.u32 {}, {}"), d, count);
      return;
    }
    // fshl(hi, lo, s): the high word of hi:lo shifted left by s % 32; fshr: the low word shifted right.
    if ((base_is("llvm.fshl") || base_is("llvm.fshr")) && bits == 32) {
      emit(FMT_COMPILE("shf.{}.wrap.b32 {}, {}, {}, {}"), base_is("llvm.fshl") ? "l" : "r", result(), arg(1), arg(0),
                       arg(2));
      return;
    }
    if (base_is("llvm.bitreverse") && bits >= 32) {
      emit(FMT_COMPILE("brev.b{} {}, {}"), bits, result(), reg(call.getArgOperand(0)));
      return;
    }
  }
  throw Unsupported("the intrinsic " + name.str());
}

// A float to an integer, saturating at the integer's range and NaN to 0, with the same instructions as LLVM's
// code generator: where the integer's bounds are floats of the source type, clamp and convert; else convert and
// replace the result where the source lies outside.
void PtxEmitter::emit_saturating_conversion(const llvm::CallInst& call, bool is_signed) {
  llvm::Type* src = call.getArgOperand(0)->getType();
  if (!src->isFloatTy() && !src->isDoubleTy()) throw Unsupported("a saturating conversion from a 16-bit float");
  int fbits = bits_of(src), n = bits_of(call.getType());
  if (n == 1) throw Unsupported("a saturating conversion to a predicate");
  int width = n == 8 ? 16 : n;  // a byte lives in a 16-bit register
  char kind = is_signed ? 's' : 'u';
  std::string x = reg(call.getArgOperand(0));
  std::string d = define(&call)[0];
  Reg cls = class_of(call.getType());
  double lo = is_signed ? -std::ldexp(1.0, n - 1) : 0.0;
  int top = is_signed ? n - 1 : n;  // the range ends below 2^top
  auto immediate_of = [&](double v) {
    return float_immediate(fbits == 32 ? std::bit_cast<uint32_t>(static_cast<float>(v)) : std::bit_cast<uint64_t>(v),
                           fbits);
  };
  bool exact = top <= (fbits == 32 ? 24 : 53);  // 2^top - 1 is a float of the source type
  auto nan_to_zero = [&](const std::string& value) {
    std::string nan = fresh(Reg::pred);
    emit(FMT_COMPILE("setp.nan.f{0} {1}, {2}, {2}"), fbits, nan, x);
    emit(FMT_COMPILE("selp.b{} {}, 0, {}, {}"), width, d, value, nan);
  };
  if (exact) {
    std::string low = fresh(class_of(src)), clamped = fresh(class_of(src));
    emit(FMT_COMPILE("max.f{} {}, {}, {}"), fbits, low, x, immediate_of(lo));
    emit(FMT_COMPILE("min.f{} {}, {}, {}"), fbits, clamped, low, immediate_of(std::ldexp(1.0, top) - 1));
    // Unsigned: max(NaN, 0) is 0 already.
    std::string converted = is_signed ? fresh(cls) : d;
    emit(FMT_COMPILE("cvt.rzi.{}{}.f{} {}, {}"), kind, width, fbits, converted, clamped);
    if (is_signed) nan_to_zero(converted);
    return;
  }
  // The largest float below 2^top: anything above it converts out of range.
  double below = fbits == 32 ? static_cast<double>(std::nextafter(std::ldexp(1.0f, top), 0.0f))
                             : std::nextafter(std::ldexp(1.0, top), 0.0);
  std::string under = fresh(Reg::pred), over = fresh(Reg::pred);
  std::string converted = fresh(cls), floored = fresh(cls), capped = is_signed ? fresh(cls) : d;
  std::string min_int = is_signed ? (n == 64 ? "-9223372036854775808" : "-2147483648") : "0";
  std::string max_int = is_signed ? (n == 64 ? "9223372036854775807" : "2147483647") : "-1";
  emit(FMT_COMPILE("setp.ltu.f{} {}, {}, {}"), fbits, under, x, immediate_of(lo));  // NaN too
  emit(FMT_COMPILE("cvt.rzi.{}{}.f{} {}, {}"), kind, n, fbits, converted, x);
  emit(FMT_COMPILE("selp.b{} {}, {}, {}, {}"), n, floored, min_int, converted, under);
  emit(FMT_COMPILE("setp.gt.f{} {}, {}, {}"), fbits, over, x, immediate_of(below));
  emit(FMT_COMPILE("selp.b{} {}, {}, {}, {}"), n, capped, max_int, floored, over);
  if (is_signed) nan_to_zero(capped);
}

// Whether a float is of the classes in llvm.is.fpclass's mask (bit 0 signaling NaN, 1 quiet NaN, then -inf,
// -normal, -subnormal, -0, +0, +subnormal, +normal, +inf), by tests on its bits: the magnitude's range picks the
// class, the sign bit the half. Each class whose two signs the mask names costs one test, one sign two.
void PtxEmitter::emit_fpclass_test(const llvm::CallInst& call) {
  auto* mask_c = llvm::dyn_cast<llvm::ConstantInt>(call.getArgOperand(1));
  if (!mask_c) throw Unsupported("an is.fpclass without a constant mask");
  unsigned mask = static_cast<unsigned>(mask_c->getZExtValue()) & 0x3ff;
  int bits = bits_of(call.getArgOperand(0)->getType());
  Reg cls = bits == 32 ? Reg::b32 : Reg::b64;
  std::string x = reg(call.getArgOperand(0));
  std::string d = define(&call)[0];
  int mantissa = bits == 32 ? 23 : 52;
  uint64_t exp_all = (bits == 32 ? uint64_t(0xff) : uint64_t(0x7ff)) << mantissa;  // the infinity's bits
  uint64_t quiet = exp_all | (uint64_t(1) << (mantissa - 1));                      // the first quiet NaN
  std::string abs = fresh(cls);
  emit(FMT_COMPILE("and.b{} {}, {}, {}"), bits, abs, x, bits == 32 ? "2147483647" : "9223372036854775807");
  std::string negative, positive;  // the sign's predicates, made when needed
  auto sign = [&](bool neg) -> const std::string& {
    std::string& p = neg ? negative : positive;
    if (p.empty()) {
      p = fresh(Reg::pred);
      emit(FMT_COMPILE("setp.{}.s{} {}, {}, 0"), neg ? "lt" : "ge", bits, p, x);
    }
    return p;
  };
  // abs - lo < count (unsigned): lo <= abs < lo + count.
  auto in_range = [&](uint64_t lo, uint64_t count) {
    std::string p = fresh(Reg::pred);
    if (lo == 0) {
      emit(FMT_COMPILE("setp.lt.u{} {}, {}, {}"), bits, p, abs, count);
    } else {
      std::string shifted = fresh(cls);
      emit(FMT_COMPILE("sub.s{} {}, {}, {}"), bits, shifted, abs, lo);
      emit(FMT_COMPILE("setp.lt.u{} {}, {}, {}"), bits, p, shifted, count);
    }
    return p;
  };
  std::vector<std::string> terms;
  auto add = [&](std::string p) { terms.push_back(std::move(p)); };
  auto one = [&](std::string p, bool neg) {
    std::string r = fresh(Reg::pred);
    emit(FMT_COMPILE("and.pred {}, {}, {}"), r, p, sign(neg));
    add(r);
  };
  // NaNs have no sign in the mask: signaling ones lie between the infinity and the first quiet NaN.
  uint64_t top = bits == 32 ? uint64_t(0x7fffffff) : uint64_t(0x7fffffffffffffff);
  if ((mask & 3) == 3) add(in_range(exp_all + 1, top - exp_all));
  else if (mask & 1) add(in_range(exp_all + 1, quiet - exp_all - 1));
  else if (mask & 2) add(in_range(quiet, top - quiet + 1));
  struct Class {
    unsigned neg_bit, pos_bit;
    uint64_t lo, count;
  };
  uint64_t min_normal = uint64_t(1) << mantissa;
  const Class classes[] = {{2, 9, exp_all, 1}, {3, 8, min_normal, exp_all - min_normal}, {4, 7, 1, min_normal - 1},
                           {5, 6, 0, 1}};
  for (const Class& c : classes) {
    bool neg = mask >> c.neg_bit & 1, pos = mask >> c.pos_bit & 1;
    if (!neg && !pos) continue;
    std::string p = in_range(c.lo, c.count);
    if (neg && pos) add(p);
    else one(p, neg);
  }
  if (terms.empty()) {
    emit(FMT_COMPILE("setp.ne.s32 {}, 0, 0"), d);
    return;
  }
  std::string acc = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    std::string next = i + 1 == terms.size() ? d : fresh(Reg::pred);
    emit(FMT_COMPILE("or.pred {}, {}, {}"), next, acc, terms[i]);
    acc = next;
  }
  if (terms.size() == 1) line(mov(Reg::pred, d, acc));
}

// IEEE 754-2019 maximum / minimum of f64 values (NaN if either is, -0 below +0), as LLVM's code generator
// expands it: max.f64 / min.f64, NaN where either operand is, and where the result is a zero, the operand that
// is the zero of the wanted sign.
void PtxEmitter::emit_f64_maximum(const llvm::CallInst& call, bool is_max) {
  std::string a = reg(call.getArgOperand(0)), b = reg(call.getArgOperand(1));
  std::string d = define(&call)[0];
  const char* zero_bits = is_max ? "0" : "-9223372036854775808";  // +0 for the maximum, -0 for the minimum
  std::string nan = fresh(Reg::pred), a_zero = fresh(Reg::pred), b_zero = fresh(Reg::pred), zero = fresh(Reg::pred);
  std::string m = fresh(Reg::b64), r = fresh(Reg::b64), ra = fresh(Reg::b64), rb = fresh(Reg::b64);
  emit(FMT_COMPILE("setp.nan.f64 {}, {}, {}"), nan, a, b);
  emit(FMT_COMPILE("{}.f64 {}, {}, {}"), is_max ? "max" : "min", m, a, b);
  emit(FMT_COMPILE("selp.f64 {}, 0d7FF8000000000000, {}, {}"), r, m, nan);
  emit(FMT_COMPILE("setp.eq.b64 {}, {}, {}"), a_zero, a, zero_bits);
  emit(FMT_COMPILE("selp.f64 {}, {}, {}, {}"), ra, a, r, a_zero);
  emit(FMT_COMPILE("setp.eq.b64 {}, {}, {}"), b_zero, b, zero_bits);
  emit(FMT_COMPILE("selp.f64 {}, {}, {}, {}"), rb, b, ra, b_zero);
  emit(FMT_COMPILE("setp.eq.f64 {}, {}, 0d0000000000000000"), zero, r);
  emit(FMT_COMPILE("selp.f64 {}, {}, {}, {}"), d, rb, r, zero);
}

std::string PtxEmitter::phi_register_for_output(const llvm::CallInst& call, unsigned k, Reg cls,
                                                const llvm::DenseSet<unsigned>& taken,
                                                const llvm::DenseMap<unsigned, int>& input_reads) {
  // Where output k goes: phis of the whole result (part k of their registers), or phis of an extractvalue of
  // field k (their one register).
  struct Candidate {
    const llvm::Value* value;  // what the phi takes
    const llvm::PHINode* phi;
    size_t part;
  };
  std::vector<Candidate> candidates;
  auto phis_of = [&](const llvm::Value* value, size_t part) {
    for (const llvm::User* u : value->users())
      if (auto* phi = llvm::dyn_cast<llvm::PHINode>(u)) candidates.push_back({value, phi, part});
  };
  phis_of(&call, call.getType()->isStructTy() ? k : 0);
  if (call.getType()->isStructTy())
    for (const llvm::User* u : call.users())
      if (auto* ev = llvm::dyn_cast<llvm::ExtractValueInst>(u); ev && ev->getNumIndices() == 1 && ev->getIndices()[0] == k)
        phis_of(ev, 0);
  for (const Candidate& c : candidates) {
    auto it = values_.find(c.phi);
    if (it == values_.end() || c.part >= it->second.size()) continue;
    const std::string& r = it->second[c.part];
    if (r.empty()) continue;
    unsigned key = register_key(r);
    if (taken.contains(key) || input_reads.contains(key) || class_of_register(r) != cls) continue;  // no input may read it
    bool free = !live_into(c.value, c.phi->getParent());
    for (const llvm::Value* holder : holders(r))
      if (free && live_after(holder, &call)) free = false;
    if (free) return r;
  }
  return "";
}

// Inline asm as LLVM prints it: $N is operand N (the outputs, then the inputs), $$ a dollar sign. The same
// statements (wgmma, TMA copies, barriers) come back in kernel after kernel, each in a new LLVMContext: parsed
// once per thread by their text and constraints (a wgmma's 130 constraints took ~1% of attention's compile to
// parse anew in every kernel), and found by InlineAsm within a kernel. Only a statement the emitter handles is
// kept (a throw leaves nothing behind). The cache empties between kernels (the constructor) when it grows large.
const PtxEmitter::ParsedAsm& PtxEmitter::parse_asm(const llvm::InlineAsm& ia) {
  if (auto known = parsed_asm_.find(&ia); known != parsed_asm_.end()) return *known->second;
  std::string key = ia.getAsmString().str();
  key += '\0';
  key += ia.getConstraintString();
  auto cached = parsed_asm_cache().find(key);
  if (cached == parsed_asm_cache().end()) {
    ParsedAsm p;
    p.constraints = ia.ParseConstraints();
    llvm::StringRef text = ia.getAsmString();
    std::string literal;
    for (size_t i = 0; i < text.size(); ++i) {
      char ch = text[i];
      if (ch != '$') {
        literal += ch;
        continue;
      }
      if (i + 1 < text.size() && text[i + 1] == '$') {  // "$$": a dollar sign
        literal += '$';
        ++i;
        continue;
      }
      // Operands are numbered within the constraints (clobbers come last): a larger number names none.
      size_t j = i + 1, n = 0, operands = p.constraints.size();
      for (; j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && n < operands; ++j)
        n = n * 10 + (text[j] - '0');
      if (j == i + 1) throw Unsupported("an inline asm operand with a modifier");
      if (n >= operands) throw Unsupported("an inline asm operand number out of range");
      p.pieces.emplace_back(std::move(literal), static_cast<int>(n));
      literal.clear();
      if (n >= p.named.size()) p.named.resize(n + 1, false);
      p.named[n] = true;
      i = j - 1;
    }
    p.pieces.emplace_back(std::move(literal), -1);
    cached = parsed_asm_cache().emplace(std::move(key), std::move(p)).first;
  }
  parsed_asm_[&ia] = &cached->second;
  return cached->second;
}

// The statement with its operands in registers (parse_asm); an input tied to an output ("0") is copied into the
// output's register before it.
void PtxEmitter::emit_inline_asm(const llvm::CallInst& call) {
  const ParsedAsm& parsed = parse_asm(*llvm::cast<llvm::InlineAsm>(call.getCalledOperand()));
  const llvm::InlineAsm::ConstraintInfoVector& infos = parsed.constraints;
  llvm::Type* t = call.getType();
  Parts outputs;
  std::vector<std::string> operands;
  unsigned input = 0;
  const std::vector<bool>& named_in_text = parsed.named;  // which operands the text reads or writes
  auto named = [&](size_t n) { return n < named_in_text.size() && named_in_text[n]; };
  std::vector<std::pair<std::string, std::string>> copies_after;  // (output, input) of passed-through values
  llvm::DenseMap<unsigned, int> input_reads;  // how many of the inputs read each register (by register_key)
  for (const llvm::Value* arg : call.args())
    if (auto a = values_.find(arg); a != values_.end())
      for (const std::string& r : a->second)
        if (!r.empty()) ++input_reads[register_key(r)];
  std::vector<bool> tied_output(infos.size(), false);  // outputs whose register an input decides
  for (const llvm::InlineAsm::ConstraintInfo& c : infos) {
    if (c.Type == llvm::InlineAsm::isClobber) continue;
    if (c.Type == llvm::InlineAsm::isLabel || c.isIndirect || c.Codes.empty())
      throw Unsupported("an inline asm operand in memory or a label");
    const std::string& code = c.Codes[0];
    if (c.Type == llvm::InlineAsm::isOutput) {
      llvm::Type* ot = t->isStructTy() ? t->getStructElementType(static_cast<unsigned>(outputs.size())) : t;
      if (code != "r" && code != "l" && code != "f" && code != "d" && code != "h")
        throw Unsupported("the inline asm output constraint '" + code + "'");
      outputs.push_back(fresh(class_of(ot)));
      operands.push_back(outputs.back());
      continue;
    }
    const llvm::Value* v = call.getArgOperand(input++);
    if (std::isdigit(static_cast<unsigned char>(code[0]))) {
      size_t tied = std::stoul(code);
      if (tied >= outputs.size()) throw Unsupported("an inline asm input tied to a later operand");
      tied_output[tied] = true;
      // An input that dies here lends its register to the output (an accumulator carried around a loop then
      // needs no copy); else the output starts as a copy of it.
      auto it = values_.find(v);
      size_t self = operands.size();  // this input's operand number
      if (!named(tied) && !named(self) && it != values_.end() && it->second.size() == 1 && !it->second[0].empty()) {
        // The text names neither: the output is the input passed through (wgmma.wait_group's fence on the
        // accumulator). Out of a phi's register it is copied after the statement, once the wgmma has finished,
        // which keeps the phi's register free for the next wgmma's result (phi_register_for_output).
        const std::string& in = it->second[0];
        bool phi_register = llvm::any_of(holders(in), [](const llvm::Value* h) { return llvm::isa<llvm::PHINode>(h); });
        if (phi_register && class_of_register(in) == class_of_register(outputs[tied])) {
          copies_after.emplace_back(outputs[tied], in);
          operands[tied] = in;
          operands.push_back(in);
          continue;
        }
      }
      // (The register read by no other operand: this input is its only reader among them.)
      bool take_over = it != values_.end() && it->second.size() == 1 && !it->second[0].empty() &&
                       class_of_register(it->second[0]) == class_of_register(outputs[tied]) &&
                       input_reads[register_key(it->second[0])] == 1;
      if (take_over)
        for (const llvm::Value* holder : holders(it->second[0]))
          if (live_after(holder, &call)) take_over = false;
      if (take_over) {
        outputs[tied] = it->second[0];
      } else {
        line(mov(class_of_register(outputs[tied]), outputs[tied], operand(v)));
      }
      operands[tied] = outputs[tied];
      operands.push_back(outputs[tied]);
    } else if (code == "n") {
      auto* ci = llvm::dyn_cast<llvm::ConstantInt>(v);
      if (!ci) throw Unsupported("an inline asm immediate that is not a constant");
      operands.push_back(std::to_string(ci->getSExtValue()));
    } else if (code == "r" || code == "l" || code == "f" || code == "d" || code == "h") {
      std::string r = reg(v);
      // A shared address lives in 32 bits here and in 64 in LLVM's data layout: widen or narrow it to the
      // register the constraint asks for.
      if (code == "l" && class_of_register(r) == Reg::b32) {
        std::string wide = fresh(Reg::b64);
        emit(FMT_COMPILE("cvt.u64.u32 {}, {}"), wide, r);
        r = wide;
      } else if (code == "r" && class_of_register(r) == Reg::b64) {
        std::string low = fresh(Reg::b32);
        emit(FMT_COMPILE("cvt.u32.u64 {}, {}"), low, r);
        r = low;
      }
      operands.push_back(r);
    } else {
      throw Unsupported("the inline asm input constraint '" + code + "'");
    }
  }
  // An output carried into a phi (an accumulator around a loop) is written into the phi's register, so the
  // edge needs no copy: a copy would read a wgmma's registers while it may still be in flight, and ptxas
  // then serializes the wgmma.
  llvm::DenseSet<unsigned> taken;
  for (const std::string& r : outputs) taken.insert(register_key(r));
  for (unsigned k = 0; k < outputs.size(); ++k) {
    if (tied_output[k]) continue;
    if (std::string r = phi_register_for_output(call, k, class_of_register(outputs[k]), taken, input_reads); !r.empty()) {
      taken.insert(register_key(r));
      outputs[k] = r;
      operands[k] = r;
    }
  }
  if (!t->isVoidTy()) bind(&call, outputs);
  // (Outputs that took over a register are bound to both values now: a later take-over checks both.)

  std::string out;
  for (const auto& [literal, n] : parsed.pieces) {
    out += literal;
    if (n < 0) break;
    if (static_cast<size_t>(n) >= operands.size()) throw Unsupported("an inline asm operand number out of range");
    out += operands[n];
  }
  body_ += "\t// begin inline asm\n\t";
  body_ += out;
  body_ += "\n\t// end inline asm\n";
  for (const auto& [to, from] : copies_after) line(mov(class_of_register(to), to, from));
}

}  // namespace weft::codegen::nvptx::emitter
