// Where the compile cache lives, and whether it is safe to use.
//
// The cache holds code weft loads and runs (CPU objects, cubins), so a directory another local user can
// write would let that user run code as the victim. Every directory from the cache root down (the root and
// its two-hex-digit shards) must be owned by the effective user and writable by nobody else; weft creates
// them 0700. A directory that fails the check turns the cache off for the process with one warning on
// stderr: kernels are still compiled and run, just not cached. There is no shared fallback: without
// WEFT_CACHE_DIR, XDG_CACHE_HOME or HOME (each an absolute path) the cache is off, with one warning.
//
// Everything below the root is reached through directory descriptors (openat & co.), so a directory
// swapped for a symlink after it was checked is not followed.
#pragma once

#include <cstdint>
#include <string>

namespace weft::cache {

// The cache root the environment selects: $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else
// $HOME/.cache/weft ("" when none of them is set to an absolute path: the cache is then off).
std::string directory();

// Why a directory of this owner and mode (st_uid, st_mode) must not hold the cache of user `me`, or ""
// when it may: it must be a directory, owned by `me`, without write permission for group or others.
std::string unsafe_directory_reason(uint32_t owner, uint32_t mode, uint32_t me);

// An open file descriptor, closed with the object; fd < 0 when there is none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The shard directory that holds the entry of `key` (the key's first two hex digits), opened after the
// root and the shard passed the checks above; created 0700 (with the root) when `create` is set and they
// are missing. Invalid (and, for an unsafe directory, one warning per directory and process) otherwise.
UniqueFd open_shard(const std::string& key, bool create);

// Prints "weft: warning: <message>" once per process for each distinct `message`.
void warn_once(const std::string& message);

}  // namespace weft::cache
