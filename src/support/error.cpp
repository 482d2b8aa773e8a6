#include "weft/error.h"

#include <string>

namespace weft {

std::string SourceLoc::str() const {
  if (!known()) return "<unknown>";
  return std::string(file) + ":" + std::to_string(line);
}

static std::string with_location(const std::string& message, const SourceLoc& where) {
  if (!where.known()) return "weft::Error: " + message;
  return where.str() + ": weft::Error: " + message;
}

Error::Error(const std::string& message, SourceLoc where)
    : std::runtime_error(with_location(message, where)), where_(where) {}

}  // namespace weft
