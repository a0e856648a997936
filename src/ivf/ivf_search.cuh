#pragma once

// The IVF index's search (docs/ivf.md), included by one translation unit per keys' dtype
// (ivf_search_<dtype>.cu). On the caller's stream:
//   cluster scores: q . c for every query row and cluster of its kv head (a warp per pair),
//                   -inf for empty clusters;
//   probes:         the n_probe best clusters per row (topk, ties to the lower cluster);
//   candidates:     a block per row places the probed clusters' tokens one after another (in
//                   probe order, cluster order within one), scores each exactly (a warp per
//                   token) and pads the list with (-inf, -1);
//   the best:       the k best candidates (topk), mapped to token positions.
#include <cub/block/block_scan.cuh>

#include <cmath>

#include "core/launch.h"
#include "cudaops/topk.h"
#include "ivf/ivf_plan.h"
#include "kmeans/kmeans_device.cuh"

namespace cudaops::detail::ivf {
namespace {

constexpr const char* kSearch = "ivf_search";

using kmeans::blocks_for;
using kmeans::warp_sum;

/// q . row over d values (lane l takes columns l, l + 32, ...), in float32, the same order every
/// run.
template <typename T, typename C>
__device__ __forceinline__ float dot(const T* q, const C* row, int d, int lane) {
  float s = 0.0f;
  for (int e = lane; e < d; e += 32)
    s = fmaf(to_float(q[e]), to_float(row[e]), s);
  return warp_sum(s);
}

/// A warp per (query row, cluster): its score, -inf where the cluster is empty or not held.
template <typename T>
__global__ void __launch_bounds__(256)
    cluster_scores_kernel(const T* queries, const float* centroids, const int32_t* sizes,
                          int64_t rows, int64_t n_queries, int64_t group, int64_t max_clusters,
                          int64_t n_clusters, int d, float* scores) {
  const int64_t item = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= rows * n_clusters) return;
  const int64_t r = item / n_clusters, j = item % n_clusters;
  const int64_t h = (r / n_queries) / group;  // the query head's kv head
  const int64_t slot = h * max_clusters + j;
  const float s = dot(queries + r * d, centroids + slot * d, d, lane);
  if (lane == 0) scores[r * n_clusters + j] = sizes[slot] > 0 ? s : -INFINITY;
}

/// A block per query row: the probed clusters' tokens placed one after another and scored, the
/// list padded with (-inf, -1) to max_candidates.
template <typename T>
__global__ void __launch_bounds__(256)
    candidates_kernel(const T* queries, const int32_t* probes, const int64_t* offsets,
                      const int32_t* ids, const T* keys, int64_t n_queries, int64_t group,
                      int64_t max_clusters, int64_t capacity, int64_t n_probe, int d,
                      int64_t max_candidates, float* cand_scores, int32_t* cand_ids) {
  extern __shared__ int64_t place[];  // n_probe + 1: each probe's first place in the list
  const int64_t r = blockIdx.x;
  const int64_t h = (r / n_queries) / group;
  const int32_t* probe = probes + r * n_probe;
  const int64_t* off = offsets + h * (max_clusters + 1);
  // The places: an exclusive scan of the probed clusters' sizes, a block's width of probes at a
  // time (every size loaded at once rather than one after another).
  using Scan = cub::BlockScan<int64_t, 256>;
  __shared__ typename Scan::TempStorage scan;
  int64_t carry = 0;
  for (int64_t p0 = 0; p0 < n_probe; p0 += 256) {
    const int64_t p = p0 + threadIdx.x;
    int64_t size = 0;
    if (p < n_probe) {
      const int32_t j = probe[p];
      if (j >= 0 && j < max_clusters) size = off[j + 1] - off[j];
    }
    int64_t before = 0, sum = 0;
    Scan(scan).ExclusiveSum(size, before, sum);
    if (p < n_probe) place[p] = carry + before;
    carry += sum;
    __syncthreads();  // the scan's storage is used again
  }
  if (threadIdx.x == 0) place[n_probe] = carry;
  __syncthreads();
  const int64_t total = min(place[n_probe], max_candidates);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* q = queries + r * d;
  float* out_scores = cand_scores + r * max_candidates;
  int32_t* out_ids = cand_ids + r * max_candidates;
  // Candidate i: the probe whose range holds it (a binary search of the places), then its token.
  for (int64_t i = warp; i < total; i += blockDim.x / 32) {
    int64_t lo = 0, hi = n_probe - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (place[mid] <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const int32_t j = probe[lo];
    const int64_t at = h * capacity + off[j] + (i - place[lo]);
    const float s = dot(q, keys + at * d, d, lane);
    if (lane == 0) {
      out_scores[i] = s;
      out_ids[i] = ids[at];
    }
  }
  for (int64_t i = total + threadIdx.x; i < max_candidates; i += blockDim.x) {
    out_scores[i] = -INFINITY;
    out_ids[i] = -1;
  }
}

/// The k best candidates' token positions; -1 where the score is -inf (padding).
__global__ void best_ids_kernel(const int32_t* best, const int32_t* cand_ids, const float* scores,
                                int64_t rows, int64_t k, int64_t max_candidates, int64_t* ids) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * k) return;
  const int64_t r = i / k;
  ids[i] = scores[i] == -INFINITY ? -1 : cand_ids[r * max_candidates + best[i]];
}

}  // namespace

template <typename T>
Status launch_search(const SearchCall& call, cudaStream_t stream) {
  const IvfShape& s = call.shape;
  const SearchLayout& w = call.layout;
  unsigned char* ws = call.workspace;
  const unsigned char* ix = call.buffer;
  const int d = static_cast<int>(s.dim);
  const int64_t rows = call.q_heads * call.n_queries;
  const int64_t group = call.q_heads / s.heads;
  const T* queries = static_cast<const T*>(call.queries);
  auto* cluster_scores = reinterpret_cast<float*>(ws + w.cluster_scores);
  auto* probe_scores = reinterpret_cast<float*>(ws + w.probe_scores);
  auto* probes = reinterpret_cast<int32_t*>(ws + w.probes);
  auto* cand_scores = reinterpret_cast<float*>(ws + w.cand_scores);
  auto* cand_ids = reinterpret_cast<int32_t*>(ws + w.cand_ids);
  auto* best = reinterpret_cast<int32_t*>(ws + w.best);

  cluster_scores_kernel<T><<<blocks_for(rows * call.n_clusters, 8), 256, 0, stream>>>(
      queries, reinterpret_cast<const float*>(ix + call.index.centroids),
      reinterpret_cast<const int32_t*>(ix + call.index.sizes), rows, call.n_queries, group,
      s.max_clusters, call.n_clusters, d, cluster_scores);
  if (Status st = check_launch(kSearch, stream); !st.ok()) return st;
  TopkOptions by_rank;
  by_rank.index_dtype = DType::kInt32;
  if (Status st = topk({cluster_scores, call.n_clusters}, {probe_scores, call.n_probe},
                       {probes, call.n_probe}, rows, call.n_clusters, call.n_probe, DType::kFloat32,
                       by_rank, ws + w.topk, w.topk_bytes, stream);
      !st.ok()) {
    return st;
  }
  const size_t smem = static_cast<size_t>(call.n_probe + 1) * sizeof(int64_t);
  const auto candidates = candidates_kernel<T>;
  if (Status st = allow_dynamic_smem(kSearch, reinterpret_cast<const void*>(candidates), smem);
      !st.ok()) {
    return st;
  }
  candidates<<<static_cast<unsigned>(rows), 256, smem, stream>>>(
      queries, probes, reinterpret_cast<const int64_t*>(ix + call.index.offsets),
      reinterpret_cast<const int32_t*>(ix + call.index.ids),
      reinterpret_cast<const T*>(ix + call.index.keys), call.n_queries, group, s.max_clusters,
      s.capacity, call.n_probe, d, call.max_candidates, cand_scores, cand_ids);
  if (Status st = check_launch(kSearch, stream); !st.ok()) return st;
  if (Status st = topk({cand_scores, call.max_candidates}, {call.scores, call.k}, {best, call.k},
                       rows, call.max_candidates, call.k, DType::kFloat32, by_rank, ws + w.topk,
                       w.topk_bytes, stream);
      !st.ok()) {
    return st;
  }
  best_ids_kernel<<<blocks_for(rows * call.k, 256), 256, 0, stream>>>(
      best, cand_ids, call.scores, rows, call.k, call.max_candidates, call.ids);
  return check_launch(kSearch, stream);
}

#define CUDAOPS_IVF_SEARCH_INSTANTIATE(T) \
  template Status launch_search<T>(const SearchCall& call, cudaStream_t stream);

}  // namespace cudaops::detail::ivf
