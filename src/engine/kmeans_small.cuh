#pragma once

// Batched k-means of small problems (at most kSmallMaxBlocks * kSmallMaxRows points, kSmallMaxK
// clusters): every iteration in one launch. A problem is a thread-block cluster of up to
// kSmallMaxBlocks blocks, each holding up to kSmallMaxRows of its points in shared memory for the
// whole fit, as given, and every centroid's operand and bias. With means, the points are not
// centred: y . c = x . c - mean . c, and the second term goes into the centroid's bias. x is exact
// in T and its products with the rounded centroid exact in float32, so only the float32 sums round:
// as precise as rounding y to T while |mean| is within some tens of |y|. An iteration:
//   1. each warp assigns its 16 kM points against all centroids (mma.sync);
//   2. each block groups its points by label, in row order (match.any within 32 rows, counts per
//      32 rows and cluster, a scan), and adds each cluster's points in that order (a warp per
//      cluster, from shared memory);
//   3. block r owns clusters [r * owned, (r + 1) * owned): it adds the blocks' sums of each in
//      rank order (read through the cluster), writes the new centroid and its operand and bias
//      into every block (half a warp per cluster).
// From the second assignment on, steps 2 and 3 sum and update only the clusters a point joined or
// left (the others' sums and centroids would be the same bits), and once no point of the problem
// moved the fit is done: the centroids are final and the labels those the last assignment gives.
// Then the last assignment: labels and, where asked for, each point's distance to its centroid.
// The same order of additions every run, so the same bits; two cluster barriers per iteration;
// the points are read from memory once.
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "device/cluster.cuh"
#include "engine/kmeans_mma.cuh"

namespace cudaops::detail::kmeans {
namespace {

constexpr int kSmallWarps = 16;
constexpr int kSmallThreads = kSmallWarps * kWarp;
constexpr int kSmallMaxBlocks = 4;         // blocks per problem
constexpr int kSmallMaxK = kSmallThreads;  // the grouping scans one cluster per thread

constexpr int kSmallMaxRows = kSmallWarps * 32;  // points per block: a warp's products take
                                                 // 32 rows (kM = 2) or 16 (kM = 1)

/// Where each array of small_fit_kernel lies in its dynamic shared memory (bytes, 16-aligned).
struct SmallLayout {
  int row_bytes = 0;  // a row of the points and of the operand (smem_row_bytes)
  int k_pad = 0;      // centroids rounded up to whole chunks
  int owned = 0;      // clusters per block
  int rows = 0;       // points per block
  int k_words = 0;    // words of a bit per cluster
  int x = 0, operand = 0, sums = 0, mu = 0, bias = 0, w = 0, label = 0, perm = 0, tile_count = 0,
      count = 0, start = 0, dirty = 0, dirty_all = 0, changed = 0, bytes = 0;
};

__host__ __device__ inline int small_align(int bytes) {
  return (bytes + 15) / 16 * 16;
}

__host__ __device__ inline SmallLayout small_layout(int k, int d_pad, int element, int blocks,
                                                    int rows) {
  SmallLayout l;
  l.rows = rows;
  l.row_bytes = smem_row_bytes(d_pad, element);
  l.k_pad = (k + kChunk - 1) / kChunk * kChunk;
  l.owned = (k + blocks - 1) / blocks;
  l.k_words = (k + 31) / 32;
  int at = 0;
  auto take = [&at](int bytes) {
    const int here = at;
    at += small_align(bytes);
    return here;
  };
  l.x = take(rows * l.row_bytes);
  l.operand = take(l.k_pad * l.row_bytes);
  l.sums = take(k * d_pad * 4);
  l.mu = take(d_pad * 4);
  l.bias = take(l.k_pad * 4);
  l.w = take(rows * 4);
  l.label = take(rows * 4);
  l.perm = take(rows * 4);
  l.tile_count = take(rows / 32 * k * 4);
  l.count = take(k * 4);
  l.start = take(k * 4);
  l.dirty = take(l.k_words * 4);
  l.dirty_all = take(kSmallMaxBlocks * l.k_words * 4);
  l.changed = take(k * 4);
  l.bytes = at;
  return l;
}

template <typename T>
struct SmallArgs {
  Rows<T> rows;
  int k;
  int d;
  int d_pad;
  int blocks;  // per problem: the cluster's size
  int n_iters;
  float alpha;
  bool cosine;
  const float* means;      // [batch, d] or null (16-bit T only: folded into the bias)
  float* centroids;        // [batch, k, d] float32: the initial ones in (unless strided_init),
                           // the fitted ones out
  bool strided_init;       // the initial centroids are init_kernel's kStrided, taken here
  SmallLayout l;           // (kernel parameters: no registers held for the offsets)
  bool float4_rows;        // centroid rows are 16-byte aligned (d % 4 == 0, centroids aligned)
  int32_t* labels;         // the last assignment's: [batch, n], or by the rows' offsets
  bool labels_by_offsets;  // problem b's labels start at rows.offsets[b] (where given)
  float* distances;  // [batch, n]: each point's distance to its centroid, or null: not asked for
  bool keeps;        // from the second assignment on, only the clusters a point joined or left are
                     // summed and updated, and the fit ends once no point moves (not with
                     // CUDAOPS_KMEANS_UPDATE=full: full_updates)
  int32_t* done;     // [batch] or null: zeroed at the start, then each block of problem b adds 1
                     // once its labels, centroids and distances are written
  bool tf32;         // float32: single TF32 products (Call::tf32)
};

/// A piece of 16 bytes of T as floats.
template <typename T>
__device__ __forceinline__ void piece_to_floats(const uint4& raw, float (&f)[kPieceValues<T>]) {
  const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int e = 0; e < kPieceValues<T>; ++e)
    f[e] = to_float(t[e]);
}

/// w[r] = 1 / |x_r - mean| (0 for a zero row) for the block's rows r < rows_here, by its
/// kSmallWarps warps, kL lanes a row (a piece each). Called, not inlined: the kernel's registers
/// are all taken, and this code, run once, would move their allocation in the iterations. The
/// loop has no branch (rows past the problem's are zeros, kept out below), and lane `part` keeps
/// the squared length of the row of its warp's part-th round (at most kL rounds), so that the
/// square roots and divisions take one round, not one per row.
template <typename T, int kL>
__device__ __noinline__ void cosine_weights(const unsigned char* x_tile, int row_bytes,
                                            const float* mu, int pieces, int rows_here, float* w) {
  constexpr int kV = kPieceValues<T>;
  constexpr int kR = kWarp / kL;
  const int warp = static_cast<int>(threadIdx.x) / kWarp,
            lane = static_cast<int>(threadIdx.x) % kWarp;
  const int sub = lane / kL, part = lane % kL;
  const int q = part < pieces ? part : 0;
  float m[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e)
    m[e] = part < pieces ? mu[part * kV + e] : 0.0f;
  float held = 0.0f;
  int round = 0;
  for (int r0 = warp * kR; r0 < rows_here; r0 += kSmallWarps * kR, ++round) {
    // (By 32-bit words: through a T pointer the compiler loads the piece value by value.)
    const uint4 raw = *reinterpret_cast<const uint4*>(x_tile + (r0 + sub) * row_bytes + q * 16);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    float f[kV];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (sizeof(T) == 2) {
        const float2 p = pair_values<T>(words[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
      } else {
        f[i] = __uint_as_float(words[i]);
      }
    }
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < kV; ++e)
      s = fmaf(f[e] - m[e], f[e] - m[e], s);
    s = group_sum<kL>(part < pieces ? s : 0.0f);
    held = part == round ? s : held;
  }
  const int r = warp * kR + part * kSmallWarps * kR + sub;  // (the row of round `part`)
  if (part < round && r < rows_here) w[r] = held > 0.0f ? 1.0f / sqrtf(held) : 0.0f;
}

/// The block's points into x_tile (rows past the problem's end and values past d zero), the
/// mean subtracted into mu, and the operand rows past k zero with infinite biases (they never
/// win); waits for the copies.
template <typename T>
__device__ __forceinline__ void load_block(const SmallArgs<T>& a, const T* first, int64_t row0,
                                           int rows, int rows_here, int pieces, int64_t b,
                                           unsigned char* x_tile, unsigned char* operand, float* mu,
                                           float* bias) {
  const SmallLayout& l = a.l;
  const int tid = threadIdx.x;
  const int row_valid_bytes = a.d * static_cast<int>(sizeof(T));
  for (int idx = tid; idx < rows * pieces; idx += kSmallThreads) {
    const int r = idx / pieces, q = idx % pieces;
    const int bytes = r < rows_here ? max(0, min(16, row_valid_bytes - q * 16)) : 0;
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(bytes > 0 ? first + (row0 + r) * a.rows.ld : first);
    copy16(x_tile + r * l.row_bytes + q * 16, src + (bytes > 0 ? q * 16 : 0), bytes);
  }
  copy_commit();
  for (int e = tid; e < a.d_pad; e += kSmallThreads)
    mu[e] = a.means != nullptr && e < a.d ? __ldg(a.means + b * a.d + e) : 0.0f;
  for (int idx = tid; idx < (l.k_pad - a.k) * (l.row_bytes / 4); idx += kSmallThreads)
    reinterpret_cast<uint32_t*>(operand + a.k * l.row_bytes)[idx] = 0u;
  for (int j = a.k + tid; j < l.k_pad; j += kSmallThreads)
    bias[j] = INFINITY;
  copy_wait<0>();
  __syncthreads();
}

/// The fit's end: the block's labels, and each point's distance to its centroid in float32 (as
/// kmeans_kernels.cuh's distance_kernel computes it) where asked for; m: the mean's values of the
/// lane's piece.
template <typename T, int kL>
__device__ __forceinline__ void write_labels_and_distances(const SmallArgs<T>& a, int64_t b,
                                                           int64_t row0, int rows_here, int pieces,
                                                           const unsigned char* x_tile,
                                                           const int* label,
                                                           const float (&m)[kPieceValues<T>]) {
  constexpr int kV = kPieceValues<T>;
  constexpr int kR = kWarp / kL;
  const SmallLayout& l = a.l;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int sub = lane / kL, part = lane % kL;
  const int64_t label_base =
      a.labels_by_offsets && a.rows.offsets != nullptr ? a.rows.offsets[b] : b * a.rows.n;
  for (int r = tid; r < rows_here; r += kSmallThreads)
    a.labels[label_base + row0 + r] = label[r];
  for (int r0 = warp * kR; a.distances != nullptr && r0 < rows_here; r0 += kSmallWarps * kR) {
    const int r = r0 + sub;
    float dot = 0.0f, yy = 0.0f, dd = 0.0f;
    if (r < rows_here && part < pieces) {
      float f[kV];
      piece_to_floats<T>(*reinterpret_cast<const uint4*>(x_tile + r * l.row_bytes + part * 16), f);
      const float* c = a.centroids + (b * a.k + label[r]) * a.d;
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        if (part * kV + e < a.d) add_distance_terms(f[e] - m[e], c[part * kV + e], dot, yy, dd);
      }
    }
    const float distance = group_distance<kL>(dot, yy, dd, a.cosine);
    if (r < rows_here && part == 0) a.distances[b * a.rows.n + row0 + r] = distance;
  }
}

/// Each changed cluster's sum over the block's points (x - mean, times the point's weight w):
/// the lanes' groups take every kR-th point in row order (kU loaded before any is added), added
/// in a fixed order, into sums [k][d_pad]; m: the mean's values of the lane's piece.
template <typename T, int kL, int kU>
__device__ __forceinline__ void sum_changed(int d_pad, int row_bytes, int pieces, int n_changed,
                                            const int* changed, const int* count, const int* start,
                                            const int* perm, const float* w,
                                            const unsigned char* x_tile,
                                            const float (&m)[kPieceValues<T>], float* sums) {
  constexpr int kV = kPieceValues<T>;
  constexpr int kR = kWarp / kL;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int sub = lane / kL, part = lane % kL;
  for (int j = warp; j < n_changed; j += kSmallWarps) {
    const int c = changed[j];
    float acc[kV] = {};
    const int n_c = count[c], s_c = start[c];
    for (int p0 = 0; p0 < n_c; p0 += kR * kU) {
      uint4 raw[kU];
      float scale[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int p = p0 + u * kR + sub;
        const bool valid = p < n_c && part < pieces;
        const int row = valid ? perm[s_c + p] : 0;
        scale[u] = valid ? w[row] : 0.0f;
        raw[u] = valid ? *reinterpret_cast<const uint4*>(x_tile + row * row_bytes + part * 16)
                       : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float f[kV];
        piece_to_floats<T>(raw[u], f);
#pragma unroll
        for (int e = 0; e < kV; ++e)
          acc[e] = fmaf(f[e] - m[e], scale[u], acc[e]);
      }
    }
    add_groups<kL>(acc, lane);
    if (sub == 0 && part < pieces) {
#pragma unroll
      for (int e = 0; e < kV; e += 4) {
        *reinterpret_cast<float4*>(sums + c * d_pad + part * kV + e) =
            make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
      }
    }
  }
}

// 128 registers a thread: the products' accumulators fit, and 16 warps hide the latencies of
// the sums and the grouping. kL lanes read a row, a 16-byte piece each (kL pieces cover d_pad);
// a warp's products take kM tiles of 16 rows.
template <typename T, int kL, int kM>
__global__ void __launch_bounds__(kSmallThreads, 1) small_fit_kernel(SmallArgs<T> a) {
  constexpr int kTile = 16 * kM;       // rows of a warp's products
  constexpr int kV = kPieceValues<T>;  // values per piece
  constexpr int kU = 2;                // points each lane loads before adding any (sum_changed)
  extern __shared__ __align__(16) unsigned char smem[];
  const SmallLayout& l = a.l;
  const int rows = l.rows;         // points per block, at most kSmallWarps * kTile
  const int groups = l.rows / 32;  // 32-row groups of the grouping (warps 0 to groups - 1)
  unsigned char* x_tile = smem + l.x;
  unsigned char* operand = smem + l.operand;
  float* sums = reinterpret_cast<float*>(smem + l.sums);  // [k][d_pad]
  float* mu = reinterpret_cast<float*>(smem + l.mu);
  float* bias = reinterpret_cast<float*>(smem + l.bias);
  float* w = reinterpret_cast<float*>(smem + l.w);
  int* label = reinterpret_cast<int*>(smem + l.label);
  int* perm = reinterpret_cast<int*>(smem + l.perm);
  int* tile_count = reinterpret_cast<int*>(smem + l.tile_count);  // [groups][k]
  int* count = reinterpret_cast<int*>(smem + l.count);
  int* start = reinterpret_cast<int*>(smem + l.start);
  // The clusters a point of the block joined or left at this assignment (a bit each), every
  // block's of the problem (written by each into all), and the block's changed ones in order.
  uint32_t* dirty = reinterpret_cast<uint32_t*>(smem + l.dirty);
  uint32_t* dirty_all = reinterpret_cast<uint32_t*>(smem + l.dirty_all);
  int* changed = reinterpret_cast<int*>(smem + l.changed);

  const int rank = static_cast<int>(blockIdx.x % a.blocks);
  const int64_t b = blockIdx.x / a.blocks;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int part = lane % kL;
  const int pieces = a.d_pad * static_cast<int>(sizeof(T)) / 16;  // of a row, <= kL
  const T* first;
  int64_t len;
  a.rows.problem(b, &first, &len);
  const int64_t row0 = static_cast<int64_t>(rank) * rows;
  const int rows_here = static_cast<int>(max(min(len - row0, int64_t{rows}), int64_t{0}));
  if (a.done != nullptr) {
    // Zeroed before the next kernel may start (it waits for the count, not for this kernel).
    if (rank == 0 && tid == 0) {
      a.done[b] = 0;
      __threadfence();
    }
    __syncthreads();
    allow_next_kernel();
  }
  // Peers' shared memory (a block alone reads its own).
  auto peer = [&](auto* p, int r) { return a.blocks > 1 ? cluster_peer(p, r) : p; };
  auto sync_all = [&] {
    if (a.blocks > 1) {
      cluster_sync_one_fence();
    } else {
      __syncthreads();
    }
  };

  load_block(a, first, row0, rows, rows_here, pieces, b, x_tile, operand, mu, bias);
  // The mean's values of the lane's piece (read where used: kept in registers through the
  // products, they spill).
  auto piece_mean = [&](float(&m)[kV]) {
#pragma unroll
    for (int e = 0; e < kV; ++e)
      m[e] = part < pieces ? mu[part * kV + e] : 0.0f;
  };
  // Every block of the cluster runs before any writes to its shared memory: the barrier's wait
  // is below, the block's own work (the weights) in its shadow. (Relaxed: the peers write only
  // operand rows and biases of real clusters, which the block has not written, and read nothing.)
  if (a.blocks > 1) cluster_arrive_relaxed();
  // Each point's weight in the sums: cosine 1 / |x - mean| (0 for a zero row), L2 1.
  if (a.cosine) {
    cosine_weights<T, kL>(x_tile, l.row_bytes, mu, pieces, rows_here, w);
  } else {
    for (int r = tid; r < rows; r += kSmallThreads)
      w[r] = 1.0f;
  }

  // A centroid's row is handled by kC lanes (two clusters a warp: one round of step 3 takes
  // 32 clusters a block). Cluster c's new float32 centroid, float4 i of it (i < d_pad / 4) in
  // v[q] for i = cl + kC q: written to the result (values below d), and published to every
  // block: its operand row (zeros past d) and bias, of the rounded values: L2 |c|^2, cosine 0,
  // plus alpha * mean . c. Every lane of the warp calls it (the sums' shuffles); only lanes
  // `active` store.
  constexpr int kC = 16;
  constexpr int kF = (kV * kL / 4 + kC - 1) / kC;  // float4s of a row per lane, at most
  const int cl = lane % kC, half = lane / kC;
  const int f4 = a.d_pad / 4;
  auto publish = [&](int c, const float4(&v)[kF], bool write, bool active) {
    float norm = 0.0f, shift = 0.0f;
    float* to = a.centroids + (b * a.k + c) * a.d;
#pragma unroll
    for (int q = 0; q < kF; ++q) {
      const int i = cl + q * kC;
      if (i >= f4) continue;
      const float in[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
      const float4 m = *reinterpret_cast<const float4*>(mu + 4 * i);
      const float mm[4] = {m.x, m.y, m.z, m.w};
      if (write && active && a.float4_rows && 4 * i < a.d) {
        *reinterpret_cast<float4*>(to + 4 * i) = v[q];
      } else if (write && active) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (4 * i + e < a.d) to[4 * i + e] = in[e];
        }
      }
      T r[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool inside = 4 * i + e < a.d;
        r[e] = operand_value<T>(inside ? in[e] : 0.0f, a.tf32);
        const float f = to_float(r[e]);
        norm = fmaf(f, f, norm);
        shift = fmaf(mm[e], f, shift);
      }
      for (int rb = 0; rb < a.blocks && active; ++rb) {
        T* dst = peer(reinterpret_cast<T*>(operand + c * l.row_bytes), rb) + 4 * i;
        if constexpr (sizeof(T) == 4) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(r);
        } else {
          *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(r);
        }
      }
    }
    norm = group_sum<kC>(norm);
    shift = group_sum<kC>(shift);
    if (active && cl < a.blocks) *peer(bias + c, cl) = centroid_bias(a.cosine, norm, shift);
  };
  const int own_first = rank * l.owned;
  const int own_end = min(a.k, own_first + l.owned);
  if (a.blocks > 1) {
    cluster_wait();
  } else {
    __syncthreads();
  }
  // (Warp-uniform rounds of two clusters: the halves' shuffles need every lane.)
  constexpr int kRound = kSmallWarps * (kWarp / kC);
  for (int c0 = own_first + warp * (kWarp / kC); c0 < own_end; c0 += kRound) {
    const int c = c0 + half;
    const bool active = c < own_end;
    const float* from = a.centroids + (b * a.k + c) * a.d;
    // Strided, as init_kernel takes them (and written out, as it writes them): point c * n / k,
    // centred, and for cosine at unit length (a zero vector stays zero).
    const int64_t point = strided_point(c, len, a.k);
    // (From the block's copy where the point is one of its rows, as it is where the clusters and
    // rows divide alike: no round trip to memory.)
    const int64_t local = point - row0;
    const T* x = local >= 0 && local < rows_here
                     ? reinterpret_cast<const T*>(x_tile + local * l.row_bytes)
                     : first + max(point, int64_t{0}) * a.rows.ld;
    float4 v[kF];
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kF; ++q) {
      const int i = cl + q * kC;
      float in[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 4 * i + e;
        const bool inside = active && i < f4 && col < a.d;
        if (!a.strided_init) {
          in[e] = inside ? from[col] : 0.0f;
        } else {
          in[e] = inside && point >= 0 ? to_float(x[col]) - mu[col] : 0.0f;
          s = fmaf(in[e], in[e], s);
        }
      }
      v[q] = make_float4(in[0], in[1], in[2], in[3]);
    }
    if (a.strided_init && a.cosine) {
      s = group_sum<kC>(s);
      const float scale = s > 0.0f ? 1.0f / sqrtf(s) : 0.0f;
#pragma unroll
      for (int q = 0; q < kF; ++q)
        v[q] = make_float4(v[q].x * scale, v[q].y * scale, v[q].z * scale, v[q].w * scale);
    }
    publish(c, v, a.strided_init, active);
  }
  sync_all();  // every block has every operand row

  // Every cluster's bit: the first assignment, or every one without a.keeps.
  auto every_cluster = [&](int word) {
    return (word + 1) * 32 <= a.k ? ~0u : (1u << (a.k % 32)) - 1u;
  };
  for (int word = tid; word < l.k_words; word += kSmallThreads)
    dirty[word] = every_cluster(word);
  const int g = lane / 4, t = lane % 4;
  const int b_row = (lane % 8) + 8 * (lane / 16);
  const int b_half = ((lane / 8) % 2) * 16;
  const int steps = a.d_pad * static_cast<int>(sizeof(T)) / 32;
  // Each warp's kTile points against every centroid: their labels; with `mark`, the clusters a
  // point left and joined are marked.
  auto assign_points = [&](bool mark) {
    if (warp * kTile < rows_here) {
      const unsigned char* a_base =
          x_tile + (warp * kTile + (lane % 16)) * l.row_bytes + (lane / 16) * 16;
      float best[kM][2];
      int best_j[kM][2];
      no_minimum(best, best_j);
      for (int j0 = 0; j0 < l.k_pad; j0 += kChunk) {
        float acc[kM][8][4];
        warp_products<T>(acc, a_base, operand + (j0 + b_row) * l.row_bytes + b_half, l.row_bytes,
                         steps, a.tf32);
        chunk_minimum_placed(
            acc, [&](int c) { return bias[j0 + c]; }, a.alpha, t, j0, best, best_j);
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v = best[m][h];
          int j = best_j[m][h];
          row_minimum(v, j);
          // No score at all (NaN rows) takes label 0, as the assignment does.
          const int r = warp * kTile + m * 16 + h * 8 + g;
          const int now = j == INT32_MAX ? 0 : j;
          if (t == 0 && mark && r < rows_here) {
            const int before = label[r];
            if (before != now) {
              atomicOr(dirty + before / 32, 1u << (before % 32));
              atomicOr(dirty + now / 32, 1u << (now % 32));
            }
          }
          if (t == 0) label[r] = now;
        }
      }
    }
  };
  bool settled = false;  // no point moved at the last assignment: its labels are the fit's
  for (int iter = 0; iter < a.n_iters; ++iter) {
    // 1. The labels.
    for (int idx = tid; idx < groups * a.k; idx += kSmallThreads)
      tile_count[idx] = 0;
    assign_points(a.keeps && iter > 0);
    __syncthreads();
    if (a.keeps) {
      for (int idx = tid; idx < a.blocks * l.k_words; idx += kSmallThreads)
        *peer(dirty_all + rank * l.k_words + idx % l.k_words, idx / l.k_words) =
            dirty[idx % l.k_words];
    }
    // 2. The block's points grouped by label, in row order: each point's place among its
    // cluster's points of the 32-row groups before its own and in its own.
    const int i = warp * 32 + lane;
    const int mine = warp < groups && i < rows_here ? label[i] : -1;
    const unsigned same = __match_any_sync(kFull, mine);
    const int before_in_tile = __popc(same & ((1u << lane) - 1u));
    if (mine >= 0 && before_in_tile == 0) tile_count[warp * a.k + mine] = __popc(same);
    __syncthreads();
    int total = 0;
    bool is_changed = false;
    if (tid < a.k) {
      for (int v = 0; v < groups; ++v) {
        const int here = tile_count[v * a.k + tid];
        tile_count[v * a.k + tid] = total;
        total += here;
      }
      count[tid] = total;
      is_changed = (dirty[tid / 32] >> (tid % 32)) & 1u;
    }
    // One scan for both: the clusters' first places (at most kSmallMaxRows, in the low 16 bits)
    // and the changed clusters' places in their list.
    int first_place = 0, all = 0;
    {
      using Scan = cub::BlockScan<int, kSmallThreads>;
      __shared__ typename Scan::TempStorage scan;
      Scan(scan).ExclusiveSum(total + (is_changed ? 1 << 16 : 0), first_place, all);
    }
    const int n_changed = all >> 16;
    if (tid < a.k) {
      start[tid] = first_place & 0xFFFF;
      if (is_changed) changed[first_place >> 16] = tid;
    }
    __syncthreads();
    if (mine >= 0) perm[start[mine] + tile_count[warp * a.k + mine] + before_in_tile] = i;
    __syncthreads();
    // Each changed cluster's sum over the block's points (x - mean, times the weight): the lanes'
    // groups take every kR-th point in row order, and are added in a fixed order. The others' are
    // the block's sums of the same points, kept from before.
    {
      float m[kV];
      piece_mean(m);
      sum_changed<T, kL, kU>(a.d_pad, l.row_bytes, pieces, n_changed, changed, count, start, perm,
                             w, x_tile, m, sums);
    }
    sync_all();  // every block's sums, counts and changed clusters are written
    if (a.keeps) {
      // No point of the problem moved: the centroids are those the last update computed, and
      // assigning again gives these labels.
      bool moved = false;
      for (int idx = lane; idx < a.blocks * l.k_words; idx += kWarp)
        moved = moved || dirty_all[idx] != 0u;
      if (!__any_sync(kFull, moved)) {
        settled = true;
        break;
      }
    }
    for (int word = tid; word < l.k_words; word += kSmallThreads)
      dirty[word] = a.keeps ? 0u : every_cluster(word);  // for the next assignment's marks

    // 3. The owned clusters that changed in any block: the blocks' sums added in rank order.
    auto changed_anywhere = [&](int c) {
      uint32_t bits = 0;
      for (int rb = 0; rb < a.blocks; ++rb)
        bits |= dirty_all[rb * l.k_words + c / 32];
      return ((bits >> (c % 32)) & 1u) != 0u;
    };
    for (int c0 = own_first + warp * (kWarp / kC); c0 < own_end; c0 += kRound) {
      const int c = c0 + half;
      const bool active = c < own_end && (!a.keeps || changed_anywhere(c));
      if (!__any_sync(kFull, active)) continue;
      // Added as they arrive, in rank order (each rank's pieces held at once, not every rank's:
      // the registers are the products').
      float4 v[kF];
      int points = 0;
#pragma unroll
      for (int r = 0; r < kSmallMaxBlocks; ++r) {
        const bool here = active && r < a.blocks;
        const float* from = here ? peer(sums, r) + c * a.d_pad : nullptr;
        points += here ? *peer(count + c, r) : 0;
#pragma unroll
        for (int q = 0; q < kF; ++q) {
          const int i = cl + q * kC;
          const float4 p = here && i < f4 ? *reinterpret_cast<const float4*>(from + 4 * i)
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          v[q] = r == 0 ? p : make_float4(v[q].x + p.x, v[q].y + p.y, v[q].z + p.z, v[q].w + p.w);
        }
      }
      float s2 = 0.0f;
#pragma unroll
      for (int q = 0; q < kF; ++q) {
        s2 = fmaf(v[q].x, v[q].x,
                  fmaf(v[q].y, v[q].y, fmaf(v[q].z, v[q].z, fmaf(v[q].w, v[q].w, s2))));
      }
      s2 = group_sum<kC>(s2);
      // An empty cluster, or a cosine sum of zero, keeps its centroid.
      const bool update = active && (a.cosine ? s2 > 0.0f : points != 0);
      // The mean as the sum times 1 / points (one division a cluster, not one a value).
      const float scale = !update    ? 1.0f
                          : a.cosine ? 1.0f / sqrtf(s2)
                                     : 1.0f / static_cast<float>(points);
#pragma unroll
      for (int q = 0; q < kF; ++q)
        v[q] = make_float4(v[q].x * scale, v[q].y * scale, v[q].z * scale, v[q].w * scale);
      publish(c, v, true, update);
    }
    sync_all();  // every operand row is new, and the sums and groups may be rewritten
  }
  // The last assignment, against the fitted centroids (where the fit settled, the labels are
  // those already), then each point's distance to its centroid in float32 (as
  // kmeans_kernels.cuh's distance_kernel computes it).
  if (!settled) {
    assign_points(false);
    __syncthreads();
  }
  float m[kV];
  piece_mean(m);
  write_labels_and_distances<T, kL>(a, b, row0, rows_here, pieces, x_tile, label, m);
  if (a.done != nullptr) {
    __syncthreads();  // the block's writes are done
    if (tid == 0) {
      __threadfence();
      atomicAdd(a.done + b, 1);
    }
  }
}

}  // namespace
}  // namespace cudaops::detail::kmeans
