// weft's own PTX emitter (ptx_emitter.h): the order blocks are written in, phis out of SSA (shared registers,
// copies on edges), branches.
#include <fmt/format.h>
#include <llvm/ADT/PostOrderIterator.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Dominators.h>

#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "codegen/nvptx/ptx_emitter_impl.h"

namespace weft::codegen::nvptx::emitter {

// The order blocks are written in: every loop's blocks together, and otherwise the function's own order as far
// as the forward edges allow (a topological order of the control flow without its back edges, so each block
// comes after its immediate dominator and every value is defined before the emitter meets a use). The
// lowering's block order can put blocks that run once (a loop's first step, a branch taken at its end) between
// the blocks of a loop; LLVM's block placement hands ptxas every loop contiguous, and so does this. An
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
        llvm::SmallVector<const llvm::Value*, 2> moved = std::move(holders(theirs));
        register_values_.erase(register_key(theirs));
        holders(mine).append(moved.begin(), moved.end());
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

std::string PtxEmitter::fresh_label() { return fmt::format(FMT_COMPILE("$L__E{}"), next_label_++); }

// Out of SSA: a phi's register is written on each edge into its block, by copies that run only on that
// edge (emit_terminator splits the edges of conditional branches), so no other path sees the new value.
void PtxEmitter::emit_phi_copies(const llvm::BasicBlock& from, const llvm::BasicBlock& to) {
  block_constants_.clear();  // each edge's copies run on that edge alone
  std::vector<std::pair<std::string, std::string>> copies;
  for (const llvm::PHINode& phi : to.phis()) {
    if (copied_early_.contains({&from, &phi})) continue;
    const llvm::Value* v = phi.getIncomingValueForBlock(&from);
    const Parts& dst = values_.at(&phi);
    RegClasses classes = part_classes(phi.getType());
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
    RegClasses classes = part_classes(phi.getType());
    if (dst.size() != 1 || classes[0] == Reg::pred || phi.getType()->isVectorTy()) continue;
    const std::string& r = dst[0];
    if (read_by_branch.count(r)) continue;
    // Nothing else held in the phi's register may be needed past the branch (on either path).
    bool free = true;
    for (const llvm::Value* holder : holders(r))
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
    // A test per case; each taken edge gets its own copies. A switch on an i1 (a predicate register, which
    // setp cannot compare) branches on the predicate itself.
    llvm::Type* t = sw->getCondition()->getType();
    std::string x = reg(sw->getCondition());
    for (const auto& c : sw->cases()) {
      std::string other = fresh_label();
      if (t->isIntegerTy(1)) {
        emit(FMT_COMPILE("@{}{} bra {}"), c.getCaseValue()->isOne() ? "!" : "", x, other);
      } else {
        std::string differs = fresh(Reg::pred);
        emit(FMT_COMPILE("setp.ne.b{} {}, {}, {}"), mov_bits(class_of(t)), differs, x, immediate(c.getCaseValue()));
        emit(FMT_COMPILE("@{} bra {}"), differs, other);
      }
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
    emit(FMT_COMPILE("@{} bra {}"), cond, label(yes));
    return go(no);
  }
  if (!no_phis) {
    emit(FMT_COMPILE("@!{} bra {}"), cond, label(no));
    return go(yes);
  }
  // Both successors take values: the no-edge's copies get a block of their own.
  std::string no_edge = fresh_label();
  emit(FMT_COMPILE("@!{} bra {}"), cond, no_edge);
  emit_phi_copies(from, *yes);
  line("bra.uni " + label(yes));
  body_ += no_edge + ":\n";
  go(no);
}

}  // namespace weft::codegen::nvptx::emitter
