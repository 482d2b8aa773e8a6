// WEFT_CHECK_PTX=<arch>: every kernel specialization, whatever backend it runs on, is also lowered to PTX
// for <arch> and assembled by NVIDIA's ptxas, so that a CPU-only machine with the CUDA toolkit catches PTX
// that the GPU's driver would refuse (the unit test ptxas_accepts_every_test_kernel runs the op tests so).
#pragma once

#include "ir/node.h"
#include "weft/kernel.h"

namespace weft::detail {

// Nothing unless WEFT_CHECK_PTX is set. Then compiles `f` to PTX for that architecture and runs
// `ptxas -arch=<arch> <file> -o /dev/null` (ptxas from PATH, else /usr/local/cuda/bin/ptxas). Throws
// weft::Error when ptxas rejects the PTX (quoting its output and keeping the PTX file), when it cannot be
// found or run, and (unchanged) when the code generator refuses the kernel.
void check_ptx_if_asked(const ir::Function& f, const KernelOptions& options);

}  // namespace weft::detail
