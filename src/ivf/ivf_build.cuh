#pragma once

// The IVF index's build (docs/ivf.md), included by one translation unit per keys' dtype
// (ivf_build_<dtype>.cu). On the caller's stream:
//   means:     each head's mean key (row ranges' column sums added in a fixed order), and the
//              segments' row offsets;
//   centring:  the keys less their head's mean, rounded to the keys' dtype, into the index's
//              keys (the placement overwrites them last);
//   k-means:   every (head, segment) of the centred keys on its own, spherical, by offsets (one
//              batched call);
//   labels:    the global pass (kmeans_assign of the centred keys against all of the head's
//              clusters; from 4096 clusters pruned, ivf_prune_<dtype>.cu), or each segment's
//              labels moved past the clusters of the segments before it;
//   grouping:  each head's tokens by cluster, ascending within one (k-means' stable sort);
//   the index: CSR offsets, sizes and the largest, the centroids (float32 and the keys' dtype),
//              ids, keys and values copied in cluster order, each cluster's value sum in order.
#include "core/launch.h"
#include "core/launch_config.h"
#include "device/cluster.cuh"
#include "device/vector.cuh"
#include "engine/kmeans_update.cuh"
#include "ivf/ivf_means.cuh"
#include "ivf/ivf_plan.h"

namespace cudaops::detail::ivf {
namespace {

using kmeans::Rows;
using kmeans::rows_of;

constexpr const char* kOp = "ivf_build";

/// Adds the 16-byte piece at `column` of rows r, r + stride, ... below `end` (rows `ld` values
/// apart) into acc, in row order, with kU loads in flight before any is added.
template <int kU, typename T>
__device__ __forceinline__ void add_rows(const T* column, int64_t ld, int64_t r, int64_t end,
                                         int64_t stride, float (&acc)[8]) {
  for (; r + (kU - 1) * stride < end; r += kU * stride) {
    Vec<T, 8> x[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      x[u] = load_vec<T, 8>(column + (r + u * stride) * ld);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] += to_float(x[u].v[e]);
    }
  }
  for (; r < end; r += stride) {
    const Vec<T, 8> x = load_vec<T, 8>(column + r * ld);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      acc[e] += to_float(x.v[e]);
  }
}

/// Column sums of the rows of part blockIdx.y (of kMeanParts) of head blockIdx.x, into
/// parts[h, part, :]: P = d / 8 lanes a row, each adding its 16-byte piece of every
/// (256 / P)-th row in row order; the row slots' sums are then added in order.
template <typename T>
__global__ void __launch_bounds__(256)
    head_sums_kernel(const T* keys, int64_t seq, int d, float* parts) {
  __shared__ float slot_sums[256 * 8];  // [row slot, d]
  const int pieces = d / 8, slots = 256 / pieces;
  const int slot = static_cast<int>(threadIdx.x) / pieces, piece = threadIdx.x % pieces;
  const int64_t h = blockIdx.x, per = (seq + kMeanParts - 1) / kMeanParts;
  const int64_t first = min(seq, per * blockIdx.y), last = min(seq, first + per);
  const T* head = keys + h * seq * d;
  float acc[8] = {};
  if (slot < slots) {
    add_rows<4>(head + piece * 8, d, first + slot, last, slots, acc);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      slot_sums[slot * d + piece * 8 + e] = acc[e];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < d; c += 256) {
    float total = 0.0f;
    for (int q = 0; q < slots; ++q)
      total += slot_sums[q * d + c];
    parts[(h * kMeanParts + blockIdx.y) * d + c] = total;
  }
}

/// Each head's mean from its parts' sums, added in order.
__global__ void __launch_bounds__(256)
    head_means_kernel(const float* parts, int64_t seq, int d, float* means) {
  const int64_t h = blockIdx.x;
  for (int c = threadIdx.x; c < d; c += 256) {
    float total = 0.0f;
    for (int q = 0; q < kMeanParts; ++q)
      total += parts[(h * kMeanParts + q) * d + c];
    means[h * d + c] = total / static_cast<float>(seq);
  }
}

/// The keys of head blockIdx.x less the head's mean, rounded to T, into `out` (the same [H, S, D]
/// layout): each thread keeps one 16-byte piece of the row and its 8 means, and walks the rows
/// of its block (blockIdx.y of gridDim.y).
template <typename T>
__global__ void __launch_bounds__(256)
    center_kernel(const T* keys, int64_t seq, int d, const float* means, T* out) {
  const int pieces = d / 8, rows = 256 / pieces;
  const int slot = static_cast<int>(threadIdx.x) / pieces, piece = threadIdx.x % pieces;
  if (slot >= rows) return;
  const int64_t h = blockIdx.x;
  float mu[8];
#pragma unroll
  for (int e = 0; e < 8; ++e)
    mu[e] = means[h * d + piece * 8 + e];
  const int64_t step = static_cast<int64_t>(gridDim.y) * rows;
  const T* in = keys + h * seq * d + piece * 8;
  T* to = out + h * seq * d + piece * 8;
  constexpr int kU = 4;  // rows loaded before any is stored
  int64_t r = static_cast<int64_t>(blockIdx.y) * rows + slot;
  for (; r + (kU - 1) * step < seq; r += kU * step) {
    Vec<T, 8> x[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      x[u] = load_vec<T, 8>(in + (r + u * step) * d);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[u].v[e] = from_float<T>(to_float(x[u].v[e]) - mu[e]);
      store_vec<T, 8>(to + (r + u * step) * d, x[u]);
    }
  }
  for (; r < seq; r += step) {
    Vec<T, 8> x = load_vec<T, 8>(in + r * d);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x.v[e] = from_float<T>(to_float(x.v[e]) - mu[e]);
    store_vec<T, 8>(to + r * d, x);
  }
}

/// Segment g of seq tokens split into n_segments as numpy.array_split splits them: its first.
__device__ __forceinline__ int64_t segment_begin(int64_t seq, int64_t n_segments, int64_t g) {
  const int64_t base = seq / n_segments, extra = seq % n_segments;
  return g * base + min(g, extra);
}

/// The segments' first rows in the [H * S, D] matrix, and its end.
__global__ void segment_offsets_kernel(int64_t heads, int64_t seq, int64_t n_segments,
                                       int64_t* offsets) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t problems = heads * n_segments;
  if (p < problems) {
    offsets[p] = (p / n_segments) * seq + segment_begin(seq, n_segments, p % n_segments);
  } else if (p == problems) {
    offsets[p] = heads * seq;
  }
}

/// Without the global pass: each token's label moved past the clusters of its head's segments
/// before its own.
__global__ void segment_labels_kernel(int32_t* labels, int64_t heads, int64_t seq,
                                      int64_t n_segments, int64_t per_segment) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= heads * seq) return;
  const int64_t t = r % seq;
  // The segment of token t: the first segments are one longer.
  const int64_t base = seq / n_segments, extra = seq % n_segments;
  const int64_t long_tokens = extra * (base + 1);
  const int64_t g = t < long_tokens ? t / (base + 1) : extra + (t - long_tokens) / base;
  labels[r] += static_cast<int32_t>(g * per_segment);
}

/// Where a call's clusters and tokens go in the index: its clusters at slots first_slot on, its
/// tokens at places (and positions) token_base on; the slots after them empty, starting at end.
/// A build clears those slots (`clear_rest`); an extension only moves their start, as the build,
/// or the load, cleared them.
struct Placement {
  bool clear_rest = true;
  int64_t heads = 0;
  int64_t n_new = 0;       // clusters of this call per head
  int64_t first_slot = 0;  // of the first of them
  int64_t max_clusters = 0;
  int64_t token_base = 0;  // tokens held before the call
  int64_t n_tokens = 0;    // tokens of this call per head
  int64_t end = 0;         // token_base + n_tokens
  int64_t capacity = 0;
  // With few_groups: where not null, each head's labels and centroids are ready once done[h]
  // reaches `need` (k-means' small problems' kernel counts its blocks there), so that the
  // placement may start before that kernel ends and place each head as soon as it is fitted.
  const int32_t* done = nullptr;
  int need = 0;
};

/// A warp per (head, slot from first_slot on): CSR offsets and sizes, the largest size, the
/// centroids in float32 and in T; slots past the call's clusters empty (offset end; with
/// clear_rest, zero size and centroid). The largest size is taken per block first: an atomic a
/// warp on the one address serialises a build's warps (hundreds of thousands).
template <typename T>
__global__ void __launch_bounds__(256)
    clusters_kernel(const float* centroids, const int32_t* counts, const int32_t* starts,
                    Placement at, int d, float* out_centroids, T* out_lp, int64_t* offsets,
                    int32_t* sizes, int32_t* largest) {
  __shared__ int32_t block_largest;
  const int64_t item = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t slots = at.max_clusters - at.first_slot;
  const bool inside = item < at.heads * slots;
  const int64_t h = inside ? item / slots : 0, local = inside ? item % slots : 0;
  const int64_t j = at.first_slot + local, slot = h * at.max_clusters + j;
  const bool held = local < at.n_new;
  if (threadIdx.x == 0) block_largest = 0;
  __syncthreads();
  if (inside && lane == 0) {
    offsets[h * (at.max_clusters + 1) + j] =
        held ? at.token_base + starts[h * at.n_new + local] : at.end;
    if (j == at.max_clusters - 1) offsets[h * (at.max_clusters + 1) + at.max_clusters] = at.end;
    if (held || at.clear_rest) {
      const int32_t count = held ? counts[h * at.n_new + local] : 0;
      sizes[slot] = count;
      atomicMax(&block_largest, count);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && block_largest > 0) atomicMax(largest, block_largest);
  if (!inside || (!held && !at.clear_rest)) return;
  for (int e = lane; e < d; e += 32) {
    const float v = held ? centroids[(h * at.n_new + local) * d + e] : 0.0f;
    out_centroids[slot * d + e] = v;
    out_lp[slot * d + e] = from_float<T>(v);
  }
}

// Calls of fewer slots (heads x clusters) than this take few_place_kernel, more clusters_kernel
// and place_kernel.
constexpr int64_t kPlaceFewSlots = 8192;

/// Slots per head of a call's clusters the kernels below write: the call's, and with clear_rest
/// the rest too (zero value sums).
__host__ __device__ inline int64_t placed_slots(const Placement& at) {
  return at.clear_rest ? at.max_clusters - at.first_slot : at.n_new;
}

/// The rows first, first + stride, ... below `count` of a cluster whose tokens are `order` (of
/// head h, the first going to place to0): each token's position, key and value copied to its
/// place, and its value added into acc in that order. A row of keys and values is kU 16-byte
/// pieces a lane (piece q = lane + 32 u: keys first, then values); the warp loads the tokens of
/// 32 rows at once, and kRows rows before it stores any.
template <typename T, int kU>
__device__ __forceinline__ void place_rows(const int32_t* order, int count, int first, int stride,
                                           const Placement& at, int64_t h, int64_t to0, int d,
                                           int value_dim, const T* keys, const T* values,
                                           int32_t* ids, T* out_keys, T* out_values,
                                           float (&acc)[kU][8]) {
  constexpr int kRows = 8 / kU;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int key_pieces = d / 8, pieces = key_pieces + value_dim / 8;
  for (int r0 = first; r0 < count; r0 += 32 * stride) {
    const int rows = min(32, (count - r0 + stride - 1) / stride);
    const int32_t mine = lane < rows ? order[r0 + stride * lane] : 0;
    if (lane < rows) ids[to0 + r0 + stride * lane] = static_cast<int32_t>(at.token_base + mine);
    for (int r1 = 0; r1 < rows; r1 += kRows) {
      uint4 x[kRows][kU];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t from = h * at.n_tokens + __shfl_sync(0xFFFFFFFFu, mine, (r1 + r) % 32);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int q = lane + 32 * u;
          if (r1 + r < rows && q < pieces) {
            x[r][u] = q < key_pieces
                          ? __ldg(reinterpret_cast<const uint4*>(keys + from * d) + q)
                          : __ldg(reinterpret_cast<const uint4*>(values + from * value_dim) +
                                  (q - key_pieces));
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t to = to0 + r0 + stride * (r1 + r);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int q = lane + 32 * u;
          if (r1 + r >= rows || q >= pieces) continue;
          if (q < key_pieces) {
            reinterpret_cast<uint4*>(out_keys + to * d)[q] = x[r][u];
          } else {
            reinterpret_cast<uint4*>(out_values + to * value_dim)[q - key_pieces] = x[r][u];
            const T* v = reinterpret_cast<const T*>(&x[r][u]);
#pragma unroll
            for (int e = 0; e < 8; ++e)
              acc[u][e] += to_float(v[e]);
          }
        }
      }
    }
  }
}

/// A warp per (head, slot from first_slot on), for calls of many clusters (place_kernel's row
/// chains are then short and every SM busy): its tokens' positions, keys and values copied to
/// their places in the call's cluster order, and the sum of its values in that order (float32,
/// the same order every run; zero for slots past the call's clusters), so that the values are
/// read once (place_rows, kU pieces a lane).
template <typename T, int kU>
__global__ void __launch_bounds__(256)
    place_kernel(const int32_t* counts, const int32_t* starts, const int32_t* perm, const T* keys,
                 const T* values, Placement at, int d, int value_dim, int32_t* ids, T* out_keys,
                 T* out_values, float* sums) {
  const int64_t item = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t slots = placed_slots(at);
  if (item >= at.heads * slots) return;
  const int64_t h = item / slots, local = item % slots;
  const bool held = local < at.n_new;
  const int64_t first = held ? starts[h * at.n_new + local] : 0;
  const int count = held ? counts[h * at.n_new + local] : 0;
  const int key_pieces = d / 8, pieces = key_pieces + value_dim / 8;
  const int32_t* order = perm + h * at.n_tokens + first;
  const int64_t to0 = h * at.capacity + at.token_base + first;
  float acc[kU][8] = {};
  place_rows<T, kU>(order, count, 0, 1, at, h, to0, d, value_dim, keys, values, ids, out_keys,
                    out_values, acc);
  if (value_dim == 0) return;
  const int64_t slot = h * at.max_clusters + at.first_slot + local;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int q = lane + 32 * u;
    if (q < key_pieces || q >= pieces) continue;
    float4* out = reinterpret_cast<float4*>(sums + slot * value_dim + (q - key_pieces) * 8);
    out[0] = make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    out[1] = make_float4(acc[u][4], acc[u][5], acc[u][6], acc[u][7]);
  }
}

constexpr int kFewWarps = 4;  // warps of few_place_kernel's blocks
// Tokens per head of a call up to which few_place_kernel's blocks group their cluster's tokens
// from the labels themselves (each block reads all its head's labels, so the cost grows with
// tokens times clusters; an extension's 1024 tokens into 64 clusters is the case it serves).
constexpr int64_t kFewGroupTokens = 1024;

/// Whether a call's tokens are placed by few_place_kernel, and grouped by it from the labels.
__host__ __device__ inline bool few_places(const Placement& at) {
  return at.heads * placed_slots(at) < kPlaceFewSlots && at.n_new > 0;
}
__host__ __device__ inline bool few_groups(const Placement& at) {
  return few_places(at) && at.n_tokens <= kFewGroupTokens;
}

/// For calls of few clusters (an extension's: place_kernel's warps would each follow a chain of
/// rows on a few SMs), a block per (head, cluster of the call): its CSR offset, size, largest and
/// centroids (as clusters_kernel writes them); its tokens' positions, keys and values copied to
/// their places in the call's cluster order, warp w taking rows w, w + kFewWarps, ...
/// (place_rows, kU pieces a lane); and the sum of its values (float32, each warp's rows in order,
/// then the warps' sums in order: the same bits every run). The slots after the call's clusters
/// are spread over the head's blocks: offset end, and with clear_rest zero size, centroid and
/// value sum. With `labels` ([heads, n_tokens], few_groups), the block finds its cluster's tokens
/// there (ascending, into dynamic shared memory) and where they start (the head's tokens of lower
/// clusters); otherwise counts, starts and perm say so (group_by_cluster).
template <typename T, int kU>
__global__ void __launch_bounds__(kFewWarps * 32)
    few_place_kernel(const float* centroids, const int32_t* labels, const int32_t* counts,
                     const int32_t* starts, const int32_t* perm, const T* keys, const T* values,
                     Placement at, int d, int value_dim, int32_t* ids, T* out_keys, T* out_values,
                     float* sums, float* out_centroids, T* out_lp, int64_t* offsets, int32_t* sizes,
                     int32_t* largest) {
  __shared__ __align__(16) float warp_sums[kFewWarps][kMaxDim];
  extern __shared__ int32_t own_rows[];  // with labels: the cluster's tokens, ascending
  const int64_t h = blockIdx.x / at.n_new, local = blockIdx.x % at.n_new;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  constexpr int kThreads = kFewWarps * 32;
  const int64_t j = at.first_slot + local, slot = h * at.max_clusters + j;
  if (at.done != nullptr) {
    if (tid == 0) {
      while (load_acquire(at.done + h) < at.need)
        __nanosleep(256);
    }
    __syncthreads();
  }
  int64_t first = 0;
  int count = 0;
  const int32_t* order = nullptr;
  if (labels != nullptr) {
    // The head's labels (at most kFewGroupTokens), kChunks of a token a thread, all loaded before
    // any is used; each chunk's tokens of this cluster are placed after the earlier chunks'
    // (warps in order, lanes in order: ascending), and the tokens of lower clusters counted.
    constexpr int kChunks = static_cast<int>(kFewGroupTokens / kThreads);
    static_assert(kFewGroupTokens % kThreads == 0, "whole chunks");
    __shared__ int hits[kChunks][kFewWarps], lower[kFewWarps];
    const int32_t* head_labels = labels + h * at.n_tokens;
    const int n = static_cast<int>(at.n_tokens);
    int label[kChunks];
    unsigned ballot[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int i = c * kThreads + tid;
      label[c] = i < n ? head_labels[i] : -1;
    }
    int below = 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      below += label[c] >= 0 && label[c] < local;
      ballot[c] = __ballot_sync(0xFFFFFFFFu, label[c] == local);
      if (lane == 0) hits[c][warp] = __popc(ballot[c]);
    }
    for (int o = 16; o > 0; o >>= 1)
      below += __shfl_xor_sync(0xFFFFFFFFu, below, o);
    if (lane == 0) lower[warp] = below;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      int at_warp = count, chunk = 0;
      for (int w = 0; w < kFewWarps; ++w) {
        at_warp += w < warp ? hits[c][w] : 0;
        chunk += hits[c][w];
      }
      if (label[c] == local) {
        own_rows[at_warp + __popc(ballot[c] & ((1u << lane) - 1u))] = c * kThreads + tid;
      }
      count += chunk;
    }
    for (int w = 0; w < kFewWarps; ++w)
      first += lower[w];
    __syncthreads();  // own_rows complete
    order = own_rows;
  } else {
    first = starts[h * at.n_new + local];
    count = counts[h * at.n_new + local];
    order = perm + h * at.n_tokens + first;
  }
  int64_t* head_offsets = offsets + h * (at.max_clusters + 1);
  if (tid == 0) {
    head_offsets[j] = at.token_base + first;
    sizes[slot] = count;
    atomicMax(largest, count);
  }
  for (int e = tid; e < d; e += kThreads) {
    const float v = centroids[(h * at.n_new + local) * d + e];
    out_centroids[slot * d + e] = v;
    out_lp[slot * d + e] = from_float<T>(v);
  }
  // The slots after the call's (and the end of the head's offsets).
  const int64_t rest_first = at.first_slot + at.n_new, rest = at.max_clusters - rest_first;
  const int64_t stride = at.n_new * kThreads;
  for (int64_t e = local * kThreads + tid; e <= rest; e += stride) {
    head_offsets[rest_first + e] = at.end;
    if (at.clear_rest && e < rest) sizes[h * at.max_clusters + rest_first + e] = 0;
  }
  if (at.clear_rest) {
    const int64_t rest_slot = h * at.max_clusters + rest_first;
    for (int64_t e = local * kThreads + tid; e < rest * d; e += stride) {
      out_centroids[rest_slot * d + e] = 0.0f;
      out_lp[rest_slot * d + e] = from_float<T>(0.0f);
    }
    for (int64_t e = local * kThreads + tid; e < rest * value_dim; e += stride)
      sums[rest_slot * value_dim + e] = 0.0f;
  }

  const int key_pieces = d / 8, pieces = key_pieces + value_dim / 8;
  const int64_t to0 = h * at.capacity + at.token_base + first;
  float acc[kU][8] = {};
  place_rows<T, kU>(order, count, warp, kFewWarps, at, h, to0, d, value_dim, keys, values, ids,
                    out_keys, out_values, acc);
  if (value_dim == 0) return;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int q = lane + 32 * u;
    if (q < key_pieces || q >= pieces) continue;
    float4* to = reinterpret_cast<float4*>(&warp_sums[warp][(q - key_pieces) * 8]);
    to[0] = make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    to[1] = make_float4(acc[u][4], acc[u][5], acc[u][6], acc[u][7]);
  }
  __syncthreads();
  for (int e = tid; e < value_dim; e += kThreads) {
    float total = warp_sums[0][e];
#pragma unroll
    for (int w = 1; w < kFewWarps; ++w)
      total += warp_sums[w][e];
    sums[slot * value_dim + e] = total;
  }
}

Status launched(cudaStream_t stream) {
  return check_launch(kOp, stream);
}

/// The index's clusters and tokens of one call (build or extend): CSR, centroids, ids, keys,
/// values and value sums, as `place` puts them.
template <typename T>
Status write_index(const IvfLayout& layout, unsigned char* ix, const Placement& place, int d,
                   int value_dim, const float* centroids, const int32_t* labels,
                   const int32_t* counts, const int32_t* starts, const int32_t* perm, const T* keys,
                   const T* values, cudaStream_t stream) {
  T* out_values = value_dim > 0 ? at<T>(ix, layout.values) : nullptr;
  float* sums = value_dim > 0 ? at<float>(ix, layout.value_sums) : nullptr;
  const int pieces = (d + value_dim) / 8;  // at most 4 * 32: d and value_dim up to kMaxDim
  static_assert(2 * kMaxDim / 8 <= 4 * 32, "a row of keys and values is at most 4 pieces a lane");
  // The kernel of kU pieces a lane for rows of `pieces`.
  const auto by_pieces = [&](auto k1, auto k2, auto k4) {
    return pieces <= 32 ? k1 : pieces <= 64 ? k2 : k4;
  };
  if (few_places(place)) {
    const auto kernel =
        by_pieces(few_place_kernel<T, 1>, few_place_kernel<T, 2>, few_place_kernel<T, 4>);
    const bool grouped = few_groups(place);
    const size_t smem = grouped ? static_cast<size_t>(place.n_tokens) * sizeof(int32_t) : 0;
    // Waiting on place.done, the kernel may start while k-means still fits other heads.
    bool dependent = false;
    if (grouped && place.done != nullptr) {
      if (Status s = dependent_launch(kOp, reinterpret_cast<const void*>(kernel), &dependent);
          !s.ok()) {
        return s;
      }
    }
    const LaunchConfig launch(static_cast<unsigned>(place.heads * place.n_new), kFewWarps * 32,
                              smem, stream, 0, dependent);
    if (const cudaError_t e =
            launch.launch(kernel, centroids, grouped ? labels : nullptr, counts, starts, perm, keys,
                          values, place, d, value_dim, at<int32_t>(ix, layout.ids),
                          at<T>(ix, layout.keys), out_values, sums, at<float>(ix, layout.centroids),
                          at<T>(ix, layout.centroids_lp), at<int64_t>(ix, layout.offsets),
                          at<int32_t>(ix, layout.sizes), at<int32_t>(ix, layout.largest));
        e != cudaSuccess) {
      return cuda_status(e, kOp, "launching the placement");
    }
    return launched(stream);
  }
  const int64_t slots = place.heads * (place.max_clusters - place.first_slot);
  clusters_kernel<T><<<blocks_for(slots, 8), 256, 0, stream>>>(
      centroids, counts, starts, place, d, at<float>(ix, layout.centroids),
      at<T>(ix, layout.centroids_lp), at<int64_t>(ix, layout.offsets),
      at<int32_t>(ix, layout.sizes), at<int32_t>(ix, layout.largest));
  if (Status st = launched(stream); !st.ok()) return st;
  const int64_t total = place.heads * placed_slots(place);
  const auto kernel = by_pieces(place_kernel<T, 1>, place_kernel<T, 2>, place_kernel<T, 4>);
  kernel<<<blocks_for(total, 8), 256, 0, stream>>>(counts, starts, perm, keys, values, place, d,
                                                   value_dim, at<int32_t>(ix, layout.ids),
                                                   at<T>(ix, layout.keys), out_values, sums);
  return launched(stream);
}

/// Each problem's rows grouped by label, ascending within one (k-means' counting sort, a block
/// per problem): counts and starts per cluster, perm the rows in cluster order.
template <typename T>
Status group_by_cluster(const KmeansPoints& rows, const int32_t* labels, int64_t k, int32_t* counts,
                        int32_t* starts, int32_t* perm, cudaStream_t stream) {
  return kmeans::launch_group(kOp, rows_of<T>(rows), rows.batch, labels, k, counts, starts, perm,
                              stream);
}

}  // namespace

template <typename T>
Status launch_build(const BuildCall& call, cudaStream_t stream) {
  const IvfShape& s = call.shape;
  const BuildLayout& w = call.layout;
  unsigned char* ws = call.workspace;
  unsigned char* ix = call.buffer;
  const int d = static_cast<int>(s.dim);
  const int64_t problems = s.heads * call.n_segments;
  int64_t* seg_offsets = at<int64_t>(ws, w.seg_offsets);
  float* centroids = at<float>(ws, w.centroids);
  int32_t* labels = at<int32_t>(ws, w.labels);
  int32_t* counts = at<int32_t>(ws, w.counts);
  int32_t* starts = at<int32_t>(ws, w.starts);
  int32_t* perm = at<int32_t>(ws, w.perm);
  float* means = at<float>(ix, call.index.means);
  const T* keys = static_cast<const T*>(call.keys);

  float* mean_parts = at<float>(ws, w.mean_parts);
  head_sums_kernel<T><<<dim3(static_cast<unsigned>(s.heads), kMeanParts), 256, 0, stream>>>(
      keys, call.seq, d, mean_parts);
  if (Status st = launched(stream); !st.ok()) return st;
  head_means_kernel<<<static_cast<unsigned>(s.heads), 256, 0, stream>>>(mean_parts, call.seq, d,
                                                                        means);
  if (Status st = launched(stream); !st.ok()) return st;
  // The keys centred once, into the index's keys (free until the placement writes them), so that
  // every k-means launch and the global pass multiply centred keys as given: the slab kernel's
  // path without means, one FMA and bias load fewer a score (docs/ivf.md). Heads on x (any
  // number), at most 4096 blocks in all where there are fewer heads.
  T* centred = at<T>(ix, call.index.keys);
  {
    const int rows = 256 / (d / 8);
    const int64_t wanted = (call.seq + rows - 1) / rows;
    const unsigned per_head = static_cast<unsigned>(
        std::max<int64_t>(1, std::min<int64_t>(wanted, (4096 + s.heads - 1) / s.heads)));
    center_kernel<T><<<dim3(static_cast<unsigned>(s.heads), per_head), 256, 0, stream>>>(
        keys, call.seq, d, means, centred);
    if (Status st = launched(stream); !st.ok()) return st;
  }
  segment_offsets_kernel<<<blocks_for(problems + 1, 256), 256, 0, stream>>>(
      s.heads, call.seq, call.n_segments, seg_offsets);
  if (Status st = launched(stream); !st.ok()) return st;

  // Every segment of every head in one k-means call.
  KmeansResult fit;
  fit.centroids = centroids;  // [H * n_segments, per_segment, D] = [H, C, D]
  // One label per row of [H * S, D]; with the global pass, that pass's labels alone (the pruned
  // pass orders the tokens by their segment's labels).
  fit.labels = call.global_pass && !call.prune.on ? nullptr : labels;
  if (Status st =
          cudaops::kmeans(segment_points(s, centred, call.seq, call.n_segments, seg_offsets),
                          segment_params(call.per_segment, call.n_iters, nullptr), fit,
                          ws + w.kmeans, w.kmeans_bytes, stream);
      !st.ok()) {
    return st;
  }
  if (call.prune.on) {
    if (call.n_segments > 1) {
      segment_labels_kernel<<<blocks_for(s.heads * call.seq, 256), 256, 0, stream>>>(
          labels, s.heads, call.seq, call.n_segments, call.per_segment);
      if (Status st = launched(stream); !st.ok()) return st;
    }
    if (Status st = pruned_pass<T>(call, centred, centroids, labels, stream); !st.ok()) return st;
  } else if (call.global_pass) {
    KmeansCentroids all;
    all.data = centroids;
    all.dtype = DType::kFloat32;
    all.n_clusters = call.n_clusters;
    if (Status st =
            cudaops::kmeans_assign(head_points(s, centred, call.seq), all, KmeansMetric::kCosine,
                                   labels, nullptr, ws + w.kmeans, w.kmeans_bytes, stream);
        !st.ok()) {
      return st;
    }
  } else if (call.n_segments > 1) {
    segment_labels_kernel<<<blocks_for(s.heads * call.seq, 256), 256, 0, stream>>>(
        labels, s.heads, call.seq, call.n_segments, call.per_segment);
    if (Status st = launched(stream); !st.ok()) return st;
  }

  Placement place;
  place.heads = s.heads;
  place.n_new = call.n_clusters;
  place.max_clusters = s.max_clusters;
  place.n_tokens = call.seq;
  place.end = call.seq;
  place.capacity = s.capacity;
  // Each head's tokens by cluster, ascending within one (or by the placement itself).
  if (!few_groups(place)) {
    if (Status st = group_by_cluster<T>(head_points(s, keys, call.seq), labels, call.n_clusters,
                                        counts, starts, perm, stream);
        !st.ok()) {
      return st;
    }
  }

  int32_t* largest = at<int32_t>(ix, call.index.largest);
  if (const cudaError_t e = cudaMemsetAsync(largest, 0, sizeof(int32_t), stream);
      e != cudaSuccess) {
    return cuda_status(e, kOp, "clearing the largest cluster's size");
  }
  if (Status st =
          write_index<T>(call.index, ix, place, d, static_cast<int>(s.value_dim), centroids, labels,
                         counts, starts, perm, keys, static_cast<const T*>(call.values), stream);
      !st.ok()) {
    return st;
  }
  return launch_key_means<T>(kOp, s, call.index, ix, 0, call.n_clusters, stream);
}

template <typename T>
Status launch_extend(const ExtendCall& call, cudaStream_t stream) {
  const IvfShape& s = call.shape;
  const ExtendLayout& w = call.layout;
  unsigned char* ws = call.workspace;
  unsigned char* ix = call.buffer;
  float* centroids = at<float>(ws, w.centroids);
  int32_t* labels = at<int32_t>(ws, w.labels);
  int32_t* counts = at<int32_t>(ws, w.counts);
  int32_t* starts = at<int32_t>(ws, w.starts);
  int32_t* perm = at<int32_t>(ws, w.perm);
  const T* keys = static_cast<const T*>(call.keys);
  // The new tokens of every head as one problem each, centred by the head's mean as built.
  const KmeansPoints points = head_points(s, keys, call.seq);
  KmeansResult fit;
  fit.centroids = centroids;
  fit.labels = labels;
  int32_t* done = at<int32_t>(ws, w.done);
  int small_blocks = 0;
  if (Status st = kmeans::kmeans_counted(
          points, segment_params(call.n_new, call.n_iters, at<float>(ix, call.index.means)), fit,
          ws + w.kmeans, w.kmeans_bytes, done, &small_blocks, stream);
      !st.ok()) {
    return st;
  }
  Placement place;
  place.clear_rest = false;
  place.heads = s.heads;
  place.n_new = call.n_new;
  place.first_slot = call.n_clusters;
  place.max_clusters = s.max_clusters;
  place.token_base = call.tokens;
  place.n_tokens = call.seq;
  place.end = call.tokens + call.seq;
  place.capacity = s.capacity;
  if (small_blocks > 0) {
    place.done = done;
    place.need = small_blocks;
  }
  if (!few_groups(place)) {
    if (Status st = group_by_cluster<T>(points, labels, call.n_new, counts, starts, perm, stream);
        !st.ok()) {
      return st;
    }
  }
  if (Status st = write_index<T>(call.index, ix, place, static_cast<int>(s.dim),
                                 static_cast<int>(s.value_dim), centroids, labels, counts, starts,
                                 perm, keys, static_cast<const T*>(call.values), stream);
      !st.ok()) {
    return st;
  }
  return launch_key_means<T>("ivf_extend", s, call.index, ix, call.n_clusters, call.n_new, stream);
}

#define CUDAOPS_IVF_INSTANTIATE(T)                                                               \
  template Status launch_build<T>(const BuildCall& call, cudaStream_t stream);                   \
  template Status launch_extend<T>(const ExtendCall& call, cudaStream_t stream);                 \
  template Status launch_key_means<T>(const char* op, const IvfShape& s, const IvfLayout& index, \
                                      unsigned char* buffer, int64_t first, int64_t count,       \
                                      cudaStream_t stream);

}  // namespace cudaops::detail::ivf
