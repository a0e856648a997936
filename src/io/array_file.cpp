#include "io/array_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "io/trusted_file.h"

namespace cudaops::detail::io {

namespace {

constexpr size_t kHeaderBytes = 64;
constexpr size_t kEntryBytes = 96;
constexpr uint64_t kAlign = 256;
constexpr uint32_t kByteOrder = 0x0A0B0C0Du;
constexpr uint32_t kByteOrderSwapped = 0x0D0C0B0Au;
constexpr unsigned char kMagic[8] = {0x89, 'C', 'U', 'D', 'A', 'O', 'P', 'S'};
// A claimed size past this is refused before anything is allocated or read for it.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 46;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_u16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint16_t get_u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxName) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
  });
}

bool valid_kind(std::string_view kind) {
  return !kind.empty() && kind.size() <= 8 && kind.find('\0') == std::string_view::npos;
}

Status file_error(const std::string& op, const std::string& path, const std::string& what) {
  return Status(StatusCode::kFileError, op + ": " + path + ": " + what);
}

std::string errno_text(int error) {
  return std::strerror(error);
}

/// The bytes of an array of `shape` and `dtype`, or false when they overflow or the shape is bad.
bool array_bytes(DType dtype, const std::vector<int64_t>& shape, uint64_t* bytes) {
  const int64_t element = dtype_size(dtype);
  if (element <= 0 || shape.size() > kMaxAxes) return false;
  int64_t n = element;
  for (int64_t extent : shape) {
    if (extent < 0 || !checked_mul(n, extent, &n)) return false;
  }
  *bytes = static_cast<uint64_t>(n);
  return true;
}

bool write_all(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool write_zeros(int fd, uint64_t count) {
  static const unsigned char zeros[kAlign] = {};
  while (count > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(count, kAlign));
    if (!write_all(fd, zeros, n)) return false;
    count -= n;
  }
  return true;
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

uint32_t crc32(const void* data, size_t bytes, uint32_t crc) {
  const auto& table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i)
    crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

Status write_array_file(const std::string& path, std::string_view kind,
                        const std::vector<ArrayToWrite>& arrays, const char* op) {
  const std::string o = op;
  if (path.empty()) return Status(StatusCode::kInvalidArgument, o + ": path must not be empty");
  if (!valid_kind(kind)) {
    return Status(StatusCode::kInvalidArgument, o + ": the file kind must be 1 to 8 bytes");
  }
  if (arrays.size() > kMaxArrays) {
    return Status(StatusCode::kInvalidArgument,
                  o + ": at most " + std::to_string(kMaxArrays) + " arrays fit a file");
  }
  // The table, with each array's place and checksum.
  std::vector<unsigned char> table(arrays.size() * kEntryBytes, 0);
  uint64_t offset = align_up(kHeaderBytes + table.size());
  std::vector<std::pair<uint64_t, uint64_t>> places;  // offset, bytes
  for (size_t i = 0; i < arrays.size(); ++i) {
    const ArrayToWrite& a = arrays[i];
    if (!valid_name(a.name)) {
      return Status(
          StatusCode::kInvalidArgument,
          o + ": array name '" + a.name + "' must be 1 to 31 letters, digits, '_' or '.'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (arrays[j].name == a.name) {
        return Status(StatusCode::kInvalidArgument, o + ": array name '" + a.name + "' twice");
      }
    }
    uint64_t bytes = 0;
    if (!array_bytes(a.dtype, a.shape, &bytes)) {
      return Status(StatusCode::kInvalidArgument,
                    o + ": array '" + a.name + "': a known dtype and at most 4 axes >= 0 whose " +
                        "size fits int64");
    }
    if (bytes > 0 && a.data == nullptr) {
      return Status(StatusCode::kInvalidArgument, o + ": array '" + a.name + "': data is null");
    }
    if (offset > kMaxFileBytes || bytes > kMaxFileBytes - offset) {
      return Status(StatusCode::kInvalidArgument, o + ": the file would be too large");
    }
    unsigned char* e = table.data() + i * kEntryBytes;
    a.name.copy(reinterpret_cast<char*>(e), a.name.size());  // NUL-padded: the table is zeroed
    put_u32(e + 32, static_cast<uint32_t>(a.dtype));
    put_u32(e + 36, static_cast<uint32_t>(a.shape.size()));
    for (size_t k = 0; k < a.shape.size(); ++k)
      put_u64(e + 40 + 8 * k, static_cast<uint64_t>(a.shape[k]));
    put_u64(e + 72, offset);
    put_u64(e + 80, bytes);
    put_u32(e + 88, crc32(a.data, static_cast<size_t>(bytes)));
    places.emplace_back(offset, bytes);
    offset = align_up(offset + bytes);
  }
  const uint64_t file_bytes =
      places.empty() ? kHeaderBytes + table.size() : places.back().first + places.back().second;
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, kind.data(), kind.size());
  put_u32(header + 16, kByteOrder);
  put_u16(header + 20, kFileMajor);
  put_u16(header + 22, kFileMinor);
  put_u32(header + 24, static_cast<uint32_t>(arrays.size()));
  put_u32(header + 28, crc32(table.data(), table.size()));
  put_u64(header + 32, kHeaderBytes);
  put_u64(header + 40, file_bytes);
  put_u32(header + 60, crc32(header, 60));

  std::string temp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return file_error(o, path, "cannot create a temporary file: " + errno_text(errno));
  bool ok = write_all(fd, header, kHeaderBytes) && write_all(fd, table.data(), table.size());
  uint64_t at = kHeaderBytes + table.size();
  for (size_t i = 0; ok && i < arrays.size(); ++i) {
    ok = write_zeros(fd, places[i].first - at) &&
         write_all(fd, arrays[i].data, static_cast<size_t>(places[i].second));
    at = places[i].first + places[i].second;
  }
  const int write_errno = errno;
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(temp.c_str());
    return file_error(o, path, "writing failed: " + errno_text(write_errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return file_error(o, path, "cannot rename the temporary file into place: " + errno_text(error));
  }
  // The rename itself reaches the disk with the directory.
  const int dir = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
  return Status();
}

ArrayFile::~ArrayFile() {
  if (fd_ >= 0) ::close(fd_);
}

ArrayFile::ArrayFile(ArrayFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      size_(other.size_),
      path_(std::move(other.path_)),
      op_(std::move(other.op_)),
      arrays_(std::move(other.arrays_)) {}

ArrayFile& ArrayFile::operator=(ArrayFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    op_ = std::move(other.op_);
    arrays_ = std::move(other.arrays_);
  }
  return *this;
}

Status ArrayFile::open(const std::string& path, std::string_view kind, const char* op,
                       ArrayFile* out) {
  const std::string o = op;
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, o + ": out must not be null");
  if (path.empty()) return Status(StatusCode::kInvalidArgument, o + ": path must not be empty");
  ArrayFile file;
  file.path_ = path;
  file.op_ = o;
  // One open, then the descriptor's own checks (io/trusted_file.h): owned by this user alone.
  TrustedFile trusted;
  std::string why;
  if (!trusted.open(path, /*owned=*/true, &why)) return file_error(o, path, why);
  const uint64_t size = trusted.size();
  file.fd_ = trusted.release();
  unsigned char header[kHeaderBytes];
  if (size < kHeaderBytes || !read_fully(file.fd_, 0, header, kHeaderBytes)) {
    return file_error(
        o, path,
        "is truncated: " + std::to_string(size) + " bytes, shorter than the 64-byte header");
  }
  if (std::memcmp(header, kMagic, 8) != 0) {
    return file_error(o, path, "is not a cudaops array file (wrong magic bytes)");
  }
  char file_kind[9] = {};
  std::memcpy(file_kind, header + 8, 8);
  if (std::string_view(file_kind) != kind) {
    return file_error(o, path,
                      "holds '" + std::string(file_kind) + "', not '" + std::string(kind) + "'");
  }
  const uint32_t order = get_u32(header + 16);
  if (order == kByteOrderSwapped) {
    return file_error(o, path, "was written in the other byte order; refused");
  }
  if (order != kByteOrder || get_u32(header + 60) != crc32(header, 60)) {
    return file_error(o, path, "has a corrupted header (its checksum does not match)");
  }
  const uint16_t major = get_u16(header + 20);
  const uint16_t minor = get_u16(header + 22);
  if (major != kFileMajor || minor > kFileMinor) {
    return file_error(o, path,
                      "is format version " + std::to_string(major) + "." + std::to_string(minor) +
                          "; this library reads " + std::to_string(kFileMajor) + ".0 to " +
                          std::to_string(kFileMajor) + "." + std::to_string(kFileMinor));
  }
  const uint32_t count = get_u32(header + 24);
  const uint64_t table_at = get_u64(header + 32);
  const uint64_t file_bytes = get_u64(header + 40);
  if (file_bytes != size) {
    return file_error(o, path,
                      size < file_bytes ? "is truncated: " + std::to_string(size) + " of " +
                                              std::to_string(file_bytes) + " bytes"
                                        : "is " + std::to_string(size) + " bytes, " +
                                              std::to_string(file_bytes) + " expected");
  }
  if (count > kMaxArrays || table_at != kHeaderBytes ||
      kHeaderBytes + uint64_t{count} * kEntryBytes > size) {
    return file_error(o, path, "has a table that does not fit the file");
  }
  std::vector<unsigned char> table(size_t{count} * kEntryBytes);
  if (!read_fully(file.fd_, table_at, table.data(), table.size())) {
    return file_error(o, path, "cannot read its table: " + errno_text(errno));
  }
  if (crc32(table.data(), table.size()) != get_u32(header + 28)) {
    return file_error(o, path, "has a corrupted table (its checksum does not match)");
  }
  const uint64_t data_start = kHeaderBytes + table.size();
  file.data_start_ = data_start;
  file.size_ = size;
  for (uint32_t i = 0; i < count; ++i) {
    const unsigned char* e = table.data() + size_t{i} * kEntryBytes;
    ArrayInfo info;
    const auto* name_end = static_cast<const unsigned char*>(std::memchr(e, 0, 32));
    info.name.assign(reinterpret_cast<const char*>(e),
                     name_end == nullptr ? 32 : static_cast<size_t>(name_end - e));
    const std::string entry = "table entry " + std::to_string(i);
    if (!valid_name(info.name)) return file_error(o, path, entry + " has an invalid name");
    info.dtype = static_cast<DType>(get_u32(e + 32));
    const uint32_t axes = get_u32(e + 36);
    if (dtype_size(info.dtype) <= 0 || axes > kMaxAxes) {
      return file_error(o, path, entry + " ('" + info.name + "') has an unknown dtype or axes");
    }
    for (uint32_t k = 0; k < axes; ++k)
      info.shape.push_back(static_cast<int64_t>(get_u64(e + 40 + 8 * k)));
    info.offset = get_u64(e + 72);
    info.bytes = get_u64(e + 80);
    info.crc = get_u32(e + 88);
    uint64_t want = 0;
    if (!array_bytes(info.dtype, info.shape, &want) || want != info.bytes) {
      return file_error(o, path, entry + " ('" + info.name + "'): its shape and size disagree");
    }
    if (info.offset % kAlign != 0 || info.offset < data_start || info.offset > size ||
        info.bytes > size - info.offset) {
      return file_error(o, path, entry + " ('" + info.name + "') lies outside the file");
    }
    for (const ArrayInfo& before : file.arrays_) {
      if (before.name == info.name) {
        return file_error(o, path, "names the array '" + info.name + "' twice");
      }
      const bool apart =
          info.offset >= before.offset + before.bytes || before.offset >= info.offset + info.bytes;
      if (!apart && info.bytes > 0 && before.bytes > 0) {
        return file_error(o, path, entry + " ('" + info.name + "') overlaps '" + before.name + "'");
      }
    }
    file.arrays_.push_back(std::move(info));
  }
  *out = std::move(file);
  return Status();
}

const ArrayInfo* ArrayFile::find(std::string_view name) const {
  for (const ArrayInfo& info : arrays_) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

Status ArrayFile::read(const ArrayInfo& info, void* dst) const {
  if (fd_ < 0) return Status(StatusCode::kInvalidArgument, op_ + ": the file is not open");
  if (info.bytes > 0 && dst == nullptr) {
    return Status(StatusCode::kInvalidArgument, op_ + ": dst must not be null");
  }
  if (!read_fully(fd_, info.offset, dst, static_cast<size_t>(info.bytes))) {
    return file_error(op_, path_, "cannot read array '" + info.name + "': " + errno_text(errno));
  }
  if (crc32(dst, static_cast<size_t>(info.bytes)) != info.crc) {
    return file_error(op_, path_,
                      "array '" + info.name + "' is corrupted (its checksum does not match)");
  }
  return Status();
}

Status ArrayFile::verify() const {
  if (fd_ < 0) return Status(StatusCode::kInvalidArgument, op_ + ": the file is not open");
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<unsigned char> chunk;
  try {
    chunk.resize(kChunk);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, op_ + ": no host memory for a 1 MiB read buffer");
  }
  std::vector<const ArrayInfo*> order;
  for (const ArrayInfo& info : arrays_)
    order.push_back(&info);
  std::sort(order.begin(), order.end(),
            [](const ArrayInfo* a, const ArrayInfo* b) { return a->offset < b->offset; });
  // zero(from, to): the bytes [from, to) all zero; crc(info): the array's checksum.
  const auto zero = [&](uint64_t from, uint64_t to) {
    while (from < to) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(to - from, kChunk));
      if (!read_fully(fd_, from, chunk.data(), n)) return false;
      for (size_t i = 0; i < n; ++i) {
        if (chunk[i] != 0) return false;
      }
      from += n;
    }
    return true;
  };
  uint64_t at = data_start_;
  for (const ArrayInfo* info : order) {
    if (!zero(at, info->offset)) {
      return file_error(
          op_, path_,
          "has non-zero bytes between its arrays (before '" + info->name + "'); refused");
    }
    uint32_t crc = 0;
    for (uint64_t done = 0; done < info->bytes;) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(info->bytes - done, kChunk));
      if (!read_fully(fd_, info->offset + done, chunk.data(), n)) {
        return file_error(op_, path_,
                          "cannot read array '" + info->name + "': " + errno_text(errno));
      }
      crc = crc32(chunk.data(), n, crc);
      done += n;
    }
    if (crc != info->crc) {
      return file_error(op_, path_,
                        "array '" + info->name + "' is corrupted (its checksum does not match)");
    }
    at = std::max(at, info->offset + info->bytes);
  }
  if (!zero(at, size_))
    return file_error(op_, path_, "has non-zero bytes after its last array; refused");
  return Status();
}

}  // namespace cudaops::detail::io
