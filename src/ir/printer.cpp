#include "ir/printer.h"

#include <fmt/format.h>

#include <unordered_map>

#include "ir/atomics.h"

namespace weft::ir {
namespace {

class Printer {
 public:
  explicit Printer(PrintOptions o) : options_(o) {}

  std::string function(const Function& f) {
    std::string params;
    for (const NodeRef& p : f.params) {
      if (!params.empty()) params += ", ";
      params += fmt::format("{}: {}", def(p), p->type.str());
      if (p->attrs.ints.size() > 1 && p->attrs.ints[1] > 1) params += fmt::format(" divisible {}", p->attrs.ints[1]);
      // The swizzle changes the code (shared-memory layout), so it is printed: the printed IR is the cache key.
      if (p->type.kind == Type::Kind::TensorDesc) params += fmt::format(" swizzle {}", p->attrs.ints.at(3));
    }
    out_ += fmt::format("kernel @{}({}) {{\n", f.name, params);
    region(f.body, 1);
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  std::string def(const NodeRef& n) {
    auto [it, added] = names_.emplace(n.get(), next_);
    if (added) ++next_;
    return fmt::format("%{}", it->second);
  }
  std::string use(const NodeRef& n) {
    auto it = names_.find(n.get());
    return it == names_.end() ? "%?" : fmt::format("%{}", it->second);
  }

  std::string attrs(const Node& n) {
    const Attrs& a = n.attrs;
    switch (n.op) {
      case Op::Param:
        return fmt::format(" {}", a.ints.at(0));
      case Op::Constant:
        return a.integer ? fmt::format(" {}", *a.integer) : fmt::format(" {}", a.number);
      case Op::Broadcast:
      case Op::Reshape:
        return " " + shape_str(a.shape);
      case Op::Cast:
        return " to " + a.dtype.str();
      case Op::LocalAlloc:
      case Op::LocalReinterpret:
        return " " + a.dtype.str() + shape_str(a.shape);
      case Op::AtomicRmw:
      case Op::AtomicCas: {
        AtomicInfo info = atomic_info(n);
        return fmt::format(" {} {} {}", atomic_name(info), order_name(info.order), scope_name(info.scope));
      }
      default:
        if (op_category(n.op) == OpCategory::Unary) return !a.ints.empty() && a.ints[0] == 1 ? " fast" : "";
        break;
    }
    std::string s;
    for (size_t i = 0; i < a.ints.size(); ++i) s += (i ? ", " : " ") + std::to_string(a.ints[i]);
    return s;
  }

  void line(int depth, const std::string& text, const Node& n) {
    out_ += std::string(2 * depth, ' ') + text;
    if (options_.locations && n.loc.known()) {
      std::string_view file = n.loc.file;
      size_t slash = file.rfind('/');
      out_ += fmt::format("  // {}:{}", slash == std::string_view::npos ? file : file.substr(slash + 1), n.loc.line);
    }
    out_ += "\n";
  }

  void region(const Region& r, int depth) {
    for (const NodeRef& n : r.body) node(n, depth);
  }

  void node(const NodeRef& n, int depth) {
    std::string operands;
    for (size_t i = 0; i < n->operands.size(); ++i) operands += (i ? ", " : " ") + use(n->operands[i]);
    if (n->op == Op::For) {
      const NodeRef& index = n->regions.at(0).args.at(0);
      line(depth,
           fmt::format("for {} = {} to {} step {} {{", def(index), use(n->operands[0]), use(n->operands[1]),
                       use(n->operands[2])),
           *n);
      region(n->regions[0], depth + 1);
      out_ += std::string(2 * depth, ' ') + "}\n";
      return;
    }
    if (n->op == Op::If) {
      line(depth, fmt::format("if {} {{", use(n->operands[0])), *n);
      region(n->regions.at(0), depth + 1);
      if (n->regions.size() > 1 && !n->regions[1].body.empty()) {
        out_ += std::string(2 * depth, ' ') + "} else {\n";
        region(n->regions[1], depth + 1);
      }
      out_ += std::string(2 * depth, ' ') + "}\n";
      return;
    }
    if (n->op == Op::While) {
      line(depth, "while {", *n);
      region(n->regions.at(0), depth + 1);
      out_ += std::string(2 * depth, ' ') + "} do {\n";
      region(n->regions.at(1), depth + 1);
      out_ += std::string(2 * depth, ' ') + "}\n";
      return;
    }
    if (n->op == Op::AsyncTasks) {
      line(depth, "async_tasks {", *n);
      for (size_t t = 0; t < n->regions.size(); ++t) {
        const int64_t* o = &n->attrs.ints.at(3 * t);
        out_ += fmt::format("{}task \"{}\" warps {} regs {} replicas {} {{\n", std::string(2 * depth + 2, ' '),
                            n->attrs.names.at(t), o[0], o[1], o[2]);
        region(n->regions[t], depth + 2);
        out_ += std::string(2 * depth + 2, ' ') + "}\n";
      }
      out_ += std::string(2 * depth, ' ') + "}\n";
      return;
    }
    std::string body = fmt::format("{}{}{}", op_name(n->op), operands, attrs(*n));
    for (const std::string& nm : n->attrs.names) body += fmt::format(" \"{}\"", nm);
    if (n->type.kind == Type::Kind::None)
      line(depth, body, *n);
    else
      line(depth, fmt::format("{} = {} : {}", def(n), body, n->type.str()), *n);
  }

  PrintOptions options_;
  std::unordered_map<const Node*, int> names_;
  int next_ = 0;
  std::string out_;
};

}  // namespace

std::string print(const Function& f, PrintOptions options) { return Printer(options).function(f); }

}  // namespace weft::ir
