#pragma once

// The one way this project opens a file it reads (array files, saved indexes, .npy inputs): one
// open that follows no link and cannot block on a FIFO, then fstat of that descriptor, so that
// what is checked is what is read (a path swapped between a stat and an open is never read).
// Header-only, so that the development kit's readers share it with the library's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace cudaops::detail {

/// Reads `bytes` bytes at `offset` of `fd` into dst (in pieces of at most 1 GiB, again after an
/// interruption); false on a short read or an error.
inline bool read_fully(int fd, uint64_t offset, void* dst, size_t bytes) {
  auto* p = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const size_t piece = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    const ssize_t n = ::pread(fd, p, piece, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

/// A read-only descriptor, closed with the object.
class TrustedFile {
 public:
  TrustedFile() = default;
  TrustedFile(const TrustedFile&) = delete;
  TrustedFile& operator=(const TrustedFile&) = delete;
  TrustedFile(TrustedFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  TrustedFile& operator=(TrustedFile&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = other.fd_;
      size_ = other.size_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~TrustedFile() { close(); }

  /// Opens `path`: O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then the descriptor must be a regular file
  /// and, with `owned`, owned by the effective user and writable by no one else. On refusal returns
  /// false with `why` ("is a symbolic link; refused", ...), the path not named in it.
  bool open(const std::string& path, bool owned, std::string* why) {
    close();
    fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      const int error = errno;
      *why = error == ELOOP ? std::string("is a symbolic link; refused")
                            : "cannot open: " + std::string(std::strerror(error));
      return false;
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      return fail("cannot stat: " + std::string(std::strerror(errno)), why);
    if (!S_ISREG(st.st_mode)) return fail("is not a regular file; refused", why);
    if (owned && st.st_uid != ::geteuid()) {
      return fail("is owned by user " + std::to_string(st.st_uid) + ", not by this user (" +
                      std::to_string(::geteuid()) + "); refused",
                  why);
    }
    if (owned && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return fail("is writable by its group or others; refused", why);
    }
    size_ = static_cast<uint64_t>(st.st_size);
    return true;
  }

  /// Reads `bytes` bytes at `offset` into dst (in pieces of at most 1 GiB); false on a short read.
  bool read_at(uint64_t offset, void* dst, size_t bytes) const {
    return read_fully(fd_, offset, dst, bytes);
  }

  int fd() const { return fd_; }
  /// The size fstat gave at open.
  uint64_t size() const { return size_; }
  /// Gives up the descriptor (the caller closes it).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  bool fail(std::string text, std::string* why) {
    *why = std::move(text);
    close();
    return false;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace cudaops::detail
