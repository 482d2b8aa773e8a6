#include "passes/shared_layouts.h"

#include <fmt/format.h>

#include "support/compile_timing.h"
#include "weft/error.h"

namespace weft::passes {

const ir::Node* root_allocation(const ir::Node* view) {
  while (view->op != ir::Op::LocalAlloc) view = view->operands.at(0).get();
  return view;
}

namespace {

struct Assigner {
  SharedLayouts layouts;
  std::unordered_map<const ir::Node*, const ir::Node*> decided_by;
  std::vector<const ir::Node*> row_views;

  // A rows() view of a buffer kept in column panels would not be one block of rows in every panel the
  // way the rest of the stage is: not offered (view whole stages, or give each part of the rows its own
  // stage).
  void check_row_views() const {
    for (const ir::Node* n : row_views) {
      const ir::Node* alloc = root_allocation(n);
      auto it = layouts.panels.find(alloc);
      if (it == layouts.panels.end() || it->second >= alloc->type.shape.back()) continue;
      throw Error(fmt::format("rows() of buffer '{}', which keeps its columns in panels of {} (for a TMA box or wgmma "
                              "operand of 128-byte rows): a block of rows is not contiguous there; give each block "
                              "of rows its own stage (e.g. local_alloc(shape, stages) and view buffer[i])",
                              alloc->attrs.names.at(0), it->second),
                  n->loc);
    }
  }

  // async_remote_shmem_copy moves bytes as they are stored: its two buffers need one layout.
  std::vector<const ir::Node*> byte_copies;
  void check_byte_copies() const {
    for (const ir::Node* n : byte_copies) {
      const ir::Node* dst = root_allocation(n->operands[0].get());
      const ir::Node* src = root_allocation(n->operands[1].get());
      if (dst == src || (layouts.of(dst) == layouts.of(src) && layouts.panel_of(dst) == layouts.panel_of(src))) continue;
      auto describe = [&](const ir::Node* a) {
        return fmt::format("'{}' ({}-byte swizzle, {})", a->attrs.names.at(0), layouts.of(a),
                           layouts.panel_of(a) ? fmt::format("panels of {} columns", layouts.panel_of(a)) : "no panels");
      };
      throw Error(fmt::format("async_remote_shmem_copy copies bytes as stored from buffer {} into buffer {}, which "
                              "its other uses give another layout; copy between stages of one buffer, or between "
                              "buffers with the same uses (TMA box, wgmma operand, cols())",
                              describe(src), describe(dst)),
                  n->loc);
    }
  }

  // local_reinterpret reads a buffer's bytes row-major (through its swizzle, which moves bytes whatever their
  // type): the buffer may not keep column panels.
  std::vector<const ir::Node*> reinterpreted;
  void check_reinterpreted() const {
    for (const ir::Node* n : reinterpreted) {
      const ir::Node* alloc = root_allocation(n);
      if (int64_t panel = layouts.panel_of(alloc))
        throw Error(fmt::format("local_reinterpret of buffer '{}', which keeps its columns in panels of {} for its "
                                "other uses (cols(), a wgmma operand of rows wider than 128 bytes): its bytes are not "
                                "in row-major order; reinterpret a buffer of its own",
                                alloc->attrs.names.at(0), panel),
                    n->loc);
    }
  }

  // async_load_bulk and async_store_bulk move a view's bytes in its row-major order: its buffer must keep
  // them so, neither swizzled nor in panels the view spans.
  std::vector<const ir::Node*> bulk_copies;
  void check_bulk_copies() const {
    for (const ir::Node* n : bulk_copies) {
      const ir::Node* view = n->operands[1].get();
      const ir::Node* alloc = root_allocation(view);
      int swizzle = layouts.of(alloc);
      int64_t panel = layouts.panel_of(alloc);
      bool spans_panels = view->type.shape.size() == 2 && panel && panel < view->type.shape[1];
      if (!swizzle && !spans_panels) continue;
      throw Error(fmt::format("{} moves the view's bytes in row-major order, but buffer '{}' is stored {} for its other "
                              "uses (a TMA box, a wgmma operand, cols()); copy through a buffer of its own",
                              ir::op_name(n->op), alloc->attrs.names.at(0),
                              swizzle ? fmt::format("with a {}-byte swizzle", swizzle)
                                      : fmt::format("in panels of {} columns", panel)),
                  n->loc);
    }
  }

  void want(const ir::Node& use, const ir::Node* view, int swizzle, const char* why) {
    const ir::Node* alloc = root_allocation(view);
    auto [it, added] = layouts.swizzle.emplace(alloc, swizzle);
    if (added) {
      decided_by[alloc] = &use;
      return;
    }
    if (it->second != swizzle) {
      auto is_tma = [](const ir::Node& n) { return n.op == ir::Op::AsyncDescriptorLoad || n.op == ir::Op::AsyncDescriptorStore; };
      const char* hint = is_tma(use) || is_tma(*decided_by[alloc])
                             ? " (a TMA descriptor's swizzle is the one its tma(..., {.swizzle = bytes}) gives)"
                             : "";
      throw Error(fmt::format("{} needs buffer '{}' with a {}-byte swizzle ({}), but {} at {} needs a {}-byte swizzle; "
                              "use two buffers, or make the uses agree{}",
                              ir::op_name(use.op), alloc->attrs.names.at(0), swizzle, why,
                              ir::op_name(decided_by[alloc]->op), decided_by[alloc]->loc.str(), it->second, hint),
                  use.loc);
    }
  }

  void want_panels(const ir::Node& use, const ir::Node* view, int64_t cols) {
    const ir::Node* alloc = root_allocation(view);
    auto [it, added] = layouts.panels.emplace(alloc, cols);
    if (!added && it->second != cols)
      throw Error(fmt::format("{} needs buffer '{}' in panels of {} columns, but another use needs panels of {}; view "
                              "its stages by one column width",
                              ir::op_name(use.op), alloc->attrs.names.at(0), cols, it->second),
                  use.loc);
  }

  void region(const ir::Region& r) {
    for (const ir::NodeRef& n : r.body) {
      switch (n->op) {
        case ir::Op::AsyncDescriptorLoad:
        case ir::Op::AsyncDescriptorLoadMulticast:
        case ir::Op::AsyncDescriptorStore:
          want(*n, n->operands[1].get(), static_cast<int>(n->operands[0]->attrs.ints.at(3)), "its TMA descriptor's");
          break;
        case ir::Op::LocalCols:
          want_panels(*n, n.get(), n->attrs.ints[1]);
          break;
        case ir::Op::LocalRows:
          row_views.push_back(n.get());
          break;
        case ir::Op::AsyncRemoteShmemCopy:
          byte_copies.push_back(n.get());
          break;
        case ir::Op::AsyncLoadBulk:
        case ir::Op::AsyncStoreBulk:
          bulk_copies.push_back(n.get());
          break;
        case ir::Op::LocalReinterpret:
          reinterpreted.push_back(n.get());
          break;
        case ir::Op::AsyncDot:
          for (int i = 0; i < 2; ++i) {
            if (n->operands[i]->type.kind != ir::Type::Kind::Shared) continue;  // a from registers
            const ir::Node* alloc = root_allocation(n->operands[i].get());
            int64_t row_bytes = alloc->type.shape.back() * alloc->type.dtype.bytes();
            bool n_major_b = i == 1 && n->operands[1]->op != ir::Op::LocalTrans;
            if (row_bytes > 128 && (n_major_b || row_bytes % 128 == 0)) {
              // Rows wider than the 128-byte swizzle: the buffer keeps its columns in panels that wide (what
              // TMA boxes of 128-byte rows fill). B stored K x N reads them as N-major panels, A stored K x M
              // (through local_trans; M a multiple of 64, so its rows are whole panels) as M-major ones, one
              // per 64-row block; a K-major operand (a, or b through local_trans) steps through K panel by
              // panel.
              int64_t panel = 128 / alloc->type.dtype.bytes();
              want_panels(*n, alloc, panel);
              want(*n, alloc, 128, "wgmma's for operands in 128-byte panels");
              continue;
            }
            if (row_bytes != 32 && row_bytes != 64 && row_bytes != 128)
              throw Error(fmt::format("async_dot reads buffer '{}' whose rows are {} bytes; wgmma operands in shared "
                                      "memory need rows (the contiguous dimension) of 32, 64 or 128 bytes, or a "
                                      "multiple of 128 (kept in 128-byte panels): for {}, tiles with {}, {}, {} or a "
                                      "multiple of {} columns",
                                      alloc->attrs.names.at(0), row_bytes, alloc->type.dtype.str(),
                                      32 / alloc->type.dtype.bytes(), 64 / alloc->type.dtype.bytes(),
                                      128 / alloc->type.dtype.bytes(), 128 / alloc->type.dtype.bytes()),
                          n->loc);
            want(*n, alloc, static_cast<int>(row_bytes), "wgmma's for its row width");
          }
          break;
        default:
          break;
      }
      for (const ir::Region& inner : n->regions) region(inner);
    }
  }
};

}  // namespace

SharedLayouts assign_shared_layouts(const ir::Function& f) {
  support::StageTimer timer(support::CompileStage::passes);
  Assigner a;
  a.region(f.body);
  a.check_row_views();
  a.check_byte_copies();
  a.check_bulk_copies();
  a.check_reinterpreted();
  return std::move(a.layouts);
}

}  // namespace weft::passes
