// SHA-256 (FIPS 180-4), for the JIT cache's keys and entry checksums.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cudaops::jit::detail {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  /// A field of a key: its length first, so that ("ab", "c") and ("a", "bc") differ.
  void field(std::string_view text);
  void field(uint64_t value);
  Digest finish();

  static Digest of(const void* data, size_t size);
  static std::string hex(const Digest& digest);

 private:
  void block(const uint8_t* data);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

}  // namespace cudaops::jit::detail
