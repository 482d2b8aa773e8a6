// weft — a C++ embedded DSL and JIT compiler for GPU kernels. Include this one header.
#pragma once

#include "weft/async.h"
#include "weft/autotune.h"
#include "weft/control.h"
#include "weft/dtype.h"
#include "weft/error.h"
#include "weft/kernel.h"
#include "weft/ops.h"
#include "weft/runtime.h"
#include "weft/tile.h"
#include "weft/threads.h"
#include "weft/tma.h"
