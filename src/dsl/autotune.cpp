// The non-template half of weft::Autotuner (include/weft/autotune.h): its knob and its entries in the
// compile cache.
#include "weft/autotune.h"

#include <fmt/format.h>

#include <cstdlib>

#include "cache/disk_cache.h"
#include "driver/cuda/cuda_driver.h"
#include "support/build_id.h"

namespace weft::detail {

AutotuneMode autotune_mode(SourceLoc loc) {
  const char* v = std::getenv("WEFT_AUTOTUNE");
  std::string value = v ? v : "";
  if (value.empty() || value == "1") return AutotuneMode::tune;
  if (value == "0") return AutotuneMode::off;
  if (value == "force") return AutotuneMode::force;
  throw Error(fmt::format("WEFT_AUTOTUNE={} is not a setting; use 0 (the default configurations, no tuning), 1 (tune "
                          "once, remember the winner: the default) or force (tune again)",
                          value),
              loc);
}

std::string autotune_key(const std::string& family, const std::string& problem, const Device& device,
                         const std::vector<std::string>& candidate_names) {
  cache::KeyBuilder key;
  key.add("autotune 2").add(family).add(problem).add(device.name()).add(support::weft_identity());
  // The driver compiles the PTX to machine code: another driver may make another candidate the fastest.
  key.add(static_cast<int64_t>(device.kind() == BackendKind::cuda ? driver::cuda::cuda_driver().version : 0));
  key.add(static_cast<int64_t>(candidate_names.size()));
  for (const std::string& name : candidate_names) key.add(name);
  return key.finish();
}

std::optional<std::string> autotune_cached(const std::string& key) {
  std::optional<std::string> entry = cache::load(key);
  if (!entry || !entry->starts_with("winner ")) return std::nullopt;
  return entry->substr(7);
}

void autotune_store(const std::string& key, const std::string& winner) { cache::store(key, "winner " + winner); }

}  // namespace weft::detail
