// Arithmetic on sizes that says when it overflows, for every product of user-given sizes.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace cudaops::detail {

/// *out = a * b; false (and *out unspecified) when it does not fit int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

/// *out = a + b; false when it does not fit int64.
inline bool checked_add(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

/// The product of `factors`, each >= 0; false when one is negative or the product does not fit.
inline bool checked_product(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t product = 1;
  for (int64_t factor : factors) {
    if (factor < 0 || !checked_mul(product, factor, &product)) return false;
  }
  *out = product;
  return true;
}

}  // namespace cudaops::detail
