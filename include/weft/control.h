// weft — structured control flow inside a kernel.
//
// The bodies are C++ callables traced once into a region of the IR; ordinary C++ `for`/`if` around DSL
// calls unroll or specialize at trace time instead. Values made inside a body stay inside it: carry a
// result out (or from one iteration to the next) through a `Var` declared before the loop.
#pragma once

#include <functional>

#include "weft/ops.h"

namespace weft {

// for (i = lo; i < hi; i += step) body(i), with i an Int; a step that is not positive runs no iteration.
template <class Lo, class Hi, class St, class Body>
  requires detail::TileOrLiteral<Lo> && detail::TileOrLiteral<Hi> && detail::TileOrLiteral<St>
void for_range(const Lo& lo, const Hi& hi, const St& step, Body&& body, SourceLoc loc = SourceLoc::current()) {
  detail::require_tracing(loc);
  // One statement each: the order of function arguments is unspecified, and the IR must not depend on
  // the compiler.
  detail::NodeRef l = detail::value_of<int32_t>(lo, loc);
  detail::NodeRef h = detail::value_of<int32_t>(hi, loc);
  detail::NodeRef s = detail::value_of<int32_t>(step, loc);
  detail::trace_for(std::move(l), std::move(h), std::move(s), [&](detail::NodeRef i) { body(Int(std::move(i))); }, loc);
}
template <class Lo, class Hi, class Body>
  requires detail::TileOrLiteral<Lo> && detail::TileOrLiteral<Hi> && std::is_invocable_v<Body, Int>
void for_range(const Lo& lo, const Hi& hi, Body&& body, SourceLoc loc = SourceLoc::current()) {
  for_range(lo, hi, 1, std::forward<Body>(body), loc);
}

// while (cond()) body(). `cond` returns a rank-0 Bool; it is traced once, as the loop's test, and runs
// before every iteration, so it may have effects — a spin lock is
//   while_([&] { return atomic_cas(lock, 0, 1) != 0; }, [] {});
// and a dynamic tile scheduler `Var<int32_t> t = atomic_add(next, 1); while_([&] { return t < tiles; },
// [&] { ...; t = atomic_add(next, 1); })`. Values made in `cond` stay there (carry them through Vars). A
// loop that waits for another program (a spin-wait on a flag) needs that program to run meanwhile: on the
// GPU, every program it waits for resident at once (a grid no larger than what fits on the GPU); on the
// CPU backend, no more waiting programs than WEFT_CPU_THREADS.
template <class Cond, class Body>
  requires std::is_invocable_v<Cond> && std::is_invocable_v<Body>
void while_(Cond&& cond, Body&& body, SourceLoc loc = SourceLoc::current()) {
  detail::trace_while([&] {
    auto c = cond();
    static_assert(std::is_same_v<detail::elem_of<decltype(c)>, bool>, "while_: the condition must return a Bool");
    return detail::node_of(c, loc);
  }, [&] { body(); }, loc);
}

// if (cond) then_body() [else else_body()]; cond is a rank-0 Bool.
template <class C, class Then>
  requires std::is_same_v<detail::elem_of<C>, bool>
void if_(const C& cond, Then&& then_body, SourceLoc loc = SourceLoc::current()) {
  detail::trace_if(detail::node_of(cond, loc), [&] { then_body(); }, nullptr, loc);
}
template <class C, class Then, class Else>
  requires std::is_same_v<detail::elem_of<C>, bool> && std::is_invocable_v<Else>
void if_(const C& cond, Then&& then_body, Else&& else_body, SourceLoc loc = SourceLoc::current()) {
  std::function<void()> other = [&] { else_body(); };
  detail::trace_if(detail::node_of(cond, loc), [&] { then_body(); }, &other, loc);
}

}  // namespace weft
