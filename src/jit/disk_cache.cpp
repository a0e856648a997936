#include "jit/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace cudaops::jit::detail {

namespace {

constexpr char kMagic[8] = {'C', 'D', 'O', 'P', 'J', 'I', 'T', '1'};
constexpr uint32_t kFormat = 1;
constexpr size_t kHeader = sizeof(kMagic) + 4 + 32 + 8 + 32;
constexpr const char* kSuffix = ".entry";
constexpr const char* kTempPrefix = ".tmp-";

std::string errno_text() {
  return std::strerror(errno);
}

bool ends_with(const std::string& text, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

// mkdir -p with owner-only permissions for what it creates.
bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  struct stat info {};
  if (stat(path.c_str(), &info) == 0) return S_ISDIR(info.st_mode);
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(path.substr(0, slash))) return false;
  return mkdir(path.c_str(), 0700) == 0 || errno == EEXIST;
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

bool read_all(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t got = ::read(fd, &(*out)[done], out->size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  out->resize(done);
  ::close(fd);
  return true;
}

void put_u64(std::string* out, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    out->push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t get_u64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}

struct Listed {
  std::string path;
  uint64_t bytes;
  int64_t mtime_ns;
  bool temporary;
};

std::vector<Listed> list(const std::string& directory) {
  std::vector<Listed> entries;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return entries;
  while (const dirent* item = readdir(dir)) {
    const std::string name = item->d_name;
    const bool temporary = name.compare(0, std::strlen(kTempPrefix), kTempPrefix) == 0;
    if (!temporary && !ends_with(name, kSuffix)) continue;
    const std::string path = directory + "/" + name;
    struct stat info {};
    if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    entries.push_back({path, static_cast<uint64_t>(info.st_size),
                       int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec,
                       temporary});
  }
  closedir(dir);
  return entries;
}

}  // namespace

DiskCache::DiskCache(std::string directory, uint64_t max_bytes)
    : directory_(std::move(directory)), max_bytes_(max_bytes) {}

std::string DiskCache::entry_path(const Sha256::Digest& key) const {
  return directory_ + "/" + Sha256::hex(key) + kSuffix;
}

DiskCache::Lookup DiskCache::load(const Sha256::Digest& key, std::string* payload,
                                  std::string* why) const {
  const std::string path = entry_path(key);
  std::string file;
  if (!read_all(path, &file)) return Lookup::kMiss;
  auto corrupt = [&](const char* reason) {
    *why = std::string(reason) + " (" + path + ")";
    ::unlink(path.c_str());
    return Lookup::kCorrupt;
  };
  if (file.size() < kHeader) return corrupt("the entry is shorter than its header");
  const char* p = file.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return corrupt("the entry has no cache header");
  p += sizeof(kMagic);
  uint32_t format = 0;
  for (int i = 0; i < 4; ++i)
    format |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  if (format != kFormat) return corrupt("the entry has another format version");
  p += 4;
  if (std::memcmp(p, key.data(), key.size()) != 0) return corrupt("the entry is another key's");
  p += 32;
  const uint64_t size = get_u64(p);
  p += 8;
  if (size != file.size() - kHeader) return corrupt("the entry is truncated or too long");
  Sha256::Digest checksum;
  std::memcpy(checksum.data(), p, checksum.size());
  if (Sha256::of(file.data() + kHeader, size) != checksum) {
    return corrupt("the entry's checksum does not match its contents");
  }
  payload->assign(file, kHeader, size);
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // most recently used
  return Lookup::kHit;
}

Status DiskCache::store(const Sha256::Digest& key, const std::string& payload) const {
  if (!make_dirs(directory_)) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: cannot create the cache directory " + directory_ + ": " + errno_text());
  }
  std::string file(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i)
    file.push_back(static_cast<char>(kFormat >> (8 * i)));
  file.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_u64(&file, payload.size());
  const Sha256::Digest checksum = Sha256::of(payload.data(), payload.size());
  file.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());
  file += payload;

  static std::atomic<uint64_t> counter{0};
  std::random_device random;
  const std::string temp = directory_ + "/" + kTempPrefix + Sha256::hex(key).substr(0, 16) + "-" +
                           std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                           std::to_string(random());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: cannot write in the cache directory " + directory_ + ": " + errno_text());
  }
  const bool written = write_all(fd, file.data(), file.size()) && ::fsync(fd) == 0;
  const int close_error = ::close(fd);
  const std::string path = entry_path(key);
  if (!written || close_error != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp.c_str());
    return Status(StatusCode::kInvalidArgument,
                  "jit: cannot write the cache entry " + path + ": " + why);
  }
  evict(path);
  return Status();
}

void DiskCache::evict(const std::string& keep) const {
  std::vector<Listed> entries = list(directory_);
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  uint64_t total = 0;
  std::vector<Listed> kept;
  for (const Listed& entry : entries) {
    if (entry.temporary) {
      // Left by a process that died while writing: removed after an hour.
      if (now_ns - entry.mtime_ns > int64_t{3600} * 1000000000) ::unlink(entry.path.c_str());
      continue;
    }
    total += entry.bytes;
    kept.push_back(entry);
  }
  if (total <= max_bytes_) return;
  std::sort(kept.begin(), kept.end(),
            [](const Listed& a, const Listed& b) { return a.mtime_ns < b.mtime_ns; });
  for (const Listed& entry : kept) {
    if (total <= max_bytes_) break;
    if (entry.path == keep) continue;
    if (::unlink(entry.path.c_str()) == 0 || errno == ENOENT) total -= entry.bytes;
  }
}

Status DiskCache::clear() const {
  for (const Listed& entry : list(directory_)) {
    if (::unlink(entry.path.c_str()) != 0 && errno != ENOENT) {
      return Status(StatusCode::kInvalidArgument,
                    "jit: cannot remove " + entry.path + ": " + errno_text());
    }
  }
  return Status();
}

uint64_t DiskCache::size_bytes() const {
  uint64_t total = 0;
  for (const Listed& entry : list(directory_)) {
    if (!entry.temporary) total += entry.bytes;
  }
  return total;
}

void PayloadWriter::u64(uint64_t value) {
  put_u64(&out_, value);
}

void PayloadWriter::f64(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  u64(bits);
}

void PayloadWriter::bytes(const std::string& value) {
  u64(value.size());
  out_ += value;
}

bool PayloadReader::u64(uint64_t* value) {
  if (in_.size() - pos_ < 8) return false;
  *value = get_u64(in_.data() + pos_);
  pos_ += 8;
  return true;
}

bool PayloadReader::f64(double* value) {
  uint64_t bits = 0;
  if (!u64(&bits)) return false;
  std::memcpy(value, &bits, sizeof(bits));
  return true;
}

bool PayloadReader::bytes(std::string* value) {
  uint64_t size = 0;
  if (!u64(&size) || in_.size() - pos_ < size) return false;
  value->assign(in_, pos_, size);
  pos_ += size;
  return true;
}

}  // namespace cudaops::jit::detail
