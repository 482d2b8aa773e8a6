// Debian's LLVM registers Polly as a static extension (LLVM_STATIC_EXTENSIONS),
// so libLLVMExtensions/libLLVMLTO reference getPollyPluginInfo(), but no Polly
// archive is shipped. This no-op definition satisfies the reference. Compiled
// into libweft only when such an archive is linked (see cmake/WeftLLVM.cmake);
// the version script keeps it local.
#if __has_include(<llvm/Plugins/PassPlugin.h>)
#include <llvm/Plugins/PassPlugin.h>  // LLVM >= 22
#else
#include <llvm/Passes/PassPlugin.h>
#endif

// Equivalent to {LLVM_PLUGIN_API_VERSION, "none", "0", nullptr}, written
// field by field so -Wmissing-field-initializers stays quiet on LLVM 22's
// extra PreCodeGenCallback member.
llvm::PassPluginLibraryInfo getPollyPluginInfo() {
  llvm::PassPluginLibraryInfo info{};
  info.APIVersion = LLVM_PLUGIN_API_VERSION;
  info.PluginName = "none";
  info.PluginVersion = "0";
  info.RegisterPassBuilderCallbacks = nullptr;
  return info;
}
