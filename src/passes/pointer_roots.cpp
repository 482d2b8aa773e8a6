#include "passes/pointer_roots.h"

#include <algorithm>
#include <unordered_set>

namespace weft::passes {

std::vector<int32_t> pointer_roots(const ir::Node& ptrs) {
  std::vector<int32_t> slots;
  std::vector<const ir::Node*> pending{&ptrs};  // a worklist: pointer chains can be long
  std::unordered_set<const ir::Node*> seen{&ptrs};
  auto follow = [&](const ir::NodeRef& n) {
    if (seen.insert(n.get()).second) pending.push_back(n.get());
  };
  while (!pending.empty()) {
    const ir::Node& n = *pending.back();
    pending.pop_back();
    switch (n.op) {
      case ir::Op::Param: slots.push_back(static_cast<int32_t>(n.attrs.ints.at(0))); break;
      case ir::Op::PtrAdd:
      case ir::Op::Broadcast:
      case ir::Op::Reshape:
      case ir::Op::Permute:
      case ir::Op::Slice: follow(n.operands.at(0)); break;
      case ir::Op::Select:
        follow(n.operands.at(1));
        follow(n.operands.at(2));
        break;
      default: return {};
    }
  }
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  return slots;
}

}  // namespace weft::passes
