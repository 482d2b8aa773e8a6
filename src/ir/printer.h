// The IR printer: stable, readable text, one node per line.
//
//   kernel @vector_add(%0: ptr<f32>, %1: ptr<f32>, %2: i32) {
//     %3 = program_id 0 : i32
//     ...
//   }
//
// Values are numbered in print order, so the text does not depend on how the kernel was built.
#pragma once

#include <string>

#include "ir/node.h"

namespace weft::ir {

struct PrintOptions {
  bool locations = false;  // append "  // file.cpp:42" to each line
};

std::string print(const Function& f, PrintOptions options = {});

}  // namespace weft::ir
