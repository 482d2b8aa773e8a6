// Identity of the weft library that is running: the linker's build ID of libweft (a hash of the binary,
// so any change to weft's code changes it). Part of every compile-cache key, so that a rebuilt weft never
// picks up code an older build compiled.
#pragma once

#include <string>

namespace weft::support {

// "weft 0.1.0 build <hex build id>" (the build id is "unknown" when the binary has none).
const std::string& weft_identity();

}  // namespace weft::support
