// NVPTX code generation: a verified kernel -> PTX text for one GPU architecture (no GPU or CUDA needed).
#pragma once

#include <cstdint>
#include <string>

#include "ir/node.h"
#include "weft/kernel.h"

namespace weft::codegen::nvptx {

struct PtxTarget {
  std::string arch = "sm_90a";    // LLVM NVPTX CPU name
  std::string features = "+ptx85";
};

struct PtxKernel {
  std::string ptx;            // a whole PTX module
  std::string entry;          // the kernel's symbol in it
  int threads = 128;          // threads per block (num_warps * 32)
  int64_t shared_bytes = 0;   // dynamic shared memory the launch must provide
  // GPU debug mode: the entry takes three more 64-bit parameters after the user's: the device addresses of
  // a passes::WaitTimeoutRecord and of its claim word, and the wait timeout in nanoseconds (debug_waits.h).
  bool debug = false;
  // Who wrote `ptx`: "weft" (weft's own emitter, ptx_emitter.h) or "llvm" (LLVM's NVPTX code generator); when
  // weft's was asked for and declined, "llvm (weft's emitter does not handle ...)".
  std::string emitter = "llvm";
};

// Which emitter compile_to_ptx asks first: weft's, unless WEFT_PTX_EMITTER=llvm. A PtxEmitterChoice
// alive on a thread overrides that for the compiles on that thread (tests compare the two in one process).
class PtxEmitterChoice {
 public:
  explicit PtxEmitterChoice(bool weft);
  ~PtxEmitterChoice();
  PtxEmitterChoice(const PtxEmitterChoice&) = delete;
  PtxEmitterChoice& operator=(const PtxEmitterChoice&) = delete;

 private:
  int before_;
};
bool weft_emitter_chosen();

// Whether `options` ask for GPU debug mode: KernelOptions::debug, or WEFT_DEBUG=1 for every kernel.
bool debug_mode(const KernelOptions& options);

// Why `arch` ("sm_90a") is not a target: "" when LLVM's NVPTX back end knows it, else a sentence naming the
// known ones (for WEFT_TARGET, WEFT_CHECK_PTX and compile_to_ptx's errors).
std::string unknown_arch_reason(const std::string& arch);

// "LLVM 22.1.8": the code generator's version, for cache keys.
std::string code_generator_version();

// Lowers `f` to PTX. Throws weft::Error for what the target cannot do (naming the user's line).
PtxKernel compile_to_ptx(const ir::Function& f, const KernelOptions& options, const PtxTarget& target);

// What a launch of `f` compiled for `target` needs, found by lowering it (no optimization, no PTX emitted):
// throws the weft::Error compile_to_ptx would for what the target cannot do (shared memory with the scratch
// weft adds, registers, barrier ids, task placement). The CPU backend runs it so that it accepts exactly the
// kernels the GPU accepts.
struct TargetPlan {
  int threads = 0;
  int64_t shared_bytes = 0;
};
TargetPlan plan_for_target(const ir::Function& f, const KernelOptions& options, const PtxTarget& target);

}  // namespace weft::codegen::nvptx
