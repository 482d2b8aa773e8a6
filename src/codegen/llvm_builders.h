// Small LLVM IR building blocks that every backend's lowering uses the same way: counted loops, the
// structured for/if of the tile IR, the check of a lowered module, and the optimization pipeline.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/KnownBits.h>

#include <functional>
#include <string>

namespace llvm {
class TargetMachine;
}

namespace weft::codegen {

// for (i = begin; i < end; i += step) body(i): signed compare, values of one integer type. The builder
// is left after the loop.
void emit_loop(llvm::IRBuilder<>& b, llvm::Value* begin, llvm::Value* end, llvm::Value* step,
               const std::function<void(llvm::Value*)>& body);

// The tile IR's `for`: i32 bounds, counted in i64 so that no bound near the i32 limits wraps, and a
// non-positive step runs no iteration rather than forever. body gets the i32 index.
void emit_for(llvm::IRBuilder<>& b, llvm::Value* lo, llvm::Value* hi, llvm::Value* step,
              const std::function<void(llvm::Value*)>& body);

// if (cond) then_body() else else_body().
// while (cond()) body(): cond() emits the test at the loop's header (its first block) and returns the i1.
void emit_while(llvm::IRBuilder<>& b, const std::function<llvm::Value*()>& cond, const std::function<void()>& body);

void emit_if(llvm::IRBuilder<>& b, llvm::Value* cond, const std::function<void()>& then_body,
             const std::function<void()>& else_body);

// The known bits of the integer v in IR still being built, by LLVM's rules for each operation (KnownBits) down
// to LLVM's usual depth: constants, bit operations, sums, products, shifts, extensions, selects, calls with a
// range. A phi is unknown: a loop's phi gets its back edge's value only after the body is lowered, and LLVM's
// own analysis (computeKnownBits) would take its first value for all of them.
llvm::KnownBits known_bits_while_building(llvm::Value* v, const llvm::DataLayout& dl, unsigned depth = 0);

// LLVM's verifier on the module `backend` (e.g. "NVPTX") lowered for `kernel`, when WEFT_VERIFY_LLVM says so
// (support/env.h: on in debug builds and weft's tests, off in release builds): an invalid module is an
// InternalError naming both and what the verifier found.
void check_lowered_module(const llvm::Module& m, const char* backend, const std::string& kernel);

// LLVM's default module pipeline at `level`, tuned for `target`.
void optimize_module(llvm::Module& m, llvm::TargetMachine* target, llvm::OptimizationLevel level,
                     const llvm::PipelineTuningOptions& tuning = llvm::PipelineTuningOptions());

// Runs on `m` the passes `build` makes with a PassBuilder for `target` whose analyses are all registered.
void run_passes(llvm::Module& m, llvm::TargetMachine* target,
                const std::function<llvm::ModulePassManager(llvm::PassBuilder&)>& build,
                const llvm::PipelineTuningOptions& tuning = llvm::PipelineTuningOptions());

}  // namespace weft::codegen
