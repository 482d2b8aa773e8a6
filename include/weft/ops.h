// weft — the operations of a kernel body, as free functions.
//
// Every function takes tiles or variables (read at the call) and records the caller's line. Naming
// follows Triton where the concept is the same: `maximum`/`minimum` are elementwise, `max`/`min`/`sum`
// reduce along an axis (so `max(x, 0)` can never silently mean a ReLU).
#pragma once

#include "weft/tile.h"

namespace weft {

namespace detail {
template <class X> using tile_of = Tile<elem_of<X>>;
template <class A, class B> using common_elem = std::conditional_t<TileLike<A>, elem_of<A>, elem_of<B>>;
inline Attrs axis_attr(int axis) {
  Attrs a;
  a.ints = {axis};
  return a;
}
}  // namespace detail

// ---- grid ---------------------------------------------------------------------------------------------

// Index of this program instance along `axis` (0, 1 or 2) of the launch grid.
inline Int program_id(int axis = 0, SourceLoc loc = SourceLoc::current()) {
  return Int(detail::emit(detail::Op::ProgramId, {}, detail::axis_attr(axis), loc));
}
// Number of program instances along `axis` of the launch grid.
inline Int num_programs(int axis = 0, SourceLoc loc = SourceLoc::current()) {
  return Int(detail::emit(detail::Op::NumPrograms, {}, detail::axis_attr(axis), loc));
}

// ---- creation -----------------------------------------------------------------------------------------

// The i32 tile [start, start + 1, …, end - 1]; end - start must be a power of two.
inline Int arange(int64_t start, int64_t end, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {start, end};
  return Int(detail::emit(detail::Op::Arange, {}, a, loc));
}
template <class E> Tile<E> full(Shape shape, double value, SourceLoc loc = SourceLoc::current()) {
  return Tile<E>(detail::constant(dtype_of<E>, value, shape, loc));
}
// An integer value exactly (an i64 past 2^53 has no double of its value).
template <class E, class V>
  requires std::is_integral_v<V>
Tile<E> full(Shape shape, V value, SourceLoc loc = SourceLoc::current()) {
  return Tile<E>(detail::literal_constant(dtype_of<E>, value, shape, loc));
}
template <class E> Tile<E> zeros(Shape shape, SourceLoc loc = SourceLoc::current()) {
  return full<E>(std::move(shape), 0.0, loc);
}
// A rank-0 constant of type E.
template <class E> Tile<E> scalar(double value, SourceLoc loc = SourceLoc::current()) {
  return full<E>({}, value, loc);
}
template <class E, class V>
  requires std::is_integral_v<V>
Tile<E> scalar(V value, SourceLoc loc = SourceLoc::current()) {
  return full<E>({}, value, loc);
}

// ---- conversions and selection --------------------------------------------------------------------------

// Elementwise conversion to U (floats to integers truncate toward zero; to bool means != 0).
template <class U, detail::TileLike X> Tile<U> cast(const X& x, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.dtype = dtype_of<U>;
  a.has_dtype = true;
  return Tile<U>(detail::emit(detail::Op::Cast, {detail::node_of(x, loc)}, a, loc));
}

// cond ? a : b elementwise, with broadcasting; a and b must have one element type (a literal adapts).
template <class C, class A, class B>
  requires std::is_same_v<detail::elem_of<C>, bool> && (detail::TileLike<A> || detail::TileLike<B>) &&
           detail::TileOrLiteral<A> && detail::TileOrLiteral<B>
Tile<detail::common_elem<A, B>> where(const C& cond, const A& a, const B& b,
                                                         SourceLoc loc = SourceLoc::current()) {
  using E = detail::common_elem<A, B>;
  return Tile<E>(detail::emit_elementwise(
      detail::Op::Select,
      {detail::node_of(cond, loc), detail::value_of<E>(a, loc), detail::value_of<E>(b, loc)}, loc));
}

namespace detail {
template <class X> struct number_of_t { using type = std::remove_cv_t<std::remove_reference_t<X>>; };
template <class T> struct number_of_t<Const<T>> { using type = T; };
// The C++ number type of a literal (a Const<T> parameter is a T).
template <class X> using number_of = typename number_of_t<std::remove_cv_t<std::remove_reference_t<X>>>::type;
// The element type that two literals meeting with no tile give: their common type's kind in weft's default
// width — a floating-point literal gives float, an integer one int32_t, two bools bool.
template <class A, class B> using literal_elem =
    std::conditional_t<std::is_same_v<std::common_type_t<number_of<A>, number_of<B>>, bool>, bool,
                       std::conditional_t<std::is_floating_point_v<std::common_type_t<number_of<A>, number_of<B>>>,
                                          float, int32_t>>;
template <class N> void require_int32_literal(N v, SourceLoc loc) {
  if constexpr (std::is_integral_v<N> && !std::is_same_v<N, bool>) {
    const bool fits = std::is_signed_v<N> ? (static_cast<int64_t>(v) >= INT32_MIN && static_cast<int64_t>(v) <= INT32_MAX)
                                          : static_cast<uint64_t>(v) <= static_cast<uint64_t>(INT32_MAX);
    if (!fits)
      throw Error("where: the literal " + std::to_string(v) +
                      " does not fit in int32_t, the element type of where() with two integer literals; make one of "
                      "them a tile of a wider type, e.g. where(cond, scalar<int64_t>(a), b)",
                  loc);
  }
}
}  // namespace detail

// cond ? a : b with two C++ literals (no tile among them): `where(c, 3, 12)` is an Int, `where(c, 0.5, 1.0)`
// a Float, of cond's shape. An integer literal gives int32_t and a floating-point one float, whatever its C++
// width; for another element type make one of them a tile: `where(c, scalar<int64_t>(3), 12)`.
template <class C, class A, class B>
  requires std::is_same_v<detail::elem_of<C>, bool> && detail::Literal<A> && detail::Literal<B>
Tile<detail::literal_elem<A, B>> where(const C& cond, const A& a, const B& b, SourceLoc loc = SourceLoc::current()) {
  using E = detail::literal_elem<A, B>;
  if constexpr (std::is_same_v<E, int32_t>) {
    detail::require_int32_literal(static_cast<detail::number_of<A>>(a), loc);
    detail::require_int32_literal(static_cast<detail::number_of<B>>(b), loc);
  }
  return Tile<E>(detail::emit_elementwise(
      detail::Op::Select,
      {detail::node_of(cond, loc), detail::value_of<E>(a, loc), detail::value_of<E>(b, loc)}, loc));
}

// ---- math -----------------------------------------------------------------------------------------------

#define WEFT_UNARY_MATH(fn, op)                                                                   \
  template <detail::TileLike X>                                                                   \
  detail::tile_of<X> fn(const X& x, SourceLoc loc = SourceLoc::current()) {                       \
    return detail::tile_of<X>(detail::emit_elementwise(detail::Op::op, {detail::node_of(x, loc)}, loc)); \
  }
WEFT_UNARY_MATH(exp, Exp)
WEFT_UNARY_MATH(exp2, Exp2)
WEFT_UNARY_MATH(log, Log)
WEFT_UNARY_MATH(log2, Log2)
WEFT_UNARY_MATH(sqrt, Sqrt)
WEFT_UNARY_MATH(rsqrt, Rsqrt)
WEFT_UNARY_MATH(abs, Abs)
WEFT_UNARY_MATH(sin, Sin)
WEFT_UNARY_MATH(cos, Cos)
WEFT_UNARY_MATH(floor, Floor)
WEFT_UNARY_MATH(ceil, Ceil)
// Computed in f64 and rounded once (f32, f16, bf16; f64 is an Error): within 1 ulp.
WEFT_UNARY_MATH(tanh, Tanh)
WEFT_UNARY_MATH(sigmoid, Sigmoid)  // 1 / (1 + e^-x)
WEFT_UNARY_MATH(erf, Erf)
WEFT_UNARY_MATH(rcp, Rcp)          // 1 / x, correctly rounded (rcp.rn.f32)
#undef WEFT_UNARY_MATH

// The fast flavours of math functions: the GPU's approximate instructions, for inner loops where their
// documented error is enough (a softmax's exponentials). They compute in f32 (f16/bf16 round afterwards;
// f64 is an Error) and flush subnormal inputs and results to zero (.ftz; tanh keeps them). The CPU backend
// computes the same functions to within the same bound (exactly, with the same flushing), so results
// compare across backends. Errors, measured against a double-precision reference by test "fast and
// accurate math: ..." (README, "Math accuracy"):
//   fast::exp2   ex2.approx.ftz.f32                      relative error below 2^-21
//   fast::exp    mul.f32 by log2(e), then ex2.approx.ftz  below 2^-21 + |x| 2^-23 (the rounded argument)
//   fast::log2   lg2.approx.ftz.f32                      absolute error below 2^-21 + 2^-22 |log2 x|
//   fast::rcp    rcp.approx.ftz.f32                      within 1 ulp
//   fast::rsqrt  rsqrt.approx.ftz.f32                    relative error below 2^-22
//   fast::tanh   tanh.approx.f32                         relative error below 2^-10.5 (about 2^12 ulp)
namespace fast {
#define WEFT_FAST_MATH(fn, op)                                                                    \
  template <detail::TileLike X> detail::tile_of<X> fn(const X& x, SourceLoc loc = SourceLoc::current()) { \
    detail::Attrs a;                                                                              \
    a.ints = {1}; /* the fast flavour */                                                          \
    return detail::tile_of<X>(detail::emit(detail::Op::op, {detail::node_of(x, loc)}, std::move(a), loc)); \
  }
WEFT_FAST_MATH(exp2, Exp2)
WEFT_FAST_MATH(exp, Exp)
WEFT_FAST_MATH(log2, Log2)
WEFT_FAST_MATH(rcp, Rcp)
WEFT_FAST_MATH(rsqrt, Rsqrt)
WEFT_FAST_MATH(tanh, Tanh)
#undef WEFT_FAST_MATH
}  // namespace fast

#define WEFT_BINARY_MATH(fn, op)                                                                  \
  template <class A, class B>                                                                     \
    requires(detail::TileLike<A> || detail::TileLike<B>) && detail::TileOrLiteral<A> &&           \
            detail::TileOrLiteral<B>                                                              \
  Tile<detail::common_elem<A, B>> fn(const A& a, const B& b, SourceLoc loc = SourceLoc::current()) { \
    using E = detail::common_elem<A, B>;                                                          \
    return Tile<E>(detail::emit_elementwise(                                                      \
        detail::Op::op, {detail::value_of<E>(a, loc), detail::value_of<E>(b, loc)}, loc));        \
  }
WEFT_BINARY_MATH(maximum, Max)
WEFT_BINARY_MATH(minimum, Min)
WEFT_BINARY_MATH(pow, Pow)  // x^y, C's powf (special cases included); computed in f64, within 1 ulp; f64 is an Error
#undef WEFT_BINARY_MATH

// a * b + c, elementwise, rounded once.
template <class A, class B, class C>
  requires detail::TileLike<A> && detail::TileOrLiteral<B> && detail::TileOrLiteral<C>
detail::tile_of<A> fma(const A& a, const B& b, const C& c, SourceLoc loc = SourceLoc::current()) {
  using E = detail::elem_of<A>;
  return Tile<E>(detail::emit_elementwise(
      detail::Op::Fma,
      {detail::node_of(a, loc), detail::value_of<E>(b, loc), detail::value_of<E>(c, loc)}, loc));
}

// Integer ceiling division, for counting tiles: cdiv(n, 128).
template <class A, class B>
  requires(detail::TileLike<A> || detail::TileLike<B>) && detail::TileOrLiteral<A> && detail::TileOrLiteral<B>
Tile<detail::common_elem<A, B>> cdiv(const A& a, const B& b, SourceLoc loc = SourceLoc::current()) {
  using E = detail::common_elem<A, B>;
  Operand<E> x(Tile<E>(detail::value_of<E>(a, loc)), loc), y(Tile<E>(detail::value_of<E>(b, loc)), loc);
  Tile<E> sum = detail::elementwise<E>(detail::Op::Add, x, y);
  Tile<E> numerator = detail::elementwise<E>(detail::Op::Sub, Operand<E>(sum, loc), Operand<E>(1, loc));
  return detail::elementwise<E>(detail::Op::Div, Operand<E>(numerator, loc), y);
}

// ---- shape ----------------------------------------------------------------------------------------------

template <detail::TileLike X> detail::tile_of<X> reshape(const X& x, Shape s, SourceLoc loc = SourceLoc::current()) {
  return detail::tile_of<X>(detail::node_of(x, loc)).reshape(std::move(s), loc);
}
template <detail::TileLike X>
detail::tile_of<X> broadcast_to(const X& x, Shape s, SourceLoc loc = SourceLoc::current()) {
  return detail::tile_of<X>(detail::node_of(x, loc)).broadcast_to(std::move(s), loc);
}
template <detail::TileLike X>
detail::tile_of<X> expand_dims(const X& x, int axis, SourceLoc loc = SourceLoc::current()) {
  return detail::tile_of<X>(detail::node_of(x, loc)).expand_dims(axis, loc);
}
template <detail::TileLike X>
detail::tile_of<X> permute(const X& x, std::vector<int64_t> perm, SourceLoc loc = SourceLoc::current()) {
  return detail::tile_of<X>(detail::node_of(x, loc)).permute(std::move(perm), loc);
}
template <detail::TileLike X> detail::tile_of<X> trans(const X& x, SourceLoc loc = SourceLoc::current()) {
  return permute(x, {1, 0}, loc);
}

// ---- memory ---------------------------------------------------------------------------------------------

namespace detail {
template <class P> struct pointee_t;
template <class T> struct pointee_t<Pointer<T>> { using type = T; };
template <class P> using pointee = typename pointee_t<elem_of<P>>::type;
template <class P> concept PointerTile = TileLike<P> && is_pointer_elem<elem_of<P>>;
}  // namespace detail

// Read the elements that `ptrs` point to.
template <detail::PointerTile P>
Tile<detail::pointee<P>> load(const P& ptrs, SourceLoc loc = SourceLoc::current()) {
  return Tile<detail::pointee<P>>(detail::emit(detail::Op::Load, {detail::node_of(ptrs, loc)}, {}, loc));
}
// Read where `mask` is true; elsewhere the result is `other` and memory is not touched.
template <detail::PointerTile P, class M, class O>
  requires std::is_same_v<detail::elem_of<M>, bool> && detail::TileOrLiteral<O>
Tile<detail::pointee<P>> load(const P& ptrs, const M& mask, const O& other, SourceLoc loc = SourceLoc::current()) {
  using T = detail::pointee<P>;
  return Tile<T>(detail::emit(detail::Op::Load,
                              {detail::node_of(ptrs, loc), detail::node_of(mask, loc), detail::value_of<T>(other, loc)},
                              {}, loc));
}
template <detail::PointerTile P, class M>
  requires std::is_same_v<detail::elem_of<M>, bool>
Tile<detail::pointee<P>> load(const P& ptrs, const M& mask, SourceLoc loc = SourceLoc::current()) {
  return load(ptrs, mask, 0, loc);
}

// Write `value` (broadcast to the shape of `ptrs`) where `ptrs` point. Its element type must be the
// pointee type; a literal is converted to it.
template <detail::PointerTile P, class V>
  requires detail::TileOrLiteral<V>
void store(const P& ptrs, const V& value, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::Store, {detail::node_of(ptrs, loc), detail::value_of<detail::pointee<P>>(value, loc)}, {}, loc);
}
template <detail::PointerTile P, class V, class M>
  requires detail::TileOrLiteral<V> && std::is_same_v<detail::elem_of<M>, bool>
void store(const P& ptrs, const V& value, const M& mask, SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::Store,
               {detail::node_of(ptrs, loc), detail::value_of<detail::pointee<P>>(value, loc), detail::node_of(mask, loc)},
               {}, loc);
}

// ---- atomics ------------------------------------------------------------------------------------------
//
// Read-modify-write of global memory, one element at a time, each element indivisible: no other access to
// it comes between the read and the write. Each returns the values the elements held before (Triton's
// atomic_* functions; PTX atom). A rank-0 pointer makes one atomic, done once by the program (by one
// thread on the GPU, its result given to all); a tile of pointers makes one per element (where `mask` is
// true: elsewhere memory is untouched and the result is 0). Element types: i32, i64, f32, f64 for add;
// i32 and i64 for max, min (signed), and, or, xor and cas; i32, i64, f32, f64 for xchg.
//
// `Atomic::order` orders the program's other memory accesses around the atomic, as the C++ memory model's
// orders do, program-wide: with `release` (or `acq_rel`) every access the program made before the atomic
// (by any of its threads) is visible to whoever later acquires the value it wrote; with `acquire` (or
// `acq_rel`) every access after it sees what was released before the value it read. `scope` says who
// that holds for: the threads of this block (`cta`), of its cluster, of the GPU (the default) or of the
// whole system (host and peer GPUs). On the GPU, an atomic with release order is preceded by a barrier of
// the program's (or task replica's) threads and one with acquire order followed by one, so that the
// order covers every thread's accesses (CUTLASS's semaphore does the same); relaxed atomics add none.
//
//   Int ticket = atomic_add(counter, 1);             // this program's turn, 0, 1, 2, … over the grid
//   atomic_add(hist + bins, ones, bins < nbins);     // a histogram: colliding bins all count
//   atomic_max(best + row, score, Atomic{.order = MemOrder::relaxed});
enum class MemOrder : uint8_t { relaxed, acquire, release, acq_rel };
enum class MemScope : uint8_t { cta, cluster, gpu, system };
struct Atomic {
  MemOrder order = MemOrder::acq_rel;
  MemScope scope = MemScope::gpu;
};
// What an atomic read-modify-write does with the element's old value and the operand (ir: atomic_rmw's
// first attribute).
enum class AtomicOp : uint8_t { add, max, min, and_, or_, xor_, xchg };

namespace detail {
inline Attrs atomic_attrs(std::initializer_list<int64_t> first, Atomic how) {
  Attrs a;
  a.ints = first;
  a.ints.push_back(static_cast<int64_t>(how.order));
  a.ints.push_back(static_cast<int64_t>(how.scope));
  return a;
}
template <class P, class V>
Tile<pointee<P>> atomic_rmw(AtomicOp op, const P& ptrs, const V& value, const NodeRef* mask, Atomic how,
                            SourceLoc loc) {
  std::vector<NodeRef> operands{node_of(ptrs, loc), value_of<pointee<P>>(value, loc)};
  if (mask) operands.push_back(*mask);
  return Tile<pointee<P>>(emit(Op::AtomicRmw, std::move(operands), atomic_attrs({static_cast<int64_t>(op)}, how), loc));
}
// Both atomic_cas overloads: `mask` is none or one tile, the last operand (and the last one traced).
template <class P, class C, class V, class... M>
Tile<pointee<P>> atomic_cas(const P& ptrs, const C& compare, const V& value, Atomic how, SourceLoc loc,
                            const M&... mask) {
  using T = pointee<P>;
  return Tile<T>(emit(Op::AtomicCas,
                      {node_of(ptrs, loc), value_of<T>(compare, loc), value_of<T>(value, loc), node_of(mask, loc)...},
                      atomic_attrs({}, how), loc));
}
}  // namespace detail

#define WEFT_ATOMIC_RMW(fn, op)                                                                               \
  template <detail::PointerTile P, class V>                                                                  \
    requires detail::TileOrLiteral<V>                                                                       \
  Tile<detail::pointee<P>> fn(const P& ptrs, const V& value, Atomic how = {},                                \
                              SourceLoc loc = SourceLoc::current()) {                                        \
    return detail::atomic_rmw(AtomicOp::op, ptrs, value, nullptr, how, loc);                                 \
  }                                                                                                          \
  template <detail::PointerTile P, class V, class M>                                                         \
    requires detail::TileOrLiteral<V> && std::is_same_v<detail::elem_of<M>, bool>                           \
  Tile<detail::pointee<P>> fn(const P& ptrs, const V& value, const M& mask, Atomic how = {},                 \
                              SourceLoc loc = SourceLoc::current()) {                                        \
    detail::NodeRef m = detail::node_of(mask, loc);                                                          \
    return detail::atomic_rmw(AtomicOp::op, ptrs, value, &m, how, loc);                                      \
  }
WEFT_ATOMIC_RMW(atomic_add, add)    // old + value
WEFT_ATOMIC_RMW(atomic_max, max)    // the larger (signed)
WEFT_ATOMIC_RMW(atomic_min, min)    // the smaller (signed)
WEFT_ATOMIC_RMW(atomic_and, and_)   // bitwise
WEFT_ATOMIC_RMW(atomic_or, or_)
WEFT_ATOMIC_RMW(atomic_xor, xor_)
WEFT_ATOMIC_RMW(atomic_xchg, xchg)  // value (the old one returned)
#undef WEFT_ATOMIC_RMW

// Compare and swap: where an element equals `compare` it becomes `value`; returns the old elements (equal
// to `compare` where the swap happened). i32 and i64.
template <detail::PointerTile P, class C, class V>
  requires detail::TileOrLiteral<C> && detail::TileOrLiteral<V>
Tile<detail::pointee<P>> atomic_cas(const P& ptrs, const C& compare, const V& value, Atomic how = {},
                                    SourceLoc loc = SourceLoc::current()) {
  return detail::atomic_cas(ptrs, compare, value, how, loc);
}
template <detail::PointerTile P, class C, class V, class M>
  requires detail::TileOrLiteral<C> && detail::TileOrLiteral<V> && std::is_same_v<detail::elem_of<M>, bool>
Tile<detail::pointee<P>> atomic_cas(const P& ptrs, const C& compare, const V& value, const M& mask, Atomic how = {},
                                    SourceLoc loc = SourceLoc::current()) {
  return detail::atomic_cas(ptrs, compare, value, how, loc, mask);
}

// A memory fence for the whole program (TLX: fence("gpu") / fence("sys")): every access the program made
// before it (by any of its threads: loads, stores, atomics) is ordered before every access it makes after,
// as seen by the threads of `scope` — another block (`cta`: this block only; `cluster`; `gpu`, the default;
// `system`: the host and peer GPUs too). What a program that publishes data with relaxed atomics, or reads
// a flag set by another program, puts between the two. On the GPU the program's threads meet at a barrier,
// each fences (fence.acq_rel.cta / .cluster / .gpu / .sys) and they meet again; on the CPU it is a
// sequentially consistent fence. In a kernel with async_tasks it belongs inside a task body, like atomics.
inline void fence(MemScope scope = MemScope::gpu, SourceLoc loc = SourceLoc::current()) {
  detail::Attrs a;
  a.ints = {static_cast<int64_t>(scope)};
  detail::emit(detail::Op::Fence, {}, std::move(a), loc);
}

// Programmatic dependent launch (sm_90; Triton: gdc_wait / gdc_launch_dependents). A kernel whose body calls
// wait_for_prior_grid() is launched so that it may start while the kernel queued before it on the stream is
// still running (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): what it does before the call (index
// arithmetic, barrier set-up, loads of data the kernel before does not write) overlaps that kernel's end,
// and the call waits until that kernel has finished and its writes are visible (griddepcontrol.wait). Every
// read of what the kernel before wrote must come after it, so it belongs outside async_tasks, where all the
// program's threads run it. A kernel without the call launches as any other: in stream order.
// launch_dependent_grids() lets the kernel queued after this one (if it waits so) be scheduled before this one
// ends, once every program of this grid has called it or exited (griddepcontrol.launch_dependents): early in a
// kernel of one wave, its dependent's programs are then resident and start the moment it finishes. It orders
// nothing: the dependent's wait_for_prior_grid() still waits for this whole grid. On the CPU backend both do
// nothing (grids run one after another).
inline void wait_for_prior_grid(SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::WaitForPriorGrid, {}, {}, loc);
}
inline void launch_dependent_grids(SourceLoc loc = SourceLoc::current()) {
  detail::emit(detail::Op::LaunchDependentGrids, {}, {}, loc);
}

// The bytes an element of T takes (TLX: size_of): 4 for float and int32_t, 2 for bf16 and f16, 1 for the
// fp8 types. A constant of the host program, like sizeof.
template <class T> constexpr int32_t size_of() { return static_cast<int32_t>(sizeof(T)); }

// ---- reductions -----------------------------------------------------------------------------------------

#define WEFT_REDUCTION(fn, op, result)                                                              \
  template <detail::TileLike X>                                                                     \
  result fn(const X& x, int axis = 0, SourceLoc loc = SourceLoc::current()) {                      \
    return result(detail::emit(detail::Op::op, {detail::node_of(x, loc)}, detail::axis_attr(axis), loc)); \
  }
// The reduced axis disappears from the shape; negative axes count from the end.
WEFT_REDUCTION(sum, ReduceSum, detail::tile_of<X>)
WEFT_REDUCTION(max, ReduceMax, detail::tile_of<X>)
WEFT_REDUCTION(min, ReduceMin, detail::tile_of<X>)
WEFT_REDUCTION(argmax, ArgMax, Int)  // index of the first maximum along the axis
WEFT_REDUCTION(argmin, ArgMin, Int)
#undef WEFT_REDUCTION

// ---- contraction ----------------------------------------------------------------------------------------

// a[M,K] @ b[K,N] accumulated in f32 (a and b: f16, bf16 or f32, one type); M, N, K powers of two.
template <detail::TileLike A, detail::TileLike B>
Float dot(const A& a, const B& b, SourceLoc loc = SourceLoc::current()) {
  return Float(detail::emit(detail::Op::Dot, {detail::node_of(a, loc), detail::node_of(b, loc)}, {}, loc));
}
// acc + a @ b.
template <detail::TileLike A, detail::TileLike B, detail::TileLike C>
Float dot(const A& a, const B& b, const C& acc, SourceLoc loc = SourceLoc::current()) {
  return Float(detail::emit(detail::Op::Dot,
                            {detail::node_of(a, loc), detail::node_of(b, loc), detail::node_of(acc, loc)}, {}, loc));
}

}  // namespace weft
