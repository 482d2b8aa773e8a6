#include "codegen/deferred_math.h"

#include <fmt/format.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>

#include <array>
#include <string_view>

#include "codegen/portable_math.h"
#include "weft/error.h"

namespace weft::codegen::deferred_math {

namespace {

struct FnInfo {
  std::string_view name;
  unsigned arity;
  bool has_f64;  // portable_math has an f64 version
};

constexpr std::array<FnInfo, 10> kFns = {{{"exp", 1, true},
                                          {"exp2", 1, true},
                                          {"log", 1, true},
                                          {"log2", 1, true},
                                          {"sin", 1, true},
                                          {"cos", 1, true},
                                          {"tanh", 1, false},
                                          {"sigmoid", 1, false},
                                          {"erf", 1, false},
                                          {"pow", 2, false}}};

constexpr std::string_view kPrefix = "weft.math.";

const FnInfo& info(Fn fn) { return kFns[static_cast<size_t>(fn)]; }

// The placeholder's function for fn on values of type t.
llvm::Function* placeholder(llvm::Module& m, Fn fn, llvm::Type* t) {
  const FnInfo& f = info(fn);
  std::string name = fmt::format("{}{}.{}", kPrefix, f.name, t->isFloatTy() ? "f32" : "f64");
  if (llvm::Function* existing = m.getFunction(name)) return existing;
  llvm::SmallVector<llvm::Type*, 2> params(f.arity, t);
  auto* function = llvm::Function::Create(llvm::FunctionType::get(t, params, false),
                                          llvm::GlobalValue::ExternalLinkage, name, m);
  function->setDoesNotThrow();
  function->setDoesNotAccessMemory();
  function->setWillReturn();
  function->setNoSync();
  function->addFnAttr(llvm::Attribute::Speculatable);  // pure arithmetic: safe anywhere
  return function;
}

}  // namespace

llvm::Value* expand_now(llvm::IRBuilder<>& b, Fn fn, llvm::ArrayRef<llvm::Value*> args) {
  switch (fn) {
    case Fn::exp: return portable_math::exp(b, args[0]);
    case Fn::exp2: return portable_math::exp2(b, args[0]);
    case Fn::log: return portable_math::log(b, args[0]);
    case Fn::log2: return portable_math::log2(b, args[0]);
    case Fn::sin: return portable_math::sin(b, args[0]);
    case Fn::cos: return portable_math::cos(b, args[0]);
    case Fn::tanh: return portable_math::tanh(b, args[0]);
    case Fn::sigmoid: return portable_math::sigmoid(b, args[0]);
    case Fn::erf: return portable_math::erf(b, args[0]);
    case Fn::pow: return portable_math::pow(b, args[0], args[1]);
  }
  throw InternalError("deferred math: unknown function");
}

llvm::Value* call(llvm::IRBuilder<>& b, Fn fn, llvm::ArrayRef<llvm::Value*> args) {
  llvm::Type* t = args[0]->getType();
  if (!t->isFloatTy() && !(t->isDoubleTy() && info(fn).has_f64)) return expand_now(b, fn, args);
  return b.CreateCall(placeholder(*b.GetInsertBlock()->getModule(), fn, t), args);
}

void expand(llvm::Module& m) {
  llvm::SmallVector<std::pair<llvm::Function*, Fn>, 4> placeholders;
  for (llvm::Function& f : m) {
    if (!f.isDeclaration() || !f.getName().starts_with(kPrefix)) continue;
    llvm::StringRef rest = f.getName().drop_front(kPrefix.size());
    std::string_view name(rest.data(), rest.find('.'));
    for (size_t i = 0; i < kFns.size(); ++i)
      if (kFns[i].name == name) placeholders.push_back({&f, static_cast<Fn>(i)});
  }
  for (auto [function, fn] : placeholders) {
    llvm::SmallVector<llvm::CallInst*, 16> calls;
    for (llvm::User* user : function->users()) {
      auto* c = llvm::dyn_cast<llvm::CallInst>(user);
      if (!c || c->getCalledFunction() != function)
        throw InternalError(fmt::format("deferred math: {} used other than by a call", function->getName().str()));
      calls.push_back(c);
    }
    for (llvm::CallInst* c : calls) {
      llvm::IRBuilder<> b(c);
      llvm::SmallVector<llvm::Value*, 2> args(c->args());
      llvm::Value* v = expand_now(b, fn, args);
      if (!v) throw InternalError(fmt::format("deferred math: no expansion of {}", function->getName().str()));
      c->replaceAllUsesWith(v);
      c->eraseFromParent();
    }
    function->eraseFromParent();
  }
}

}  // namespace weft::codegen::deferred_math
