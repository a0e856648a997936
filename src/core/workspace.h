#pragma once

// The one carver of a call's workspace: pieces laid end to end in the caller's blob, each starting
// on a 256-byte boundary (CUB's habit: every piece aligned for any access, cudaMalloc's alignment
// kept). Every size is a product checked for overflow; the total stays below 2^62 bytes, so that
// an offset plus a size never wraps.
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/checked.h"

namespace cudaops::detail {

/// Where a piece lies in the workspace.
struct Piece {
  size_t offset = 0;
  size_t bytes = 0;
};

class WorkspaceCarver {
 public:
  static constexpr size_t kAlign = 256;
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 62;

  /// A piece of the product of `factors` bytes (each factor >= 0); an empty piece, and overflow()
  /// true from then on, where the product or the total would pass kMaxBytes.
  Piece piece(std::initializer_list<int64_t> factors) {
    int64_t bytes = 0;
    if (overflow_ || !checked_product(factors, &bytes) ||
        static_cast<uint64_t>(bytes) > kMaxBytes - offset_) {
      overflow_ = true;
      return {};
    }
    const Piece p{offset_, static_cast<size_t>(bytes)};
    offset_ += (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
    return p;
  }
  /// The offset of a piece of the product of `factors` bytes (piece() without its size).
  size_t add(std::initializer_list<int64_t> factors) { return piece(factors).offset; }

  /// The bytes carved so far (a multiple of kAlign); meaningless once overflow() is true.
  size_t bytes() const { return offset_; }
  bool overflow() const { return overflow_; }
  /// Marks the carving as overflowed (a size computed outside piece() did not fit).
  void set_overflow() { overflow_ = true; }

 private:
  size_t offset_ = 0;
  bool overflow_ = false;
};

}  // namespace cudaops::detail
