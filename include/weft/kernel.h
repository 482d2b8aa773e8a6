// weft — kernels: a C++ callable traced into IR, compiled per specialization and launched on a grid.
//
//   weft::Kernel add("vector_add", [](Ptr<float> x, Ptr<float> y, Ptr<float> out, Int n, Const<int> block) {
//     Int offs = program_id() * block + arange(0, block);
//     store(out + offs, load(x + offs, offs < n) + load(y + offs, offs < n), offs < n);
//   });
//   add.launch(Grid(cdiv(n, 1024)), x, y, out, n, 1024);
//
// Parameters are `Tile<E>` of rank 0 (`Ptr<T>`, `Int`, `Float`, …), passed at launch as Buffers, raw
// device pointers or numbers; `Const<T>`: compile-time values that are part of the specialization — each
// distinct set of Const values is traced and compiled once, then memoized; and `TensorDesc<T>` (TMA),
// passed as `weft::tma(buffer, shape, box)`, whose element type, box and swizzle are part of the
// specialization too.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "weft/async.h"
#include "weft/runtime.h"
#include "weft/tile.h"
#include "weft/tma.h"

namespace weft {

// The launch grid: program instances along x, y, z.
struct Grid {
  int64_t x = 1, y = 1, z = 1;
  SourceLoc loc;
  Grid(int64_t x_, int64_t y_ = 1, int64_t z_ = 1, SourceLoc l = SourceLoc::current()) : x(x_), y(y_), z(z_), loc(l) {}
};

// Thread-block clusters (sm_90): the grid still counts blocks; a cluster regroups `x * y * z` neighbouring
// blocks that run at the same time on one GPU processing cluster and can reach each other's shared memory
// (remote barrier arrivals, TMA multicast, cluster_sync; see async.h). Each grid dimension must be a
// multiple of the cluster's, and a cluster has at most 8 blocks (the portable limit of CUDA; the H100's
// non-portable 16 is not offered).
struct ClusterDims {
  int x = 1, y = 1, z = 1;
  int blocks() const { return x * y * z; }
};

struct KernelOptions {
  int num_warps = 4;    // GPU backends: warps per program instance
  ClusterDims cluster = {};  // blocks per cluster; {1, 1, 1}: no clusters
  // Debug mode for this kernel, as WEFT_DEBUG=1 gives every kernel. On a GPU: mbarrier waits time out and
  // the launch throws a weft::Error saying who waited where, instead of hanging (README, "WEFT_DEBUG"). On
  // the CPU backend (which always reports deadlocks): every load and store is checked against its
  // allocation (README, "Bounds checks").
  bool debug = false;
};

namespace detail {

struct ParamInfo {
  bool is_const = false;
  DType dtype{};  // the element type of a Tile or TensorDesc parameter, or the type of a Const's number
  bool is_descriptor = false;  // a TensorDesc<dtype, rank>
  int rank = 0;                // of a TensorDesc: the rank it takes (0: any)
};

// One launch argument, before it is checked against the kernel's parameter.
struct KernelArg {
  enum class Kind { Pointer, Integer, Floating, Descriptor } kind;
  DType dtype{};  // pointer: the pointee (pointer = true); numbers: the C++ type passed; Descriptor: elements
  uint64_t bits = 0;     // pointer: the address; Integer: the value as int64
  double number = 0;     // Floating: the value
  const Backend* backend = nullptr;  // pointer from a Buffer, or Descriptor: where the memory lives
  const TmaDescriptor* descriptor = nullptr;  // Descriptor: the Tma's (alive for the launch's duration)
  bool from_buffer = false;  // pointer: a Buffer's address (else the caller's raw pointer)
};

template <class T> KernelArg kernel_arg(const Buffer<T>& b) {
  return {KernelArg::Kind::Pointer, DType{dtype_of<T>.scalar, true}, reinterpret_cast<uint64_t>(b.data()), 0, b.backend(),
          nullptr, true};
}
template <class T> KernelArg kernel_arg(T* p) {
  return {KernelArg::Kind::Pointer, DType{dtype_of<std::remove_const_t<T>>.scalar, true}, reinterpret_cast<uint64_t>(p), 0, nullptr};
}
template <class T>
  requires std::is_arithmetic_v<T>
KernelArg kernel_arg(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return {KernelArg::Kind::Floating, dtype_of<T>, 0, static_cast<double>(v), nullptr};
  else
    return {KernelArg::Kind::Integer, dtype_of<T>, static_cast<uint64_t>(static_cast<int64_t>(v)), 0, nullptr};
}
template <class T> KernelArg kernel_arg(const Const<T>& c) { return kernel_arg(c.value); }
template <class T> KernelArg kernel_arg(const Tma<T>& t) {
  return {KernelArg::Kind::Descriptor, dtype_of<T>, 0, 0, t.buffer().backend(), &t.descriptor()};
}

// What the tracer receives: for each parameter position its IR node (Tile and TensorDesc parameters) or
// its Const value; `consts` also holds each TensorDesc's launch argument, whose box and swizzle the trace
// records.
struct TraceInputs {
  std::vector<NodeRef> values;
  std::vector<KernelArg> consts;
};

template <class P> struct param_traits;
template <class E> struct param_traits<Tile<E>> {
  static ParamInfo info() { return {false, dtype_of<E>}; }
  static Tile<E> make(const TraceInputs& in, size_t i) { return Tile<E>(in.values[i]); }
};
template <class T> struct param_traits<Const<T>> {
  static ParamInfo info() { return {true, dtype_of<T>}; }
  static Const<T> make(const TraceInputs& in, size_t i) {
    const KernelArg& a = in.consts[i];
    return Const<T>{a.kind == KernelArg::Kind::Floating ? static_cast<T>(a.number)
                                                         : static_cast<T>(static_cast<int64_t>(a.bits))};
  }
};

template <class T, int Rank> struct param_traits<TensorDesc<T, Rank>> {
  static ParamInfo info() { return {false, dtype_of<T>, true, Rank}; }
  static TensorDesc<T, Rank> make(const TraceInputs& in, size_t i) { return TensorDesc<T, Rank>(in.values[i]); }
};

template <class F> struct callable_traits : callable_traits<decltype(&F::operator())> {};
template <class C, class R, class... P> struct callable_traits<R (C::*)(P...) const> {
  using params = std::tuple<std::remove_cv_t<std::remove_reference_t<P>>...>;
};
template <class C, class R, class... P> struct callable_traits<R (C::*)(P...)> : callable_traits<R (C::*)(P...) const> {};
template <class R, class... P> struct callable_traits<R (*)(P...)> {  // a plain function
  using params = std::tuple<std::remove_cv_t<std::remove_reference_t<P>>...>;
};

template <class F, class Tuple, size_t... I>
void invoke_traced(F& fn, const TraceInputs& in, std::index_sequence<I...>) {
  fn(param_traits<std::tuple_element_t<I, Tuple>>::make(in, I)...);
}

class KernelImpl;
std::shared_ptr<KernelImpl> make_kernel(std::string name, std::vector<ParamInfo> params,
                                        std::function<void(const TraceInputs&)> tracer, KernelOptions options,
                                        SourceLoc loc);
// `args`: the launch's `count` arguments, in order (a stack array of Kernel::launch).
void launch_kernel(KernelImpl&, const Stream* stream, const Grid& grid, const KernelArg* args, size_t count);
std::string kernel_ir(KernelImpl&, const std::vector<KernelArg>& const_args);
std::string kernel_ptx(KernelImpl&, const std::vector<KernelArg>& const_args, const std::string& arch);
struct CompiledKernel;
std::shared_ptr<const CompiledKernel> compile_kernel(KernelImpl&, Backend&, const std::vector<KernelArg>& const_args);
std::future<std::shared_ptr<const CompiledKernel>> compile_kernel_async(std::shared_ptr<KernelImpl>, Backend&,
                                                                        std::vector<KernelArg> const_args);
void prepare_kernel(KernelImpl&, Backend&, const KernelArg* args, size_t count);
std::future<void> prepare_kernel_async(std::shared_ptr<KernelImpl>, Backend&, std::vector<KernelArg> args);

}  // namespace detail

class Kernel {
 public:
  template <class F>
  Kernel(std::string name, F fn, KernelOptions options = {}, SourceLoc loc = SourceLoc::current()) {
    using Params = typename detail::callable_traits<F>::params;
    constexpr size_t n = std::tuple_size_v<Params>;
    std::vector<detail::ParamInfo> infos;
    [&]<size_t... I>(std::index_sequence<I...>) {
      (infos.push_back(detail::param_traits<std::tuple_element_t<I, Params>>::info()), ...);
    }(std::make_index_sequence<n>{});
    impl_ = detail::make_kernel(
        std::move(name), std::move(infos),
        [fn](const detail::TraceInputs& in) mutable {
          detail::invoke_traced<F, Params>(fn, in, std::make_index_sequence<n>{});
        },
        options, loc);
  }

  // Launch on the current device's default stream (synchronous on the CPU backend).
  // The arguments go to the library as an array on the stack: a warm launch allocates nothing.
  template <class... A> void launch(const Grid& grid, const A&... args) const {
    const std::array<detail::KernelArg, sizeof...(A)> a{detail::kernel_arg(args)...};
    detail::launch_kernel(*impl_, nullptr, grid, a.data(), a.size());
  }
  // Launch on `stream`.
  template <class... A> void launch(const Stream& stream, const Grid& grid, const A&... args) const {
    const std::array<detail::KernelArg, sizeof...(A)> a{detail::kernel_arg(args)...};
    detail::launch_kernel(*impl_, &stream, grid, a.data(), a.size());
  }

  // Compiles the specialization for these Const arguments on `device` now, instead of at its first launch
  // (its content is backend-specific). A TensorDesc parameter takes its Tma here too, in parameter order with
  // the Const values. It assumes nothing about the other arguments; a launch whose pointers are 16-byte
  // aligned or whose integers are multiples of 16 runs code specialized for that, compiled at that launch:
  // prepare(device, args...) compiles exactly what a launch with those arguments runs.
  template <class... C>
  std::shared_ptr<const detail::CompiledKernel> compile(const Device& device, const C&... const_args) const {
    return detail::compile_kernel(*impl_, device.backend(), {detail::kernel_arg(const_args)...});
  }

  // The same compile on one of weft's compile threads (one per host core), returning at once: start every
  // specialization an autotuner tries, or every kernel a library warms, then wait for the futures, and the
  // compiles run side by side (the wait is the longest of them per core, not the sum). The result is the
  // one compile() then returns; errors, also in the arguments, come out of the future's get().
  // Tma arguments are read during the compile: keep them alive until the future is ready.
  //   std::vector<std::future<std::shared_ptr<const detail::CompiledKernel>>> pending;
  //   for (int block : {64, 128, 256}) pending.push_back(k.compile_async(dev, block));
  //   for (auto& f : pending) f.get();
  template <class... C>
  std::future<std::shared_ptr<const detail::CompiledKernel>> compile_async(const Device& device,
                                                                           const C&... const_args) const {
    return detail::compile_kernel_async(impl_, device.backend(), {detail::kernel_arg(const_args)...});
  }

  // Compiles, on `device`, exactly what a launch with these arguments (all of them, as launch takes them)
  // would run, and launches nothing. Besides the Const values and Tmas, a specialization depends on what
  // weft learns from the other arguments (pointers aligned to 16 bytes, integers divisible by 16), which
  // compile() cannot know: an autotuner or a warm-up that will launch with given buffers and sizes prepares
  // with them, and the launch then finds its code ready. Errors name the line where the kernel was declared.
  template <class... A> void prepare(const Device& device, const A&... args) const {
    const std::array<detail::KernelArg, sizeof...(A)> a{detail::kernel_arg(args)...};
    detail::prepare_kernel(*impl_, device.backend(), a.data(), a.size());
  }
  // The same on one of weft's compile threads, returning at once (as compile_async); errors come out of
  // get(). The arguments' memory (buffers, Tmas) must stay alive until the future is ready.
  template <class... A> std::future<void> prepare_async(const Device& device, const A&... args) const {
    return detail::prepare_kernel_async(impl_, device.backend(), {detail::kernel_arg(args)...});
  }

  // The traced IR, as text, for the given Const arguments (in the order of the Const parameters, with a
  // Tma for each TensorDesc parameter among them). Errors in the arguments name the line where the kernel
  // was declared.
  template <class... C> std::string ir(const C&... const_args) const {
    return detail::kernel_ir(*impl_, {detail::kernel_arg(const_args)...});
  }

  // The kernel's PTX for sm_90a (the NVPTX back end's output, before the driver compiles it), for the same
  // arguments as ir(). Needs no GPU: a way to look at the code weft generates, e.g. on a build machine.
  template <class... C> std::string ptx(const C&... const_args) const {
    return detail::kernel_ptx(*impl_, {detail::kernel_arg(const_args)...}, "sm_90a");
  }

 private:
  std::shared_ptr<detail::KernelImpl> impl_;
};

}  // namespace weft
