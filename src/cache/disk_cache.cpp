#include "cache/disk_cache.h"

#include <fmt/format.h>
#include <llvm/ADT/ArrayRef.h>
#include <llvm/Support/SHA256.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace weft::cache {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "weft-cache-entry-1\n";

std::string hex(llvm::ArrayRef<uint8_t> bytes) {
  std::string s;
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

std::string checksum(std::string_view payload) {
  return hex(llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size())));
}

fs::path entry_path(const std::string& key) { return fs::path(directory()) / key.substr(0, 2) / (key + ".entry"); }

}  // namespace

KeyBuilder& KeyBuilder::add(std::string_view field) {
  data_ += std::to_string(field.size());
  data_ += ':';
  data_ += field;
  return *this;
}

KeyBuilder& KeyBuilder::add(int64_t value) { return add(std::to_string(value)); }

std::string KeyBuilder::finish() const { return checksum(data_); }

bool enabled() {
  const char* v = std::getenv("WEFT_CACHE");
  return !(v && std::string_view(v) == "0");
}

std::string directory() {
  if (const char* d = std::getenv("WEFT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "weft").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "weft").string();
  return (fs::temp_directory_path() / "weft-cache").string();
}

std::optional<std::string> load(const std::string& key) {
  if (!enabled()) return std::nullopt;
  fs::path path = entry_path(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  // Layout: magic, "<payload bytes> <sha256>\n", payload.
  bool ok = text.compare(0, kMagic.size(), kMagic) == 0;
  size_t header_end = ok ? text.find('\n', kMagic.size()) : std::string::npos;
  if (header_end != std::string::npos) {
    std::string header = text.substr(kMagic.size(), header_end - kMagic.size());
    size_t space = header.find(' ');
    std::string_view payload = std::string_view(text).substr(header_end + 1);
    if (space != std::string::npos && header.substr(0, space) == std::to_string(payload.size()) &&
        header.substr(space + 1) == checksum(payload))
      return std::string(payload);
  }
  std::error_code ignored;
  fs::remove(path, ignored);  // corrupt or truncated: rebuild
  return std::nullopt;
}

void store(const std::string& key, std::string_view payload) {
  if (!enabled()) return;
  static std::atomic<uint64_t> counter{0};
  fs::path path = entry_path(key);
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  if (error) return;
  fs::path temp = path;
  temp += fmt::format(".tmp.{}.{}.{}", ::getpid(), std::hash<std::thread::id>{}(std::this_thread::get_id()), counter++);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out << kMagic << payload.size() << ' ' << checksum(payload) << '\n';
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.flush();
    if (!out) {
      fs::remove(temp, error);
      return;
    }
  }
  fs::rename(temp, path, error);  // atomic replace
  if (error) fs::remove(temp, error);
}

}  // namespace weft::cache
