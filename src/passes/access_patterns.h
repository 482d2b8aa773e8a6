// Analysis: what is known at compile time about the integer and pointer values of a kernel, along the
// flat (row-major) element order of each tile — enough to prove that a chunk of consecutive elements
// addresses consecutive, aligned memory, so a code generator can use wide accesses without run-time
// checks (the idea of Triton's axis analysis, for the last dimension only).
//
//   contiguity c: the tile splits into runs of c elements (starting at multiples of c in flat order), each
//                 run holding v, v + 1, …, v + c - 1 (pointers: consecutive elements)
//   constancy  k: runs of k elements hold one value
//   divisor    d: the first value of each run is a multiple of d (pointers: its byte address)
//
// All three are powers of two; 1 says nothing is known.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "ir/node.h"

namespace weft::passes {

struct AccessPattern {
  int64_t contiguity = 1;
  int64_t constancy = 1;
  int64_t divisor = 1;
};

class AccessPatterns {
 public:
  explicit AccessPatterns(const ir::Function& f);
  AccessPattern of(const ir::Node* n) const;

 private:
  AccessPattern compute(const ir::Node& n) const;
  void visit(const ir::Region& r);
  std::unordered_map<const ir::Node*, AccessPattern> known_;
};

}  // namespace weft::passes
