// The compile cache: content-addressed entries on disk.
//
// Key: a SHA-256 over length-prefixed fields (everything that changes the generated code: the printed IR,
// compile options, target, and the versions of weft, LLVM and the driver). Entries live under the directory
// cache_dir.h describes ($WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else ~/.cache/weft, each directory
// private to the user or the cache is off); WEFT_CACHE=0 turns the cache off.
//
// An entry is written to a fresh temporary file (O_EXCL | O_NOFOLLOW, mode 0600) and renamed into place, so
// readers never see half an entry and a file planted at the temporary name is never written through. An
// entry records its full key and the build of weft that wrote it, and a checksum of its payload: an entry
// copied or linked under another key, one from another build, and a corrupt or truncated one are misses
// (and removed, so they are rebuilt). Entries are opened with O_NOFOLLOW | O_NONBLOCK and read only when
// they are regular files of the user, not writable by others, of at most kMaxEntryBytes: a symlink, a
// FIFO or a device at an entry's path is a miss, never a hang or an endless read.
// Several threads or processes may compile and store the same key at once: the last rename wins and every
// version is complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cache/cache_dir.h"

namespace weft::cache {

// The largest payload stored or loaded; larger ones are not cached.
constexpr size_t kMaxEntryBytes = size_t(64) << 20;

class KeyBuilder {
 public:
  KeyBuilder& add(std::string_view field);  // length-prefixed, so fields never run together
  KeyBuilder& add(int64_t value);
  std::string finish() const;  // 64 hex digits

 private:
  std::string data_;
};

// WEFT_CACHE: unset, empty or 1 is on, 0 is off; anything else is a weft::Error. Read at each call.
bool enabled();

// The payload stored under `key`, or nothing (absent, unreadable, unsafe or corrupt; a bad entry is removed).
std::optional<std::string> load(const std::string& key);
// Stores `payload` under `key`; failures (read-only disk …) are ignored: the cache is an optimization.
void store(const std::string& key, std::string_view payload);

// The name (inside the key's shard directory) of the temporary file the store() numbered `sequence`
// writes, and the number the next store() of this process takes: tests plant files there.
std::string temp_file_name(const std::string& key, uint64_t sequence);
uint64_t next_temp_sequence();
// The name of the entry of `key` inside its shard directory.
std::string entry_file_name(const std::string& key);

}  // namespace weft::cache
