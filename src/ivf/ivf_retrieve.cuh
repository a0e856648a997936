#pragma once

// The IVF index's retrieval (docs/ivf.md): the clusters each row attends to exactly and their
// tokens gathered into padded blocks, included after ivf_search.cuh (whose cluster scores and
// probe selection it shares) by one translation unit per keys' dtype. On the caller's stream:
//   cluster scores: q . c / sqrt(D) per query row (grouped: softmax weights per query row,
//                   summed over each kv head's query heads; empty clusters at -inf);
//   probes:         the n_probe best per row, ascending, with their first tokens and places;
//   gather:         a retrieval copies each row's tokens (keys, values, positions) into its block,
//                   zeros and -1 past its length.
#include <cub/block/block_reduce.cuh>

#include <cmath>

#include "ivf/ivf_search.cuh"

namespace cudaops::detail::ivf {
namespace {

constexpr const char* kRetrieve = "ivf_retrieve";
constexpr int kStatsThreads = 256;
constexpr int kGatherThreads = 256;
constexpr int kGatherTokens = 64;  // block places per block

/// A block per query row: its largest score and 1 / the sum of exp(score - largest) over its
/// clusters (0 when every cluster is empty).
__global__ void __launch_bounds__(kStatsThreads)
    softmax_stats_kernel(const float* scores, int64_t n_clusters, float* stats) {
  using Reduce = cub::BlockReduce<float, kStatsThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  __shared__ float top;
  follow_prior_kernels();
  const float* row = scores + blockIdx.x * n_clusters;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n_clusters; j += kStatsThreads)
    m = fmaxf(m, row[j]);
  m = Reduce(reduce).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) top = m;
  __syncthreads();
  const float largest = top;
  float sum = 0.0f;
  if (largest != -INFINITY) {
    for (int64_t j = threadIdx.x; j < n_clusters; j += kStatsThreads)
      sum += expf(row[j] - largest);  // exp(-inf) = 0 for empty clusters
  }
  sum = Reduce(reduce).Sum(sum);
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = largest;
    stats[2 * blockIdx.x + 1] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
}

/// Row h * Q + q, cluster j: the softmax weight of j summed over kv head h's query heads (in
/// order, so the same bits every run); -inf for an empty cluster.
__global__ void group_scores_kernel(const float* scores, const float* stats, const int32_t* sizes,
                                    int64_t heads, int64_t group, int64_t n_queries,
                                    int64_t max_clusters, int64_t n_clusters, float* out) {
  follow_prior_kernels();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= heads * n_queries * n_clusters) return;
  const int64_t o = i / n_clusters, j = i % n_clusters;
  const int64_t h = o / n_queries, q = o % n_queries;
  float sum = 0.0f;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t r = (h * group + g) * n_queries + q;
    const float s = scores[r * n_clusters + j];
    if (s != -INFINITY) sum += expf(s - stats[2 * r]) * stats[2 * r + 1];
  }
  out[i] = sizes[h * max_clusters + j] > 0 ? sum : -INFINITY;
}

/// A row's places [y * kGatherTokens, ...) of its block (blockIdx.x the row): half a warp per
/// place copies its token's key and value in 16-byte pieces and writes its position; places
/// past the row's length get zeros and -1.
template <typename T>
__global__ void __launch_bounds__(kGatherThreads)
    gather_kernel(const int64_t* starts, const int64_t* places, const int64_t* lengths,
                  const T* keys, const T* values, const int32_t* ids, int64_t n_queries,
                  int64_t group, int64_t capacity, int64_t n_probe, int d, int dv,
                  int64_t max_tokens, T* out_keys, T* out_values, int64_t* out_ids) {
  follow_prior_kernels();
  const int64_t r = blockIdx.x;
  const int64_t h = (r / n_queries) / group;
  const int64_t len = lengths[r];
  const int64_t* place = places + r * (n_probe + 1);
  const int half = threadIdx.x / 16, lane = threadIdx.x % 16;
  for (int64_t i0 = blockIdx.y * int64_t{kGatherTokens}; i0 < max_tokens;
       i0 += gridDim.y * int64_t{kGatherTokens}) {
    const int64_t end = min(i0 + kGatherTokens, max_tokens);
    for (int64_t i = i0 + half; i < end; i += kGatherThreads / 16) {
      int64_t at = -1;  // the token's slot in its head
      if (i < len) {
        int64_t lo = 0, hi = n_probe - 1;  // the last probe placed at or before i
        while (lo < hi) {
          const int64_t mid = (lo + hi + 1) / 2;
          if (place[mid] <= i) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        at = h * capacity + starts[r * n_probe + lo] + (i - place[lo]);
      }
      const int64_t slot = r * max_tokens + i;
      // 16-byte pieces as four words: zeros past the length.
      for (int c = lane; c < d / 8; c += 16) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (at >= 0) v = *reinterpret_cast<const uint4*>(keys + at * d + c * 8);
        *reinterpret_cast<uint4*>(out_keys + slot * d + c * 8) = v;
      }
      if (out_values != nullptr) {
        for (int c = lane; c < dv / 8; c += 16) {
          uint4 v = make_uint4(0, 0, 0, 0);
          if (at >= 0) v = *reinterpret_cast<const uint4*>(values + at * dv + c * 8);
          *reinterpret_cast<uint4*>(out_values + slot * dv + c * 8) = v;
        }
      }
      if (lane == 0) out_ids[slot] = at >= 0 ? ids[at] : -1;
    }
  }
}

/// The ranking of clusters a retrieval or a decode attention chooses by, for every query row:
/// the search's cluster scores (q . c / sqrt(D) with `group`, else q . c) and, with `group`, the
/// softmax weights summed over each kv head's query heads (rows (kv head, query)). *ranked: the
/// scores ranked, [rows, n_clusters] (cluster_scores, or grouped).
template <typename T>
Status launch_ranking(const char* op, const IvfShape& s, const IvfLayout& index,
                      const unsigned char* ix, const T* queries, int64_t q_heads, int64_t n_queries,
                      int64_t n_clusters, bool group, float* cluster_scores, float* stats,
                      float* grouped, const float** ranked, cudaStream_t stream) {
  const float scale = group ? 1.0f / std::sqrt(static_cast<float>(s.dim)) : 1.0f;
  if (Status st = launch_cluster_scores(op, s, index, ix, queries, q_heads, n_queries, n_clusters,
                                        scale, cluster_scores, stream);
      !st.ok()) {
    return st;
  }
  *ranked = cluster_scores;
  if (!group) return Status();
  const int64_t query_rows = q_heads * n_queries, rows = s.heads * n_queries;
  if (Status st = launch_after(op, softmax_stats_kernel, dim3(static_cast<unsigned>(query_rows)),
                               kStatsThreads, 0, stream, static_cast<const float*>(cluster_scores),
                               n_clusters, stats);
      !st.ok()) {
    return st;
  }
  if (Status st = launch_after(op, group_scores_kernel, dim3(blocks_for(rows * n_clusters, 256)),
                               256, 0, stream, static_cast<const float*>(cluster_scores),
                               static_cast<const float*>(stats),
                               reinterpret_cast<const int32_t*>(ix + index.sizes), s.heads,
                               q_heads / s.heads, n_queries, s.max_clusters, n_clusters, grouped);
      !st.ok()) {
    return st;
  }
  *ranked = grouped;
  return Status();
}

}  // namespace

template <typename T>
Status launch_probe(const ProbeCall& call, cudaStream_t stream) {
  const IvfShape& s = call.shape;
  const ProbeLayout& w = call.layout;
  unsigned char* ws = call.workspace;
  const unsigned char* ix = call.buffer;
  const char* op = call.clusters != nullptr ? "ivf_clusters" : kRetrieve;
  const int64_t query_rows = call.q_heads * call.n_queries;
  if (query_rows == 0) return Status();
  const int64_t group = call.q_heads / s.heads;
  const int64_t rows = call.group ? s.heads * call.n_queries : query_rows;
  const T* queries = static_cast<const T*>(call.queries);
  const float* ranked = nullptr;
  if (Status st = launch_ranking(
          op, s, call.index, ix, queries, call.q_heads, call.n_queries, call.n_clusters, call.group,
          reinterpret_cast<float*>(ws + w.cluster_scores), reinterpret_cast<float*>(ws + w.stats),
          reinterpret_cast<float*>(ws + w.group_scores), &ranked, stream);
      !st.ok()) {
    return st;
  }
  // Rows of the ranking: per (kv head, query), or per (query head, query) as the search's.
  const int64_t row_group = call.group ? 1 : group;
  auto* probes =
      call.clusters != nullptr ? call.clusters : reinterpret_cast<int32_t*>(ws + w.probes);
  auto* starts = reinterpret_cast<int64_t*>(ws + w.starts);
  auto* places = reinterpret_cast<int64_t*>(ws + w.places);
  auto* lengths =
      call.clusters != nullptr ? reinterpret_cast<int64_t*>(ws + w.lengths) : call.out.lengths;
  if (Status st =
          launch_probes(op, rows, ranked, reinterpret_cast<const int64_t*>(ix + call.index.offsets),
                        call.n_clusters, call.n_queries, row_group, s.max_clusters, call.n_probe,
                        call.max_tokens, probes, starts, places, lengths, stream);
      !st.ok()) {
    return st;
  }
  if (call.clusters != nullptr) return Status();
  const int64_t tiles = (call.max_tokens + kGatherTokens - 1) / kGatherTokens;
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>(std::min<int64_t>(tiles, 65535)));
  return launch_after(
      op, gather_kernel<T>, grid, kGatherThreads, 0, stream, static_cast<const int64_t*>(starts),
      static_cast<const int64_t*>(places), static_cast<const int64_t*>(lengths),
      reinterpret_cast<const T*>(ix + call.index.keys),
      reinterpret_cast<const T*>(ix + call.index.values),
      reinterpret_cast<const int32_t*>(ix + call.index.ids), call.n_queries, row_group, s.capacity,
      call.n_probe, static_cast<int>(s.dim), static_cast<int>(s.value_dim), call.max_tokens,
      static_cast<T*>(call.out.keys), static_cast<T*>(call.out.values), call.out.ids);
}

#define CUDAOPS_IVF_PROBE_INSTANTIATE(T) \
  template Status launch_probe<T>(const ProbeCall& call, cudaStream_t stream);

}  // namespace cudaops::detail::ivf
