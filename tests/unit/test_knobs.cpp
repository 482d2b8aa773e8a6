// Environment knobs (src/support/env.h): a value weft does not understand is a weft::Error that names the
// variable and says what it takes, never silently ignored or half-used.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "codegen/nvptx/compile_ptx.h"
#include "support/env.h"
#include "weft/error.h"
#include "weft/weft.h"

using namespace weft;

namespace {

support::Knobs parse(std::map<std::string, std::string> env) {
  return support::parse_knobs([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("knobs: well-formed values are taken", "[knobs]") {
  support::Knobs k = parse({{"WEFT_DUMP", "ir,llvm-opt"}, {"WEFT_CPU_THREADS", "3"}, {"WEFT_CUDA_DEVICE", "1"},
                            {"WEFT_DEBUG", "1"}, {"WEFT_DEBUG_TIMEOUT_MS", "250"}});
  CHECK(k.dumps("ir"));
  CHECK(k.dumps("llvm-opt"));
  CHECK_FALSE(k.dumps("llvm"));
  CHECK(k.cpu_threads == 3);
  CHECK(k.cuda_device == 1);
  CHECK(k.debug);
  CHECK(k.debug_timeout_ms == 250);
  support::Knobs defaults = parse({});
  CHECK(defaults.cpu_threads == 0);
  CHECK_FALSE(defaults.debug);
  CHECK(defaults.debug_timeout_ms == 5000);
  CHECK(parse({{"WEFT_DUMP", "all"}}).dumps("sass"));
}

TEST_CASE("knobs: an unknown dump stage is an Error listing the stages", "[knobs]") {
  CHECK_THROWS_WITH(parse({{"WEFT_DUMP", "bogus"}}),
                    Catch::Contains("WEFT_DUMP=bogus: 'bogus' is not a dump stage; use a comma-separated list of ir, "
                                    "llvm, llvm-opt, ptx, sass, or all"));
  CHECK_THROWS_WITH(parse({{"WEFT_DUMP", "ir,pttx"}}), Catch::Contains("'pttx' is not a dump stage"));
}

TEST_CASE("knobs: numbers that are not numbers, or out of range, and unknown words are Errors", "[knobs]") {
  CHECK_THROWS_WITH(parse({{"WEFT_CPU_THREADS", "abc"}}),
                    Catch::Contains("WEFT_CPU_THREADS=abc is not a thread count; give a whole number from 1 to 65536"));
  CHECK_THROWS_WITH(parse({{"WEFT_CPU_THREADS", "4x"}}), Catch::Contains("WEFT_CPU_THREADS=4x is not a thread count"));
  CHECK_THROWS_WITH(parse({{"WEFT_CPU_THREADS", "-2"}}), Catch::Contains("WEFT_CPU_THREADS=-2 is not"));
  CHECK_THROWS_WITH(parse({{"WEFT_CUDA_DEVICE", "first"}}), Catch::Contains("WEFT_CUDA_DEVICE=first is not a device ordinal"));
  CHECK_THROWS_WITH(parse({{"WEFT_DEBUG_TIMEOUT_MS", "0"}}), Catch::Contains("WEFT_DEBUG_TIMEOUT_MS=0 is not a timeout"));
  CHECK_THROWS_WITH(parse({{"WEFT_DEBUG_TIMEOUT_MS", "99999999999999999999"}}),
                    Catch::Contains("is not a timeout"));
  CHECK_THROWS_WITH(parse({{"WEFT_DEBUG", "yes"}}), Catch::Contains("WEFT_DEBUG=yes is not a setting; use WEFT_DEBUG=1"));
  CHECK_THROWS_WITH(parse({{"WEFT_TIME_PASSES", "yes"}}),
                    Catch::Contains("WEFT_TIME_PASSES=yes is not a setting; use WEFT_TIME_PASSES=1"));
  CHECK(parse({{"WEFT_TIME_PASSES", "1"}}).time_passes);
  CHECK(parse({}).verify_llvm == weft::support::kVerifyLlvmByDefault);
  CHECK(parse({{"WEFT_VERIFY_LLVM", "1"}}).verify_llvm);
  CHECK_FALSE(parse({{"WEFT_VERIFY_LLVM", "0"}}).verify_llvm);
  CHECK_THROWS_WITH(parse({{"WEFT_VERIFY_LLVM", "on"}}),
                    Catch::Contains("WEFT_VERIFY_LLVM=on is not a setting; use WEFT_VERIFY_LLVM=1"));
  CHECK(parse({{"WEFT_NVPTX_PASSES", "default<O3>"}}).nvptx_passes == "default<O3>");
  CHECK(!parse({}).nvptx_skip);
  CHECK(parse({{"WEFT_NVPTX_SKIP", "slsr,consthoist"}}).nvptx_skip == "slsr,consthoist");
  CHECK(parse({{"WEFT_NVPTX_SKIP", "none"}}).nvptx_skip == "");
  CHECK_THROWS_WITH(parse({{"WEFT_BACKEND", "gpu"}}), Catch::Contains("WEFT_BACKEND=gpu is not a backend; use cpu, cuda or hip"));
  CHECK(parse({{"WEFT_BACKEND", "cuda"}}).backend == "cuda");
  CHECK(parse({}).weft_ptx_emitter);  // weft's emitter unless WEFT_PTX_EMITTER=llvm
  CHECK(parse({{"WEFT_PTX_EMITTER", "weft"}}).weft_ptx_emitter);
  CHECK_FALSE(parse({{"WEFT_PTX_EMITTER", "llvm"}}).weft_ptx_emitter);
  CHECK_THROWS_WITH(parse({{"WEFT_PTX_EMITTER", "nvcc"}}),
                    Catch::Contains("WEFT_PTX_EMITTER=nvcc is not an emitter; use WEFT_PTX_EMITTER=weft"));
  CHECK_THROWS_WITH(parse({{"WEFT_PTX_EMITTER", "WEFT"}}), Catch::Contains("WEFT_PTX_EMITTER=WEFT is not an emitter"));
}

TEST_CASE("knobs: GPU architectures are checked against the code generator's", "[knobs]") {
  CHECK(codegen::nvptx::unknown_arch_reason("sm_90a").empty());
  CHECK(codegen::nvptx::unknown_arch_reason("sm_100a").empty());
  const std::string why = codegen::nvptx::unknown_arch_reason("sm_12");
  CHECK_THAT(why, Catch::Contains("'sm_12' is not an NVIDIA GPU architecture"));
  CHECK_THAT(why, Catch::Contains("sm_90a"));  // the list of known ones
  CHECK_FALSE(codegen::nvptx::unknown_arch_reason("gfx942").empty());
  // Kernel::ptx reaches the same check through compile_to_ptx: an Error, not an LLVM warning per compile.
  Kernel k("copy", [](Ptr<float> a) { store(a, load(a)); });
  CHECK_NOTHROW(k.ptx());
}
