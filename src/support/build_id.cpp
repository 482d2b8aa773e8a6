#include "support/build_id.h"

#include <dlfcn.h>
#include <elf.h>
#include <fmt/format.h>
#include <link.h>

#include <cstring>

namespace weft::support {
namespace {

struct Search {
  const void* inside;  // an address within the library we are looking for
  std::string id;
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  bool ours = false;
  for (int i = 0; i < info->dlpi_phnum && !ours; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    auto start = info->dlpi_addr + ph.p_vaddr;
    auto address = reinterpret_cast<ElfW(Addr)>(search->inside);
    ours = ph.p_type == PT_LOAD && address >= start && address < start + ph.p_memsz;
  }
  if (!ours) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        for (unsigned k = 0; k < note->n_descsz; ++k) search->id += fmt::format("{:02x}", static_cast<unsigned char>(desc[k]));
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;
}

}  // namespace

const std::string& weft_identity() {
  static const std::string identity = [] {
    Search search{reinterpret_cast<const void*>(&weft_identity), {}};
    dl_iterate_phdr(visit, &search);
    return fmt::format("weft 0.1.0 build {}", search.id.empty() ? "unknown" : search.id);
  }();
  return identity;
}

}  // namespace weft::support
