// What a TMA copy's attributes say (async_descriptor_load / _store / _prefetch; weft/async.h): ints = {} (no
// hint), {evict}, or for a reducing store {evict (0: none), reduce}. Read here by the verifier and both lowerings.
#pragma once

#include <cstdint>

#include "ir/node.h"

namespace weft::ir {

struct CopyHints {
  int evict = 0;   // weft::Evict: 0 none, 1 first, 2 last, 3 normal, 4 unchanged
  int reduce = 0;  // weft::StoreReduce: 0 none (a plain store), 1 add, 2 min, 3 max
};

inline CopyHints copy_hints(const Attrs& a) {
  CopyHints h;
  if (!a.ints.empty()) h.evict = static_cast<int>(a.ints[0]);
  if (a.ints.size() == 2) h.reduce = static_cast<int>(a.ints[1]);
  return h;
}

// "add", "min", "max": StoreReduce's names, also the PTX reduction's (null for none or a value out of range).
inline const char* store_reduce_name(int reduce) {
  static const char* const names[] = {"add", "min", "max"};
  return reduce >= 1 && reduce <= 3 ? names[reduce - 1] : nullptr;
}

}  // namespace weft::ir
