#pragma once

// Each cluster's mean key (original coordinates, rounded to the keys' dtype), which the decode
// attention's estimate scores a cluster by (ivf_attention.cuh). Written after the build's and
// the extension's placement, and after a load, from the keys in cluster order: a warp per
// (head, cluster) adds its rows in row order (the same bits every run).
#include <type_traits>

#include "core/launch.h"
#include "device/numeric.cuh"
#include "device/vector.cuh"
#include "device/warp.cuh"
#include "ivf/ivf_plan.h"

namespace cudaops::detail::ivf {
namespace {

constexpr int kMeansWarps = 8;

/// Warp (blockIdx.x * kMeansWarps + warp) takes cluster first + i of head blockIdx.y: kL lanes a
/// row (16-byte pieces, kP of them a lane: d <= 8 * kL * kP), 32 / kL rows a step; the row
/// groups' sums added in a fixed order.
template <typename T, int kL, int kP>
__global__ void __launch_bounds__(kMeansWarps * 32)
    key_means_kernel(const int64_t* offsets, const T* keys, int64_t capacity, int64_t max_clusters,
                     int64_t first, int64_t count, int d, T* means) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kMeansWarps + warp;
  if (i >= count) return;
  const int64_t h = blockIdx.y, c = first + i;
  const int64_t* off = offsets + h * (max_clusters + 1);
  const int64_t begin = off[c], end = off[c + 1];
  const T* head = keys + h * capacity * d;
  const int pieces = d / 8;
  const int sub = lane % kL, row0 = lane / kL;
  constexpr int kRows = 32 / kL;
  float acc[kP][8];
#pragma unroll
  for (int p = 0; p < kP; ++p) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      acc[p][e] = 0.0f;
  }
  for (int64_t r = begin + row0; r < end; r += kRows) {
#pragma unroll
    for (int p = 0; p < kP; ++p) {
      const int piece = sub + p * kL;
      if (piece < pieces) {
        const Vec<T, 8> v = load_vec<T, 8>(head + r * d + piece * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[p][e] += to_float(v.v[e]);
      }
    }
  }
  // The row groups' sums, the lower group first, so that every run adds in the same order.
#pragma unroll
  for (int o = kL; o < 32; o <<= 1) {
#pragma unroll
    for (int p = 0; p < kP; ++p) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float other = __shfl_xor_sync(kFull, acc[p][e], o);
        acc[p][e] = (lane & o) != 0 ? other + acc[p][e] : acc[p][e] + other;
      }
    }
  }
  if (row0 != 0) return;
  const int64_t n = end - begin;
  const float inv = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  T* out = means + (h * max_clusters + c) * d;
#pragma unroll
  for (int p = 0; p < kP; ++p) {
    const int piece = sub + p * kL;
    if (piece < pieces) {
      Vec<T, 8> v;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v.v[e] = from_float<T>(acc[p][e] * inv);
      *reinterpret_cast<Vec<T, 8>*>(out + piece * 8) = v;
    }
  }
}

}  // namespace

/// The mean keys of clusters [first, first + count) of every head of the index at `buffer`.
template <typename T>
Status launch_key_means(const char* op, const IvfShape& s, const IvfLayout& index,
                        unsigned char* buffer, int64_t first, int64_t count, cudaStream_t stream) {
  if (count <= 0) return Status();
  const dim3 grid(static_cast<unsigned>((count + kMeansWarps - 1) / kMeansWarps),
                  static_cast<unsigned>(s.heads));
  const auto* offsets = reinterpret_cast<const int64_t*>(buffer + index.offsets);
  const auto* keys = reinterpret_cast<const T*>(buffer + index.keys);
  auto* means = reinterpret_cast<T*>(buffer + index.key_means);
  const int d = static_cast<int>(s.dim), pieces = d / 8;
  const auto with = [&](auto lanes, auto per_lane) {
    constexpr int kL = decltype(lanes)::value, kP = decltype(per_lane)::value;
    key_means_kernel<T, kL, kP><<<grid, kMeansWarps * 32, 0, stream>>>(
        offsets, keys, s.capacity, s.max_clusters, first, count, d, means);
    return check_launch(op, stream);
  };
  using I = std::integral_constant<int, 1>;
  if (pieces <= 8) return with(std::integral_constant<int, 8>{}, I{});
  if (pieces <= 16) return with(std::integral_constant<int, 16>{}, I{});
  if (pieces <= 32) return with(std::integral_constant<int, 32>{}, I{});
  return with(std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{});
}

}  // namespace cudaops::detail::ivf
