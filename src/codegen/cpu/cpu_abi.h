// The calling convention between the CPU backend's generated code and its runtime (no LLVM here).
//
//   void kernel(const uint64_t* args, const ProgramCtx* ctx, char* frame);
//
// `args` holds one 64-bit slot per Tile parameter; `ctx` says which program instance runs; `frame` is
// scratch memory of `frame_bytes` (64-byte aligned) where the kernel keeps its tiles, one frame per
// concurrently running program instance.
#pragma once

#include <cstdint>

namespace weft::codegen::cpu {

struct ProgramCtx {
  int32_t program_id[3];
  int32_t num_programs[3];
};

using KernelFn = void (*)(const uint64_t* args, const ProgramCtx* ctx, char* frame);

constexpr int64_t kFrameAlign = 64;

}  // namespace weft::codegen::cpu
