// NVPTX lowering: 32-bit index arithmetic in the form instcombine would give it (constants folded outward,
// `or disjoint` where the bits are known apart, one product per block), pointers as a shared base plus
// constants, and the elements of binary ops that go through them.
#include "codegen/nvptx/lowering.h"

#include "codegen/llvm_builders.h"

namespace weft::codegen::nvptx::detail {

// a | b where no bit is set in both (`or disjoint`: an add, known to carry nothing).
Value* Lowering::disjoint_or(Value* a, Value* b) { return b_.CreateOr(a, b, "", /*IsDisjoint=*/true); }

// The bits LLVM's known-bits analysis proves zero in the 32-bit integer x (known_bits_while_building; once per
// value: a tile's registers share their varying part).
const llvm::APInt& Lowering::known_zeros(Value* x) {
  auto [at, added] = known_zeros_.try_emplace(x);
  if (added) at->second = known_bits_while_building(x, mod_->getDataLayout()).Zero;
  return at->second;
}

// x + c, or x itself when c is 0 (no `add x, 0` for the optimizer to delete); `or disjoint` where c sets only
// bits that are zero in x (what instcombine would make of the add: the registers of a tile then differ from
// their shared part by bits or'd in).
Value* Lowering::add_const(Value* x, int64_t c, bool nsw) {
  if (c == 0) return x;
  if (c > 0 && c <= INT32_MAX && (llvm::APInt(32, uint64_t(c)) & ~known_zeros(x)).isZero()) return disjoint_or(x, i32c(c));
  return nsw ? b_.CreateNSWAdd(x, i32c(c)) : b_.CreateAdd(x, i32c(c));
}

// Integer index arithmetic (32-bit) in the form instcombine would give it: each value a part that varies
// plus a constant (`x + c`, `x | c` with disjoint bits: the layouts' coordinates, acc_row and acc_col,
// flat_index), the constants folded and kept outermost, the varying parts combined once per block. So
// the elements of `arange + scalar`, rows + columns, or a ring slot's `(stage * panels + p) * bytes` share
// one add or multiply and differ by a constant, with nothing for instcombine to reassociate element by
// element nor for CSE to merge after it (without that, the pipeline's first instcombine was needed, and
// D 64 attention's masks kept a copy of x + s per element: benchmarks/NOTES.md, session 33).
// split_offset(v) = {x, c} with v = x + c (x null where v is a constant); with `sext_exact`, only through the
// steps where sext(x + c) = sext(x) + c (sext_splits: pointer_add's offsets).
std::pair<Value*, int64_t> Lowering::split_offset(Value* v, bool sext_exact) {
  int64_t c = 0;
  for (int depth = 0; depth < 4; ++depth) {
    if (auto* k = llvm::dyn_cast<llvm::ConstantInt>(v)) return {nullptr, c + k->getSExtValue()};
    auto* op = llvm::dyn_cast<llvm::BinaryOperator>(v);
    auto* k = op ? llvm::dyn_cast<llvm::ConstantInt>(op->getOperand(1)) : nullptr;
    bool offset = k && (sext_exact ? sext_splits(op)
                                   : op->getOpcode() == llvm::Instruction::Add ||
                                         (op->getOpcode() == llvm::Instruction::Or &&
                                          llvm::cast<llvm::PossiblyDisjointInst>(op)->isDisjoint()));
    if (!offset) break;
    c += k->getSExtValue();
    v = op->getOperand(0);
  }
  return {v, c};
}

// a + b, or a - b.
Value* Lowering::index_add(Value* a, Value* b, bool subtract) {
  if (a->getType() != b->getType() || !a->getType()->isIntegerTy(32))
    return subtract ? b_.CreateSub(a, b) : b_.CreateAdd(a, b);
  auto [x, cx] = split_offset(a);
  auto [y, cy] = split_offset(b);
  int64_t c = subtract ? cx - cy : cx + cy;
  if (!y) return cy == 0 ? a : x ? add_const(x, c) : i32c(c);
  if (!x && !subtract) return cx == 0 ? b : add_const(y, c);
  if (!x) return b_.CreateSub(a, b);  // c - y: no form to keep
  Value*& sum = index_sums_[{b_.GetInsertBlock(), x, y, subtract}];
  if (!sum)
    sum = subtract ? b_.CreateSub(x, y) : (known_zeros(x) | known_zeros(y)).isAllOnes() ? disjoint_or(x, y) : b_.CreateAdd(x, y);
  return add_const(sum, c);
}

// a * k for a constant k: (x + c) k = x k + c k, and (y k') k = y (k' k).
Value* Lowering::index_mul(Value* a, int64_t k) {
  if (!a->getType()->isIntegerTy(32)) return b_.CreateMul(a, llvm::ConstantInt::get(a->getType(), k));
  if (k == 0 || k == 1) return k == 0 ? i32c(0) : a;
  auto [x, c] = split_offset(a);
  if (!x) return i32c(c * k);
  auto* inner = llvm::dyn_cast<llvm::BinaryOperator>(x);
  auto* k2 = inner && inner->getOpcode() == llvm::Instruction::Mul ? llvm::dyn_cast<llvm::ConstantInt>(inner->getOperand(1)) : nullptr;
  Value* y = k2 ? inner->getOperand(0) : x;
  int64_t factor = k2 ? k2->getSExtValue() * k : k;
  Value*& product = index_products_[{b_.GetInsertBlock(), y, factor}];
  if (!product) product = factor == 1 ? y : b_.CreateMul(y, i32c(factor));
  return add_const(product, c * k);
}

// sum of coords[k] * strides[k] in index_mul's and index_add's form: the coordinates' per-thread parts
// scaled and summed once per block, their constants folded into one, so that the registers of a tile share
// one index and differ by a constant (a row-major index of blocked or Acc coordinates, a gather's address).
Value* Lowering::linear_index(const std::vector<Value*>& coords, const std::vector<int64_t>& strides) {
  Value* at = i32c(0);
  for (size_t k = 0; k < coords.size(); ++k) at = index_add(at, index_mul(coords[k], strides[k]), false);
  return at;
}

// Whether sext(x op k) = sext(x) + k for `op`, an add or a disjoint or of x and a constant k: the add cannot
// overflow (nsw, or x known non-negative and small enough: LLVM's known bits of x, which the layouts' thread
// parts and index_mul's products have), or the or's k sets no bit at or above bit 31.
bool Lowering::sext_splits(llvm::BinaryOperator* op) {
  auto* k = llvm::cast<llvm::ConstantInt>(op->getOperand(1));
  if (op->getOpcode() == llvm::Instruction::Or)
    return llvm::cast<llvm::PossiblyDisjointInst>(op)->isDisjoint() && !k->isNegative();
  if (op->getOpcode() != llvm::Instruction::Add) return false;
  if (op->hasNoSignedWrap()) return true;
  llvm::KnownBits x = known_bits_while_building(op->getOperand(0), mod_->getDataLayout());
  return x.isNonNegative() && static_cast<int64_t>(x.getMaxValue().getZExtValue()) + k->getSExtValue() <= INT32_MAX;
}

// p + offset elements of `pointee`. An offset that is a 64-bit sum of two values (a row's start plus a
// column, `row * n + cols` in Longs) becomes two steps, p + a + b, so that licm can hoist the step that does
// not change in a loop (LLVM's own pipelines split such GEPs in instcombine first); a 32-bit offset that is a
// varying part plus constants (index_add's form, the layouts' coordinates) becomes p + x, then the constant,
// so that the registers of a tile share p + x.
Value* Lowering::pointer_add(llvm::Type* pointee, Value* p, Value* offset) {
  if (offset->getType()->isIntegerTy(32)) {  // x + c or x | c: p + x, then + c (a constant offset of the access)
    auto [x, c] = split_offset(offset, /*sext_exact=*/true);
    if (x && x != offset) return b_.CreateConstGEP1_64(pointee, pointer_add(pointee, p, x), static_cast<uint64_t>(c));
  }
  Value* o = b_.CreateSExt(offset, b_.getInt64Ty());
  auto* sum = llvm::dyn_cast<llvm::BinaryOperator>(o);
  if (sum && sum->getOpcode() == llvm::Instruction::Add && !llvm::isa<llvm::Constant>(sum->getOperand(0)) &&
      !llvm::isa<llvm::Constant>(sum->getOperand(1)))
    return b_.CreateGEP(pointee, b_.CreateGEP(pointee, p, sum->getOperand(0)), sum->getOperand(1));
  return b_.CreateGEP(pointee, p, o);
}

// One element of a binary op: 32-bit integer adds and subtractions in the form above (index_add), and a tile's
// multiplications by a constant (index_mul: `rows * n + cols` then shares one product per block), everything
// else as the element ops make it. (Scalars' products stay plain: index_mul on them, `j * BN` in attention's
// loop, cost the D 64 causal kernels 16 SASS instructions and 4 bytes of spill.)
Value* Lowering::binary_element(ir::Op op, DType d, Value* a, Value* b, bool tile) {
  if ((op == Op::Add || op == Op::Sub) && a->getType()->isIntegerTy(32)) return index_add(a, b, op == Op::Sub);
  if (op == Op::Mul && tile && a->getType()->isIntegerTy(32)) {
    if (auto* k = llvm::dyn_cast<llvm::ConstantInt>(b)) return index_mul(a, k->getSExtValue());
    if (auto* k = llvm::dyn_cast<llvm::ConstantInt>(a)) return index_mul(b, k->getSExtValue());
  }
  return ops_.round(d, ops_.binary(op, d, a, b));
}

}  // namespace weft::codegen::nvptx::detail
