#include "cache/disk_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <llvm/ADT/ArrayRef.h>
#include <llvm/Support/SHA256.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "support/build_id.h"
#include "weft/error.h"

namespace weft::cache {
namespace {

// Layout: the magic line, "key <key>", "build <weft identity>", "payload <bytes> <sha256>", the payload.
constexpr std::string_view kMagic = "weft-cache-entry-2\n";

std::string hex(llvm::ArrayRef<uint8_t> bytes) {
  std::string s;
  for (uint8_t b : bytes) s += fmt::format("{:02x}", b);
  return s;
}

std::string checksum(std::string_view payload) {
  return hex(llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size())));
}

std::string header(const std::string& key, std::string_view payload) {
  return fmt::format("{}key {}\nbuild {}\npayload {} {}\n", kMagic, key, support::weft_identity(), payload.size(),
                     checksum(payload));
}

// The payload of `text` if it is a whole entry of `key` written by this build of weft.
std::optional<std::string> parse_entry(const std::string& key, const std::string& text) {
  size_t at = 0;
  auto line = [&](std::string_view prefix) -> std::optional<std::string_view> {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) return std::nullopt;
    std::string_view l = std::string_view(text).substr(at, end - at);
    at = end + 1;
    if (!l.starts_with(prefix)) return std::nullopt;
    return l.substr(prefix.size());
  };
  auto magic = line(kMagic.substr(0, kMagic.size() - 1));
  if (!magic || !magic->empty()) return std::nullopt;
  auto stored_key = line("key ");
  if (!stored_key || *stored_key != key) return std::nullopt;  // copied or linked from another key
  auto build = line("build ");
  if (!build || *build != support::weft_identity()) return std::nullopt;
  auto sizes = line("payload ");
  if (!sizes) return std::nullopt;
  std::string_view payload = std::string_view(text).substr(at);
  if (*sizes != fmt::format("{} {}", payload.size(), checksum(payload))) return std::nullopt;
  return std::string(payload);
}

// Reads the regular file `fd` of `size` bytes; nothing if it is not exactly that long.
std::optional<std::string> read_exactly(int fd, size_t size) {
  std::string text(size + 1, '\0');  // one byte more: a file that grew is not an entry
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got != size) return std::nullopt;
  text.resize(size);
  return text;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::atomic<uint64_t> temp_sequence{0};

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
  if (!v || !*v || std::string_view(v) == "1") return true;
  if (std::string_view(v) == "0") return false;
  throw Error(fmt::format("WEFT_CACHE={} is not a setting; use WEFT_CACHE=0 to turn the compile cache off, or "
                          "unset it (or 1) to keep it on",
                          v));
}

std::string entry_file_name(const std::string& key) { return key + ".entry"; }

std::string temp_file_name(const std::string& key, uint64_t sequence) {
  return fmt::format("{}.tmp.{}.{}", key, ::getpid(), sequence);
}

uint64_t next_temp_sequence() { return temp_sequence.load(); }

std::optional<std::string> load(const std::string& key) {
  if (!enabled() || key.size() < 2) return std::nullopt;
  UniqueFd shard = open_shard(key, /*create=*/false);
  if (!shard) return std::nullopt;
  const std::string name = entry_file_name(key);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  int fd = ::openat(shard.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) ::unlinkat(shard.get(), name.c_str(), 0);  // a symlink: never ours, never followed
    return std::nullopt;
  }
  UniqueFd file(fd);  // closes it
  struct stat st;
  if (::fstat(fd, &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode)) return std::nullopt;  // left alone: store() cannot replace it either
  std::optional<std::string> payload;
  const bool trusted = S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH));
  const uint64_t limit = kMaxEntryBytes + 4096;  // payload and header
  if (trusted && static_cast<uint64_t>(st.st_size) <= limit)
    if (std::optional<std::string> text = read_exactly(fd, static_cast<size_t>(st.st_size)))
      payload = parse_entry(key, *text);
  if (!payload) ::unlinkat(shard.get(), name.c_str(), 0);  // unusable: removed, so the next compile rebuilds it
  return payload;
}

void store(const std::string& key, std::string_view payload) {
  if (!enabled() || key.size() < 2 || payload.size() > kMaxEntryBytes) return;
  UniqueFd shard = open_shard(key, /*create=*/true);
  if (!shard) return;
  // O_EXCL | O_NOFOLLOW: a file or symlink already at the name is never opened; take the next name.
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    temp = temp_file_name(key, temp_sequence++);
    fd = ::openat(shard.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return;
  }
  if (fd < 0) return;
  bool ok = write_all(fd, header(key, payload)) && write_all(fd, payload);
  ok = ::close(fd) == 0 && ok;
  // renameat replaces whatever is at the entry's name (a file, a symlink, a FIFO) without following it.
  if (!ok || ::renameat(shard.get(), temp.c_str(), shard.get(), entry_file_name(key).c_str()) != 0)
    ::unlinkat(shard.get(), temp.c_str(), 0);
}

}  // namespace weft::cache
