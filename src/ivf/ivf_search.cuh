#pragma once

// The IVF index's search (docs/ivf.md), included by one translation unit per keys' dtype
// (ivf_search_<dtype>.cu). On the caller's stream:
//   cluster scores: q . c with the centroids in the keys' dtype, for every query row and cluster
//                   of its kv head (-inf for empty clusters): each block reads a tile of centroids
//                   once for up to kRowsPerBlock rows of the head;
//   probes:         a block per row selects the n_probe best clusters (ivf_select.cuh), written
//                   in ascending cluster order with their first tokens and their places in the
//                   row's candidate list;
//   candidates:     blocks of kProbesPerBlock probes per row score their clusters' tokens exactly
//                   (half a warp per token) into that list;
//   the best:       a block per row selects the k best candidates and sorts them.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/launch.h"
#include "core/launch_config.h"
#include "device/cluster.cuh"
#include "device/vector.cuh"
#include "engine/kmeans_device.cuh"
#include "engine/kmeans_mma.cuh"
#include "ivf/ivf_plan.h"
#include "ivf/ivf_select.cuh"

namespace cudaops::detail::ivf {
namespace {

constexpr const char* kSearch = "ivf_search";

constexpr int kScoreThreads = 256;
constexpr int kRowsPerBlock = 16;
constexpr int kCentroidsPerHalf = 4;  // sum4_half_warp's four
constexpr int kCentroidsPerBlock = kScoreThreads / 16 * kCentroidsPerHalf;
constexpr int kCandidateThreads = 256;
constexpr int kProbesPerBlock = 8;
constexpr int kTokensPerHalf = 4;  // sum4_half_warp's four
static_assert(kMaxDim <= 128 * 4, "at most four 8-value chunks per lane");
static_assert(kIvfMaxK <= kMaxSorted, "a block sorts the k best");

/// Launches `kernel` on `grid` as dependent on the kernel before it in the stream where the
/// device and image allow: its launch overlaps that kernel's end. Every kernel here waits for the
/// kernels before it first (all it reads, the index included, may be their output); the search's
/// let the next kernel launch only when they are done (search_done), the others as they start
/// (follow_prior_kernels).
template <typename... Params, typename... Args>
Status launch_after(const char* op, void (*kernel)(Params...), dim3 grid, int threads, size_t smem,
                    cudaStream_t stream, Args... args) {
  bool dependent = false;
  if (Status s = dependent_launch(op, reinterpret_cast<const void*>(kernel), &dependent); !s.ok()) {
    return s;
  }
  LaunchConfig config(1, threads, smem, stream, 0, dependent);
  config.set_grid(grid);
  if (const cudaError_t e = config.launch(kernel, args...); e != cudaSuccess) {
    (void)cudaGetLastError();  // reported here, not by a later call
    return cuda_status(e, op, "kernel launch failed");
  }
  return check_launch(op, stream);
}

/// What the retrieval's kernels do first (launch_after).
__device__ __forceinline__ void follow_prior_kernels() {
  allow_next_kernel();
  wait_for_prior_kernels();
}

/// What the search's kernels do last, having waited for the kernels before them first. A block of
/// the next kernel launched earlier would wait on an SM that this kernel's later blocks need (the
/// probes' blocks, resident while the cluster scores ran their last blocks, cost about 8 us a
/// search).
__device__ __forceinline__ void search_done() {
  allow_next_kernel();
}

/// The sums over the 16 lanes of each half warp of four values per lane, in five shuffles rather
/// than sixteen: lanes 0, 4, 8 and 12 of the half get the sums of v[0], v[1], v[2] and v[3].
/// Each step hands half of what a lane holds to its partner and adds what comes back.
__device__ __forceinline__ float sum4_half_warp(const float (&v)[4], int lane) {
  const bool high8 = (lane & 8) != 0, high4 = (lane & 4) != 0;
  // Lanes below 8 keep v[0] and v[1], the others v[2] and v[3].
  const float a = (high8 ? v[2] : v[0]) + __shfl_xor_sync(0xffffffffu, high8 ? v[0] : v[2], 8);
  const float b = (high8 ? v[3] : v[1]) + __shfl_xor_sync(0xffffffffu, high8 ? v[1] : v[3], 8);
  // Then lanes with bit 2 clear keep a, the others b.
  float s = (high4 ? b : a) + __shfl_xor_sync(0xffffffffu, high4 ? a : b, 4);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  return s;
}

/// Scores of rows [row0, row0 + kRowsPerBlock) of kv head h (blockIdx.x: head and row tile)
/// against kCentroidsPerBlock clusters (blockIdx.y), scaled by `scale`: half a warp per cluster,
/// each lane holding 8 of every 128 of its values (kChunks 8-value chunks, d <= 128 * kChunks).
/// Every centroid of a half warp is loaded before any is used, so that enough bytes are in flight.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kScoreThreads)
    cluster_scores_kernel(const T* queries, const T* centroids, const int32_t* sizes,
                          int64_t head_rows, int64_t row_tiles, int64_t max_clusters,
                          int64_t n_clusters, int d, float scale, float* scores) {
  extern __shared__ float q[];  // [rows, d]
  wait_for_prior_kernels();
  const int64_t h = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * kRowsPerBlock;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRowsPerBlock), head_rows - row0));
  const int half = threadIdx.x / 16, lane = threadIdx.x % 16, chunks = d / 8;
  const int64_t j0 =
      blockIdx.y * static_cast<int64_t>(kCentroidsPerBlock) + half * kCentroidsPerHalf;
  Vec<T, 8> x[kCentroidsPerHalf][kChunks];
  bool empty[kCentroidsPerHalf];
#pragma unroll
  for (int c = 0; c < kCentroidsPerHalf; ++c) {
    const int64_t j = j0 + c;
    const int64_t slot = h * max_clusters + (j < n_clusters ? j : 0);
    empty[c] = j >= n_clusters || sizes[slot] <= 0;
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int chunk = lane + 16 * u;
      if (j < n_clusters && chunk < chunks) {
        x[c][u] = load_vec<T, 8>(centroids + slot * d + chunk * 8);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[c][u].v[e] = from_float<T>(0.0f);
      }
    }
  }
  // The queries after the centroids' loads are issued, so that both are in flight together.
  const T* qh = queries + (h * head_rows + row0) * d;
  for (int i = threadIdx.x; i < rows * d; i += kScoreThreads)
    q[i] = to_float(qh[i]);
  __syncthreads();
  for (int r = 0; r < rows; ++r) {
    // This lane's values of the query, read from shared memory once for every centroid.
    float qr[kChunks][8];
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int chunk = lane + 16 * u;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        qr[u][e] = chunk < chunks ? q[r * d + chunk * 8 + e] : 0.0f;
    }
    float part[kCentroidsPerHalf];
#pragma unroll
    for (int c = 0; c < kCentroidsPerHalf; ++c) {
      part[c] = 0.0f;
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          part[c] = fmaf(to_float(x[c][u].v[e]), qr[u][e], part[c]);
      }
    }
    // Lane 4c of the half warp gets centroid c's score.
    const int c = lane / 4;
    const float score = sum4_half_warp(part, lane);
    const bool none = c == 0 ? empty[0] : c == 1 ? empty[1] : c == 2 ? empty[2] : empty[3];
    if (lane % 4 == 0 && j0 + c < n_clusters) {
      scores[(h * head_rows + row0 + r) * n_clusters + j0 + c] = none ? -INFINITY : score * scale;
    }
  }
  search_done();
}

// Cluster scores on the tensor cores (d <= kMmaScoreDim): warps of kMmaTiles tiles of 8
// centroids, every load of a warp issued before its first product.
constexpr int kMmaScoreWarps = 4;
constexpr int kMmaTiles = 4;
constexpr int kMmaScoreDim = 128;

/// 16 bytes at p, or zeros where `in` is false.
template <typename T>
__device__ __forceinline__ uint4 load16_or_zero(const T* p, bool in) {
  return in ? *reinterpret_cast<const uint4*>(p) : make_uint4(0u, 0u, 0u, 0u);
}

/// cluster_scores_kernel's scores by mma.sync (m16n8k16, float32 sums): the block's up to 16 query
/// rows of kv head h are the A operand (rows g and g + 8 of lane 4 g + t), each warp's tiles of
/// 8 centroids the B operand (centroid g of the tile). A lane loads 16 bytes of each 32 values:
/// values 32 c + 8 t to 32 c + 8 t + 7 of its row or centroid, which serve two products as k
/// pairs (2 t, 2 t + 8) and then (2 t, 2 t + 8) again: the same order of k in A and B, so the sums
/// are the dot products.
template <typename T>
__global__ void __launch_bounds__(kMmaScoreWarps * 32)
    cluster_scores_mma_kernel(const T* queries, const T* centroids, const int32_t* sizes,
                              int64_t head_rows, int64_t row_tiles, int64_t max_clusters,
                              int64_t n_clusters, int d, float scale, float* scores) {
  constexpr int kChunks = kMmaScoreDim / 32;
  wait_for_prior_kernels();
  const int64_t h = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * kRowsPerBlock;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRowsPerBlock), head_rows - row0));
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t tiles = (n_clusters + 7) / 8;
  const int64_t first = (int64_t{blockIdx.y} * kMmaScoreWarps + warp) * kMmaTiles;
  uint4 b[kMmaTiles][kChunks];
  // Centroid g's size with its values, so that no load is left after the products (an empty
  // cluster scores -inf).
  int32_t size[kMmaTiles];
#pragma unroll
  for (int u = 0; u < kMmaTiles; ++u) {
    const int64_t j = (first + u) * 8 + g;
    const T* c = centroids + (h * max_clusters + (j < n_clusters ? j : 0)) * d;
    size[u] = j < n_clusters ? sizes[h * max_clusters + j] : 0;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int at = 32 * k + 8 * t;
      b[u][k] = load16_or_zero(c + at, j < n_clusters && at < d);
    }
  }
  const T* q = queries + (h * head_rows + row0) * d;
  uint4 qa[kChunks], qb[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int at = 32 * k + 8 * t;
    qa[k] = load16_or_zero(q + static_cast<int64_t>(g) * d + at, g < rows && at < d);
    qb[k] = load16_or_zero(q + static_cast<int64_t>(g + 8) * d + at, g + 8 < rows && at < d);
  }
#pragma unroll
  for (int u = 0; u < kMmaTiles; ++u) {
    const int64_t tile = first + u;
    if (tile >= tiles) break;  // the same for the whole warp
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const uint32_t lo[4] = {qa[k].x, qb[k].x, qa[k].y, qb[k].y};
      const uint32_t hi[4] = {qa[k].z, qb[k].z, qa[k].w, qb[k].w};
      mma<T>(acc, lo, b[u][k].x, b[u][k].y);
      mma<T>(acc, hi, b[u][k].z, b[u][k].w);
    }
    // acc: rows g and g + 8, centroids 2 t and 2 t + 1 of the tile (lanes 8 t and 8 t + 4 hold
    // their sizes).
    const unsigned empties = __ballot_sync(0xffffffffu, size[u] <= 0);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t j = tile * 8 + 2 * t + e;
      if (j >= n_clusters) continue;
      const bool empty = ((empties >> (8 * t + 4 * e)) & 1u) != 0;
      if (g < rows) {
        scores[(h * head_rows + row0 + g) * n_clusters + j] = empty ? -INFINITY : acc[e] * scale;
      }
      if (g + 8 < rows) {
        scores[(h * head_rows + row0 + g + 8) * n_clusters + j] =
            empty ? -INFINITY : acc[2 + e] * scale;
      }
    }
  }
  search_done();
}

/// Scans over a block of the probes: a thread's chosen clusters (above kPlaceCountShift) and
/// their tokens (below) in one 64-bit sum. A round's clusters are at most 2^14 (kSelectThreads
/// words of 32), a head's tokens below 2^31 (int32 ids).
using PlaceScan = cub::BlockScan<uint64_t, kSelectThreads>;
constexpr int kPlaceCountShift = 48;
constexpr uint64_t kPlaceTokens = (uint64_t{1} << kPlaceCountShift) - 1;

/// A block per query row: the n_probe best clusters in ascending order, with each one's first
/// token in its head (starts) and first place in the row's candidate list (places, n_probe + 1
/// per row, the last the total), and the row's length (at most max_candidates). Clusters scored
/// -inf (empty) are left out; the list is padded with -1 (size 0). staged_row: the row's scores
/// are first copied to dynamic shared memory (followed by a word per 32 of them).
__global__ void __launch_bounds__(kSelectThreads)
    probes_kernel(const float* scores, const int64_t* offsets, int64_t n_clusters,
                  int64_t n_queries, int64_t group, int64_t max_clusters, int64_t n_probe,
                  int64_t max_candidates, bool staged_row, int32_t* probes, int64_t* starts,
                  int64_t* places, int64_t* lengths) {
  __shared__ SelectShared s;
  __shared__ uint64_t ties[kMaxTies];
  __shared__ uint32_t tie_at[kMaxTies];
  __shared__ typename PlaceScan::TempStorage place_scan;
  extern __shared__ float staged[];
  wait_for_prior_kernels();
  const int64_t r = blockIdx.x;
  const float* row = scores + r * n_clusters;
  const int64_t* off = offsets + ((r / n_queries) / group) * (max_clusters + 1);
  // 32-bit places: a head's clusters are below 2^31.
  const int n = static_cast<int>(n_clusters);
  const int words = (n + 31) / 32;
  // The offsets go to L1 while the selection runs (the placement reads those of the chosen
  // clusters).
  for (int i = 16 * static_cast<int>(threadIdx.x); i <= n; i += 16 * kSelectThreads)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(off + i));
  if (staged_row) stage_row(row, n_clusters, staged);
  __syncthreads();
  // Written once per source of the row, so that a staged row is read as shared memory.
  const auto select_and_place = [&](const ScoreRow& items) {
    // The chosen clusters as a ballot per 32 (kept after a staged row's scores) where the bins
    // mark them, else compared with select_bound's bound.
    uint32_t* ballots = staged_row ? reinterpret_cast<uint32_t*>(staged + n_clusters) : nullptr;
    const bool marked = ballots != nullptr && n_clusters > n_probe &&
                        mark_by_bins(items, n_probe, s, ties, tie_at, ballots);
    if (!marked && !select_by_bins(items, n_probe, s, ties)) {
      select_bound(
          n_clusters, n_probe, [&](auto f) { for_each_item(items, f); }, s);
    }
    const uint64_t bound = s.prefix;  // the k best are the items >= bound
    // The chosen clusters of word w (clusters 32 w to 32 w + 31) as bits; empty clusters (-inf)
    // are left out (the bins may mark them as ties where fewer than n_probe are finite).
    const auto chosen_bits = [&](int w) {
      const int first = 32 * w, end = min(n, first + 32);
      uint32_t bits = 0;
      if (marked) {
        bits = ballots[w];
        for (uint32_t b = bits; b != 0; b &= b - 1) {
          const int bit = __ffs(static_cast<int>(b)) - 1;
          if (items.score(first + bit) == -INFINITY) bits &= ~(1u << bit);
        }
        return bits;
      }
      for (int i = first; i < end; ++i) {
        const uint64_t item = items.item(static_cast<uint32_t>(i));
        const bool in = static_cast<uint32_t>(item >> 32) != kNegInfKey && item >= bound;
        bits |= in ? 1u << (i - first) : 0u;
      }
      return bits;
    };
    // A word a thread: its clusters and their tokens, placed by one scan over the block per
    // round of kSelectThreads words.
    int32_t* out = probes + r * n_probe;
    int64_t* start = starts + r * n_probe;
    int64_t* place = places + r * (n_probe + 1);
    // The rounds before (kept apart: a row's chosen clusters may pass 2^16 over its rounds).
    int64_t chosen_all = 0, total = 0;
    for (int w0 = 0; w0 < words; w0 += kSelectThreads) {
      const int w = w0 + static_cast<int>(threadIdx.x);
      const uint32_t bits = w < words ? chosen_bits(w) : 0u;
      int64_t tokens = 0;
      for (uint32_t b = bits; b != 0; b &= b - 1) {
        const int i = 32 * w + __ffs(static_cast<int>(b)) - 1;
        tokens += off[i + 1] - off[i];
      }
      uint64_t before = 0, round = 0;
      PlaceScan(place_scan)
          .ExclusiveSum((static_cast<uint64_t>(__popc(bits)) << kPlaceCountShift) |
                            static_cast<uint64_t>(tokens),
                        before, round);
      int64_t slot = chosen_all + static_cast<int64_t>(before >> kPlaceCountShift);
      int64_t at = total + static_cast<int64_t>(before & kPlaceTokens);
      for (uint32_t b = bits; b != 0; b &= b - 1, ++slot) {
        const int i = 32 * w + __ffs(static_cast<int>(b)) - 1;
        const int64_t first = off[i];
        out[slot] = i;
        start[slot] = first;
        place[slot] = at;
        at += off[i + 1] - first;
      }
      chosen_all += static_cast<int64_t>(round >> kPlaceCountShift);
      total += static_cast<int64_t>(round & kPlaceTokens);
      __syncthreads();  // place_scan is used again
    }
    for (int64_t i = chosen_all + threadIdx.x; i <= n_probe; i += kSelectThreads) {
      if (i < n_probe) {
        out[i] = -1;
        start[i] = 0;
      }
      place[i] = total;
    }
    if (threadIdx.x == 0) lengths[r] = min(total, max_candidates);
  };
  if (staged_row) {
    select_and_place(ScoreRow{staged, n_clusters});
  } else {
    select_and_place(ScoreRow{row, n_clusters});
  }
  search_done();
}

/// The probes of every row of `scores` (probes_kernel), each row first copied to shared memory
/// where the device has room for it.
Status launch_probes(const char* op, int64_t rows, const float* scores, const int64_t* offsets,
                     int64_t n_clusters, int64_t n_queries, int64_t group, int64_t max_clusters,
                     int64_t n_probe, int64_t max_candidates, int32_t* probes, int64_t* starts,
                     int64_t* places, int64_t* lengths, cudaStream_t stream) {
  size_t room = 0;
  if (Status st = max_dynamic_smem(op, reinterpret_cast<const void*>(probes_kernel), &room);
      !st.ok()) {
    return st;
  }
  // The scores, then a ballot per 32 of them.
  const size_t bytes = static_cast<size_t>(n_clusters + (n_clusters + 31) / 32) * sizeof(float);
  const bool staged = n_clusters <= kStagedScores && bytes <= room;
  const size_t smem = staged ? bytes : 0;
  if (Status st = allow_dynamic_smem(op, reinterpret_cast<const void*>(probes_kernel), smem);
      !st.ok()) {
    return st;
  }
  return launch_after(op, probes_kernel, dim3(static_cast<unsigned>(rows)), kSelectThreads, smem,
                      stream, scores, offsets, n_clusters, n_queries, group, max_clusters, n_probe,
                      max_candidates, staged, probes, starts, places, lengths);
}

/// Blocks of kProbesPerBlock probes of one query row (blockIdx.x the row, blockIdx.y the probes):
/// each probed cluster's tokens at their places in the row's list (probes_kernel), scored
/// exactly; places past max_candidates are dropped. Half a warp scores kTokensPerHalf tokens at a
/// time, their keys loaded together (kChunks 8-value chunks per lane, d <= 128 * kChunks).
template <typename T, int kChunks>
__global__ void __launch_bounds__(kCandidateThreads)
    candidates_kernel(const T* queries, const int64_t* starts, const int64_t* places,
                      const int32_t* ids, const T* keys, int64_t n_queries, int64_t group,
                      int64_t capacity, int64_t n_probe, int d, int64_t max_candidates,
                      uint64_t* cand) {
  __shared__ __align__(16) float q[kMaxDim];
  __shared__ int64_t place[kProbesPerBlock + 1];
  __shared__ int64_t start[kProbesPerBlock];
  wait_for_prior_kernels();
  const int64_t r = blockIdx.x, p0 = blockIdx.y * static_cast<int64_t>(kProbesPerBlock);
  const int64_t h = (r / n_queries) / group;
  if (threadIdx.x <= kProbesPerBlock) {
    const int64_t p = min(p0 + threadIdx.x, n_probe);
    place[threadIdx.x] = places[r * (n_probe + 1) + p];
    if (threadIdx.x < kProbesPerBlock)
      start[threadIdx.x] = p < n_probe ? starts[r * n_probe + p] : 0;
  }
  for (int e = threadIdx.x; e < d; e += kCandidateThreads)
    q[e] = to_float(queries[r * d + e]);
  __syncthreads();
  const int64_t lo = min(place[0], max_candidates);
  const int64_t hi = min(place[kProbesPerBlock], max_candidates);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 16, side = (threadIdx.x / 16) % 2;
  const int chunks = d / 8;
  // This lane's values of the query, in registers for every token.
  float qr[kChunks][8];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      qr[c][e] = lane + 16 * c < chunks ? q[(lane + 16 * c) * 8 + e] : 0.0f;
  }
  // The places in registers: each token finds its probe by comparisons alone.
  int64_t bound[kProbesPerBlock];
#pragma unroll
  for (int p = 0; p < kProbesPerBlock; ++p)
    bound[p] = place[p];
  const T* kh = keys + h * capacity * d;
  const int32_t* ih = ids + h * capacity;
  uint64_t* out = cand + r * max_candidates;
  constexpr int kWarps = kCandidateThreads / 32;
  constexpr int kStep = 2 * kTokensPerHalf;
  // Each half warp takes kTokensPerHalf consecutive places; the loop is the same for both halves
  // of a warp so that their shuffles meet.
  for (int64_t base = lo + kStep * warp; base < hi; base += kStep * kWarps) {
    Vec<T, 8> x[kTokensPerHalf][kChunks];
    int32_t id[kTokensPerHalf];
#pragma unroll
    for (int u = 0; u < kTokensPerHalf; ++u) {
      const int64_t i = base + side * kTokensPerHalf + u;
      id[u] = -1;
      if (i < hi) {
        int pi = 0;  // its probe: places ascend (independent compares, not a search)
#pragma unroll
        for (int p = 1; p < kProbesPerBlock; ++p)
          pi += bound[p] <= i ? 1 : 0;
        const int64_t at = start[pi] + (i - place[pi]);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          if (lane + 16 * c < chunks) x[u][c] = load_vec<T, 8>(kh + at * d + (lane + 16 * c) * 8);
        }
        id[u] = ih[at];
      }
    }
    float part[kTokensPerHalf];
#pragma unroll
    for (int u = 0; u < kTokensPerHalf; ++u) {
      part[u] = 0.0f;
      if (id[u] >= 0) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          if (lane + 16 * c < chunks) {
#pragma unroll
            for (int e = 0; e < 8; ++e)
              part[u] = fmaf(to_float(x[u][c].v[e]), qr[c][e], part[u]);
          }
        }
      }
    }
    // Lane 4u of the half warp gets token u's sum (sum4_half_warp).
    const int u = lane / 4;
    const float score = sum4_half_warp(part, lane);
    const int32_t token = u == 0 ? id[0] : u == 1 ? id[1] : u == 2 ? id[2] : id[3];
    if (lane % 4 == 0 && token >= 0)
      out[base + side * kTokensPerHalf + u] = make_item(score, token);
  }
  search_done();
}

/// A block per query row: the k best of its candidates, best first; (-inf, -1) past them.
__global__ void __launch_bounds__(kSelectThreads)
    best_kernel(const uint64_t* cand, const int64_t* lengths, int64_t max_candidates, int64_t k,
                int64_t staged, float* scores, int64_t* ids) {
  __shared__ SelectShared s;
  // width (a power of two >= k, >= 64) + kMaxBinRun items, then the row where it fits (`staged`
  // items)
  extern __shared__ uint64_t best[];
  __shared__ uint32_t taken;
  wait_for_prior_kernels();
  const int64_t r = blockIdx.x, n = lengths[r];
  const uint64_t* row = cand + r * max_candidates;
  int width = 64;
  while (width < k)
    width <<= 1;
  uint64_t* in_shared = best + width + kMaxBinRun;
  if (n <= staged) stage_row(row, n, in_shared);
  __syncthreads();
  const ItemRow items{n <= staged ? in_shared : row, n};  // (the fallback's)
  const auto each = [&](auto f) { for_each_item(items, f); };
  const int count = static_cast<int>(min(n, k));
  const auto write = [&](int64_t i, uint64_t item) {
    const float score = item_score(item);
    scores[r * k + i] = score;
    ids[r * k + i] = score == -INFINITY ? -1 : item_id(item);
  };
  // Written once per source of the row, so that a staged row is read as shared memory.
  const bool sorted = n > 0 && (n <= staged ? sort_by_bins(ItemRow{in_shared, n}, k, s, best, write)
                                            : sort_by_bins(ItemRow{row, n}, k, s, best, write));
  if (n > 0 && !sorted) {
    select_bound(n, k, each, s);
    width = 64;
    while (width < count)
      width <<= 1;
    if (threadIdx.x == 0) taken = 0;
    __syncthreads();
    const uint64_t prefix = s.prefix;
    const int lane = static_cast<int>(threadIdx.x % 32);
    each([&](uint64_t item, bool valid) {
      const bool in = valid && item >= prefix;
      const unsigned ballot = __ballot_sync(0xffffffffu, in);
      if (ballot == 0) return;
      uint32_t slot = 0;
      if (lane == 0) slot = atomicAdd(&taken, static_cast<uint32_t>(__popc(ballot)));
      slot = __shfl_sync(0xffffffffu, slot, 0) + __popc(ballot & ((1u << lane) - 1));
      if (in) best[slot] = item;
    });
    for (int i = count + threadIdx.x; i < width; i += kSelectThreads)
      best[i] = 0;
    __syncthreads();
    sort_descending(best, width);
    for (int i = threadIdx.x; i < count; i += kSelectThreads)
      write(i, best[i]);
  }
  for (int64_t i = count + threadIdx.x; i < k; i += kSelectThreads) {
    scores[r * k + i] = -INFINITY;
    ids[r * k + i] = -1;
  }
  search_done();
}

/// Scores of every query row against its kv head's clusters (cluster_scores_kernel), scaled.
template <typename T>
Status launch_cluster_scores(const char* op, const IvfShape& s, const IvfLayout& index,
                             const unsigned char* ix, const T* queries, int64_t q_heads,
                             int64_t n_queries, int64_t n_clusters, float scale, float* scores,
                             cudaStream_t stream) {
  const int d = static_cast<int>(s.dim);
  const int64_t head_rows = q_heads / s.heads * n_queries;
  const int64_t row_tiles = (head_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const size_t smem =
      static_cast<size_t>(std::min<int64_t>(kRowsPerBlock, head_rows) * d) * sizeof(float);
  const auto with = [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    const dim3 grid(
        static_cast<unsigned>(s.heads * row_tiles),
        static_cast<unsigned>((n_clusters + kCentroidsPerBlock - 1) / kCentroidsPerBlock));
    return launch_after(op, cluster_scores_kernel<T, kChunks>, grid, kScoreThreads, smem, stream,
                        queries, reinterpret_cast<const T*>(ix + index.centroids_lp),
                        reinterpret_cast<const int32_t*>(ix + index.sizes), head_rows, row_tiles,
                        s.max_clusters, n_clusters, d, scale, scores);
  };
  if (d <= kMmaScoreDim) {
    const int64_t per_block = int64_t{kMmaScoreWarps} * kMmaTiles * 8;
    const dim3 grid(static_cast<unsigned>(s.heads * row_tiles),
                    static_cast<unsigned>((n_clusters + per_block - 1) / per_block));
    return launch_after(op, cluster_scores_mma_kernel<T>, grid, kMmaScoreWarps * 32, 0, stream,
                        queries, reinterpret_cast<const T*>(ix + index.centroids_lp),
                        reinterpret_cast<const int32_t*>(ix + index.sizes), head_rows, row_tiles,
                        s.max_clusters, n_clusters, d, scale, scores);
  }
  if (d <= 256) return with(std::integral_constant<int, 2>{});
  return with(std::integral_constant<int, 4>{});
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
  if (rows == 0) return Status();
  const int64_t group = call.q_heads / s.heads;
  const T* queries = static_cast<const T*>(call.queries);
  auto* cluster_scores = reinterpret_cast<float*>(ws + w.cluster_scores);
  auto* probes = reinterpret_cast<int32_t*>(ws + w.probes);
  auto* starts = reinterpret_cast<int64_t*>(ws + w.starts);
  auto* places = reinterpret_cast<int64_t*>(ws + w.places);
  auto* cand = reinterpret_cast<uint64_t*>(ws + w.candidates);
  auto* lengths = reinterpret_cast<int64_t*>(ws + w.lengths);

  const dim3 cand_grid(
      static_cast<unsigned>(rows),
      static_cast<unsigned>((call.n_probe + kProbesPerBlock - 1) / kProbesPerBlock));
  const auto candidates_with = [&](auto chunks) {
    constexpr int kChunks = decltype(chunks)::value;
    return launch_after(kSearch, candidates_kernel<T, kChunks>, cand_grid, kCandidateThreads, 0,
                        stream, queries, static_cast<const int64_t*>(starts),
                        static_cast<const int64_t*>(places),
                        reinterpret_cast<const int32_t*>(ix + call.index.ids),
                        reinterpret_cast<const T*>(ix + call.index.keys), call.n_queries, group,
                        s.capacity, call.n_probe, d, call.max_candidates, cand);
  };
  if (Status st =
          launch_cluster_scores(kSearch, s, call.index, ix, queries, call.q_heads, call.n_queries,
                                call.n_clusters, 1.0f, cluster_scores, stream);
      !st.ok()) {
    return st;
  }
  if (Status st = launch_probes(
          kSearch, rows, cluster_scores, reinterpret_cast<const int64_t*>(ix + call.index.offsets),
          call.n_clusters, call.n_queries, group, s.max_clusters, call.n_probe, call.max_candidates,
          probes, starts, places, lengths, stream);
      !st.ok()) {
    return st;
  }
  size_t room = 0;
  const Status cst = d <= 128   ? candidates_with(std::integral_constant<int, 1>{})
                     : d <= 256 ? candidates_with(std::integral_constant<int, 2>{})
                                : candidates_with(std::integral_constant<int, 4>{});
  if (!cst.ok()) return cst;
  int64_t width = 64;
  while (width < call.k)
    width <<= 1;
  if (Status st = max_dynamic_smem(kSearch, reinterpret_cast<const void*>(best_kernel), &room);
      !st.ok()) {
    return st;
  }
  const int64_t spare = static_cast<int64_t>(room / sizeof(uint64_t)) - width - kMaxBinRun;
  const int64_t staged = std::max<int64_t>(0, std::min({call.max_candidates, kStagedItems, spare}));
  const size_t smem = static_cast<size_t>(width + kMaxBinRun + staged) * sizeof(uint64_t);
  if (Status st = allow_dynamic_smem(kSearch, reinterpret_cast<const void*>(best_kernel), smem);
      !st.ok()) {
    return st;
  }
  return launch_after(kSearch, best_kernel, dim3(static_cast<unsigned>(rows)), kSelectThreads, smem,
                      stream, static_cast<const uint64_t*>(cand),
                      static_cast<const int64_t*>(lengths), call.max_candidates, call.k, staged,
                      call.scores, call.ids);
}

#define CUDAOPS_IVF_SEARCH_INSTANTIATE(T) \
  template Status launch_search<T>(const SearchCall& call, cudaStream_t stream);

}  // namespace cudaops::detail::ivf
