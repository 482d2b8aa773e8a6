// The CPU backend's side of bounds checks (codegen/cpu/cpu_abi.h, LaunchChecks): the allocation each
// pointer argument lies in, and the report of the first access outside it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cpu/cpu_abi.h"

namespace weft::driver::cpu {

// The CPU backend's allocations and the host memory Device::wrap lent it, by address: a launch finds the
// allocation each pointer argument lies in (a Buffer's, or one a raw pointer points into).
class AllocationRegistry {
 public:
  void add(const void* address, size_t bytes);
  void remove(const void* address);  // one add() of that address
  // [first byte, one past the last] of the allocation holding `address`; {0, UINT64_MAX} when none does
  // (a raw pointer to memory weft never saw: its accesses cannot be checked).
  std::pair<uint64_t, uint64_t> extent_of(uint64_t address) const;

 private:
  struct Entry {
    uint64_t end = 0;
    int registrations = 0;  // Device::wrap may lend the same memory twice
  };
  mutable std::mutex mutex_;
  std::map<uint64_t, Entry> by_start_;
};

// The checks of one launch: its arguments' extents, and the first violation any program instance found.
class LaunchBounds {
 public:
  LaunchBounds(const std::string& kernel, const std::vector<codegen::cpu::AccessSite>& sites, const uint64_t* args,
               size_t count, const AllocationRegistry& registry);
  const codegen::cpu::LaunchChecks* checks() const { return &checks_; }
  bool failed() const;
  [[noreturn]] void throw_report() const;

  // Called by the generated code through the runtime function (a program instance's thread or fiber).
  void record(const codegen::cpu::ProgramCtx* ctx, int32_t site, int64_t element, uint64_t address);
  const std::string& message() const { return message_; }
  SourceLoc loc() const { return loc_; }

 private:
  std::string kernel_;
  const std::vector<codegen::cpu::AccessSite>& sites_;
  std::vector<uint64_t> extents_;
  codegen::cpu::LaunchChecks checks_;
  mutable std::mutex mutex_;
  bool failed_ = false;
  std::string message_;
  SourceLoc loc_;
};

// The function generated code calls on a violation (cpu_abi.h, kOutOfBoundsFn).
void out_of_bounds(const codegen::cpu::ProgramCtx* ctx, int32_t site, int64_t element, uint64_t address) noexcept;

}  // namespace weft::driver::cpu
