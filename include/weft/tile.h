// weft — the values of a kernel: Tile<E> and Var<E>, with their operators.
//
// A `Tile<E>` is a handle to an immutable value of a kernel being traced: a statically shaped block of
// elements of type E (rank 0 is a scalar; `Scalar<E>` and `Int` are spellings of that). Operators build
// IR nodes; nothing is computed while tracing. A `Var<E>` is a mutable slot: assigning to it inside a
// `for_range` body is how a value is carried from one iteration to the next (a loop-carried value).
//
// Element types E: bool, int8_t … int64_t, f16, bf16, float, double, and Pointer<T> (a global pointer;
// spelled `Ptr<T>` for a scalar pointer). Arithmetic needs both operands of the same element type — a
// C++ literal takes the type of the tile it meets (`x * 2.0` on a Tile<bf16> multiplies by bf16 2);
// convert explicitly with `cast<U>(x)` otherwise. Shapes broadcast as in NumPy.
#pragma once

#include <initializer_list>
#include <type_traits>
#include <utility>

#include "weft/detail/trace.h"
#include "weft/dtype.h"
#include "weft/error.h"

namespace weft {

using Shape = detail::Shape;

template <class E> class Tile;
template <class E> class Var;

// A compile-time parameter of a kernel: a plain number while tracing, part of the specialization key.
template <class T> struct Const {
  static_assert(std::is_arithmetic_v<T>, "Const<T> takes a number type");
  T value;
  operator T() const { return value; }
};

template <class E> using Scalar = Tile<E>;  // a rank-0 tile
template <class T> using Ptr = Tile<Pointer<T>>;
using Int = Tile<int32_t>;
using Long = Tile<int64_t>;
using Float = Tile<float>;
using Bool = Tile<bool>;

namespace detail {

template <class X> struct elem_of_t { using type = void; };
template <class E> struct elem_of_t<Tile<E>> { using type = E; };
template <class E> struct elem_of_t<Var<E>> { using type = E; };
// The element type of a tile or variable; void for anything else (a C++ literal).
template <class X> using elem_of = typename elem_of_t<std::remove_cv_t<std::remove_reference_t<X>>>::type;
template <class X> concept TileLike = !std::is_void_v<elem_of<X>>;
template <class X> struct is_const_param : std::false_type {};
template <class T> struct is_const_param<Const<T>> : std::true_type {};
// A C++ number, or a Const parameter (a number while tracing).
template <class X> concept Literal = std::is_arithmetic_v<std::remove_cv_t<std::remove_reference_t<X>>> ||
                                     is_const_param<std::remove_cv_t<std::remove_reference_t<X>>>::value;
template <class X> concept TileOrLiteral = TileLike<X> || Literal<X>;

template <class E> NodeRef node_of(const Tile<E>& t, SourceLoc loc);
template <class E> NodeRef node_of(const Var<E>& v, SourceLoc loc);

// Materialize a literal as a rank-0 constant of type E, or take a tile's / variable's value.
template <class E, class X> NodeRef value_of(const X& x, SourceLoc loc) {
  if constexpr (TileLike<X>) {
    return node_of(x, loc);
  } else {
    static_assert(Literal<X>, "expected a tile, a Var or a C++ number");
    return literal_constant(dtype_of<E>, x, {}, loc);
  }
}

}  // namespace detail

// One operand of an operator on Tile<E>: a tile, a variable (read where the operator is) or a literal.
// Its constructor's default argument records the user's line of the whole expression.
template <class E> struct Operand {
  detail::NodeRef node;
  SourceLoc loc;
  Operand(const Tile<E>& t, SourceLoc l = SourceLoc::current()) : node(detail::node_of(t, l)), loc(l) {}
  Operand(const Var<E>& v, SourceLoc l = SourceLoc::current()) : node(detail::node_of(v, l)), loc(l) {}
  template <class L>
    requires detail::Literal<L> && (!is_pointer_elem<E>)
  Operand(L literal, SourceLoc l = SourceLoc::current())
      : node(detail::literal_constant(dtype_of<E>, literal, {}, l)), loc(l) {}
  template <class L>
    requires(!is_pointer_elem<E>)
  Operand(Const<L> c, SourceLoc l = SourceLoc::current()) : Operand(c.value, l) {}
};

// An integer offset added to a pointer tile: i32 or i64 tiles, or an integer literal.
struct Offset {
  detail::NodeRef node;
  SourceLoc loc;
  Offset(const Tile<int32_t>& t, SourceLoc l = SourceLoc::current());
  Offset(const Tile<int64_t>& t, SourceLoc l = SourceLoc::current());
  Offset(const Var<int32_t>& v, SourceLoc l = SourceLoc::current());
  Offset(const Var<int64_t>& v, SourceLoc l = SourceLoc::current());
  template <class L>
    requires std::is_integral_v<L>
  Offset(L literal, SourceLoc l = SourceLoc::current())
      : node(detail::literal_constant(dtype_of<int64_t>, literal, {}, l)), loc(l) {}
  template <class L>
    requires std::is_integral_v<L>
  Offset(Const<L> c, SourceLoc l = SourceLoc::current()) : Offset(c.value, l) {}
};

namespace detail {

// Tile<bool> spelled so that it depends on E: friends defined in the operator families below are then
// checked only when instantiated, after Tile is complete.
template <class E> struct bool_for { using type = bool; };
template <class E> using Mask = Tile<typename bool_for<E>::type>;

template <class R, class E> Tile<R> elementwise(Op op, const Operand<E>& a, const Operand<E>& b) {
  return Tile<R>(emit_elementwise(op, {a.node, b.node}, a.loc));
}

// Operators are hidden friends, so they are found (through Tile<E> or Var<E>) without templates and
// accept literals and variables by implicit conversion. Which families a tile gets depends on E.
template <class E> struct ArithmeticOps {
  friend Tile<E> operator+(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Add, a, b); }
  friend Tile<E> operator-(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Sub, a, b); }
  friend Tile<E> operator*(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Mul, a, b); }
  friend Tile<E> operator/(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Div, a, b); }
  friend Tile<E> operator%(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Rem, a, b); }
  friend Tile<E> operator-(Operand<E> a) { return Tile<E>(emit_elementwise(Op::Neg, {a.node}, a.loc)); }
  friend Mask<E> operator<(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Lt, a, b); }
  friend Mask<E> operator<=(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Le, a, b); }
  friend Mask<E> operator>(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Gt, a, b); }
  friend Mask<E> operator>=(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Ge, a, b); }
};
template <class E> struct EqualityOps {
  friend Mask<E> operator==(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Eq, a, b); }
  friend Mask<E> operator!=(Operand<E> a, Operand<E> b) { return elementwise<typename bool_for<E>::type>(Op::Ne, a, b); }
};
template <class E> struct BitwiseOps {
  friend Tile<E> operator&(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::And, a, b); }
  friend Tile<E> operator|(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Or, a, b); }
  friend Tile<E> operator^(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Xor, a, b); }
  friend Tile<E> operator~(Operand<E> a) { return Tile<E>(emit_elementwise(Op::Not, {a.node}, a.loc)); }
};
template <class E> struct ShiftOps {
  friend Tile<E> operator<<(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Shl, a, b); }
  friend Tile<E> operator>>(Operand<E> a, Operand<E> b) { return elementwise<E>(Op::Shr, a, b); }
};
template <class E> struct LogicalOps {
  friend Mask<E> operator&&(Operand<bool> a, Operand<bool> b) { return elementwise<typename bool_for<E>::type>(Op::And, a, b); }
  friend Mask<E> operator||(Operand<bool> a, Operand<bool> b) { return elementwise<typename bool_for<E>::type>(Op::Or, a, b); }
  friend Mask<E> operator!(Operand<bool> a) { return Mask<E>(emit_elementwise(Op::Not, {a.node}, a.loc)); }
};
template <class E> struct PointerOps {
  friend Tile<E> operator+(const Tile<E>& p, Offset off) {
    return Tile<E>(emit_elementwise(Op::PtrAdd, {p.node(), off.node}, off.loc));
  }
  friend Tile<E> operator+(Offset off, const Tile<E>& p) {
    return Tile<E>(emit_elementwise(Op::PtrAdd, {p.node(), off.node}, off.loc));
  }
};
template <int> struct NoOps {};

template <class E>
struct Ops : std::conditional_t<!is_pointer_elem<E>, EqualityOps<E>, NoOps<0>>,
             std::conditional_t<is_numeric_elem<E>, ArithmeticOps<E>, NoOps<1>>,
             std::conditional_t<is_int_elem<E> || std::is_same_v<E, bool>, BitwiseOps<E>, NoOps<2>>,
             std::conditional_t<is_int_elem<E>, ShiftOps<E>, NoOps<3>>,
             std::conditional_t<std::is_same_v<E, bool>, LogicalOps<E>, NoOps<4>>,
             std::conditional_t<is_pointer_elem<E>, PointerOps<E>, NoOps<5>> {};

}  // namespace detail

template <class E> class Tile : public detail::Ops<E> {
 public:
  using element_type = E;

  Tile() = default;  // an empty handle; assign a value before use
  explicit Tile(detail::NodeRef node) : node_(std::move(node)) {}

  const detail::NodeRef& node() const { return node_; }
  bool empty() const { return !node_; }
  const Shape& shape() const { return detail::node_shape(node_); }
  int rank() const { return static_cast<int>(shape().size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape()) n *= d;
    return n;
  }
  DType dtype() const { return detail::node_dtype(node_); }

  Tile reshape(Shape shape, SourceLoc loc = SourceLoc::current()) const {
    detail::Attrs a;
    a.shape = std::move(shape);
    return Tile(detail::emit(detail::Op::Reshape, {node_}, a, loc));
  }
  Tile broadcast_to(Shape shape, SourceLoc loc = SourceLoc::current()) const {
    detail::Attrs a;
    a.shape = std::move(shape);
    return Tile(detail::emit(detail::Op::Broadcast, {node_}, a, loc));
  }
  // Insert a dimension of size 1 before `axis` (negative counts from the end, -1 appends).
  Tile expand_dims(int axis, SourceLoc loc = SourceLoc::current()) const {
    Shape s = shape();
    int r = static_cast<int>(s.size());
    int at = axis < 0 ? axis + r + 1 : axis;
    if (at < 0 || at > r)
      throw Error("expand_dims: axis " + std::to_string(axis) + " is out of range for a tile of rank " +
                      std::to_string(r) + "; use an axis in [" + std::to_string(-r - 1) + ", " +
                      std::to_string(r) + "]",
                  loc);
    s.insert(s.begin() + at, 1);
    return reshape(std::move(s), loc);
  }
  Tile permute(std::vector<int64_t> perm, SourceLoc loc = SourceLoc::current()) const {
    detail::Attrs a;
    a.ints = std::move(perm);
    return Tile(detail::emit(detail::Op::Permute, {node_}, a, loc));
  }
  // Elements [start, start + size) along `axis` (static; start a multiple of size).
  Tile slice(int axis, int64_t start, int64_t size, SourceLoc loc = SourceLoc::current()) const {
    detail::Attrs a;
    a.ints = {axis, start, size};
    return Tile(detail::emit(detail::Op::Slice, {node_}, a, loc));
  }
  // Transpose of a rank-2 tile.
  Tile trans(SourceLoc loc = SourceLoc::current()) const { return permute({1, 0}, loc); }

  template <class Other> Tile& operator+=(const Other& o) requires is_numeric_elem<E> { return *this = *this + o; }
  template <class Other> Tile& operator-=(const Other& o) requires is_numeric_elem<E> { return *this = *this - o; }
  template <class Other> Tile& operator*=(const Other& o) requires is_numeric_elem<E> { return *this = *this * o; }
  template <class Other> Tile& operator/=(const Other& o) requires is_numeric_elem<E> { return *this = *this / o; }

 private:
  detail::NodeRef node_;
};

// A mutable variable of the kernel: declared with an initial value, read wherever it is used, assigned
// with `=`. Its shape and element type are fixed by the initial value; assigning a value of another shape
// is an error at the line of the assignment.
template <class E> class Var : public detail::Ops<E> {
 public:
  using element_type = E;

  Var(const Tile<E>& init, SourceLoc loc = SourceLoc::current())
      : slot_(detail::emit(detail::Op::VarDecl, {init.node()}, {}, loc)) {}
  template <class L>
    requires detail::Literal<L> && (!is_pointer_elem<E>)
  Var(L init, SourceLoc loc = SourceLoc::current())
      : slot_(detail::emit(detail::Op::VarDecl, {detail::literal_constant(dtype_of<E>, init, {}, loc)}, {}, loc)) {}
  Var(const Var&) = delete;

  // The variable's value at this point of the kernel.
  Tile<E> read(SourceLoc loc = SourceLoc::current()) const {
    return Tile<E>(detail::emit(detail::Op::VarGet, {slot_}, {}, loc));
  }
  operator Tile<E>() const { return read(); }
  const Shape& shape() const { return detail::node_shape(slot_); }

  Var& operator=(Operand<E> value) {
    detail::emit(detail::Op::VarSet, {slot_, value.node}, {}, value.loc);
    return *this;
  }
  // Takes a non-const Var so that a Tile on the right never converts to a temporary Var (which would make
  // `acc = tile` ambiguous); const Vars go through Operand<E> like any other value.
  Var& operator=(Var& other) { return *this = Operand<E>(other); }
  template <class Other> Var& operator+=(const Other& o) requires is_numeric_elem<E> { return *this = *this + o; }
  template <class Other> Var& operator-=(const Other& o) requires is_numeric_elem<E> { return *this = *this - o; }
  template <class Other> Var& operator*=(const Other& o) requires is_numeric_elem<E> { return *this = *this * o; }
  template <class Other> Var& operator/=(const Other& o) requires is_numeric_elem<E> { return *this = *this / o; }

 private:
  detail::NodeRef slot_;
};
template <class E> Var(const Tile<E>&) -> Var<E>;

namespace detail {
template <class E> NodeRef node_of(const Tile<E>& t, SourceLoc loc) {
  if (!t.node()) throw Error("this Tile is empty: assign it a value before using it", loc);
  return t.node();
}
template <class E> NodeRef node_of(const Var<E>& v, SourceLoc loc) { return v.read(loc).node(); }
}  // namespace detail

inline Offset::Offset(const Tile<int32_t>& t, SourceLoc l) : node(detail::node_of(t, l)), loc(l) {}
inline Offset::Offset(const Tile<int64_t>& t, SourceLoc l) : node(detail::node_of(t, l)), loc(l) {}
inline Offset::Offset(const Var<int32_t>& v, SourceLoc l) : node(detail::node_of(v, l)), loc(l) {}
inline Offset::Offset(const Var<int64_t>& v, SourceLoc l) : node(detail::node_of(v, l)), loc(l) {}

}  // namespace weft
