// The compile cache: content-addressed entries on disk.
//
// Key: a SHA-256 over length-prefixed fields (everything that changes the generated code: the printed IR,
// compile options, target, and the versions of weft, LLVM and the driver). Entries live in
// $WEFT_CACHE_DIR, else $XDG_CACHE_HOME/weft, else ~/.cache/weft; WEFT_CACHE=0 turns the cache off.
// An entry is written to a temporary file and renamed into place, so readers never see half an entry, and
// carries a checksum of its payload, so a corrupt or truncated entry is detected, removed and rebuilt.
// Several threads or processes may compile and store the same key at once: the last rename wins and every
// version is complete.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weft::cache {

class KeyBuilder {
 public:
  KeyBuilder& add(std::string_view field);  // length-prefixed, so fields never run together
  KeyBuilder& add(int64_t value);
  std::string finish() const;  // 64 hex digits

 private:
  std::string data_;
};

bool enabled();
std::string directory();

// The payload stored under `key`, or nothing (absent, unreadable or corrupt; a corrupt entry is removed).
std::optional<std::string> load(const std::string& key);
// Stores `payload` under `key`; failures (read-only disk …) are ignored: the cache is an optimization.
void store(const std::string& key, std::string_view payload);

}  // namespace weft::cache
