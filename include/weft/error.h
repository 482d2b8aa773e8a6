// weft — errors and source locations.
//
// Every DSL call records where in the user's C++ it was made (`SourceLoc`), so that a verifier or
// runtime complaint names the user's own file and line. We use the compiler builtins rather than
// std::source_location because clang 14 with libstdc++ 12 lacks the latter; the information is the same.
#pragma once

#include <stdexcept>
#include <string>

namespace weft {

struct SourceLoc {
  const char* file = "";
  const char* function = "";
  unsigned line = 0;
  unsigned column = 0;

  static constexpr SourceLoc current(const char* file = __builtin_FILE(),
                                     const char* function = __builtin_FUNCTION(),
                                     unsigned line = __builtin_LINE(),
#if defined(__clang__)
                                     unsigned column = __builtin_COLUMN()) noexcept {
#else
                                     unsigned column = 0) noexcept {  // g++ 12 has no __builtin_COLUMN
#endif
    return SourceLoc{file, function, line, column};
  }
  bool known() const { return line != 0; }
  // "dir/file.cpp:42", or "<unknown>" when nothing was recorded.
  std::string str() const;
};

// A mistake in the user's kernel or in how it is launched: the message says what is wrong and what to
// change; `where()` is the user's line it concerns.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, SourceLoc where = {});
  const SourceLoc& where() const { return where_; }

 private:
  SourceLoc where_;
};

// A fault of weft itself. The message names the failing step and, where one was written, a reproducer file.
class InternalError : public std::runtime_error {
 public:
  explicit InternalError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace weft
