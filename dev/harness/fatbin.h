#pragma once

// What GPU code a binary carries: the fat binaries that nvcc embeds in the `.nv_fatbin` section
// of an ELF file (one per CUDA source), each holding SASS for some real architectures (sm_XX)
// and PTX for some virtual ones (compute_XX); and which of them the CUDA loader picks for a
// device. Read from the file: no GPU is needed.

#include <cstdint>
#include <string>
#include <vector>

#include "cudaops/status.h"

namespace cudaops::harness {

struct FatbinEntry {
  int fatbin = 0;    ///< which fat binary of the section (in section order)
  bool ptx = false;  ///< PTX, else an ELF cubin (SASS)
  int arch = 0;      ///< major * 10 + minor: 90 for sm_90 or compute_90
  bool compressed = false;
  int64_t payload_offset = 0;  ///< in the file (and in FatbinContents::bytes)
  int64_t payload_size = 0;
};

struct FatbinContents {
  std::string path;
  int fatbins = 0;
  std::vector<FatbinEntry> entries;
  std::string bytes;  ///< the file as read (payload offsets index it)
};

/// Reads the fat binary headers of the ELF file at `path`. A file without a `.nv_fatbin` section
/// gives no entries; a file that is not a 64-bit little-endian ELF, or a section that does not
/// parse, gives kInvalidArgument naming the file.
Status read_fatbins(const std::string& path, FatbinContents* contents);

/// The fat binaries (indices) with an uncompressed cubin whose bytes contain `symbol`, e.g. a
/// kernel's mangled name. Compressed cubins cannot be searched and are not reported.
std::vector<int> fatbins_holding(const FatbinContents& contents, const std::string& symbol);

/// The entries of fat binary `fatbin`, or of every fat binary when `fatbin` < 0.
std::vector<FatbinEntry> entries_of(const FatbinContents& contents, int fatbin);

enum class CodeKind { kSass, kPtx, kNone };

struct CodeChoice {
  CodeKind kind = CodeKind::kNone;
  int arch = 0;
};

/// What the CUDA loader runs on a device of architecture `device_arch` (major * 10 + minor):
/// SASS of the same major with the highest minor not above the device's (sm_80 runs on sm_86);
/// else the newest PTX not above the device, compiled by the driver at load time; else nothing.
CodeChoice choose_code(const std::vector<FatbinEntry>& entries, int device_arch);

/// "sm_90" / "compute_90" / "sm_100".
std::string arch_name(int arch, bool ptx);

/// Path of the ELF file (shared library or executable) that holds `address`; empty if unknown.
std::string binary_of(const void* address);

}  // namespace cudaops::harness
