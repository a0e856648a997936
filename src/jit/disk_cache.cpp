#include "jit/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

namespace cudaops::jit::detail {

namespace {

constexpr char kMagic[8] = {'C', 'D', 'O', 'P', 'J', 'I', 'T', '2'};
constexpr uint32_t kFormat = 2;
constexpr size_t kMacOffset = sizeof(kMagic) + 4 + 32 + 8;
constexpr size_t kHeader = kMacOffset + 32;
constexpr const char* kSuffixes[] = {".entry", ".note"};
constexpr const char* kTempPrefix = ".tmp-";
constexpr const char* kKeyFile = "mac.key";
using MacKey = std::array<uint8_t, 32>;

std::string errno_text() {
  return std::strerror(errno);
}

bool ends_with(const std::string& text, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// mkdir -p with owner-only permissions for what it creates.
bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  struct stat info {};
  if (stat(path.c_str(), &info) == 0) return S_ISDIR(info.st_mode);
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(path.substr(0, slash))) return false;
  return mkdir(path.c_str(), 0700) == 0 || errno == EEXIST;
}

// "" when `info` is what this user alone can have written, else what is wrong with it.
std::string distrust(const struct stat& info, bool directory) {
  if (directory && !S_ISDIR(info.st_mode)) return "is not a directory";
  if (!directory && !S_ISREG(info.st_mode)) return "is not a regular file";
  if (info.st_uid != ::geteuid()) {
    return "is owned by another user (uid " + std::to_string(info.st_uid) + ", not " +
           std::to_string(::geteuid()) + ")";
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return std::string("is writable by group or others (mode ") + mode + ")";
  }
  return "";
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

// Reads exactly `size` bytes; false on an error or an early end.
bool read_exact(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t got = ::read(fd, data, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    data += got;
    size -= static_cast<size_t>(got);
  }
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

bool random_bytes(void* out, size_t size) {
  auto* bytes = static_cast<uint8_t*>(out);
  while (size > 0) {
    const ssize_t got = ::getrandom(bytes, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// HMAC-SHA-256 (RFC 2104) of `header` then `payload`.
Sha256::Digest mac_of(const MacKey& key, const char* header, size_t header_size,
                      const char* payload, size_t payload_size) {
  uint8_t pad[64] = {};
  std::memcpy(pad, key.data(), key.size());
  for (uint8_t& b : pad)
    b ^= 0x36;
  Sha256 inner;
  inner.update(pad, sizeof(pad));
  inner.update(header, header_size);
  inner.update(payload, payload_size);
  const Sha256::Digest inner_digest = inner.finish();
  for (uint8_t& b : pad)
    b ^= 0x36 ^ 0x5c;
  Sha256 outer;
  outer.update(pad, sizeof(pad));
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

// Constant-time comparison: a forger learns nothing from how long a rejection took.
bool same(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i)
    diff |= a[i] ^ b[i];
  return diff == 0;
}

std::string temp_name(const std::string& stem) {
  static std::atomic<uint64_t> counter{0};
  uint64_t nonce = 0;
  if (!random_bytes(&nonce, sizeof(nonce))) {
    nonce = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%016llx-%llu", static_cast<unsigned long long>(nonce),
                static_cast<unsigned long long>(counter++));
  return std::string(kTempPrefix) + stem + "-" + suffix;
}

// "" when every directory above `dir` (an open directory) up to the root is one this user can
// trust, else which one is not and why: owned by root or this user, and writable by no one else
// unless its sticky bit keeps others from renaming what is not theirs (as /tmp). Whoever can
// rename an ancestor can swap the cache for another directory of the user's (OpenSSH checks
// ~/.ssh the same way). Walked by "..", so the directories checked are those the descriptor is in.
std::string distrust_ancestors(int dir, const std::string& name) {
  struct stat below {};
  if (::fstat(dir, &below) != 0) return "cannot be inspected: " + errno_text();
  Fd current(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
  std::string path = name + "/..";
  for (int depth = 0; depth < 256 && current.valid(); ++depth) {
    Fd up(::openat(current.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct stat info {};
    if (!up.valid() || ::fstat(up.get(), &info) != 0) return "cannot be inspected: " + errno_text();
    if (info.st_dev == below.st_dev && info.st_ino == below.st_ino) return "";  // the root
    if (info.st_uid != 0 && info.st_uid != ::geteuid()) {
      return "has an ancestor (" + path + ") owned by another user (uid " +
             std::to_string(info.st_uid) + ")";
    }
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
      return "has an ancestor (" + path + ") writable by group or others (mode " + mode +
             ") without the sticky bit";
    }
    below = info;
    current = std::move(up);
    path += "/..";
  }
  return "has too many ancestors to check";
}

// The cache directory, opened and checked. `missing`: it (or its parent) does not exist and
// was not to be created; `why`: why it cannot be used.
struct Opened {
  Fd fd;
  bool missing = false;
  std::string why;
};

Opened open_directory(const std::string& directory, bool create) {
  Opened out;
  const size_t slash = directory.find_last_of('/');
  const std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : directory.substr(0, slash));
  const std::string name = slash == std::string::npos ? directory : directory.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    out.why = "jit: the cache directory " + directory + " names no directory";
    return out;
  }
  if (create && !make_dirs(parent)) {
    out.why = "jit: cannot create the cache directory " + directory + " (at " + parent +
              "): " + errno_text();
    return out;
  }
  // The parent may be a link the user made (~/.cache to another disk); what it resolves to
  // is what is checked.
  Fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) {
    out.missing = errno == ENOENT;
    out.why = "jit: cannot open the cache directory " + parent + ": " + errno_text();
    return out;
  }
  struct stat info {};
  if (::fstat(parent_fd.get(), &info) != 0) {
    out.why = "jit: cannot inspect the cache directory " + parent + ": " + errno_text();
    return out;
  }
  std::string wrong = distrust(info, true);
  if (wrong.empty()) wrong = distrust_ancestors(parent_fd.get(), parent);
  if (!wrong.empty()) {
    out.why = "jit: the cache directory " + parent + " " + wrong +
              "; its entries are neither loaded nor stored (use a directory only this user can "
              "write, e.g. CUDAOPS_CACHE_DIR=~/.cache/cudaops)";
    return out;
  }
  if (create && ::mkdirat(parent_fd.get(), name.c_str(), 0700) != 0 && errno != EEXIST) {
    out.why = "jit: cannot create the cache directory " + directory + ": " + errno_text();
    return out;
  }
  out.fd =
      Fd(::openat(parent_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!out.fd.valid()) {
    out.missing = errno == ENOENT;
    out.why = errno == ELOOP || errno == ENOTDIR
                  ? "jit: the cache directory " + directory +
                        " is a symbolic link or not a directory; it is not used"
                  : "jit: cannot open the cache directory " + directory + ": " + errno_text();
    return out;
  }
  if (::fstat(out.fd.get(), &info) != 0) {
    out.fd = Fd();
    out.why = "jit: cannot inspect the cache directory " + directory + ": " + errno_text();
    return out;
  }
  wrong = distrust(info, true);
  if (!wrong.empty()) {
    out.fd = Fd();
    out.why = "jit: the cache directory " + directory + " " + wrong +
              "; its entries are neither loaded nor stored";
  }
  return out;
}

// Opens `name` in `dir` for reading, refusing what is not a regular file of this user's
// (without waiting on a FIFO or following a link). Returns an invalid Fd with `why` set, or
// `missing` when there is nothing there.
Fd open_file(int dir, const std::string& name, struct stat* info, bool* missing, std::string* why) {
  *missing = false;
  Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) {
      *missing = true;
    } else if (errno == ELOOP) {
      *why = "is a symbolic link";
    } else {
      *why = "cannot be opened: " + errno_text();
    }
    return fd;
  }
  if (::fstat(fd.get(), info) != 0) {
    *why = "cannot be inspected: " + errno_text();
    return Fd();
  }
  *why = distrust(*info, false);
  if (!why->empty()) return Fd();
  return fd;
}

// The per-user MAC key of the directory, made when missing and `create`.
bool mac_key(int dir, bool create, MacKey* key, std::string* why) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    struct stat info {};
    bool missing = false;
    Fd fd = open_file(dir, kKeyFile, &info, &missing, why);
    if (fd.valid()) {
      if ((info.st_mode & 077) != 0 || info.st_size != static_cast<off_t>(key->size())) {
        *why = "the cache's key file is readable by others or has the wrong size";
        return false;
      }
      if (!read_exact(fd.get(), reinterpret_cast<char*>(key->data()), key->size())) {
        *why = "the cache's key file cannot be read: " + errno_text();
        return false;
      }
      return true;
    }
    if (!missing) {
      *why = std::string("the cache's key file ") + *why;
      return false;
    }
    if (!create) {
      *why = "the cache has no key file";
      return false;
    }
    MacKey fresh{};
    if (!random_bytes(fresh.data(), fresh.size())) {
      *why = "no random bytes for the cache's key: " + errno_text();
      return false;
    }
    // Written whole under a temporary name, then linked into place: a racing process's key
    // wins or ours does, and both then read the one that won.
    const std::string temp = temp_name("key");
    Fd out(::openat(dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid()) {
      *why = "cannot create the cache's key file: " + errno_text();
      return false;
    }
    const bool written =
        write_all(out.get(), reinterpret_cast<const char*>(fresh.data()), fresh.size()) &&
        ::fsync(out.get()) == 0;
    out = Fd();
    const bool linked =
        written && (::linkat(dir, temp.c_str(), dir, kKeyFile, 0) == 0 || errno == EEXIST);
    ::unlinkat(dir, temp.c_str(), 0);
    if (!linked) {
      *why = "cannot write the cache's key file: " + errno_text();
      return false;
    }
  }
  *why = "the cache's key file cannot be made";
  return false;
}

struct Listed {
  std::string name;
  uint64_t bytes;
  int64_t mtime_ns;
  bool temporary;
  bool regular;
};

// The entries and temporary files of `dir` (of any type, so that clear() removes them all).
std::vector<Listed> list(int dir) {
  std::vector<Listed> entries;
  const int copy = ::dup(dir);
  if (copy < 0) return entries;
  DIR* stream = ::fdopendir(copy);
  if (stream == nullptr) {
    ::close(copy);
    return entries;
  }
  while (const dirent* item = ::readdir(stream)) {
    const std::string name = item->d_name;
    const bool temporary = name.compare(0, std::strlen(kTempPrefix), kTempPrefix) == 0;
    if (!temporary && !ends_with(name, kSuffixes[0]) && !ends_with(name, kSuffixes[1])) continue;
    struct stat info {};
    if (::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const bool regular = S_ISREG(info.st_mode);
    entries.push_back({name, regular ? static_cast<uint64_t>(info.st_size) : 0,
                       int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec, temporary,
                       regular});
  }
  ::closedir(stream);
  return entries;
}

void evict(int dir, const std::string& keep, uint64_t max_bytes) {
  std::vector<Listed> entries = list(dir);
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  uint64_t total = 0;
  std::vector<Listed> kept;
  for (const Listed& entry : entries) {
    if (entry.temporary) {
      // Left by a process that died while writing: removed after an hour.
      if (now_ns - entry.mtime_ns > int64_t{3600} * 1000000000) {
        ::unlinkat(dir, entry.name.c_str(), 0);
      }
      continue;
    }
    total += entry.bytes;
    kept.push_back(entry);
  }
  if (total <= max_bytes) return;
  std::sort(kept.begin(), kept.end(),
            [](const Listed& a, const Listed& b) { return a.mtime_ns < b.mtime_ns; });
  for (const Listed& entry : kept) {
    if (total <= max_bytes) break;
    if (entry.name == keep) continue;
    if (::unlinkat(dir, entry.name.c_str(), 0) == 0 || errno == ENOENT) total -= entry.bytes;
  }
}

}  // namespace

DiskCache::DiskCache(std::string directory, uint64_t max_bytes, std::string suffix)
    : directory_(std::move(directory)), max_bytes_(max_bytes), suffix_(std::move(suffix)) {}

std::string DiskCache::entry_path(const Sha256::Digest& key) const {
  return directory_ + "/" + Sha256::hex(key) + suffix_;
}

DiskCache::Lookup DiskCache::load(const Sha256::Digest& key, std::string* payload,
                                  std::string* why) const {
  const Opened dir = open_directory(directory_, false);
  if (dir.missing) return Lookup::kMiss;
  if (!dir.fd.valid()) {
    *why = dir.why;
    return Lookup::kUntrusted;
  }
  const std::string name = Sha256::hex(key) + suffix_;
  const std::string path = directory_ + "/" + name;
  auto corrupt = [&](const std::string& reason) {
    *why = "the entry " + reason + " (" + path + ")";
    ::unlinkat(dir.fd.get(), name.c_str(), 0);
    return Lookup::kCorrupt;
  };
  struct stat info {};
  bool missing = false;
  std::string wrong;
  const Fd fd = open_file(dir.fd.get(), name, &info, &missing, &wrong);
  if (missing) return Lookup::kMiss;
  if (!fd.valid()) return corrupt(wrong);
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size > kMaxEntryBytes) {
    return corrupt("is larger than " + std::to_string(kMaxEntryBytes) + " bytes");
  }
  if (file_size < kHeader) return corrupt("is shorter than its header");
  std::string file(static_cast<size_t>(file_size), '\0');
  if (!read_exact(fd.get(), &file[0], file.size())) return corrupt("is truncated");
  const char* p = file.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return corrupt("has no cache header");
  p += sizeof(kMagic);
  uint32_t format = 0;
  for (int i = 0; i < 4; ++i)
    format |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  if (format != kFormat) return corrupt("has another format version");
  p += 4;
  if (std::memcmp(p, key.data(), key.size()) != 0) return corrupt("is another key's");
  p += 32;
  const uint64_t size = get_u64(p);
  if (size != file.size() - kHeader) return corrupt("is truncated or too long");
  MacKey mac{};
  std::string key_why;
  if (!mac_key(dir.fd.get(), false, &mac, &key_why)) {
    return corrupt("cannot be verified: " + key_why);
  }
  const Sha256::Digest expected =
      mac_of(mac, file.data(), kMacOffset, file.data() + kHeader, static_cast<size_t>(size));
  if (!same(expected.data(), reinterpret_cast<const uint8_t*>(file.data() + kMacOffset), 32)) {
    return corrupt("has a checksum (MAC) that does not match its contents");
  }
  payload->assign(file, kHeader, static_cast<size_t>(size));
  ::futimens(fd.get(), nullptr);  // most recently used
  return Lookup::kHit;
}

Status DiskCache::store(const Sha256::Digest& key, const std::string& payload) const {
  const Opened dir = open_directory(directory_, true);
  if (!dir.fd.valid()) return Status(StatusCode::kInvalidArgument, dir.why);
  if (payload.size() > kMaxEntryBytes - kHeader) {
    return Status(StatusCode::kInvalidArgument, "jit: the entry is too large for the cache");
  }
  MacKey mac{};
  std::string why;
  if (!mac_key(dir.fd.get(), true, &mac, &why)) {
    return Status(StatusCode::kInvalidArgument, "jit: " + why + " (" + directory_ + ")");
  }
  std::string file(kMagic, sizeof(kMagic));
  for (int i = 0; i < 4; ++i)
    file.push_back(static_cast<char>(kFormat >> (8 * i)));
  file.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_u64(&file, payload.size());
  const Sha256::Digest digest =
      mac_of(mac, file.data(), file.size(), payload.data(), payload.size());
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file += payload;

  const std::string hex = Sha256::hex(key);
  const std::string name = hex + suffix_;
  const std::string temp = temp_name(hex.substr(0, 16));
  Fd fd(::openat(dir.fd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0600));
  if (!fd.valid()) {
    return Status(StatusCode::kInvalidArgument,
                  "jit: cannot write in the cache directory " + directory_ + ": " + errno_text());
  }
  const bool written = write_all(fd.get(), file.data(), file.size()) && ::fsync(fd.get()) == 0;
  const int close_error = ::close(fd.release());
  // renameat replaces whatever is at the name (a planted link included) without following it.
  if (!written || close_error != 0 ||
      ::renameat(dir.fd.get(), temp.c_str(), dir.fd.get(), name.c_str()) != 0) {
    const std::string error = errno_text();
    ::unlinkat(dir.fd.get(), temp.c_str(), 0);
    return Status(StatusCode::kInvalidArgument,
                  "jit: cannot write the cache entry " + directory_ + "/" + name + ": " + error);
  }
  evict(dir.fd.get(), name, max_bytes_);
  return Status();
}

Status DiskCache::clear() const {
  const Opened dir = open_directory(directory_, false);
  if (dir.missing) return Status();
  if (!dir.fd.valid()) return Status(StatusCode::kInvalidArgument, dir.why);
  for (const Listed& entry : list(dir.fd.get())) {
    if (::unlinkat(dir.fd.get(), entry.name.c_str(), 0) != 0 && errno != ENOENT) {
      return Status(StatusCode::kInvalidArgument,
                    "jit: cannot remove " + directory_ + "/" + entry.name + ": " + errno_text());
    }
  }
  return Status();
}

uint64_t DiskCache::size_bytes() const {
  const Opened dir = open_directory(directory_, false);
  if (!dir.fd.valid()) return 0;
  uint64_t total = 0;
  for (const Listed& entry : list(dir.fd.get())) {
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
