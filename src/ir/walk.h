// Walking a node's operands without recursion. Expression chains can be a million nodes deep (a loop in
// the user's C++ that keeps adding to one tile), so no analysis may follow operands on the C++ stack: they
// visit in post-order through this explicit stack instead, each node after the nodes it depends on.
#pragma once

#include <unordered_set>
#include <vector>

#include "ir/node.h"

namespace weft::ir {

// `root` and the nodes it depends on, each once and after its own dependencies (post-order).
// `deps(node)` gives the nodes to visit before `node` (a std::vector<const Node*>), in the order to visit
// them; an analysis with a memo leaves out the nodes it already knows, so that a walk from each node of a
// chain in turn costs linear time overall.
template <class Deps> std::vector<const Node*> post_order(const Node& root, Deps deps) {
  struct Frame {
    const Node* node;
    std::vector<const Node*> deps;
    size_t next = 0;
  };
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen{&root};
  std::vector<Frame> stack;
  stack.push_back({&root, deps(root)});
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next < top.deps.size()) {
      const Node* d = top.deps[top.next++];
      if (seen.insert(d).second) {
        std::vector<const Node*> next = deps(*d);
        stack.push_back({d, std::move(next)});  // (top is not used past this point)
      }
      continue;
    }
    order.push_back(top.node);
    stack.pop_back();
  }
  return order;
}

// Whether `pred` holds for a statement of region `r` or of a region nested in one of its statements (loop
// bodies, branches, task bodies). Regions nest as deep as the user's control flow, not as expression chains.
template <class Pred> bool any_statement(const Region& r, const Pred& pred) {
  for (const NodeRef& n : r.body) {
    if (pred(*n)) return true;
    for (const Region& inner : n->regions)
      if (any_statement(inner, pred)) return true;
  }
  return false;
}

}  // namespace weft::ir
