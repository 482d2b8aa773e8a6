// Pass: where each shared-memory buffer and mbarrier array of a kernel lives in the block's shared memory.
//
// Allocations (local_alloc, alloc_barriers) sit at the top of the kernel body and live for the whole
// block; each gets its own range, in program order: buffers aligned to 1024 bytes (what 128-byte
// swizzled TMA and wgmma operands need), mbarriers to 8. The total must fit the per-block limit (227 KB
// on sm_90); when it does not, the error lists every allocation with its size.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/node.h"

namespace weft::passes {

struct SharedAllocation {
  const ir::Node* node = nullptr;  // LocalAlloc or AllocBarriers
  std::string name;
  int64_t offset = 0;       // bytes from the start of the block's shared memory
  int64_t bytes = 0;
  int64_t stage_bytes = 0;  // the distance between stages: a swizzled stage starts 1024-byte aligned
  int swizzle = 0;          // bytes (passes/shared_layouts.h)
  int64_t panel = 0;        // columns per panel (passes/shared_layouts.h); 0: plain row-major stages
};

struct SharedMemoryPlan {
  std::vector<SharedAllocation> allocations;  // program order
  std::unordered_map<const ir::Node*, size_t> index;
  int64_t bytes = 0;  // total, including alignment padding

  const SharedAllocation& of(const ir::Node* n) const { return allocations.at(index.at(n)); }
  // "  'a_s' bf16[4x128x64]: 65536 bytes at 0" for each allocation, one per line.
  std::string table() const;
};

constexpr int64_t kMaxSharedBytesPerBlock = 227 * 1024;
constexpr int64_t kMbarrierBytes = 8;

// Throws weft::Error when the allocations exceed `limit` bytes. Assigns the buffers' layouts first
// (passes/shared_layouts.h).
SharedMemoryPlan plan_shared_memory(const ir::Function& f, int64_t limit = kMaxSharedBytesPerBlock);

}  // namespace weft::passes
