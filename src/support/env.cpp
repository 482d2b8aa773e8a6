#include "support/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "weft/error.h"

namespace weft::support {

static std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

const Knobs& knobs() {
  static const Knobs k = [] {
    Knobs k;
    k.dump = env_or("WEFT_DUMP", "");
    k.dump_dir = env_or("WEFT_DUMP_DIR", "");
    k.backend = env_or("WEFT_BACKEND", "");
    k.target = env_or("WEFT_TARGET", "");
    k.cpu_threads = std::atoi(env_or("WEFT_CPU_THREADS", "0").c_str());
    k.cuda_device = std::atoi(env_or("WEFT_CUDA_DEVICE", "0").c_str());
    k.debug = env_or("WEFT_DEBUG", "0") != "0";
    k.debug_timeout_ms = std::atoll(env_or("WEFT_DEBUG_TIMEOUT_MS", "5000").c_str());
    if (k.debug_timeout_ms <= 0) k.debug_timeout_ms = 5000;
    k.check_ptx = env_or("WEFT_CHECK_PTX", "");
    return k;
  }();
  return k;
}

std::optional<uint64_t> cpu_sched_seed() {
  const char* v = std::getenv("WEFT_CPU_SCHED_SEED");
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  uint64_t seed = std::strtoull(v, &end, 0);
  if (*end != '\0' || errno != 0 || *v == '-')
    throw Error(fmt::format("WEFT_CPU_SCHED_SEED={} is not a seed; give a non-negative integer", v));
  return seed;
}

bool Knobs::dumps(std::string_view stage) const {
  std::string_view rest = dump;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    if (rest.substr(0, comma) == stage || rest.substr(0, comma) == "all") return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void dump(std::string_view stage, std::string_view kernel, std::string_view ext, std::string_view text) {
  const Knobs& k = knobs();
  if (!k.dumps(stage)) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (k.dump_dir.empty()) {
    fmt::print(stderr, "// ---- weft dump: {} of kernel '{}' ----\n{}\n", stage, kernel, text);
    return;
  }
  std::filesystem::create_directories(k.dump_dir);
  std::filesystem::path path = std::filesystem::path(k.dump_dir) / fmt::format("{}.{}", kernel, ext);
  std::ofstream(path) << text;
}

}  // namespace weft::support
