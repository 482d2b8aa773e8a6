#include "support/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "weft/error.h"

namespace weft::support {

const char* const kDumpStages[5] = {"ir", "llvm", "llvm-opt", "ptx", "sass"};

namespace {

// A whole decimal number in [lo, hi], or a weft::Error saying what `name` takes (`takes`).
int64_t parse_number(const char* name, const std::string& value, int64_t lo, int64_t hi, const char* takes) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw Error(fmt::format("{}={} is not {}", name, value, takes));
  return v;
}

// Each comma-separated stage of WEFT_DUMP must be one weft dumps ("all" for every one).
void check_dump_stages(const std::string& dump) {
  std::string_view rest = dump;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view stage = rest.substr(0, comma);
    bool known = stage.empty() || stage == "all";
    for (const char* s : kDumpStages) known = known || stage == s;
    if (!known)
      throw Error(fmt::format("WEFT_DUMP={}: '{}' is not a dump stage; use a comma-separated list of ir, llvm, "
                              "llvm-opt, ptx, sass, or all",
                              dump, stage));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

// A 0/1 knob: `fallback` when unset, an Error saying `advice` for anything else.
bool parse_flag(const char* name, const std::string& value, bool fallback, const char* advice) {
  if (value.empty()) return fallback;
  if (value != "0" && value != "1") throw Error(fmt::format("{}={} is not a setting; {}", name, value, advice));
  return value == "1";
}

}  // namespace

Knobs parse_knobs(const std::function<const char*(const char*)>& lookup) {
  auto get = [&](const char* name) -> std::string {
    const char* v = lookup(name);
    return v ? v : "";
  };
  Knobs k;
  k.dump = get("WEFT_DUMP");
  check_dump_stages(k.dump);
  k.dump_dir = get("WEFT_DUMP_DIR");
  k.backend = get("WEFT_BACKEND");
  if (!k.backend.empty() && k.backend != "cpu" && k.backend != "cuda" && k.backend != "hip")
    throw Error(fmt::format("WEFT_BACKEND={} is not a backend; use cpu, cuda or hip, or unset it for the best one "
                            "available",
                            k.backend));
  k.target = get("WEFT_TARGET");
  if (std::string v = get("WEFT_CPU_THREADS"); !v.empty())
    k.cpu_threads = static_cast<int>(parse_number("WEFT_CPU_THREADS", v, 0, 65536,
                                                  "a thread count; give a whole number from 1 to 65536, or 0 (or "
                                                  "unset it) for one thread per core"));
  if (std::string v = get("WEFT_CUDA_DEVICE"); !v.empty())
    k.cuda_device = static_cast<int>(parse_number("WEFT_CUDA_DEVICE", v, 0, 1023,
                                                  "a device ordinal; give a whole number from 0 (the first GPU)"));
  k.debug = parse_flag("WEFT_DEBUG", get("WEFT_DEBUG"), false, "use WEFT_DEBUG=1 for GPU debug mode, 0 (or unset it) for none");
  k.check_bounds = parse_flag("WEFT_CHECK_BOUNDS", get("WEFT_CHECK_BOUNDS"), k.debug,
                              "use 1 to check every CPU load and store against its allocation, 0 for no checks (unset: "
                              "as WEFT_DEBUG)");
  if (std::string v = get("WEFT_DEBUG_TIMEOUT_MS"); !v.empty())
    k.debug_timeout_ms = parse_number("WEFT_DEBUG_TIMEOUT_MS", v, 1, int64_t(1) << 40,
                                      "a timeout; give a whole number of milliseconds, at least 1 (default 5000)");
  k.check_ptx = get("WEFT_CHECK_PTX");
  k.time_passes = parse_flag("WEFT_TIME_PASSES", get("WEFT_TIME_PASSES"), false,
                             "use WEFT_TIME_PASSES=1 to print each kernel's compile time by stage, 0 (or unset it) for "
                             "none");
  k.verify_llvm = parse_flag("WEFT_VERIFY_LLVM", get("WEFT_VERIFY_LLVM"), kVerifyLlvmByDefault,
                             "use WEFT_VERIFY_LLVM=1 to check each lowered LLVM module, 0 for no check (unset: on in "
                             "debug builds of weft, off in release builds)");
  k.nvptx_passes = get("WEFT_NVPTX_PASSES");
  k.llvm_args = get("WEFT_LLVM_ARGS");
  if (std::string v = get("WEFT_NVPTX_SKIP"); !v.empty()) k.nvptx_skip = v == "none" ? "" : v;
  if (std::string v = get("WEFT_PTX_EMITTER"); !v.empty()) {
    if (v != "llvm" && v != "weft")
      throw Error("WEFT_PTX_EMITTER=" + v + " is not an emitter; use WEFT_PTX_EMITTER=weft for weft's own PTX "
                  "emitter (the default) or llvm for LLVM's NVPTX code generator");
    k.weft_ptx_emitter = v == "weft";
  }
  return k;
}

int host_cores() {
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

const Knobs& knobs() {
  // A function-local static whose initializer throws is initialized again at the next call: a bad knob
  // is an Error every time, not just the first.
  static const Knobs k = parse_knobs([](const char* name) { return std::getenv(name); });
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
