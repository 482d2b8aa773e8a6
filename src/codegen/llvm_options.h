// WEFT_LLVM_ARGS: options for LLVM's own command line (as `opt` or `llc` take them), given to LLVM once per
// process before weft's first compile, for investigations: e.g. `-debug-counter=instcombine-visit=0-500` to
// bisect what a pass does. (Options that print per pass, -print-after or -time-passes, print nothing: weft
// registers no pass instrumentation.) They may change the code made, so both compile caches' keys hold them.
#pragma once

namespace weft::codegen {

// Hands WEFT_LLVM_ARGS to LLVM the first time it is called in a process; a later call does nothing. Options
// LLVM does not know are a weft::Error naming the variable (raised again by each call until LLVM accepts them).
void apply_llvm_args();

}  // namespace weft::codegen
