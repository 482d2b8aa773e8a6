// Atomic read-modify-writes in the IR (atomic_rmw, atomic_cas; weft/ops.h): what a node's attributes say,
// and the names the printer, the verifier and the lowerings spell them with.
#pragma once

#include <cstdint>

#include "ir/node.h"
#include "weft/ops.h"

namespace weft::ir {

struct AtomicInfo {
  bool cas = false;            // compare and swap; else `op`
  AtomicOp op = AtomicOp::add;
  MemOrder order = MemOrder::acq_rel;
  MemScope scope = MemScope::gpu;
  bool release() const { return order == MemOrder::release || order == MemOrder::acq_rel; }
  bool acquire() const { return order == MemOrder::acquire || order == MemOrder::acq_rel; }
};

// atomic_rmw: ints = {op, order, scope}; atomic_cas: ints = {order, scope}.
inline AtomicInfo atomic_info(Op op, const Attrs& a) {
  AtomicInfo info;
  info.cas = op == Op::AtomicCas;
  size_t at = info.cas ? 0 : 1;
  if (!info.cas) info.op = static_cast<AtomicOp>(a.ints.at(0));
  info.order = static_cast<MemOrder>(a.ints.at(at));
  info.scope = static_cast<MemScope>(a.ints.at(at + 1));
  return info;
}
inline AtomicInfo atomic_info(const Node& n) { return atomic_info(n.op, n.attrs); }

// "add", "max", … "xchg" ("cas" for compare and swap): also the PTX atom operation's name.
inline const char* atomic_name(const AtomicInfo& info) {
  if (info.cas) return "cas";
  switch (info.op) {
    case AtomicOp::add: return "add";
    case AtomicOp::max: return "max";
    case AtomicOp::min: return "min";
    case AtomicOp::and_: return "and";
    case AtomicOp::or_: return "or";
    case AtomicOp::xor_: return "xor";
    case AtomicOp::xchg: return "xchg";
  }
  return "?";
}
// The PTX memory-model names: .relaxed/.acquire/.release/.acq_rel and .cta/.cluster/.gpu/.sys.
inline const char* order_name(MemOrder o) {
  switch (o) {
    case MemOrder::relaxed: return "relaxed";
    case MemOrder::acquire: return "acquire";
    case MemOrder::release: return "release";
    case MemOrder::acq_rel: return "acq_rel";
  }
  return "?";
}
inline const char* scope_name(MemScope s) {
  switch (s) {
    case MemScope::cta: return "cta";
    case MemScope::cluster: return "cluster";
    case MemScope::gpu: return "gpu";
    case MemScope::system: return "sys";
  }
  return "?";
}

}  // namespace weft::ir
