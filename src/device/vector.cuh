#pragma once

#include <cstdint>

namespace cudaops::detail {

/// N elements of T moved as one aligned access: 16 bytes gives LDG.E.128 / STG.E.128.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

/// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& x) {
  *reinterpret_cast<Vec<T, N>*>(p) = x;
}

inline uintptr_t address(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace cudaops::detail
