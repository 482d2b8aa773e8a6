#include "codegen/llvm_options.h"

#include <llvm/Support/CommandLine.h>
#include <llvm/Support/raw_ostream.h>

#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "support/env.h"
#include "weft/error.h"

namespace weft::codegen {

void apply_llvm_args() {
  static std::once_flag once;
  const std::string& text = support::knobs().llvm_args;
  if (text.empty()) return;
  std::call_once(once, [&] {  // (a throw leaves the flag unset: the next compile tries again)
    std::vector<std::string> words{"weft"};  // argv[0]
    std::istringstream in(text);
    for (std::string w; in >> w;) words.push_back(w);
    std::vector<const char*> argv;
    for (const std::string& w : words) argv.push_back(w.c_str());
    std::string why;
    llvm::raw_string_ostream errors(why);
    if (!llvm::cl::ParseCommandLineOptions(static_cast<int>(argv.size()), argv.data(), "", &errors)) {
      std::string said;  // LLVM's lines without its program name and its advice to run `weft --help`
      std::istringstream lines(why);
      for (std::string l; std::getline(lines, l);) {
        if (l.starts_with("weft: ")) l.erase(0, 6);
        if (size_t at = l.find("  Try: "); at != std::string::npos) l.erase(at);
        if (!l.empty()) said += (said.empty() ? "" : " ") + l;
      }
      throw Error("WEFT_LLVM_ARGS='" + text + "': LLVM does not accept these options: " + said +
                  " (give options of LLVM's own tools, e.g. -debug-counter=instcombine-visit=0-100, or unset it)");
    }
  });
}

}  // namespace weft::codegen
