// weft::tma: the hardware's rules for a TMA descriptor (those of cuTensorMapEncodeTiled, interleave none,
// element strides 1), checked on the host for every backend, and the descriptor each backend passes.
#include <fmt/format.h>

#include <list>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "driver/backend.h"
#include "driver/tma_descriptor.h"

namespace weft::detail {
namespace {

constexpr int kMaxRank = TensorDescData::kMaxRank;
constexpr int64_t kMaxDim = int64_t(1) << 32;          // dimensions: 1 .. 2^32 elements
constexpr int64_t kStrideLimit = int64_t(1) << 40;     // strides: below 2^40 bytes
constexpr int64_t kMaxBoxDim = 256;                    // box dimensions: 1 .. 256 elements
constexpr int64_t kAlign = 16;                         // bytes: address, strides, box rows

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += fmt::format("{}{}", s.empty() ? "" : ", ", x);
  return "[" + s + "]";
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Element types TMA moves (CUtensorMapDataType): f16, bf16, f32, f64 and integers of 8 to 64 bits (the
// driver knows 8- and 16-bit integers as unsigned; a copy moves bits, so signedness does not matter).
bool tma_supports(DType d) { return !d.pointer && d.scalar != ScalarType::i1; }

// The default swizzle: the span the box's rows fill exactly (what wgmma's shared-memory layouts want);
// rows of other widths get none. It never breaks the rule that rows fit the span.
int default_swizzle(int64_t inner_box_bytes) {
  for (int span : {128, 64, 32})
    if (inner_box_bytes == span) return span;
  return 0;
}

// The rules in the order they are checked; each failure names its rule, the value and the fix.
class Checker {
 public:
  Checker(TmaFields& f, void* buffer_address, size_t buffer_bytes, const Backend* backend, SourceLoc loc)
      : f_(f), buffer_(buffer_address), buffer_bytes_(buffer_bytes), backend_(backend), loc_(loc) {}

  void check() {
    const int64_t e = f_.dtype.bytes();
    const int64_t per_16 = kAlign / e;  // elements in 16 bytes (every TMA type is at most 8 bytes wide)
    if (!tma_supports(f_.dtype))
      fail("element type", fmt::format("the element type is {}", f_.dtype.str()),
           "TMA copies f16, bf16, f32, f64 and 8-, 16-, 32- and 64-bit integers: store the elements as one of "
           "those (bool as int8_t)");
    const int rank = static_cast<int>(f_.shape.size());
    if (rank < 1 || rank > kMaxRank)
      fail("rank 1 to 5", fmt::format("the shape {} has {} dimensions", list(f_.shape), rank),
           rank < 1 ? "give the tensor at least one dimension"
                    : "give at most 5 dimensions: merge neighbouring dimensions that are contiguous "
                      "([a, b] -> [a * b])");
    if (static_cast<int>(f_.box.size()) != rank)
      fail("one box dimension per tensor dimension",
           fmt::format("the box {} has {} dimensions but the shape {} has {}", list(f_.box), f_.box.size(),
                       list(f_.shape), rank),
           fmt::format("give the box {} dimensions, outermost first", rank));
    if (!f_.strides.empty() && static_cast<int>(f_.strides.size()) != rank)
      fail("one stride per dimension",
           fmt::format("TmaOptions::strides {} has {} entries but the shape has {} dimensions", list(f_.strides),
                       f_.strides.size(), rank),
           fmt::format("give {} strides, outermost first, or none for a row-major tensor", rank));
    for (int i = 0; i < rank; ++i)
      if (f_.shape[i] < 1 || f_.shape[i] > kMaxDim)
        fail("dimensions 1 to 2^32", fmt::format("dimension {} of the shape is {}", i, f_.shape[i]),
             f_.shape[i] < 1 ? "an empty tensor has nothing to copy: skip the launch, or give every dimension at "
                               "least 1 element"
                             : "split the dimension into two (e.g. [n] -> [n / k, k]) or use several descriptors");
    if (f_.strides.empty()) {  // row-major
      f_.strides.assign(rank, 1);
      for (int i = rank - 2; i >= 0; --i) f_.strides[i] = f_.strides[i + 1] * f_.shape[i + 1];
    }
    if (f_.strides[rank - 1] != 1)
      fail("contiguous innermost dimension",
           fmt::format("the innermost stride is {} elements", f_.strides[rank - 1]),
           "TMA reads rows of consecutive elements: make the innermost stride 1 (for a transposed tensor, give the "
           "dimensions in the order they are laid out in memory)");
    for (int i = 0; i + 1 < rank; ++i) {
      const int64_t s = f_.strides[i];
      const std::string which = fmt::format("stride {} is {} elements", i, s);
      if (s < 1 || s % per_16 != 0)
        fail("strides multiples of 16 bytes",
             fmt::format("{} ({} bytes){}", which, s * e, s < 1 ? ", not positive" : ", not a multiple of 16"),
             s < 1 ? "give positive strides"
                   : fmt::format("pad the rows to a multiple of {} elements of {} and pass the padded strides in "
                                 "TmaOptions::strides (stride {} = {} instead of {})",
                                 per_16, f_.dtype.str(), i, round_up(s, per_16), s));
      if (s >= kStrideLimit / e)
        fail("strides below 2^40 bytes", fmt::format("{} ({} bytes)", which, s * e),
             "the tensor spans too much memory for one descriptor: use one descriptor per part of it");
    }
    if (f_.offset < 0)
      fail("tensor inside the buffer", fmt::format("the offset is {} elements", f_.offset),
           "give an offset of at least 0 elements from the buffer's start");
    const uintptr_t address = reinterpret_cast<uintptr_t>(buffer_) + static_cast<uintptr_t>(f_.offset * e);
    if (address % kAlign != 0)
      fail("global address 16-byte aligned",
           fmt::format("the tensor starts at {:#x} (the buffer + {} elements = {} bytes)", address, f_.offset,
                       f_.offset * e),
           fmt::format("make TmaOptions::offset a multiple of {} elements of {}", per_16, f_.dtype.str()));
    for (int i = 0; i < rank; ++i)
      if (f_.box[i] < 1 || f_.box[i] > kMaxBoxDim)
        fail("box dimensions 1 to 256", fmt::format("dimension {} of the box is {}", i, f_.box[i]),
             "give each box dimension 1 to 256 elements; a larger tile takes several copies");
    const int64_t inner_bytes = f_.box[rank - 1] * e;
    if (inner_bytes % kAlign != 0)
      fail("box inner dimension a multiple of 16 bytes",
           fmt::format("the box's inner dimension is {} elements of {} = {} bytes", f_.box[rank - 1],
                       f_.dtype.str(), inner_bytes),
           fmt::format("make it a multiple of {} elements (e.g. {})", per_16, round_up(f_.box[rank - 1], per_16)));
    if (f_.swizzle == -1) f_.swizzle = default_swizzle(inner_bytes);
    if (f_.swizzle != 0 && f_.swizzle != 32 && f_.swizzle != 64 && f_.swizzle != 128)
      fail("swizzle 0, 32, 64 or 128 bytes", fmt::format("the swizzle is {}", f_.swizzle),
           "use 0, 32, 64 or 128, or leave TmaOptions::swizzle out for the default");
    if (f_.swizzle != 0 && inner_bytes > f_.swizzle)
      fail("box inner dimension at most the swizzle span",
           fmt::format("the box's inner dimension is {} bytes ({} elements of {}) but swizzle {} spans {} bytes",
                       inner_bytes, f_.box[rank - 1], f_.dtype.str(), f_.swizzle, f_.swizzle),
           inner_bytes <= 128
               ? fmt::format("use swizzle {}, or a box of at most {} elements in the inner dimension",
                             inner_bytes <= 64 ? (inner_bytes <= 32 ? 32 : 64) : 128, f_.swizzle / e)
               : fmt::format("use swizzle 0, or a box of at most {} elements in the inner dimension with swizzle "
                             "{}",
                             f_.swizzle / e, f_.swizzle));
    // The last element the descriptor can reach must lie in the buffer (128-bit: 2^32 x 2^40 overflows).
    __int128 last = f_.offset;
    for (int i = 0; i < rank; ++i) last += static_cast<__int128>(f_.shape[i] - 1) * f_.strides[i];
    const __int128 elements = static_cast<__int128>(buffer_bytes_ / static_cast<size_t>(e));
    if (last >= elements)
      fail("tensor inside the buffer",
           fmt::format("the tensor reaches element {} of the buffer but the buffer holds {} elements",
                       static_cast<int64_t>(last), static_cast<int64_t>(elements)),
           "shrink the shape, the strides or the offset, or use a larger buffer");
  }

 private:
  [[noreturn]] void fail(std::string_view rule, const std::string& problem, const std::string& fix) {
    throw Error(fmt::format("tma: rule \"{}\" is broken: {}; {}\n{}", rule, problem, fix,
                            describe_tma_fields(f_, buffer_, buffer_bytes_, backend_)),
                loc_);
  }

  TmaFields& f_;
  void* buffer_;
  size_t buffer_bytes_;
  const Backend* backend_;
  SourceLoc loc_;
};

// Element type, rank, swizzle and box, packed: 4 + 3 + 2 + 5 x 8 bits (box dimensions 1..256 stored - 1).
uint64_t specialization_bits(const TmaFields& f) {
  uint64_t swizzle_code = f.swizzle == 0 ? 0 : f.swizzle == 32 ? 1 : f.swizzle == 64 ? 2 : 3;
  uint64_t bits = static_cast<uint64_t>(f.dtype.scalar) | uint64_t(f.shape.size()) << 4 | swizzle_code << 7;
  for (size_t i = 0; i < f.box.size(); ++i) bits |= static_cast<uint64_t>(f.box[i] - 1) << (9 + 8 * i);
  return bits;
}

}  // namespace

std::string describe_tma_fields(const TmaFields& f, const void* buffer_address, size_t buffer_bytes,
                                const Backend* backend) {
  const int64_t e = f.dtype.bytes();
  std::string strides = f.strides.empty() ? "row-major" : fmt::format("{} elements", list(f.strides));
  if (!f.strides.empty()) {
    std::vector<int64_t> bytes;
    for (int64_t s : f.strides) bytes.push_back(s * e);
    strides += fmt::format(" = {} bytes", list(bytes));
  }
  std::string box = list(f.box);
  if (!f.box.empty()) box += fmt::format(" (inner dimension {} bytes)", f.box.back() * e);
  std::string swizzle = f.swizzle == -1 ? "default" : fmt::format("{} bytes", f.swizzle);
  return fmt::format(
      "  element type  {} ({} bytes)\n"
      "  rank          {}\n"
      "  shape         {}\n"
      "  strides       {}\n"
      "  box           {}\n"
      "  swizzle       {}\n"
      "  address       {} + offset {} elements\n"
      "  buffer        {} bytes on {}",
      f.dtype.str(), e, f.shape.size(), list(f.shape), strides, box, swizzle, fmt::ptr(buffer_address), f.offset,
      buffer_bytes, backend ? backend->name() : "no device (an empty Buffer)");
}

std::string TmaDescriptor::describe() const {
  return describe_tma_fields(fields, static_cast<const char*>(address) - fields.offset * fields.dtype.bytes(),
                             buffer_bytes, backend);
}

namespace {

// Everything a descriptor is made of, the call's place included (its later errors name it).
struct DescriptorKey {
  Backend* backend;
  void* address;
  size_t bytes;
  DType dtype;
  Shape shape, box;
  TmaOptions options;
  SourceLoc loc;

  bool operator==(const DescriptorKey& o) const {
    return backend == o.backend && address == o.address && bytes == o.bytes && dtype == o.dtype && shape == o.shape &&
           box == o.box && options.strides == o.options.strides && options.swizzle == o.options.swizzle &&
           options.offset == o.options.offset && loc.line == o.loc.line && loc.column == o.loc.column &&
           loc.file == o.loc.file;  // the pointers: a kept key never reads a caller's string again
  }
};

struct DescriptorKeyHash {
  size_t operator()(const DescriptorKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(reinterpret_cast<uintptr_t>(k.backend));
    mix(reinterpret_cast<uintptr_t>(k.address));
    mix(k.bytes);
    mix(static_cast<uint64_t>(k.dtype.scalar) << 1 | k.dtype.pointer);
    for (int64_t v : k.shape) mix(uint64_t(v));
    for (int64_t v : k.box) mix(uint64_t(v) << 8);
    for (int64_t v : k.options.strides) mix(uint64_t(v) << 16);
    mix(uint64_t(int64_t(k.options.swizzle)));
    mix(uint64_t(k.options.offset));
    mix(reinterpret_cast<uintptr_t>(k.loc.file));
    mix(k.loc.line);
    mix(k.loc.column);
    return size_t(h);
  }
};

// The last kRecentDescriptors distinct descriptors made, most recent first: a caller that makes its
// descriptors at every launch (gemm() and attention_fwd() do) gets the same object back, so the rules are
// checked and the CUDA map encoded once, not at every call. A descriptor holds its tensor's address, not
// its buffer: keeping one keeps no device memory, and a buffer allocated later at the same address with the
// same size is described by the same bytes.
class RecentDescriptors {
 public:
  std::shared_ptr<const TmaDescriptor> find(const DescriptorKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void add(DescriptorKey key, std::shared_ptr<const TmaDescriptor> d) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index_.count(key)) return;  // another thread made the same one meanwhile
    order_.emplace_front(std::move(key), std::move(d));
    index_.emplace(order_.front().first, order_.begin());
    if (order_.size() > kRecentDescriptors) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  static constexpr size_t kRecentDescriptors = 256;
  using Entry = std::pair<DescriptorKey, std::shared_ptr<const TmaDescriptor>>;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<DescriptorKey, std::list<Entry>::iterator, DescriptorKeyHash> index_;
};

RecentDescriptors& recent_descriptors() {
  static RecentDescriptors* recent = new RecentDescriptors;  // never destroyed: launches may run at exit
  return *recent;
}

}  // namespace

std::shared_ptr<const TmaDescriptor> make_tma_descriptor(Backend* backend, void* buffer_address, size_t buffer_bytes,
                                                         DType dtype, Shape shape, Shape box, const TmaOptions& options,
                                                         SourceLoc loc) {
  // (The shapes move into the key: a repeated call, the common one, copies nothing.)
  DescriptorKey key{backend, buffer_address, buffer_bytes, dtype, std::move(shape), std::move(box), options, loc};
  if (auto d = recent_descriptors().find(key)) return d;
  auto d = std::make_shared<TmaDescriptor>();
  TmaFields& f = d->fields;
  f.dtype = dtype;
  f.shape = key.shape;
  f.strides = options.strides;
  f.box = key.box;
  f.swizzle = options.swizzle;
  f.offset = options.offset;
  Checker(f, buffer_address, buffer_bytes, backend, loc).check();

  d->backend = backend;
  d->address = static_cast<char*>(buffer_address) + f.offset * dtype.bytes();
  d->buffer_bytes = buffer_bytes;
  d->loc = loc;
  d->specialization_bits = specialization_bits(f);
  TensorDescData& c = d->cpu;
  c.base = d->address;
  c.rank = static_cast<int32_t>(f.shape.size());
  c.element_bytes = dtype.bytes();
  c.swizzle = f.swizzle;
  c.dtype = dtype.scalar;
  for (int i = 0; i < c.rank; ++i) {
    c.dims[i] = f.shape[i];
    c.strides[i] = f.strides[i];
    c.box[i] = static_cast<int32_t>(f.box[i]);
  }
  recent_descriptors().add(std::move(key), d);
  return d;
}

const TmaFields& tma_fields(const TmaDescriptor& d) { return d.fields; }

}  // namespace weft::detail
