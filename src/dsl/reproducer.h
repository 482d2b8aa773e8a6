// Reproducers for compiler faults: when compiling a kernel raises weft::InternalError, the kernel's IR and
// everything that decided its compilation (options, backend, weft's build, the WEFT_ variables) go to a
// file, and the error's message names it, so that the fault can be reported and replayed.
#pragma once

#include <string>

#include "ir/node.h"
#include "weft/error.h"
#include "weft/kernel.h"

namespace weft::dsl {

// `fault` with "\nreproducer: <path>" appended (or, when no file could be written, why not). The file goes
// to WEFT_DUMP_DIR when it is set, else to $TMPDIR (or /tmp) under a fresh name (mkstemp: private, never
// an existing file). A fault that already names a reproducer is returned as it is.
InternalError with_reproducer(const InternalError& fault, const ir::Function& f, const KernelOptions& options,
                              const std::string& backend);

}  // namespace weft::dsl
