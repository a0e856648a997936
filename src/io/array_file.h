#pragma once

// A file of named arrays, as the IVF index saves itself: written to a temporary file renamed into
// place, read back only after its owner, type, size, version, byte order and checksums check out.
// Host only: the caller copies device arrays to and from host memory.
//
// The format (version 1.0), little-endian:
//   header, 64 bytes:
//      0  magic      8 bytes  0x89 'C' 'U' 'D' 'A' 'O' 'P' 'S'
//      8  kind       8 bytes  what the file holds ("ivf"), NUL-padded
//     16  byte order u32      0x0A0B0C0D as written (read as 0x0D0C0B0A on the other order)
//     20  major u16, minor u16
//     24  arrays     u32      at most kMaxArrays
//     28  table CRC  u32      CRC-32 of the table
//     32  table at   u64      64
//     40  file bytes u64      the whole file's size (a shorter or longer file is refused)
//     48  reserved   12 bytes zero
//     60  header CRC u32      CRC-32 of bytes 0 to 59
//   table: one 96-byte entry per array:
//      0  name       32 bytes NUL-padded: letters, digits, '_' and '.', at least one
//     32  dtype u32 (DType), axes u32 (0 to 4)
//     40  shape      4 x i64  (unused axes 0)
//     72  offset u64 (a multiple of 256, past the table), bytes u64 (= elements x element size)
//     88  CRC-32 of the array's bytes u32, reserved u32
//   each array's bytes at its offset; the gaps are zero.
// A file of another major or of a newer minor version than this library's is refused.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cudaops/dtype.h"
#include "cudaops/status.h"

namespace cudaops::detail::io {

inline constexpr uint16_t kFileMajor = 1;
inline constexpr uint16_t kFileMinor = 0;
inline constexpr uint32_t kMaxArrays = 1024;
inline constexpr size_t kMaxAxes = 4;
inline constexpr size_t kMaxName = 31;

/// CRC-32 (IEEE 802.3, reflected, as zlib computes it) of `bytes` bytes, continuing from `crc`.
uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0);

/// An array to write: its elements in host memory.
struct ArrayToWrite {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  ///< may be null when the array has no elements
};

/// Writes `arrays` as a file of `kind` at `path`: into a new temporary file of the same directory
/// (readable and writable by this user alone), flushed to disk, then renamed over `path`, so that
/// a reader sees the old file or the whole new one. `op` prefixes the messages.
Status write_array_file(const std::string& path, std::string_view kind,
                        const std::vector<ArrayToWrite>& arrays, const char* op);

/// An array of an opened file.
struct ArrayInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

/// A file of arrays whose header and table have been checked; each array's checksum is checked
/// as it is read.
class ArrayFile {
 public:
  ArrayFile() = default;
  ~ArrayFile();
  ArrayFile(const ArrayFile&) = delete;
  ArrayFile& operator=(const ArrayFile&) = delete;
  ArrayFile(ArrayFile&& other) noexcept;
  ArrayFile& operator=(ArrayFile&& other) noexcept;

  /// Opens `path` as a file of `kind`: a regular file (not a link, FIFO or device) owned by the
  /// effective user and writable by no one else, whose size, magic, kind, byte order, version,
  /// header and table checksums and every table entry are as the format says.
  static Status open(const std::string& path, std::string_view kind, const char* op,
                     ArrayFile* out);

  const std::vector<ArrayInfo>& arrays() const { return arrays_; }
  /// The array named `name`, or null.
  const ArrayInfo* find(std::string_view name) const;
  /// Reads `info`'s bytes into dst (info.bytes of them) and checks their checksum.
  Status read(const ArrayInfo& info, void* dst) const;
  /// Checks every byte of the file past the table without holding more than a chunk of it: each
  /// array's checksum, and that the gaps between arrays (alignment) and after the last are zero,
  /// so that no byte of the file is unchecked. A reader calls it before allocating what the
  /// table claims, so that a forged (say sparse) file is refused before it costs memory.
  Status verify() const;

 private:
  int fd_ = -1;
  uint64_t data_start_ = 0;
  uint64_t size_ = 0;
  std::string path_;
  std::string op_;
  std::vector<ArrayInfo> arrays_;
};

}  // namespace cudaops::detail::io
