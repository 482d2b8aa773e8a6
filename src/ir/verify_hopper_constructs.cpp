// The typing rules of the Hopper constructs (include/weft/async.h, tma.h, threads.h): shared buffers and
// their views, mbarriers and named barriers, TMA copies and async_load, async_dot, async_tasks, clusters,
// and thread identity and time. infer_type hands them every op it has no rule of its own for; the bulk copy
// and the prefetches go on to verify_copies_and_hints.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/copy_hints.h"
#include "ir/verifier.h"
#include "ir/verifier_internal.h"

namespace weft::ir {
namespace {

// A shared-memory operand: a whole buffer (`stage_view` false) or one stage of it.
const Type& shared_operand(Op op, const std::vector<NodeRef>& operands, size_t i, bool stage_view, SourceLoc loc) {
  const NodeRef& o = operands.at(i);
  const Type& t = o->type;
  if (t.kind != Type::Kind::Shared)
    fail(loc, fmt::format("{}: operand {} must be shared memory (from local_alloc), got {}", name(op), i, kind_name(t)));
  bool is_view = o->op != Op::LocalAlloc;
  if (stage_view && !is_view)
    fail(loc, fmt::format("{} takes one stage of a buffer: index the buffer from local_alloc (made at {}) with "
                          "local_view(buffer, stage) or buffer[stage]",
                          name(op), o->loc.str()));
  if (!stage_view && is_view) fail(loc, fmt::format("{} takes a whole buffer from local_alloc, not a view", name(op)));
  return t;
}

// One mbarrier: an element of an alloc_barriers array.
void require_one_barrier(Op op, const std::vector<NodeRef>& operands, SourceLoc loc) {
  const Type& t = operands.at(0)->type;
  if (t.kind != Type::Kind::Barrier)
    fail(loc, fmt::format("{} needs an mbarrier (an element of alloc_barriers), got {}", name(op), kind_name(t)));
  if (!t.shape.empty())
    fail(loc, fmt::format("{} needs one mbarrier, got the array of {} (made at {}); pick one with bars[i]", name(op),
                          t.shape[0], operands[0]->loc.str()));
}

void require_i32_scalar(Op op, const std::vector<NodeRef>& operands, size_t i, std::string_view what, SourceLoc loc) {
  const Type& t = require_scalar(op, operands, i, what, loc);
  if (t.dtype != DType{ScalarType::i32, false})
    fail(loc, fmt::format("{}: {} must be i32, got {}; convert it with cast<int32_t>(...)", name(op), what, t.str()));
}

// wgmma with fp8 operands has no transposed forms (imm-trans-a/b exist for f16/bf16 only) and takes A from
// registers only in a fragment layout of its own: both operands come from shared memory, K-major.
void check_fp8_async_dot_operands(const std::vector<NodeRef>& operands, SourceLoc loc) {
  if (operands[0]->type.kind == Type::Kind::Value)
    fail(loc, "async_dot with fp8 operands reads a from shared memory: store the tile into a buffer stage "
              "(local_store) and pass the stage");
  if (operands[0]->op == Op::LocalTrans)
    fail(loc, "async_dot with fp8 operands needs a K-major (K contiguous): wgmma cannot transpose fp8 operands; "
              "store a as [M, K] and pass the stage itself, not local_trans");
  if (operands[1]->op != Op::LocalTrans)
    fail(loc, fmt::format("async_dot with fp8 operands needs b K-major, but b is a {} stage read as it is stored "
                          "(N contiguous): wgmma cannot transpose fp8 operands; store b as [N, K] (K contiguous) "
                          "and pass local_trans(stage)",
                          shape_str(operands[1]->type.shape)));
}

// A reducing TMA store (StoreReduce): the reductions the copy engine has for the tensor's element type.
void check_store_reduce(DType dtype, int reduce, SourceLoc loc) {
  const char* name = store_reduce_name(reduce);
  if (!name)
    fail(loc, fmt::format("async_descriptor_store: {} is not a reduction; pass StoreReduce::add, min or max (or none)",
                          reduce));
  const ScalarType t = dtype.scalar;
  const bool half = t == ScalarType::f16 || t == ScalarType::bf16;
  const bool ok = reduce == 1 ? (t == ScalarType::i32 || t == ScalarType::f32 || half) : (t == ScalarType::i32 || half);
  if (!ok)
    fail(loc, fmt::format("async_descriptor_store with StoreReduce::{}: the copy engine has no {} reduction of {} "
                          "elements; {} takes {}",
                          name, name, dtype.str(), name,
                          reduce == 1 ? "i32, f32, f16 or bf16" : "i32, f16 or bf16"));
}

}  // namespace

Type infer_hopper_construct(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc) {
  const DType i32{ScalarType::i32, false};
  const DType i1{ScalarType::i1, false};

  switch (op) {
    case Op::LocalAlloc: {
      if (attrs.shape.size() < 2 || attrs.shape[0] < 1)
        fail(loc, "local_alloc: give a tile shape and a stage count of at least 1");
      Shape stage(attrs.shape.begin() + 1, attrs.shape.end());
      check_tile_shape(stage, "local_alloc", loc);
      if (attrs.dtype.pointer || attrs.dtype.is_bool())
        fail(loc, fmt::format("local_alloc: shared buffers hold numbers, not {}", attrs.dtype.str()));
      if (!operands.empty()) {  // reuses another allocation's bytes
        const Node& other = *operands[0];
        if (other.op != Op::LocalAlloc || !other.operands.empty())
          fail(loc, "local_alloc: `reuse` must be a buffer that local_alloc made without reuse");
        int64_t mine = Type::shared(attrs.dtype, attrs.shape).numel() * attrs.dtype.bytes();
        int64_t theirs = other.type.numel() * other.type.dtype.bytes();
        if (mine > theirs)
          fail(loc, fmt::format("local_alloc: this buffer needs {} bytes but reuses '{}' (made at {}), which has {}; "
                                "reuse a larger buffer or use fewer stages",
                                mine, other.attrs.names.at(0), other.loc.str(), theirs));
      }
      return Type::shared(attrs.dtype, attrs.shape);
    }
    case Op::LocalView: {
      const Type& buf = shared_operand(op, operands, 0, false, loc);
      require_i32_scalar(op, operands, 1, "the stage", loc);
      return Type::shared(buf.dtype, Shape(buf.shape.begin() + 1, buf.shape.end()));
    }
    case Op::LocalLoad: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      return Type::value(v.dtype, v.shape);
    }
    case Op::LocalStore:
    case Op::LocalStoreRemote: {
      if (op == Op::LocalStoreRemote) require_i32_scalar(op, operands, 2, "the cluster rank of the block to store into", loc);
      const Type& v = shared_operand(op, operands, 0, true, loc);
      const Type& x = value_operand(op, operands, 1, loc);
      if (!x.same_value_type(Type::value(v.dtype, v.shape)))
        fail(loc, fmt::format("local_store of a {} tile into a buffer stage of {}; the tile must have the stage's shape "
                              "and element type",
                              x.str(), Type::value(v.dtype, v.shape).str()));
      return Type::none();
    }
    case Op::LocalGather:
    case Op::LocalScatter: {
      const bool scatter = op == Op::LocalScatter;
      const Type& v = shared_operand(op, operands, 0, true, loc);
      const Type& idx = value_operand(op, operands, scatter ? 2 : 1, loc);
      if (idx.dtype != i32)
        fail(loc, fmt::format("{}: the indices must be an i32 tile, got {}; convert them with cast<int32_t>(...)",
                              name(op), idx.str()));
      const int64_t rank = static_cast<int64_t>(v.shape.size());
      if (static_cast<int64_t>(idx.shape.size()) != rank)
        fail(loc, fmt::format("{}: the indices {} must have the view's rank ({}: {})", name(op), shape_str(idx.shape),
                              rank, shape_str(v.shape)));
      int64_t axis = attrs.ints.at(0);
      if (axis < -rank || axis >= rank)
        fail(loc, fmt::format("{}: axis {} does not exist in a view of rank {}; use 0 to {} (or -1 for the last)",
                              name(op), axis, rank, rank - 1));
      if (axis < 0) attrs.ints[0] = axis += rank;
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && idx.shape[d] > v.shape[d])
          fail(loc, fmt::format("{}: the indices {} are larger than the view {} along axis {} (not the indexed axis "
                                "{}): every other axis of the indices must be at most the view's",
                                name(op), shape_str(idx.shape), shape_str(v.shape), d, axis));
      if (!scatter) return Type::value(v.dtype, idx.shape);
      const Type& x = value_operand(op, operands, 1, loc);
      if (!x.same_value_type(Type::value(v.dtype, idx.shape)))
        fail(loc, fmt::format("local_scatter of a {} tile with indices {} into a view of {}: the values must have the "
                              "indices' shape and the view's element type",
                              x.str(), shape_str(idx.shape), v.dtype.str()));
      return Type::none();
    }
    case Op::AllocBarriers: {
      int64_t count = attrs.ints.at(0), arrivals = attrs.ints.at(1);
      if (count < 1 || count > 1024) fail(loc, fmt::format("alloc_barriers: {} barriers; allocate 1 to 1024", count));
      if (arrivals < 1 || arrivals > (1 << 20) - 1)
        fail(loc, fmt::format("alloc_barriers: an arrive count of {} is out of range; a phase needs 1 to 2^20 - 1 arrivals",
                              arrivals));
      return Type::barrier({count});
    }
    case Op::BarrierAt: {
      const Type& t = operands.at(0)->type;
      if (t.kind != Type::Kind::Barrier || t.shape.empty())
        fail(loc, fmt::format("indexing needs the array from alloc_barriers, got {}", kind_name(t)));
      require_i32_scalar(op, operands, 1, "the index", loc);
      return Type::barrier({});
    }
    case Op::BarrierExpectBytes:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the byte count", loc);
      return Type::none();
    case Op::BarrierArrive:
      require_one_barrier(op, operands, loc);
      return Type::none();
    case Op::BarrierWait:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the phase", loc);
      return Type::none();
    case Op::NamedBarrierArrive:
    case Op::NamedBarrierWait: {
      int64_t id = attrs.ints.at(0), threads = attrs.ints.at(1);
      if (!operands.empty())  // an id computed in the kernel: its range is checked with the task plan's
        require_i32_scalar(op, operands, 0, "the barrier id", loc);
      else if (id < 0 || id > 15)
        fail(loc, fmt::format("{}: barrier id {} does not exist; the hardware has named barriers 0 to 15", name(op), id));
      if (threads < 32 || threads % 32 != 0 || threads > 1024)
        fail(loc, fmt::format("{}: {} threads; the count must be a multiple of 32 (whole warps) from 32 to 1024",
                              name(op), threads));
      return Type::none();
    }
    case Op::AsyncDescriptorLoad:
    case Op::AsyncDescriptorLoadMulticast:
    case Op::AsyncDescriptorStore: {
      bool is_load = op != Op::AsyncDescriptorStore, multicast = op == Op::AsyncDescriptorLoadMulticast;
      check_eviction(op, attrs, loc);
      const Type& d = operands.at(0)->type;
      if (d.kind != Type::Kind::TensorDesc)
        fail(loc, fmt::format("{}: operand 0 must be a TensorDesc kernel parameter, got {}", name(op), kind_name(d)));
      const Type& v = shared_operand(op, operands, 1, true, loc);
      // A box's leading dimensions of size 1 (one head of a [B*H, S, D] tensor, say) are not part of the
      // tile: a [1, R, C] box fills an [R, C] view, row-major either way.
      auto squeezed = [](const Shape& s) {
        size_t first = 0;
        while (first + 1 < s.size() && s[first] == 1) ++first;
        return Shape(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
      };
      if (v.dtype != d.dtype || squeezed(v.shape) != squeezed(d.shape))
        fail(loc, fmt::format("{}: the descriptor moves boxes of {}{} but the shared buffer stage is {}{}; make the "
                              "buffer's tile shape the descriptor's box (or the box the tile shape; leading box "
                              "dimensions of 1 may be left out)",
                              name(op), d.dtype.str(), shape_str(d.shape), v.dtype.str(), shape_str(v.shape)));
      size_t first_coord = multicast ? 4 : is_load ? 3 : 2;
      if (is_load) {
        std::vector<NodeRef> bar{operands.at(2)};
        require_one_barrier(op, bar, loc);
      }
      if (multicast) require_i32_scalar(op, operands, 3, "the multicast mask", loc);
      if (operands.size() - first_coord != d.shape.size())
        fail(loc, fmt::format("{}: {} coordinates for a {}-dimensional descriptor; give one per dimension",
                              name(op), operands.size() - first_coord, d.shape.size()));
      for (size_t i = first_coord; i < operands.size(); ++i) require_i32_scalar(op, operands, i, "a coordinate", loc);
      if (op == Op::AsyncDescriptorStore && attrs.ints.size() == 2) check_store_reduce(d.dtype, copy_hints(attrs).reduce, loc);
      return Type::none();
    }
    case Op::AsyncStoreWait:
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 63)
        fail(loc, fmt::format("async_store_wait({}): the number of stores left in flight must be 0 to 63", attrs.ints[0]));
      return Type::none();
    case Op::FenceAsyncShared:
      return Type::none();
    case Op::AsyncLoad: {
      const Type& p = value_operand(op, operands, 0, loc);
      if (!p.dtype.pointer) fail(loc, fmt::format("async_load needs a tile of pointers, got {}", p.str()));
      check_eviction(op, attrs, loc);
      const Type& v = shared_operand(op, operands, 1, true, loc);
      if (operands[1]->op == Op::LocalTrans)
        fail(loc, "async_load into a local_trans view: copy into the stage as it is stored, then read it through "
                  "local_trans");
      DType elem{p.dtype.scalar, false};
      if (v.dtype != elem || v.shape != p.shape)
        fail(loc, fmt::format("async_load of {} elements through pointers of shape {} into a buffer stage of {}; the "
                              "pointers must have the stage's shape and point to its element type",
                              elem.str(), shape_str(p.shape), Type::value(v.dtype, v.shape).str()));
      if (operands.size() >= 3) {
        const Type& m = value_operand(op, operands, 2, loc);
        if (m.dtype != i1 || m.shape != p.shape)
          fail(loc, fmt::format("async_load: the mask must be a bool tile of the pointers' shape {}, got {}",
                                shape_str(p.shape), m.str()));
      }
      if (operands.size() == 4) {
        const Type& o = value_operand(op, operands, 3, loc);
        if (o.dtype != elem || o.shape != p.shape)
          fail(loc, fmt::format("async_load: the fill value must be {} of shape {}, got {}", elem.str(),
                                shape_str(p.shape), o.str()));
      }
      return Type::none();
    }
    case Op::AsyncCommitGroup:
      return Type::none();
    case Op::AsyncWaitGroup:
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 63)
        fail(loc, fmt::format("async_wait_group({}): the number of groups left in flight must be 0 to 63", attrs.ints[0]));
      return Type::none();
    case Op::LocalRows: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      require_i32_scalar(op, operands, 1, "the first row", loc);
      if (operands[0]->op == Op::LocalTrans) fail(loc, "rows of a transposed view: take the rows first, then local_trans");
      int64_t rows = attrs.ints.at(0);
      if (v.rank() < 1 || rows < 1 || rows > v.shape[0] || v.shape[0] % rows != 0)
        fail(loc, fmt::format("rows({}) of a {} stage: the count must divide the stage's {} rows", rows, shape_str(v.shape),
                              v.rank() ? v.shape[0] : 0));
      Shape s = v.shape;
      s[0] = rows;
      return Type::shared(v.dtype, s);
    }
    case Op::LocalCols: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      if (operands[0]->op != Op::LocalView)
        fail(loc, "cols() takes a whole stage (buffer[stage]): column panels are a property of the buffer");
      int64_t first = attrs.ints.at(0), count = attrs.ints.at(1);
      if (v.rank() != 2 || count < 1 || first < 0 || first + count > v.shape[1] || first % count != 0)
        fail(loc, fmt::format("cols({}, {}) of a {} stage: the columns must lie inside it and start at a multiple of "
                              "the count",
                              first, count, shape_str(v.shape)));
      return Type::shared(v.dtype, {v.shape[0], count});
    }
    case Op::LocalReinterpret: {
      const NodeRef& src = operands.at(0);
      const Type& t = src->type;
      if (t.kind != Type::Kind::Shared || (src->op != Op::LocalAlloc && src->op != Op::LocalView))
        fail(loc, "local_reinterpret takes a stage of a buffer (buffer[stage]) or a whole buffer from local_alloc, not "
                  "a rows(), cols() or local_trans view: reinterpret the stage, then view the result");
      check_tile_shape(attrs.shape, "local_reinterpret", loc);
      if (attrs.dtype.pointer || attrs.dtype.is_bool())
        fail(loc, fmt::format("local_reinterpret: shared buffers hold numbers, not {}", attrs.dtype.str()));
      int64_t have = t.numel() * t.dtype.bytes();  // a whole buffer: every stage's
      int64_t want = Type::shared(attrs.dtype, attrs.shape).numel() * attrs.dtype.bytes();
      if (want > have)
        fail(loc, fmt::format("local_reinterpret as {}{} needs {} bytes, but the {} has {}; give a shape that fits",
                              attrs.dtype.str(), shape_str(attrs.shape), want,
                              src->op == Op::LocalAlloc ? "buffer" : "stage", have));
      return Type::shared(attrs.dtype, attrs.shape);
    }
    case Op::LocalTrans: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      if (v.rank() != 2) fail(loc, fmt::format("local_trans transposes a 2-D buffer stage, got {}", v.str()));
      if (operands[0]->op == Op::LocalTrans) fail(loc, "local_trans of a transposed view: use the view itself");
      return Type::shared(v.dtype, {v.shape[1], v.shape[0]});
    }
    case Op::AsyncDot: {
      // a: a buffer stage, or a tile in registers (wgmma's A from registers).
      const Type& a = operands.at(0)->type.kind == Type::Kind::Value ? value_operand(op, operands, 0, loc)
                                                                      : shared_operand(op, operands, 0, true, loc);
      const Type& b = shared_operand(op, operands, 1, true, loc);
      const Type& acc = value_operand(op, operands, 2, loc);
      if (a.rank() != 2 || b.rank() != 2)
        fail(loc, fmt::format("async_dot multiplies 2-D tiles, got a: {} and b: {}", a.str(), b.str()));
      bool fp8 = a.dtype.is_fp8() && b.dtype.is_fp8();
      if (!fp8 && (a.dtype != b.dtype || (a.dtype.scalar != ScalarType::bf16 && a.dtype.scalar != ScalarType::f16)))
        fail(loc, fmt::format("async_dot takes bf16 or f16 operands of one type, or fp8 ones (f8e4m3, f8e5m2, mixed "
                              "as you like), got a: {} and b: {}",
                              a.dtype.str(), b.dtype.str()));
      if (fp8) check_fp8_async_dot_operands(operands, loc);
      for (int i = 0; i < 2; ++i)
        for (const Node* v = operands[i].get(); v->type.kind == Type::Kind::Shared && v->op != Op::LocalAlloc;
             v = v->operands[0].get())
          if (v->op == Op::LocalReinterpret)
            fail(loc, fmt::format("async_dot reads {} through local_reinterpret (at {}): wgmma reads a buffer in the "
                                  "shape local_alloc declared; declare a buffer of the shape and type the product "
                                  "needs (local_alloc(..., reuse) shares the bytes of another)",
                                  i == 0 ? "a" : "b", v->loc.str()));
      int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
      int64_t k_step = fp8 ? 32 : 16;
      if (b.shape[0] != K)
        fail(loc, fmt::format("async_dot: a is {} and b is {}; a's columns must equal b's rows", shape_str(a.shape),
                              shape_str(b.shape)));
      std::vector<std::string> wrong;
      if (M % 64 != 0) wrong.push_back(fmt::format("M = {} is not a multiple of 64", M));
      if (K % k_step != 0) wrong.push_back(fmt::format("K = {} is not a multiple of {}", K, k_step));
      if (N % 8 != 0) wrong.push_back(fmt::format("N = {} is not a multiple of 8", N));
      if (N > 256) wrong.push_back(fmt::format("N = {} is over 256 (split b's columns over several async_dots)", N));
      if (!wrong.empty())
        fail(loc, fmt::format("async_dot of [{}x{}] by [{}x{}]: {}; wgmma needs M a multiple of 64, K a multiple of {} "
                              "(for {}) and N a multiple of 8 up to 256",
                              M, K, K, N, fmt::join(wrong, ", "), k_step, fp8 ? "fp8" : "16-bit operands"));
      Type result = Type::value(DType{ScalarType::f32, false}, {M, N});
      if (!acc.same_value_type(result))
        fail(loc, fmt::format("async_dot: the accumulator is {} but the product is {}", acc.str(), result.str()));
      return result;
    }
    case Op::AsyncDotWait: {
      const Type& x = value_operand(op, operands, 0, loc);
      if (operands[0]->op != Op::AsyncDot && operands[0]->op != Op::VarGet)
        fail(loc, "async_dot_wait takes the value of an async_dot (directly or through a Var)");
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 7)
        fail(loc, fmt::format("async_dot_wait({}): the number of groups left in flight must be 0 to 7", attrs.ints[0]));
      return x;
    }
    case Op::AsyncTasks:
      return Type::none();
    case Op::TaskReplicaId:
    case Op::ClusterCtaRank:
      return Type::value(i32, {});
    case Op::ClusterSync:
      return Type::none();
    case Op::ThreadIndex:
    case Op::ReadClock: {
      int64_t threads = attrs.ints.at(0);
      std::string what = thread_query_name(op, attrs);
      if (!is_pow2(threads))
        fail(loc, fmt::format("{}() gives one element per thread of its group, here {} threads, but tiles need a "
                              "power-of-two shape: call it in a task of 1, 2, 4, 8 or 16 warps",
                              what, threads));
      return Type::value(op == Op::ThreadIndex ? i32 : DType{ScalarType::i64, false}, {threads});
    }
    case Op::VoteBallot: {
      const Type& t = value_operand(op, operands, 0, loc);
      int64_t threads = attrs.ints.at(0);
      if (t.dtype != DType{ScalarType::i1, false})
        fail(loc, fmt::format("vote_ballot_sync votes with a bool (a comparison, e.g. thread_id() < 16), got {}", t.str()));
      if (!t.shape.empty() && t.shape != Shape{threads})
        fail(loc, fmt::format("vote_ballot_sync takes one value per thread: a tile of shape [{}] (this group's threads; "
                              "element t is thread t's, as thread_id() gives) or a scalar, got {}",
                              threads, t.str()));
      if (!t.shape.empty() && !is_pow2(threads))
        fail(loc, fmt::format("vote_ballot_sync of one value per thread needs a power-of-two group, here {} threads: "
                              "call it in a task of 1, 2, 4, 8 or 16 warps",
                              threads));
      return Type::value(i32, t.shape);
    }
    case Op::Nanosleep: {
      const Type& t = value_operand(op, operands, 0, loc);
      if (t.dtype != i32)
        fail(loc, fmt::format("nanosleep takes a duration in nanoseconds as i32 (a scalar or a tile), got {}; convert it "
                              "with cast<int32_t>(...)",
                              t.str()));
      return Type::none();
    }
    case Op::AsyncRemoteShmemCopy:
    case Op::AsyncRemoteShmemStore:
    case Op::AsyncLoadBulk:
    case Op::AsyncStoreBulk:
    case Op::AsyncDescriptorPrefetch:
    case Op::DescriptorPrefetch:
      return infer_copy_or_prefetch(op, operands, attrs, loc);
    case Op::BarrierArriveRemote:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the cluster rank of the block to arrive in", loc);
      return Type::none();
    default:
      break;
  }
  throw InternalError(fmt::format("verifier: no typing rule for op '{}'", name(op)));
}

}  // namespace weft::ir
