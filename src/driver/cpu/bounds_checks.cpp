#include "driver/cpu/bounds_checks.h"

#include <fmt/format.h>

#include "driver/cpu/block_runtime.h"

namespace weft::driver::cpu {

using codegen::cpu::AccessSite;
using codegen::cpu::ProgramCtx;

void AllocationRegistry::add(const void* address, size_t bytes) {
  if (!address || !bytes) return;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t start = reinterpret_cast<uint64_t>(address);
  Entry& e = by_start_[start];
  e.end = std::max(e.end, start + bytes);
  ++e.registrations;
}

void AllocationRegistry::remove(const void* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_start_.find(reinterpret_cast<uint64_t>(address));
  if (it != by_start_.end() && --it->second.registrations <= 0) by_start_.erase(it);
}

std::pair<uint64_t, uint64_t> AllocationRegistry::extent_of(uint64_t address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_start_.upper_bound(address);
  if (it != by_start_.begin()) {
    --it;
    if (address < it->second.end) return {it->first, it->second.end};
  }
  return {0, UINT64_MAX};
}

LaunchBounds::LaunchBounds(const std::string& kernel, const std::vector<AccessSite>& sites, const uint64_t* args,
                           size_t count, const AllocationRegistry& registry)
    : kernel_(kernel), sites_(sites), extents_(2 * count, 0) {
  std::vector<bool> pointer(count, false);
  for (const AccessSite& s : sites)
    for (int32_t slot : s.slots) pointer.at(static_cast<size_t>(slot)) = true;
  for (size_t i = 0; i < count; ++i) {
    if (!pointer[i]) continue;
    auto [first, end] = registry.extent_of(args[i]);
    extents_[2 * i] = first;
    extents_[2 * i + 1] = end;
  }
  checks_.extents = extents_.data();
  checks_.report = this;
}

bool LaunchBounds::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void LaunchBounds::throw_report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  throw Error(message_, loc_);
}

void LaunchBounds::record(const ProgramCtx* ctx, int32_t site_index, int64_t element, uint64_t address) {
  const AccessSite& site = sites_.at(static_cast<size_t>(site_index));
  const uint64_t bytes = static_cast<uint64_t>(site.element_bytes);
  // Where the address lies relative to the allocation(s) it may come from.
  std::string relation, slots;
  for (int32_t s : site.slots) slots += fmt::format("{}{}", slots.empty() ? "" : ", ", s);
  if (site.slots.size() == 1) {
    uint64_t first = extents_[2 * site.slots[0]], end = extents_[2 * site.slots[0] + 1];
    std::string allocation = fmt::format("the {}-byte allocation at {:#x} that its pointers come from (argument slot "
                                         "{})",
                                         end - first, first, slots);
    relation = address < first ? fmt::format("{} bytes before the start of {}", first - address, allocation)
                               : fmt::format("at byte offset {} of {}, past its end", address - first, allocation);
  } else {
    relation = fmt::format("outside every allocation its pointers may come from (argument slots {})", slots);
  }
  const bool writes = site.op == "store" || site.op == "async_store_bulk";
  std::string message = fmt::format(
      "out-of-bounds {} in kernel '{}', block ({}, {}, {}): element {} of the {} ({} elements of {}) {} {} bytes at "
      "{:#x}, {}; nothing was {}. Mask the {} (its mask argument) or correct the offsets",
      site.op, kernel_, ctx->program_id[0], ctx->program_id[1], ctx->program_id[2], element, site.op,
      site.elements, site.element, writes ? "writes" : "reads", bytes, address, relation,
      writes ? "written" : "read", site.op);
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) return;  // the first violation is the report
  failed_ = true;
  message_ = std::move(message);
  loc_ = site.loc;
}

void out_of_bounds(const ProgramCtx* ctx, int32_t site, int64_t element, uint64_t address) noexcept {
  auto* bounds = static_cast<LaunchBounds*>(ctx->checks->report);
  try {
    bounds->record(ctx, site, element, address);
  } catch (...) {  // (formatting failed: out of memory) the generated code still returns at once
  }
  // In a block of fibers: abandon it as the block runtime's own errors do (this never returns).
  if (ctx->block) abandon_block(ctx, bounds->message(), bounds->loc());
}

}  // namespace weft::driver::cpu
