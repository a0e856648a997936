#pragma once

// Batched k-means: the update (see kmeans_kernels.cuh): the clusters whose points changed since
// the assignment before, each problem's points grouped by label, each changed cluster's sum in
// row order, and empty clusters re-seeded.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/kmeans_device.cuh"

namespace cudaops::detail::kmeans {
namespace {

// ---- the update --------------------------------------------------------------------------------

/// Most warps of group_kernel's blocks.
constexpr int kGroupMaxWarps = 32;

/// Exclusive prefix sum of v over the block (any whole number of warps), and the block's total;
/// `totals` is shared memory of kGroupMaxWarps ints. Every thread of the block calls it.
__device__ __forceinline__ int32_t block_exclusive_sum(int32_t v, int32_t* totals, int32_t* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  int32_t x = v;
#pragma unroll
  for (int o = 1; o < kWarp; o *= 2) {
    const int32_t y = __shfl_up_sync(kFull, x, o);
    if (lane >= o) x += y;
  }
  if (lane == kWarp - 1) totals[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int32_t t = lane < warps ? totals[lane] : 0;
#pragma unroll
    for (int o = 1; o < kWarp; o *= 2) {
      const int32_t y = __shfl_up_sync(kFull, t, o);
      if (lane >= o) t += y;
    }
    totals[lane] = t;
  }
  __syncthreads();
  const int32_t before = x - v + (warp > 0 ? totals[warp - 1] : 0);
  *total = totals[warps - 1];
  __syncthreads();  // totals may be rewritten by the next call
  return before;
}

/// For each of kN labels of the warp's lanes (-1: none), the lanes holding the same label (below
/// 2^bits), from one ballot a bit (faster here than match.any: docs/kmeans.md).
template <int kN>
__device__ __forceinline__ void same_labels(const int (&label)[kN], int bits,
                                            unsigned (&peers)[kN]) {
#pragma unroll
  for (int u = 0; u < kN; ++u)
    peers[u] = __ballot_sync(kFull, label[u] >= 0);
  for (int bit = 0; bit < bits; ++bit) {
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const bool one = (label[u] >> bit) & 1;
      const unsigned ones = __ballot_sync(kFull, one);
      peers[u] &= one ? ones : ~ones;
    }
  }
}

/// Each problem's points grouped by label, in row order within a label (a block per problem):
/// counts and starts per cluster, and perm[start_c ...] the cluster's rows. A counting sort: warp
/// w takes the w-th contiguous segment of the rows and counts its labels in row w of a
/// [warps][k] table (shared-memory atomics: integers, so any order gives the same counts); a
/// pass over the table turns each count into the warp's first place in its cluster; the warp
/// walks its segment again and places each row there, after the lanes below it of the same label
/// (one leader a label and step). With `staged`, the problem's perm is built in shared memory and
/// written out in order, rather than scattered 4 bytes at a time. Stable, the same every run.
// 32 registers a thread: two blocks of 32 warps an SM where it holds 64 warps (a minimum of two
// blocks in __launch_bounds__ is out of range where it holds fewer).
template <typename T>
__global__ void __maxnreg__(32)
    group_kernel(Rows<T> rows, const int32_t* labels, int k, bool staged, int32_t* counts,
                 int32_t* starts, int32_t* perm, const int32_t* moved) {
  __shared__ int32_t totals[kGroupMaxWarps];
  extern __shared__ int32_t table[];  // [warps][k], then with `staged` the perm [rows.n]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  const int64_t b = blockIdx.x;
  if (moved != nullptr && moved[b] == 0) return;  // the same labels: counts and starts stand
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  const int32_t* lab = labels + b * rows.n;
  for (int idx = threadIdx.x; idx < warps * k; idx += blockDim.x)
    table[idx] = 0;
  // The warp's rows [begin, end): whole steps of 32 but the last.
  const int64_t seg = ((len + warps - 1) / warps + kWarp - 1) / kWarp * kWarp;
  const int64_t begin = min(len, warp * seg), end = min(len, begin + seg);
  int32_t* mine = table + warp * k;
  const unsigned below = (1u << lane) - 1u;
  const int bits = k > 1 ? 32 - __clz(k - 1) : 0;  // of the labels 0 .. k - 1
  __syncthreads();
  // Steps whose labels a lane loads before using any (more spill at 32 registers).
  constexpr int kAhead = 4;
  // The labels of kAhead steps from row i0 (-1 past the segment's end).
  auto load_labels = [&](int64_t i0, int(&label)[kAhead]) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t i = i0 + u * kWarp + lane;
      label[u] = i < end ? __ldg(lab + i) : -1;
    }
  };
  for (int64_t i0 = begin; i0 < end; i0 += kAhead * kWarp) {
    int label[kAhead];
    load_labels(i0, label);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (label[u] >= 0) atomicAdd(mine + label[u], 1);
    }
  }
  __syncthreads();
  // Per cluster: the warps' first places (the counts of the warps before, and the start).
  int32_t carry = 0;
  for (int c0 = 0; c0 < k; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    int32_t count = 0;
    if (c < k) {
      for (int v = 0; v < warps; ++v) {
        const int32_t here = table[v * k + c];
        table[v * k + c] = count;
        count += here;
      }
    }
    int32_t chunk = 0;
    const int32_t start = carry + block_exclusive_sum(count, totals, &chunk);
    if (c < k) {
      counts[b * k + c] = count;
      starts[b * k + c] = start;
      for (int v = 0; v < warps; ++v)
        table[v * k + c] += start;
    }
    carry += chunk;
  }
  __syncthreads();
  int32_t* out = staged ? table + warps * k : perm + b * rows.n;
  for (int64_t i0 = begin; i0 < end; i0 += kAhead * kWarp) {
    int label[kAhead];
    load_labels(i0, label);
    unsigned peers[kAhead];
    same_labels(label, bits, peers);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      int32_t place = 0;
      if (label[u] >= 0) {
        place = mine[label[u]];
        out[place + __popc(peers[u] & below)] = static_cast<int32_t>(i0 + u * kWarp + lane);
      }
      __syncwarp();
      if (label[u] >= 0 && (peers[u] & below) == 0) mine[label[u]] = place + __popc(peers[u]);
      __syncwarp();
    }
  }
  if (!staged) return;
  __syncthreads();
  int32_t* to = perm + b * rows.n;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
    to[i] = out[i];
}

/// Groups each problem's rows by label (group_kernel): counts and starts [batch, k], perm
/// [batch, rows.n]. As many warps a block as shared memory holds a table row for, at most 32 and
/// at most one per 32 rows; the perm staged in shared memory where it fits beside the table
/// without costing a block its place beside another.
template <typename T>
Status launch_group(const char* op, const Rows<T>& rows, int64_t batch, const int32_t* labels,
                    int64_t k, int32_t* counts, int32_t* starts, int32_t* perm, cudaStream_t stream,
                    const int32_t* moved = nullptr) {
  const void* kernel = reinterpret_cast<const void*>(group_kernel<T>);
  size_t room = 0;
  if (Status s = max_dynamic_smem(op, kernel, &room); !s.ok()) return s;
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(int32_t));
  const int64_t fit = static_cast<int64_t>(room) / row_bytes;
  const int64_t warps =
      std::max<int64_t>(1, std::min<int64_t>({kGroupMaxWarps, fit, (rows.n + kWarp - 1) / kWarp}));
  size_t smem = static_cast<size_t>(warps * row_bytes);
  const size_t staged_smem = smem + static_cast<size_t>(rows.n) * sizeof(int32_t);
  // Staged only while two blocks still share an SM, or one had the SM alone anyway.
  const bool staged = staged_smem <= room / 2 || (smem > room / 2 && staged_smem <= room);
  if (staged) smem = staged_smem;
  if (Status s = allow_dynamic_smem(op, kernel, smem); !s.ok()) return s;
  group_kernel<T>
      <<<static_cast<unsigned>(batch), static_cast<unsigned>(warps * kWarp), smem, stream>>>(
          rows, labels, static_cast<int>(k), staged, counts, starts, perm, moved);
  return launched(stream);
}

template <typename T>
struct SumArgs {
  Rows<T> rows;
  const int32_t* counts;  // [batch, k]
  const int32_t* starts;  // [batch, k]
  const int32_t* perm;    // [batch, n]
  const float* means;     // or null
  float* weights;         // [batch, n]: cosine 1 / |y| (Call::point_w); null for L2
  const int32_t* dirty;   // [batch, k]: clusters whose rows changed (mark_kernel), or null: all
  float* centroids;       // [batch, k, d]
  T* operand;             // [batch, k, d_pad], or null: not written
  float* bias;            // [batch, k] (with operand)
  int64_t k;
  int64_t items;  // batch * k
  int d;
  int d_pad;
  bool cosine;
  bool fold;      // the bias carries alpha * mean . c (Call::fold_means)
  bool prefetch;  // prefetch_share: each problem's rows fit L2 a few times over
  bool tf32;      // float32 operand rows rounded to TF32 (Call::tf32)
  int span = 1;   // items a warp takes (sum_kernel's kSpan form), 1 to kSumSpan
};

// Two warps a block: a block holds its SM slot until its largest cluster is summed, and clusters'
// sizes vary; smaller blocks leave fewer warps idle behind the largest.
constexpr int kSumWarps = 2;

/// Prefetches into L2, as one stream, the share of its problem's rows of the `span` items from
/// item0 (the problem's spans split them evenly), so that the warps gather their clusters'
/// scattered rows from L2 rather than from DRAM 256 bytes at a time. A hint: nothing waits for it.
template <typename T>
__device__ __forceinline__ void prefetch_share(const SumArgs<T>& args, int64_t item0, int span) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t b = item0 / args.k;
  const int64_t shares = (args.k + span - 1) / span;
  const int64_t share = (item0 % args.k) / span;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  if (len <= 0) return;
  // The problem's bytes from its first row to the end of its last (rows are 16-byte aligned).
  const int64_t total = ((len - 1) * args.rows.ld + args.d) * static_cast<int64_t>(sizeof(T));
  const int64_t step = ((total + shares - 1) / shares + 15) & ~int64_t{15};
  const int64_t begin = share * step;
  const int64_t bytes = (min(begin + step, total) - begin) & ~int64_t{15};
  if (bytes <= 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(
                   reinterpret_cast<const unsigned char*>(first) + begin),
               "r"(static_cast<uint32_t>(bytes))
               : "memory");
#else
  (void)args;
  (void)item0;
  (void)span;
#endif
}

/// Marks each cluster that a row joined or left since the previous assignment (dirty[b, c] = 1,
/// cleared before), and each problem where any did (moved[b] = 1): labels against prev,
/// kMarkRows rows of a problem a block.
constexpr int kMarkRows = 1024;
template <typename T>
__global__ void __launch_bounds__(256)
    mark_kernel(Rows<T> rows, int64_t k, int64_t blocks_per_problem, const int32_t* labels,
                const int32_t* prev, int32_t* dirty, int32_t* moved) {
  const int64_t b = blockIdx.x / blocks_per_problem;
  const int64_t i0 = (blockIdx.x % blocks_per_problem) * kMarkRows;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
#pragma unroll
  for (int u = 0; u < kMarkRows / 256; ++u) {
    const int64_t i = i0 + u * 256 + threadIdx.x;
    if (i >= len) break;
    const int32_t now = labels[b * rows.n + i], before = prev[b * rows.n + i];
    if (now == before) continue;
    moved[b] = 1;
    if (now >= 0 && now < k) dirty[b * k + now] = 1;
    if (before >= 0 && before < k) dirty[b * k + before] = 1;
  }
}

/// New centroids: a warp per cluster adds its points' working rows (y, or y / |y| for cosine) and
/// writes their mean (cosine: their sum at unit length), and where args.operand is set, the
/// centroid's operand row and bias as operand_kernel writes them (so that the next assignment
/// needs no launch to round them). Empty clusters, and cosine sums of zero, keep their centroid. A
/// row is read in 16-byte pieces by kL lanes (kQ pieces each), so a warp reads 32 / kL rows per
/// load and keeps several loads in flight; each group of kL lanes adds its rows in row order and
/// the groups are added in a fixed order: the same bits every run. Cosine's 1 / |y| is computed
/// where every cluster is summed (the fit's first update) and stored in args.weights, and read
/// back by kStored (the changed clusters' sums): the points do not change, and the sums are bound
/// by their instructions, of which the weight was a third.
template <typename T, int kL, int kQ, bool kStored>
__device__ __forceinline__ void sum_cluster(const SumArgs<T>& args, int64_t item, int lane) {
  constexpr int kSumUnroll = kQ == 1 ? 4 : 2;  // loads a lane has in flight before it adds any
  constexpr int kV = kPieceValues<T>;
  constexpr int kR = kWarp / kL;  // rows per load
  const int sub = lane / kL, part = lane % kL;
  const int64_t b = item / args.k;
  const int count = args.counts[item];
  if (count == 0) return;
  const int start = args.starts[item];
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  const int32_t* perm = args.perm + b * args.rows.n + start;
  float* weights = args.cosine ? args.weights + b * args.rows.n : nullptr;
  const int row_pieces = (args.d + kV - 1) / kV;
  const bool whole_last = args.d % kV == 0;  // the last piece of a row lies inside d
  // Per piece of the lane: an aligned 16-byte load (whole), the row's last piece past d
  // (partial: loaded value by value), or nothing past the row.
  bool whole[kQ], partial[kQ];
  float mu[kQ][kV];
  float acc[kQ][kV];
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int piece = part + q * kL;
    whole[q] = piece < row_pieces && (piece + 1 < row_pieces || whole_last);
    partial[q] = piece < row_pieces && !whole[q];
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const int c = piece * kV + e;
      mu[q][e] = args.means != nullptr && c < args.d ? __ldg(args.means + b * args.d + c) : 0.0f;
      acc[q][e] = 0.0f;
    }
  }
  for (int p0 = 0; p0 < count; p0 += kWarp) {
    const int mine = p0 + lane < count ? __ldg(perm + p0 + lane) : 0;
    const int m = min(kWarp, count - p0);
    for (int j = 0; j < m; j += kR * kSumUnroll) {
      uint4 raw[kSumUnroll][kQ];
      int row_of[kSumUnroll];
      float stored[kSumUnroll];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        const int idx = j + u * kR + sub;
        const int r = __shfl_sync(kFull, mine, idx % kWarp);
        const bool valid = idx < m;
        const T* row = first + static_cast<int64_t>(r) * args.rows.ld;
        row_of[u] = valid ? r : -1;
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          raw[u][q] = make_uint4(0, 0, 0, 0);
          if (valid && whole[q]) {
            raw[u][q] = __ldg(reinterpret_cast<const uint4*>(row) + part + q * kL);
          } else if (valid && partial[q]) {
            raw[u][q] = load_piece(row, part + q * kL, row_pieces, false, args.d);
          }
        }
        if constexpr (kStored) stored[u] = valid && weights != nullptr ? weights[r] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        // Values past d are zero in raw and mu alike; a row past the end is scaled by 0.
        const bool valid = row_of[u] >= 0;
        float scale = valid ? 1.0f : 0.0f;
        if (args.cosine) {
          if constexpr (kStored) {
            scale = stored[u];
          } else {
            float norm = 0.0f;
#pragma unroll
            for (int q = 0; q < kQ; ++q) {
              const T* t = reinterpret_cast<const T*>(&raw[u][q]);
#pragma unroll
              for (int e = 0; e < kV; ++e) {
                const float f = to_float(t[e]) - mu[q][e];
                norm = fmaf(f, f, norm);
              }
            }
            norm = group_sum<kL>(norm);
            scale = valid && norm > 0.0f ? rsqrtf(norm) : 0.0f;
            if (valid && part == 0) weights[row_of[u]] = scale;
          }
        }
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          const T* t = reinterpret_cast<const T*>(&raw[u][q]);
#pragma unroll
          for (int e = 0; e < kV; ++e)
            acc[q][e] = fmaf(to_float(t[e]) - mu[q][e], scale, acc[q][e]);
        }
      }
    }
  }
  // The row groups' sums, added in a fixed order (the lower group first).
#pragma unroll
  for (int q = 0; q < kQ; ++q)
    add_groups<kL>(acc[q], lane);
  float scale = 1.0f;
  if (args.cosine) {
    float s2 = 0.0f;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
#pragma unroll
      for (int e = 0; e < kV; ++e)
        s2 = fmaf(acc[q][e], acc[q][e], s2);
    }
    s2 = group_sum<kL>(s2);
    if (s2 <= 0.0f) return;  // a zero sum keeps the centroid
    scale = 1.0f / sqrtf(s2);
  }
  // The centroid (zeros past d), and its operand values: every group holds the sums, so that
  // every lane takes part in the norm's shuffles.
  uint4 rounded[kQ];
  float norm = 0.0f, shift = 0.0f;
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int c0 = (part + q * kL) * kV;
    T* r = reinterpret_cast<T*>(&rounded[q]);
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const float v = c0 + e >= args.d ? 0.0f
                      : args.cosine    ? acc[q][e] * scale
                                       : acc[q][e] / static_cast<float>(count);
      acc[q][e] = v;
      r[e] = operand_value<T>(v, args.tf32);
      const float f = to_float(r[e]);
      norm = fmaf(f, f, norm);
      shift = fmaf(mu[q][e], f, shift);  // (mu is 0 past d and without means)
    }
  }
  if (args.operand != nullptr) {
    norm = group_sum<kL>(norm);
    if (args.fold) shift = group_sum<kL>(shift);
  }
  if (sub != 0) return;
  float* out = args.centroids + item * args.d;
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int piece = part + q * kL, c0 = piece * kV;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      if (c0 + e < args.d) out[c0 + e] = acc[q][e];
    }
    if (args.operand != nullptr && c0 < args.d_pad) {
      *reinterpret_cast<uint4*>(args.operand + item * args.d_pad + c0) = rounded[q];
    }
  }
  if (args.operand != nullptr && part == 0) {
    args.bias[item] = centroid_bias(args.cosine, norm, args.fold ? shift : 0.0f);
  }
}

/// Most items a warp takes where only the changed clusters are summed (args.dirty): the unchanged
/// ones then cost a flag in one load of the warp rather than a block's launch each.
constexpr int kSumSpan = 32;
/// Warps the span form keeps at least (where there are that many items): fewer, longer spans
/// leave the device idle behind a few warps (a batch of 32 x 512 clusters in spans of 32 took
/// 2.5 times as long as a warp a cluster).
constexpr int64_t kSumSpanWarps = 8192;

/// kSpan false: a warp per cluster (sum_cluster), every cluster. kSpan: only the changed clusters
/// (args.dirty), a warp per kSumSpan consecutive clusters summing the changed ones in turn; an
/// unchanged cluster has the same rows in the same order as at the last update, so its centroid
/// (and operand row) stands. Two kernels, so that the full update keeps its registers.
template <typename T, int kL, int kQ, bool kSpan>
__global__ void __launch_bounds__(kSumWarps * 32, (kQ == 1 ? 32 : 16) / kSumWarps)
    sum_kernel(SumArgs<T> args) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kSumWarps + threadIdx.x / kWarp;
  if constexpr (!kSpan) {
    if (warp >= args.items) return;
    if (args.prefetch && threadIdx.x == 0)
      prefetch_share(args, static_cast<int64_t>(blockIdx.x) * kSumWarps, kSumWarps);
    sum_cluster<T, kL, kQ, false>(args, warp, lane);
  } else {
    const int64_t item0 = warp * args.span;
    const int64_t mine = item0 + lane;
    uint32_t todo =
        __ballot_sync(kFull, lane < args.span && mine < args.items && args.dirty[mine] != 0);
    // Where most of the span changed, its share of the problem's rows is read almost whole.
    if (args.prefetch && lane == 0 && __popc(todo) * 2 >= args.span)
      prefetch_share(args, item0, args.span);
    while (todo != 0) {
      const int next = __ffs(static_cast<int>(todo)) - 1;
      todo &= todo - 1;
      sum_cluster<T, kL, kQ, true>(args, item0 + next, lane);
    }
  }
}

// ---- re-seeding empty clusters (kFarthest) -----------------------------------------------------

/// The distance of a point from its assignment's score: L2 score + |y|^2, cosine 1 + score * w.
__device__ __forceinline__ float distance_of(float score, float w, bool cosine) {
  return cosine ? fmaf(score, w, 1.0f) : score + w;
}

template <typename T>
__global__ void __launch_bounds__(256)
    reseed_kernel(Rows<T> rows, int d, int64_t k, const int32_t* counts, const float* scores,
                  const float* point_w, const float* means, bool cosine, float* centroids) {
  __shared__ int64_t empty[kMaxReseeds];
  __shared__ int64_t picked[kMaxReseeds];
  __shared__ int n_empty;
  __shared__ float warp_best[8];
  __shared__ int64_t warp_row[8];
  const int64_t b = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (threadIdx.x == 0) {
    int found = 0;
    for (int64_t j = 0; j < k && found < kMaxReseeds; ++j) {
      if (counts[b * k + j] == 0) empty[found++] = j;
    }
    n_empty = found;
  }
  __syncthreads();
  const int e_count = n_empty;
  if (e_count == 0) return;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  const float* sc = scores + b * rows.n;
  const float* pw = point_w + b * rows.n;
  for (int round = 0; round < e_count; ++round) {
    float best = -INFINITY;
    int64_t best_row = -1;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      bool used = false;
      for (int q = 0; q < round; ++q)
        used |= picked[q] == i;
      const float dist = distance_of(sc[i], pw[i], cosine);
      if (!used && dist > best) {  // strided order: the first of equal distances stays
        best = dist;
        best_row = i;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, best, o);
      const int64_t orow = __shfl_xor_sync(kFull, best_row, o);
      if (orow >= 0 && (best_row < 0 || ov > best || (ov == best && orow < best_row))) {
        best = ov;
        best_row = orow;
      }
    }
    if (lane == 0) {
      warp_best[warp] = best;
      warp_row[warp] = best_row;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = warp_best[0];
      int64_t r = warp_row[0];
      for (int w = 1; w < 8; ++w) {
        if (warp_row[w] >= 0 &&
            (r < 0 || warp_best[w] > v || (warp_best[w] == v && warp_row[w] < r))) {
          v = warp_best[w];
          r = warp_row[w];
        }
      }
      picked[round] = r;
    }
    __syncthreads();
    const int64_t r = picked[round];
    if (r < 0) return;  // fewer points than empty clusters
    const float w = cosine ? pw[r] : 1.0f;
    float* out = centroids + (b * k + empty[round]) * d;
    for (int e = threadIdx.x; e < d; e += blockDim.x)
      out[e] =
          (to_float(first[r * rows.ld + e]) - (means != nullptr ? means[b * d + e] : 0.0f)) * w;
    __syncthreads();
  }
}

/// The largest problem (bytes of rows) whose rows the sums prefetch: the problems the resident
/// blocks work on then fit L2 (about 8 at once on an H100's 50 MB).
constexpr int64_t kPrefetchMost = int64_t{4} << 20;

/// CUDAOPS_KMEANS_UPDATE=full: every cluster's sums are added again at every update, as before
/// the update kept the unchanged ones (read at each call, so that a test can compare the two).
inline bool full_updates() {
  const char* value = std::getenv("CUDAOPS_KMEANS_UPDATE");
  return value != nullptr && std::strcmp(value, "full") == 0;
}

/// Whether a fit's updates mark the clusters and problems whose points changed (Call::dirty,
/// Call::moved) from the second on: asked once a fit, so that its assignments and updates agree.
inline bool marks_changes(const Call& call) {
  return call.prev_labels != nullptr && call.dirty != nullptr && !full_updates();
}

/// The update: the grouping, then the sums; with_operand: the sums also write the centroids'
/// operand rows and biases (launch_operand's), for the next assignment. With `marks`
/// (marks_changes, and call.prev_labels holds the previous assignment's labels), only the
/// clusters that a row joined or left are summed again: the others' rows and their order are the
/// same, and so are the bits of their centroids, operand rows and biases, which the last update
/// wrote.
template <typename T>
Status launch_update(const Call& call, bool with_operand, bool marks, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  if (marks) {
    if (const cudaError_t error = cudaMemsetAsync(
            call.dirty, 0, static_cast<size_t>(p.batch * call.k + p.batch) * sizeof(int32_t),
            stream);
        error != cudaSuccess) {
      return cuda_status(error, kOp, "clearing the changed clusters");
    }
    const int64_t per = std::max<int64_t>(1, (p.n + kMarkRows - 1) / kMarkRows);
    mark_kernel<T><<<blocks_for(p.batch * per, 1), 256, 0, stream>>>(
        rows_of<T>(p), call.k, per, call.labels, call.prev_labels, call.dirty, call.moved);
    if (Status s = launched(stream); !s.ok()) return s;
  }
  if (Status s = launch_group(kOp, rows_of<T>(p), p.batch, call.labels, call.k, call.counts,
                              call.starts, call.perm, stream, marks ? call.moved : nullptr);
      !s.ok()) {
    return s;
  }
  // Cosine sums keep each row's weight in point_w (fit_layout gives every cosine fit one): the
  // full update writes it, the changed clusters' sums read it.
  const bool cosine = call.metric == KmeansMetric::kCosine;
  SumArgs<T> args{rows_of<T>(p),
                  call.counts,
                  call.starts,
                  call.perm,
                  call.center ? call.means : nullptr,
                  cosine ? call.point_w : nullptr,
                  marks ? call.dirty : nullptr,
                  call.centroids,
                  with_operand ? static_cast<T*>(call.operand) : nullptr,
                  call.bias,
                  call.k,
                  p.batch * call.k,
                  static_cast<int>(p.d),
                  static_cast<int>(call.d_pad),
                  cosine,
                  call.fold_means,
                  p.n * p.ld * static_cast<int64_t>(sizeof(T)) <= kPrefetchMost,
                  call.tf32};
  args.span = static_cast<int>(
      std::clamp<int64_t>(args.items / kSumSpanWarps, 1, static_cast<int64_t>(kSumSpan)));
  with_row_lanes<T>(p.d, [&](auto lanes, auto pieces) {
    constexpr int kL = decltype(lanes)::value, kQ = decltype(pieces)::value;
    if (marks) {
      sum_kernel<T, kL, kQ, true><<<blocks_for((args.items + args.span - 1) / args.span, kSumWarps),
                                    kSumWarps * 32, 0, stream>>>(args);
    } else {
      sum_kernel<T, kL, kQ, false>
          <<<blocks_for(args.items, kSumWarps), kSumWarps * 32, 0, stream>>>(args);
    }
  });
  return launched(stream);
}

}  // namespace
}  // namespace cudaops::detail::kmeans
