// ptxas (the CUDA toolkit's, where it is installed) run on PTX that weft generated: for the tests that check
// what ptxas makes of a kernel (it assembles, no spills, no serialized wgmma) on a machine without a GPU. Tests
// skip with a printed reason where find_ptxas() finds none.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace weft_test {

// ptxas on PATH, else /usr/local/cuda/bin/ptxas; "" when neither exists.
inline std::string find_ptxas() {
  if (std::system("command -v ptxas > /dev/null 2>&1") == 0) return "ptxas";
  return std::filesystem::exists("/usr/local/cuda/bin/ptxas") ? "/usr/local/cuda/bin/ptxas" : "";
}

struct PtxasRun {
  int status = -1;     // ptxas's exit status (0: assembled)
  std::string output;  // what it printed (with -v: registers, stack frame, spill bytes per kernel)

  // The "N bytes spill stores" of -v's report (its first kernel), or -1 where it says none.
  int spill_store_bytes() const {
    size_t at = output.find(" bytes spill stores");
    if (at == std::string::npos) return -1;
    size_t start = output.rfind(' ', at - 1) + 1;
    return std::stoi(output.substr(start, at - start));
  }
};

// `ptxas -arch=sm_90a <flags> <ptx> -o /dev/null`, the PTX written to a temporary file of this process.
inline PtxasRun run_ptxas(const std::string& ptxas, const std::string& ptx, const std::string& flags = "-v") {
  auto file = std::filesystem::temp_directory_path() / ("weft-test-" + std::to_string(::getpid()) + ".ptx");
  std::ofstream(file) << ptx;
  PtxasRun run;
  if (FILE* pipe = ::popen((ptxas + " -arch=sm_90a " + flags + " " + file.string() + " -o /dev/null 2>&1").c_str(), "r")) {
    char chunk[512];
    while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) run.output.append(chunk, n);
    run.status = ::pclose(pipe);
  } else {
    run.output = "popen failed";
  }
  std::filesystem::remove(file);
  return run;
}

// Checks that ptxas assembles `ptx`, or says (WARN) that the check is skipped where there is no ptxas.
inline void check_ptxas_assembles(const std::string& ptx) {
  std::string ptxas = find_ptxas();
  if (ptxas.empty()) {
    WARN("SKIPPED the ptxas part: no ptxas on PATH or in /usr/local/cuda/bin");
    return;
  }
  PtxasRun run = run_ptxas(ptxas, ptx);
  INFO(run.output);
  CHECK(run.status == 0);
}

}  // namespace weft_test
