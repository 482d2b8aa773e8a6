#include "support/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    k.check_bounds = env_or("WEFT_CHECK_BOUNDS", k.debug ? "1" : "0") != "0";
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
  write_dump_file(k.dump_dir, fmt::format("{}.{}", kernel, ext), text);
}

void write_dump_file(const std::string& dir, const std::string& file_name, std::string_view text) {
  namespace fs = std::filesystem;
  const std::string fix = "set WEFT_DUMP_DIR to a directory you can write, or unset it to print dumps to stderr";
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);  // follows symlinks: a link to a directory is fine
  if (fs::exists(st) && !fs::is_directory(st))
    throw Error(fmt::format("WEFT_DUMP_DIR={} is not a directory (it is an existing {}); {}", dir,
                            fs::is_regular_file(st) ? "file" : "non-directory entry", fix));
  if (!fs::exists(st) && !fs::create_directories(dir, ec) && ec)
    throw Error(fmt::format("WEFT_DUMP_DIR={}: cannot create the directory: {}; {}", dir, ec.message(), fix));
  const fs::path path = fs::path(dir) / file_name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int error = errno;
    throw Error(fmt::format("WEFT_DUMP_DIR={}: cannot open {} for writing: {}; {}", dir, path.string(),
                            error ? std::strerror(error) : "unknown error", fix));
  }
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out)
    throw Error(fmt::format("WEFT_DUMP_DIR={}: writing {} failed (is the disk full?); {}", dir, path.string(), fix));
}

}  // namespace weft::support
