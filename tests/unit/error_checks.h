// Helpers of the tests of weft::Error messages: an error must be a weft::Error that names the user's own
// line (the DSL call or launch that is wrong) and says what is wrong.
#pragma once

#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <functional>
#include <string>
#include <vector>

namespace weft_test {

// Runs `fn`, which must throw a weft::Error located at `file:line` whose message contains `phrase`. `line`
// is read afterwards: a kernel body records it while `fn` traces the kernel.
inline void require_weft_error(const std::function<void()>& fn, const char* file, const int& line,
                               const std::string& phrase) {
  try {
    fn();
  } catch (const weft::Error& e) {
    const std::string message = e.what(), where = std::string(file) + ":" + std::to_string(line);
    INFO("message: " << message);
    REQUIRE(line > 0);
    CHECK(message.find(where) != std::string::npos);
    CHECK(message.find(phrase) != std::string::npos);
    CHECK(e.where().line == static_cast<unsigned>(line));
    return;
  }
  FAIL("expected a weft::Error at line " << line << " mentioning \"" << phrase << "\", but nothing was thrown");
}

// Runs `fn`, which must throw a weft::Error whose message contains every one of `phrases`; returns the
// message.
inline std::string require_error(const std::function<void()>& fn, const std::vector<std::string>& phrases) {
  try {
    fn();
  } catch (const weft::Error& e) {
    std::string message = e.what();
    INFO("message:\n" << message);
    for (const std::string& p : phrases) CHECK(message.find(p) != std::string::npos);
    return message;
  }
  FAIL("expected a weft::Error, but nothing was thrown");
  return {};
}

}  // namespace weft_test

// Evaluates `expr`, which must throw a weft::Error at this file's `line` whose message contains `phrase`.
// Keep each use on one line: within a macro's arguments clang reports the line where the invocation ends.
#define REQUIRE_WEFT_ERROR(expr, line, phrase) \
  ::weft_test::require_weft_error([&] { (void)(expr); }, __FILE__, (line), (phrase))
