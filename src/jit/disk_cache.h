// The JIT's disk cache: one file per key, written atomically, trusted only when this user alone
// could have written it, verified on every read.
//
// Trust: the directory and its parent must be directories owned by the effective user and not
// writable by group or others; the cache's own directory is opened without following a
// symbolic link and every entry is reached through that descriptor (openat), so the checked
// directory is the one used. An entry must be a regular file owned by the user, not writable by
// group or others, no larger than kMaxEntryBytes; it is opened non-blocking and without
// following links (a FIFO or a link there is refused, not waited on).
//
// File: "CDOPJIT2", format version (u32), the key's digest (32 bytes), payload size (u64),
// HMAC-SHA-256 of everything before it and the payload under a per-user key (32 bytes), payload.
// The key is 32 random bytes in <directory>/mac.key (0600), made on the first store: an entry
// computed by anyone without that file (another user who knows the source, a copied cache) does
// not verify. Writes go to a temporary file created exclusively (O_EXCL, random name), flushed
// and renamed over <key>.entry (or .note), so a reader sees a whole entry or none; two processes
// storing one key both succeed, and nothing is locked. An entry that fails a check is removed and
// reported as corrupt. Hits refresh the entry's time; stores evict the oldest entries beyond the
// size bound.
#pragma once

#include <cstdint>
#include <string>

#include "cudaops/status.h"
#include "jit/sha256.h"

namespace cudaops::jit::detail {

class DiskCache {
 public:
  /// kUntrusted: the directory failed the ownership/permission checks (`why` says which);
  /// nothing was read, written or removed.
  enum class Lookup { kHit, kMiss, kCorrupt, kUntrusted };

  static constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 28;

  /// `directory`: where the entries live (created on the first store, owner-only, as is its
  /// parent when missing). `suffix`: of this cache's files, ".entry" (kernels) or ".note"
  /// (facts remembered beside them); clear(), eviction and size_bytes() cover both.
  DiskCache(std::string directory, uint64_t max_bytes, std::string suffix = ".entry");

  const std::string& directory() const { return directory_; }
  std::string entry_path(const Sha256::Digest& key) const;

  /// Reads and verifies the entry of `key`. kCorrupt: it existed, failed to verify (`why` says
  /// how) and was removed.
  Lookup load(const Sha256::Digest& key, std::string* payload, std::string* why) const;

  /// Writes the entry atomically, then evicts the oldest entries while the directory holds
  /// more than max_bytes (never the entry just written).
  Status store(const Sha256::Digest& key, const std::string& payload) const;

  /// Removes every entry and every temporary file of the directory (the MAC key stays).
  Status clear() const;

  /// Total bytes of the entries.
  uint64_t size_bytes() const;

 private:
  std::string directory_;
  uint64_t max_bytes_;
  std::string suffix_;
};

/// Little-endian field codec for payloads.
class PayloadWriter {
 public:
  void u64(uint64_t value);
  void f64(double value);
  void bytes(const std::string& value);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class PayloadReader {
 public:
  explicit PayloadReader(const std::string& in) : in_(in) {}
  bool u64(uint64_t* value);
  bool f64(double* value);
  bool bytes(std::string* value);
  bool at_end() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace cudaops::jit::detail
