#include "harness/fatbin.h"

#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string_view>

namespace cudaops::harness {
namespace {

// The fat binary layout as nvcc writes it (fatbinary_section.h describes the wrapper; the
// headers below are stable across CUDA 10 to 13): a 16-byte header, then entries, each a header
// of `header_size` bytes followed by `payload_size` bytes.
constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;
constexpr uint64_t kFlagCompressed = 0x2000u | 0x8000u;  // older and newer compression flags

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};

struct EntryHeader {
  uint16_t kind;
  uint16_t unknown0;
  uint32_t header_size;
  uint64_t payload_size;
  uint32_t compressed_size;
  uint32_t unknown1;
  uint16_t minor;
  uint16_t major;
  uint32_t arch;
  uint32_t name_offset;
  uint32_t name_size;
  uint64_t flags;
};

template <typename T>
bool read_at(const std::string& bytes, uint64_t offset, T* out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + offset, sizeof(T));
  return true;
}

Status bad(const std::string& path, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "read_fatbins: " + path + ": " + why);
}

}  // namespace

Status read_fatbins(const std::string& path, FatbinContents* contents) {
  *contents = FatbinContents{path, 0, {}, {}};
  std::ifstream file(path, std::ios::binary);
  if (!file) return bad(path, "cannot be opened");
  contents->bytes.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  const std::string& bytes = contents->bytes;
  Elf64_Ehdr elf{};
  if (!read_at(bytes, 0, &elf) || std::memcmp(elf.e_ident, ELFMAG, SELFMAG) != 0 ||
      elf.e_ident[EI_CLASS] != ELFCLASS64 || elf.e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad(path, "not a 64-bit little-endian ELF file");
  }
  Elf64_Shdr names{};
  if (!read_at(bytes, elf.e_shoff + uint64_t{elf.e_shstrndx} * elf.e_shentsize, &names)) {
    return bad(path, "section headers out of the file");
  }
  for (uint64_t i = 0; i < elf.e_shnum; ++i) {
    Elf64_Shdr section{};
    if (!read_at(bytes, elf.e_shoff + i * elf.e_shentsize, &section)) {
      return bad(path, "section headers out of the file");
    }
    const uint64_t name_at = names.sh_offset + section.sh_name;
    // The name and its terminating NUL: ".nv_fatbin" exactly, not a longer name.
    constexpr char kName[] = ".nv_fatbin";
    if (name_at >= bytes.size() || bytes.size() - name_at < sizeof(kName) ||
        std::memcmp(bytes.data() + name_at, kName, sizeof(kName)) != 0) {
      continue;
    }
    if (section.sh_type == SHT_NOBITS || section.sh_offset + section.sh_size > bytes.size()) {
      return bad(path, ".nv_fatbin out of the file");
    }
    uint64_t at = section.sh_offset;
    const uint64_t end = section.sh_offset + section.sh_size;
    while (at + sizeof(FatbinHeader) <= end) {
      FatbinHeader header{};
      read_at(bytes, at, &header);
      if (header.magic != kFatbinMagic) {
        // Fat binaries are 8-byte aligned; padding between them is zero.
        at += 8;
        continue;
      }
      const uint64_t first = at + header.header_size;
      const uint64_t last = first + header.fat_size;
      if (header.header_size < sizeof(FatbinHeader) || last > end) {
        return bad(path, "a fat binary runs past .nv_fatbin");
      }
      for (uint64_t e = first; e < last;) {
        EntryHeader entry{};
        if (!read_at(bytes, e, &entry) || entry.header_size < sizeof(EntryHeader) ||
            e + entry.header_size + entry.payload_size > last) {
          return bad(path, "a fat binary entry runs past its fat binary");
        }
        if (entry.kind == kKindPtx || entry.kind == kKindElf) {
          FatbinEntry out;
          out.fatbin = contents->fatbins;
          out.ptx = entry.kind == kKindPtx;
          out.arch = static_cast<int>(entry.arch);
          out.compressed = (entry.flags & kFlagCompressed) != 0;
          out.payload_offset = static_cast<int64_t>(e + entry.header_size);
          out.payload_size = static_cast<int64_t>(entry.payload_size);
          contents->entries.push_back(out);
        }
        e += entry.header_size + entry.payload_size;
      }
      ++contents->fatbins;
      at = (last + 7) / 8 * 8;
    }
  }
  return Status();
}

std::vector<int> fatbins_holding(const FatbinContents& contents, const std::string& symbol) {
  std::set<int> found;
  if (symbol.empty()) return {};
  const std::string_view bytes(contents.bytes);
  for (const FatbinEntry& entry : contents.entries) {
    if (entry.ptx || entry.compressed || found.count(entry.fatbin) != 0) continue;
    const std::string_view payload = bytes.substr(static_cast<size_t>(entry.payload_offset),
                                                  static_cast<size_t>(entry.payload_size));
    if (payload.find(symbol) != std::string_view::npos) found.insert(entry.fatbin);
  }
  return {found.begin(), found.end()};
}

std::vector<FatbinEntry> entries_of(const FatbinContents& contents, int fatbin) {
  std::vector<FatbinEntry> out;
  for (const FatbinEntry& entry : contents.entries) {
    if (fatbin < 0 || entry.fatbin == fatbin) out.push_back(entry);
  }
  return out;
}

CodeChoice choose_code(const std::vector<FatbinEntry>& entries, int device_arch) {
  CodeChoice sass, ptx;
  for (const FatbinEntry& entry : entries) {
    if (entry.ptx) {
      if (entry.arch <= device_arch && entry.arch > ptx.arch) ptx = {CodeKind::kPtx, entry.arch};
    } else if (entry.arch / 10 == device_arch / 10 && entry.arch <= device_arch &&
               entry.arch > sass.arch) {
      sass = {CodeKind::kSass, entry.arch};
    }
  }
  if (sass.kind != CodeKind::kNone) return sass;
  return ptx;
}

std::string arch_name(int arch, bool ptx) {
  return (ptx ? "compute_" : "sm_") + std::to_string(arch);
}

std::string binary_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  // The executable itself may be reported by the name it was started with (no directory).
  const char* name =
      std::strchr(info.dli_fname, '/') != nullptr ? info.dli_fname : "/proc/self/exe";
  char resolved[PATH_MAX];
  return realpath(name, resolved) != nullptr ? resolved : "";
}

}  // namespace cudaops::harness
