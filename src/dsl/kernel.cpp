// Kernels: argument checking, specialization on Const values and TMA descriptors, tracing, compiling
// (memoized per backend) and launching.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "codegen/nvptx/compile_ptx.h"
#include "driver/backend.h"
#include "driver/ptx_check.h"
#include "dsl/compile_pool.h"
#include "dsl/reproducer.h"
#include "dsl/trace.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "support/compile_timing.h"
#include "support/env.h"
#include "support/float_rounding.h"

namespace weft::detail {

// Runs `step` (a compile of `f`); a compiler fault in it leaves a reproducer file (dsl/reproducer.h).
template <class Step>
auto reproducing(const ir::Function& f, const KernelOptions& options, const std::string& backend, Step&& step)
    -> decltype(step()) {
  try {
    return step();
  } catch (const InternalError& fault) {
    throw dsl::with_reproducer(fault, f, options, backend);
  }
}

class KernelImpl {
 public:
  std::string name;
  std::vector<ParamInfo> params;
  std::function<void(const TraceInputs&)> tracer;
  KernelOptions options;
  SourceLoc loc;

  // A backend's compile of a specialization, ready or under way on some thread (which holds the promise).
  using CompiledSlot = std::shared_future<std::shared_ptr<CompiledKernel>>;
  struct Specialization {
    std::shared_ptr<const ir::Function> function;
    std::unordered_map<Backend*, CompiledSlot> compiled;
  };
  std::mutex mutex;
  // Keyed on the Const values, the descriptors' specialization bits and `divisible`.
  std::map<std::string, Specialization> specializations;

  // The last launch's specialization, so that a warm launch skips the key and the maps: its backend, its
  // Const values and descriptors (each one's 64 bits, see const_bits and
  // TmaDescriptor::specialization_bits, in the order of the Const and TensorDesc parameters) and what it
  // launched. `last_compiled` is owned by `specializations`, which never drops an entry. Guarded by `mutex`.
  Backend* last_backend = nullptr;
  std::vector<uint64_t> last_consts;
  CompiledKernel* last_compiled = nullptr;

  // `divisible`: bit i set when Tile parameter i is a 16-byte-aligned pointer or an integer divisible by
  // 16 at this launch (0 for Kernel::ir / compile, which see no arguments). Code generators use it to
  // prove 16-byte accesses at compile time; kernels specialize on it as they do on Const values.
  Specialization& specialization(const std::vector<KernelArg>& consts, uint64_t divisible);
  // The specialization compiled for `backend` (compiled now if it was not yet). Call with `lock` (of `mutex`)
  // held: tracing happens under it, but the backend's compile does not, so that other threads compile other
  // specializations meanwhile (Kernel::compile_async); a thread that wants a compile under way waits for it.
  std::shared_ptr<CompiledKernel> compiled(const std::vector<KernelArg>& consts, uint64_t divisible, Backend& backend,
                                           std::unique_lock<std::mutex>& lock) {
    std::optional<support::CompileRecording> recording;  // WEFT_TIME_PASSES: only compiles are recorded
    if (!compiled_already(consts, divisible, backend)) recording.emplace(name, backend.name());
    Specialization& s = specialization(consts, divisible);  // never erased: stays valid while unlocked
    if (auto it = s.compiled.find(&backend); it != s.compiled.end()) {
      CompiledSlot slot = it->second;
      lock.unlock();
      slot.wait();
      lock.lock();
      return slot.get();
    }
    std::promise<std::shared_ptr<CompiledKernel>> promise;
    s.compiled.emplace(&backend, promise.get_future().share());
    std::shared_ptr<const ir::Function> function = s.function;
    lock.unlock();
    try {
      std::shared_ptr<CompiledKernel> k =
          reproducing(*function, options, backend.name(), [&] { return backend.compile(*function, options); });
      promise.set_value(k);
      lock.lock();
      return k;
    } catch (...) {
      promise.set_exception(std::current_exception());  // for the threads waiting on it
      lock.lock();
      s.compiled.erase(&backend);  // a later call compiles again
      throw;
    }
  }
  bool compiled_already(const std::vector<KernelArg>& consts, uint64_t divisible, Backend& backend) const {
    auto it = specializations.find(specialization_key(consts, divisible));
    return it != specializations.end() && it->second.compiled.count(&backend);
  }
  static std::string specialization_key(const std::vector<KernelArg>& consts, uint64_t divisible);
};

namespace {

constexpr int kMaxClusterBlocks = 8;

std::string describe(const ParamInfo& p) {
  if (p.is_const) return fmt::format("Const<{}>", p.dtype.str());
  if (p.is_descriptor)
    return p.rank ? fmt::format("TensorDesc<{}, {}>", p.dtype.str(), p.rank)
                  : fmt::format("TensorDesc<{}>", p.dtype.str());
  return p.dtype.pointer ? fmt::format("Ptr<{}>", DType{p.dtype.scalar, false}.str())
                         : fmt::format("Scalar<{}>", p.dtype.str());
}

std::string describe(const KernelArg& a) {
  switch (a.kind) {
    case KernelArg::Kind::Pointer: return fmt::format("a pointer to {}", DType{a.dtype.scalar, false}.str());
    case KernelArg::Kind::Integer: return fmt::format("an integer ({})", a.dtype.str());
    case KernelArg::Kind::Floating: return fmt::format("a floating-point number ({})", a.dtype.str());
    case KernelArg::Kind::Descriptor: {
      const TmaFields& f = a.descriptor->fields;
      std::string box;
      for (int64_t d : f.box) box += fmt::format("{}{}", box.empty() ? "" : ", ", d);
      return fmt::format("a Tma of {} of rank {} (box [{}])", a.dtype.str(), f.shape.size(), box);
    }
  }
  return "?";
}

std::string signature(const KernelImpl& k) {
  std::string s;
  for (const ParamInfo& p : k.params) s += (s.empty() ? "" : ", ") + describe(p);
  return fmt::format("{}({})", k.name, s);
}

[[noreturn]] void bad_argument(const KernelImpl& k, size_t i, const KernelArg& a, const std::string& why, SourceLoc loc) {
  throw Error(fmt::format("argument {} of kernel {} is {}, but the parameter is {}{}", i, signature(k), describe(a),
                          describe(k.params[i]), why.empty() ? "" : "; " + why),
              loc);
}

// A null address for the pointer parameter `i`: an empty Buffer (default-constructed, or of 0 elements) or
// a raw nullptr. Refused on every backend before anything runs: the kernel would dereference it (SIGSEGV on
// the CPU, an illegal address that loses the context on a GPU).
[[noreturn]] void null_pointer_argument(const KernelImpl& k, size_t i, const KernelArg& a, const Backend& backend,
                                        SourceLoc loc) {
  const std::string elem = DType{a.dtype.scalar, false}.str();
  if (a.from_buffer)
    throw Error(fmt::format("argument {} of kernel '{}' is an empty Buffer<{}> (default-constructed, or of 0 "
                            "elements): it has no memory for the kernel's {}; pass a buffer that holds the elements "
                            "the kernel reads or writes (Device::alloc<{}>(n) with n > 0, or Device::upload)",
                            i, k.name, elem, describe(k.params[i]), elem),
                loc);
  throw Error(fmt::format("argument {} of kernel '{}' is a null pointer for its {}; pass the address of memory on {} "
                          "(a Buffer from Device::alloc, or your own allocation through Device::wrap)",
                          i, k.name, describe(k.params[i]), backend.name()),
              loc);
}

// The value of an integer argument for the integer parameter `i`: floats are refused, and the value must
// fit the parameter's type.
int64_t integer_value(const KernelImpl& k, size_t i, const KernelArg& a, SourceLoc loc) {
  DType d = k.params[i].dtype;
  if (a.kind == KernelArg::Kind::Floating)
    bad_argument(k, i, a, "convert it to an integer explicitly if that is what you mean", loc);
  int64_t v = static_cast<int64_t>(a.bits);
  int bits = d.bits();
  if (bits < 64) {
    int64_t lo = d.is_bool() ? 0 : -(int64_t(1) << (bits - 1));
    int64_t hi = d.is_bool() ? 1 : (int64_t(1) << (bits - 1)) - 1;
    if (v < lo || v > hi)
      throw Error(fmt::format("argument {} of kernel {} is {}, which does not fit in the parameter's type {} (range {} "
                              "to {})",
                              i, signature(k), v, d.str(), lo, hi),
                  loc);
  }
  return v;
}

// A Tma given for a parameter that is not a TensorDesc.
void refuse_descriptor(const KernelImpl& k, size_t i, const KernelArg& a, SourceLoc loc) {
  if (a.kind == KernelArg::Kind::Descriptor)
    bad_argument(k, i, a, "a Tma goes to a TensorDesc<T> parameter; declare the parameter as one, or pass the buffer",
                 loc);
}

// The 64-bit slot a number occupies for a parameter of type `d`.
uint64_t number_slot(const KernelImpl& k, size_t i, const KernelArg& a, SourceLoc loc) {
  DType d = k.params[i].dtype;
  refuse_descriptor(k, i, a, loc);
  if (a.kind == KernelArg::Kind::Pointer) bad_argument(k, i, a, "pass a number", loc);
  if (d.is_float()) {
    double v = a.kind == KernelArg::Kind::Floating ? a.number : static_cast<double>(static_cast<int64_t>(a.bits));
    switch (d.scalar) {
      case ScalarType::f16: return f16(support::f32_round_to_odd(v)).bits;  // one rounding, from any number
      case ScalarType::bf16: return bf16(support::f32_round_to_odd(v)).bits;
      case ScalarType::f8e4m3: return f8e4m3(support::f32_round_to_odd(v)).bits;
      case ScalarType::f8e5m2: return f8e5m2(support::f32_round_to_odd(v)).bits;
      case ScalarType::f32: {
        float f = static_cast<float>(v);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return u;
      }
      default: {
        uint64_t u;
        std::memcpy(&u, &v, 8);
        return u;
      }
    }
  }
  return static_cast<uint64_t>(integer_value(k, i, a, loc));
}

// A Const argument, checked like a number for a Scalar parameter of the same type and converted to that
// type, so that equal values give one specialization however they were spelled (2, 2.0, 2.0f).
KernelArg const_value(const KernelImpl& k, size_t i, const KernelArg& a, SourceLoc loc) {
  refuse_descriptor(k, i, a, loc);
  if (a.kind == KernelArg::Kind::Pointer) bad_argument(k, i, a, "pass a number", loc);
  DType d = k.params[i].dtype;
  if (!d.is_float()) {
    integer_value(k, i, a, loc);
    return a;
  }
  KernelArg f = a;
  f.kind = KernelArg::Kind::Floating;
  f.number = a.kind == KernelArg::Kind::Floating ? a.number : static_cast<double>(static_cast<int64_t>(a.bits));
  if (d.scalar == ScalarType::f32) f.number = static_cast<float>(f.number);
  return f;
}

// The descriptor of a Tma argument for the TensorDesc parameter `i`: its element type and rank must be the
// parameter's. (Its backend is checked at launch, where there is one.)
const TmaDescriptor& descriptor_value(const KernelImpl& k, size_t i, const KernelArg& a, SourceLoc loc) {
  const ParamInfo& p = k.params[i];
  if (a.kind != KernelArg::Kind::Descriptor)
    bad_argument(k, i, a, fmt::format("pass weft::tma(buffer, shape, box) of a Buffer<{}>", p.dtype.str()), loc);
  if (a.dtype.scalar != p.dtype.scalar)
    bad_argument(k, i, a, fmt::format("make the Tma from a Buffer<{}>, or declare the parameter TensorDesc<{}>",
                                      p.dtype.str(), a.dtype.str()),
                 loc);
  const size_t rank = a.descriptor->fields.shape.size();
  if (p.rank != 0 && rank != static_cast<size_t>(p.rank))
    bad_argument(k, i, a,
                 fmt::format("describe the tensor with {} dimensions, or declare the parameter TensorDesc<{}, {}>",
                             p.rank, p.dtype.str(), rank),
                 loc);
  return *a.descriptor;
}

std::string const_key(const std::vector<KernelArg>& consts) {
  std::string key;
  for (const KernelArg& c : consts) {
    if (c.kind == KernelArg::Kind::Descriptor)
      key += fmt::format("t{};", c.descriptor->specialization_bits);
    else if (c.kind == KernelArg::Kind::Floating)
      key += fmt::format("f{};", c.number);
    else
      key += fmt::format("i{};", static_cast<int64_t>(c.bits));
  }
  return key;
}

// Host-side calls on a Kernel (launch, ir, compile) made from inside a kernel body being traced: an
// Error instead of re-entering the kernel (its lock is held while it traces).
void refuse_inside_kernel_body(const KernelImpl& k, const char* call, SourceLoc loc) {
  if (dsl::tracing())
    throw Error(fmt::format("Kernel::{} of kernel '{}' is called inside a kernel body being traced; launch, ir and "
                            "compile belong in host code, outside kernel bodies",
                            call, k.name),
                loc);
}

void check_grid(const Grid& g, const KernelImpl& k) {
  if (g.x < 1 || g.y < 1 || g.z < 1 || g.x > INT32_MAX || g.y > 65535 || g.z > 65535)
    throw Error(fmt::format("kernel '{}' launched on grid ({}, {}, {}): each dimension must be at least 1, x at most "
                            "2^31 - 1 and y, z at most 65535",
                            k.name, g.x, g.y, g.z),
                g.loc);
}

// The grid regrouped in clusters: every dimension a multiple of the cluster's (as the hardware requires).
void check_grid_fits_clusters(const Grid& g, const KernelImpl& k) {
  const ClusterDims& c = k.options.cluster;
  if (c.blocks() == 1) return;
  if (g.x % c.x != 0 || g.y % c.y != 0 || g.z % c.z != 0)
    throw Error(fmt::format("kernel '{}' runs in clusters of ({}, {}, {}) blocks but is launched on grid ({}, {}, {}): "
                            "each grid dimension must be a multiple of the cluster's; round the grid up (and let the "
                            "extra blocks do nothing)",
                            k.name, c.x, c.y, c.z, g.x, g.y, g.z),
                g.loc);
}

// Cluster dims given at the kernel's declaration: 1 to 8 blocks (CUDA's portable cluster size).
void check_cluster(const ClusterDims& c, const std::string& name, SourceLoc loc) {
  if (c.x < 1 || c.y < 1 || c.z < 1)
    throw Error(fmt::format("kernel '{}': cluster ({}, {}, {}) has a dimension below 1; give at least 1 block along "
                            "each axis",
                            name, c.x, c.y, c.z),
                loc);
  const int64_t blocks = int64_t(c.x) * c.y * c.z;  // no overflow, whatever the dims
  if (blocks > kMaxClusterBlocks)
    throw Error(fmt::format("kernel '{}': a cluster of ({}, {}, {}) is {} blocks, more than the {} a cluster may have "
                            "(CUDA's portable limit); use a smaller cluster",
                            name, c.x, c.y, c.z, blocks, kMaxClusterBlocks),
                loc);
}

}  // namespace

std::string KernelImpl::specialization_key(const std::vector<KernelArg>& consts, uint64_t divisible) {
  return const_key(consts) + fmt::format("d{}", divisible);
}

KernelImpl::Specialization& KernelImpl::specialization(const std::vector<KernelArg>& consts, uint64_t divisible) {
  std::string key = specialization_key(consts, divisible);
  auto it = specializations.find(key);
  if (it != specializations.end()) return it->second;
  Specialization s;
  s.function = dsl::trace_kernel(name, params, tracer, consts, divisible, loc, options.num_warps);
  ir::verify_cluster_copies(*s.function, static_cast<int>(options.cluster.blocks()), name);  // rules that need the options
  if (support::knobs().dumps("ir")) support::dump("ir", name, "ir", ir::print(*s.function, {.locations = true}));
  // WEFT_CHECK_PTX: the PTX must pass ptxas too (not part of the kernel's compile time)
  support::RecordingPause not_this_kernels_compile;
  reproducing(*s.function, options, "WEFT_CHECK_PTX", [&] { check_ptx_if_asked(*s.function, options); });
  return specializations.emplace(key, std::move(s)).first->second;
}

std::shared_ptr<KernelImpl> make_kernel(std::string name, std::vector<ParamInfo> params,
                                        std::function<void(const TraceInputs&)> tracer, KernelOptions options,
                                        SourceLoc loc) {
  if (name.empty()) throw Error("a kernel needs a name", loc);
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      throw Error(fmt::format("kernel name '{}' may contain only letters, digits and '_'", name), loc);
  check_cluster(options.cluster, name, loc);
  auto k = std::make_shared<KernelImpl>();
  k->name = std::move(name);
  k->params = std::move(params);
  k->tracer = std::move(tracer);
  k->options = options;
  k->loc = loc;
  return k;
}

namespace {

// The 64 bits that identify a checked Const value (the result of const_value) for the launch fast path.
// A Const parameter's values all have one kind (its type decides), so equal bits mean an equal key
// (const_key); different bits with an equal key (NaNs of different payloads) only miss the fast path.
uint64_t const_bits(const KernelArg& c) {
  return c.kind == KernelArg::Kind::Floating ? std::bit_cast<uint64_t>(c.number) : c.bits;
}

// `n` values of T on the stack, or on the heap when n is larger than N: kernels have few parameters.
template <class T, size_t N> class SmallArray {
 public:
  explicit SmallArray(size_t n) {
    if (n > N) {
      heap_.resize(n);
      data_ = heap_.data();
    }
  }
  SmallArray(const SmallArray&) = delete;
  SmallArray& operator=(const SmallArray&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  T inline_[N];  // left uninitialized: written before it is read
  std::vector<T> heap_;
  T* data_ = inline_;
};

}  // namespace

namespace {

// A launch (`grid` given) or its preparation (`grid` null: Kernel::prepare, which compiles what the launch
// would run and stops there). One path for both, so that they pick the same specialization. Errors name
// `loc`.
CompiledKernel* launch_or_prepare(KernelImpl& k, Backend& backend, const Stream* stream, const Grid* grid,
                                  const KernelArg* args, size_t count, SourceLoc loc) {
  refuse_inside_kernel_body(k, grid ? "launch" : "prepare", loc);
  if (count != k.params.size())
    throw Error(fmt::format("kernel {} takes {} arguments but the {} passes {}", signature(k), k.params.size(),
                            grid ? "launch" : "prepare", count),
                loc);
  if (grid) {
    check_grid(*grid, k);
    check_grid_fits_clusters(*grid, k);
  }

  constexpr size_t kInlineParams = 32;
  SmallArray<uint64_t, kInlineParams> slots(count), consts(count + 1);
  size_t num_slots = 0, num_consts = 0;
  uint64_t divisible = 0;  // see KernelImpl::specialization
  for (size_t i = 0; i < count; ++i) {
    const ParamInfo& p = k.params[i];
    const KernelArg& a = args[i];
    if (p.is_const) {
      consts[num_consts++] = const_bits(const_value(k, i, a, loc));
      continue;
    }
    if (p.is_descriptor) {
      const TmaDescriptor& d = descriptor_value(k, i, a, loc);
      if (d.backend != &backend)
        throw Error(fmt::format("argument {} of kernel '{}' is a Tma of a buffer on {} but the kernel is launched on "
                                "{}; make the Tma of a buffer allocated on the launching device",
                                i, k.name, d.backend->name(), backend.name()),
                    loc);
      consts[num_consts++] = d.specialization_bits;  // part of the specialization, like a Const value
      slots[num_slots++] = backend.tensor_desc_slot(d);
      continue;
    }
    if (p.dtype.pointer) {
      refuse_descriptor(k, i, a, loc);
      if (a.kind != KernelArg::Kind::Pointer || a.dtype.scalar != p.dtype.scalar) bad_argument(k, i, a, "", loc);
      if (a.backend && a.backend != &backend)
        throw Error(fmt::format("argument {} of kernel '{}' is a buffer on {} but the kernel is launched on {}; allocate "
                                "it on the launching device",
                                i, k.name, a.backend->name(), backend.name()),
                    loc);
      if (a.bits == 0) null_pointer_argument(k, i, a, backend, loc);
      slots[num_slots++] = a.bits;
    } else {
      slots[num_slots++] = number_slot(k, i, a, loc);
    }
    bool integer = p.dtype.pointer || (p.dtype.is_int() && !p.dtype.is_bool());
    bool multiple_of_16 = integer && slots[num_slots - 1] % 16 == 0;
    if (multiple_of_16 && num_slots <= 64) divisible |= uint64_t(1) << (num_slots - 1);
  }
  consts[num_consts++] = divisible;  // part of the key of the fast path, like a Const value

  // Lookup only under the lock (a first launch also traces and compiles under it, once). The
  // CompiledKernel stays alive after the lock is released: `specializations` owns it for as long as `k`.
  CompiledKernel* compiled;
  {
    std::unique_lock<std::mutex> lock(k.mutex);
    if (k.last_backend == &backend && k.last_consts.size() == num_consts &&
        std::equal(k.last_consts.begin(), k.last_consts.end(), consts.data())) {
      compiled = k.last_compiled;
    } else {
      // The Const values and descriptors by parameter position, as tracing wants them (checked above).
      std::vector<KernelArg> by_position(count);
      for (size_t i = 0; i < count; ++i) {
        if (k.params[i].is_const) by_position[i] = const_value(k, i, args[i], loc);
        if (k.params[i].is_descriptor) by_position[i] = args[i];
      }
      compiled = k.compiled(by_position, divisible, backend, lock).get();
      k.last_backend = &backend;
      k.last_consts.assign(consts.data(), consts.data() + num_consts);
      k.last_compiled = compiled;
    }
  }
  if (grid)
    backend.launch(*compiled, LaunchDims{grid->x, grid->y, grid->z}, slots.data(), num_slots,
                   stream ? stream->native() : backend.default_stream());
  return compiled;
}

}  // namespace

void launch_kernel(KernelImpl& k, const Stream* stream, const Grid& grid, const KernelArg* args, size_t count) {
  Backend& backend = stream ? stream->backend() : Device::current().backend();
  launch_or_prepare(k, backend, stream, &grid, args, count, grid.loc);
}

void prepare_kernel(KernelImpl& k, Backend& backend, const KernelArg* args, size_t count) {
  launch_or_prepare(k, backend, nullptr, nullptr, args, count, k.loc);
}

std::future<void> prepare_kernel_async(std::shared_ptr<KernelImpl> k, Backend& backend, std::vector<KernelArg> args) {
  refuse_inside_kernel_body(*k, "prepare_async", k->loc);
  auto promise = std::make_shared<std::promise<void>>();
  std::future<void> result = promise->get_future();
  dsl::run_on_compile_thread([k = std::move(k), &backend, args = std::move(args), promise] {
    try {
      prepare_kernel(*k, backend, args.data(), args.size());
      promise->set_value();
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return result;
}


namespace {

// The Const values and Tmas given to Kernel::ir / Kernel::compile (one per Const or TensorDesc parameter,
// in order), spread over the parameter positions. Those calls cannot record their caller's line (their
// arguments are a pack), so errors name the line where the kernel was declared.
std::vector<KernelArg> consts_by_position(const KernelImpl& k, const std::vector<KernelArg>& const_args,
                                          const char* call) {
  size_t wanted = 0, descriptors = 0;
  for (const ParamInfo& p : k.params) {
    wanted += p.is_const || p.is_descriptor;
    descriptors += p.is_descriptor;
  }
  if (wanted != const_args.size())
    throw Error(fmt::format("kernel {} has {} {} but Kernel::{} was given {} values; pass one value per Const "
                            "parameter{}, in order",
                            signature(k), wanted, descriptors ? "Const and TensorDesc parameters" : "Const parameters",
                            call, const_args.size(), descriptors ? " and one Tma per TensorDesc parameter" : ""),
                k.loc);
  std::vector<KernelArg> consts(k.params.size());
  size_t next = 0;
  for (size_t i = 0; i < k.params.size(); ++i) {
    if (k.params[i].is_const) consts[i] = const_value(k, i, const_args[next++], k.loc);
    if (k.params[i].is_descriptor) {
      descriptor_value(k, i, const_args[next], k.loc);
      consts[i] = const_args[next++];
    }
  }
  return consts;
}

}  // namespace

std::string kernel_ir(KernelImpl& k, const std::vector<KernelArg>& const_args) {
  refuse_inside_kernel_body(k, "ir", k.loc);
  std::vector<KernelArg> consts = consts_by_position(k, const_args, "ir");
  std::lock_guard<std::mutex> lock(k.mutex);
  return ir::print(*k.specialization(consts, 0).function);
}

std::string kernel_ptx(KernelImpl& k, const std::vector<KernelArg>& const_args, const std::string& arch) {
  refuse_inside_kernel_body(k, "ptx", k.loc);
  std::vector<KernelArg> consts = consts_by_position(k, const_args, "ptx");
  std::lock_guard<std::mutex> lock(k.mutex);
  support::CompileRecording recording(k.name, arch + " (Kernel::ptx)");
  const ir::Function& f = *k.specialization(consts, 0).function;
  return reproducing(f, k.options, "PTX for " + arch, [&] {
    return codegen::nvptx::compile_to_ptx(f, k.options, codegen::nvptx::PtxTarget{arch, "+ptx85"}).ptx;
  });
}

std::shared_ptr<const CompiledKernel> compile_kernel(KernelImpl& k, Backend& backend,
                                                     const std::vector<KernelArg>& const_args) {
  refuse_inside_kernel_body(k, "compile", k.loc);
  std::vector<KernelArg> consts = consts_by_position(k, const_args, "compile");
  std::unique_lock<std::mutex> lock(k.mutex);
  return k.compiled(consts, 0, backend, lock);
}

std::future<std::shared_ptr<const CompiledKernel>> compile_kernel_async(std::shared_ptr<KernelImpl> k, Backend& backend,
                                                                        std::vector<KernelArg> const_args) {
  refuse_inside_kernel_body(*k, "compile_async", k->loc);
  auto promise = std::make_shared<std::promise<std::shared_ptr<const CompiledKernel>>>();
  std::future<std::shared_ptr<const CompiledKernel>> result = promise->get_future();
  dsl::run_on_compile_thread([k = std::move(k), &backend, const_args = std::move(const_args), promise] {
    try {
      promise->set_value(compile_kernel(*k, backend, const_args));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return result;
}

}  // namespace weft::detail
