// The JIT's disk cache: one file per key, written atomically, verified on every read.
//
// File: "CDOPJIT1", format version (u32), the key's digest (32 bytes), payload size (u64),
// SHA-256 of the payload (32 bytes), payload. It is written to a temporary file in the same
// directory, flushed and renamed over <key>.entry, so a reader sees a whole entry or none; two
// processes storing one key both succeed (the last rename wins, with the same contents), and
// nothing is locked. An entry that fails to verify (truncated, altered, another key's) is removed
// and reported as corrupt. Hits refresh the entry's time; stores evict the oldest entries beyond
// the size bound.
#pragma once

#include <cstdint>
#include <string>

#include "cudaops/status.h"
#include "jit/sha256.h"

namespace cudaops::jit::detail {

class DiskCache {
 public:
  enum class Lookup { kHit, kMiss, kCorrupt };

  /// `directory`: where the entries live (created on the first store, owner-only).
  DiskCache(std::string directory, uint64_t max_bytes);

  const std::string& directory() const { return directory_; }
  std::string entry_path(const Sha256::Digest& key) const;

  /// Reads and verifies the entry of `key`. kCorrupt: it existed, failed to verify (`why` says
  /// how) and was removed.
  Lookup load(const Sha256::Digest& key, std::string* payload, std::string* why) const;

  /// Writes the entry atomically, then evicts the oldest entries while the directory holds
  /// more than max_bytes (never the entry just written).
  Status store(const Sha256::Digest& key, const std::string& payload) const;

  /// Removes every entry and every temporary file of the directory.
  Status clear() const;

  /// Total bytes of the entries.
  uint64_t size_bytes() const;

 private:
  void evict(const std::string& keep) const;
  std::string directory_;
  uint64_t max_bytes_;
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
