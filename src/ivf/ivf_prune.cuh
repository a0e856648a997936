#pragma once

// The IVF build's global pass, pruned exactly (docs/ivf.md, "The global pass pruned"). Each
// head's centroids are grouped by a spherical k-means of the centroids and laid out group by group
// in chunks of 64 columns (a group's last chunk padded with copies of its first centroid, which
// name the same centroid); each chunk keeps the mean g of its rounded rows and a radius r with
// |c - g| <= r for every row c. For a token y, no centroid of a chunk scores above
// y . g + |y| r, so a tile of tokens skips every chunk where that bound (plus a margin far above
// the products' rounding) is below each of its tokens' best score so far: the labels are those of
// every token against every centroid, but at near ties. The tokens are ordered by the group of
// their segment's cluster, then by that cluster, so that a tile's tokens need the same few chunks.
#include <algorithm>

#include "cudaops/kmeans.h"

#include "core/launch.h"
#include "engine/kmeans_mma.cuh"
#include "engine/kmeans_update.cuh"
#include "ivf/ivf_plan.h"

namespace cudaops::detail::ivf {
namespace {

using kmeans::smem_row_bytes;

/// Columns of a chunk (the mma.sync products' chunk).
constexpr int kPruneChunk = 64;
/// Words of a tile's chunk masks: at most 32 * kPruneMaskWords chunks a head.
constexpr int kPruneMaskWords = 32;
/// The margin of the skip test, a fraction of |y|: above the bound's own rounding (g rounded to
/// the keys' 16-bit type moves y . g by under 2^-8 |y|) and the products' (about 2^-16 |y|).
constexpr float kPruneMargin = 1.0f / 128;

/// Each head's first chunk of each group, and (at groups) its chunks in all, from the groups'
/// sizes. One thread a head: at most 256 groups.
__global__ void chunk_starts_kernel(const int32_t* group_counts, int groups, int32_t* first) {
  if (threadIdx.x != 0) return;
  const int64_t b = blockIdx.x;
  int32_t at = 0;
  for (int g = 0; g < groups; ++g) {
    first[b * (groups + 1) + g] = at;
    at += (group_counts[b * groups + g] + kPruneChunk - 1) / kPruneChunk;
  }
  first[b * (groups + 1) + groups] = at;
}

/// Every head's chunks (PrunePlan's sizes): written by chunks_kernel, read by the pass.
template <typename T>
struct Chunks {
  int64_t clusters;  // C
  int groups;        // G
  int d, d_pad;
  int64_t chunk_slots;   // chunks a head's layout holds
  int64_t mean_rows;     // rows of a head's chunk means: chunk_slots rounded up to 64
  int32_t* chunk_first;  // [H, G + 1]: each group's first chunk; at G, the head's chunks
  T* operand;            // [H, chunk_slots * 64, d_pad]
  int32_t* column;       // [H, chunk_slots * 64]: the centroid of each column
  T* means;              // [H, mean_rows, d_pad]
  float* radius;         // [H, mean_rows]: -inf past the head's chunks
  int32_t* position;     // [H, C]: each centroid's place in group order
  int32_t* chunk_of;     // [H, C]: the chunk of each place
};

/// What the chunks' layout kernel reads besides.
template <typename T>
struct ChunkArgs {
  Chunks<T> l;
  const float* centroids;       // [H, C, d]: the segments' centroids (unit rows)
  const int32_t* group_counts;  // [H, G]
  const int32_t* group_starts;  // [H, G]
  const int32_t* grouped;       // [H, C]: the centroids in group order
};

/// A block per (chunk, head): the chunk's rows rounded as the products use them, the column map,
/// the chunk's mean (rounded) and radius. Chunks past the head's last are zero, radius -inf.
template <typename T>
__global__ void __launch_bounds__(256) chunks_kernel(ChunkArgs<T> a) {
  const Chunks<T>& l = a.l;
  extern __shared__ float mean[];  // [d]
  __shared__ float radius2;
  const int64_t c = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t* first = l.chunk_first + b * (l.groups + 1);
  const int32_t chunks = first[l.groups];
  if (c >= chunks) {
    T* m = l.means + (b * l.mean_rows + c) * l.d_pad;
    for (int e = threadIdx.x; e < l.d_pad; e += blockDim.x)
      m[e] = from_float<T>(0.0f);
    if (threadIdx.x == 0) l.radius[b * l.mean_rows + c] = -INFINITY;
    if (c >= l.chunk_slots) return;
    for (int idx = threadIdx.x; idx < kPruneChunk * l.d_pad; idx += blockDim.x) {
      l.operand[(b * l.chunk_slots + c) * kPruneChunk * l.d_pad + idx] = from_float<T>(0.0f);
    }
    for (int k = threadIdx.x; k < kPruneChunk; k += blockDim.x)
      l.column[(b * l.chunk_slots + c) * kPruneChunk + k] = 0;
    return;
  }
  // The chunk's group: the last whose first chunk is at or before c.
  int lo = 0, hi = l.groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int g = lo;
  const int32_t count = a.group_counts[b * l.groups + g];
  const int32_t base = (static_cast<int32_t>(c) - first[g]) * kPruneChunk;  // within the group
  const int32_t real = min(kPruneChunk, count - base);
  const int32_t* members = a.grouped + b * l.clusters + a.group_starts[b * l.groups + g] + base;
  T* rows = l.operand + (b * l.chunk_slots + c) * kPruneChunk * l.d_pad;
  for (int k = warp; k < kPruneChunk; k += blockDim.x / 32) {
    const int32_t j = members[k < real ? k : 0];
    if (lane == 0) {
      l.column[(b * l.chunk_slots + c) * kPruneChunk + k] = j;
      if (k < real) {
        const int32_t place = a.group_starts[b * l.groups + g] + base + k;
        l.position[b * l.clusters + j] = place;
        l.chunk_of[b * l.clusters + place] = static_cast<int32_t>(c);
      }
    }
    const float* src = a.centroids + (b * l.clusters + j) * l.d;
    for (int e = lane; e < l.d_pad; e += 32)
      rows[k * l.d_pad + e] = operand_value<T>(e < l.d ? src[e] : 0.0f, false);
  }
  if (threadIdx.x == 0) radius2 = 0.0f;
  __syncthreads();  // the block's rows, written above, are read back below
  for (int e = threadIdx.x; e < l.d_pad; e += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < real; ++k)
      s += to_float(rows[k * l.d_pad + e]);
    mean[e] = s / static_cast<float>(real);
  }
  __syncthreads();
  for (int k = warp; k < real; k += blockDim.x / 32) {
    float s = 0.0f;
    for (int e = lane; e < l.d_pad; e += 32) {
      const float v = to_float(rows[k * l.d_pad + e]) - mean[e];
      s = fmaf(v, v, s);
    }
    s = warp_sum(s);
    // Non-negative floats order as their bits.
    if (lane == 0) atomicMax(reinterpret_cast<int*>(&radius2), __float_as_int(s));
  }
  __syncthreads();
  T* m = l.means + (b * l.mean_rows + c) * l.d_pad;
  for (int e = threadIdx.x; e < l.d_pad; e += blockDim.x)
    m[e] = from_float<T>(mean[e]);
  // Rounded up a little: the bound must hold for the float32 sums above too.
  if (threadIdx.x == 0) l.radius[b * l.mean_rows + c] = sqrtf(radius2) * 1.0001f + 1e-6f;
}

/// Each token's key for the pass's order: its cluster's place in group order (labels: each
/// token's cluster in its head, replaced in place).
__global__ void order_keys_kernel(int32_t* labels, int64_t heads, int64_t seq, int64_t clusters,
                                  const int32_t* position) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= heads * seq) return;
  labels[r] = position[r / seq * clusters + labels[r]];
}

template <typename T>
struct PruneArgs {
  Chunks<T> l;
  const T* keys;  // [H, S, d]: the centred keys
  int64_t seq;
  const int32_t* order;  // [H, S]: the tokens in the pass's order
  int64_t tiles;         // of a head
  int32_t* labels;       // [H * S]: each token's cluster's place on entry, its label on return
};

template <int kWarps>
inline size_t prune_smem(int d_pad, int element) {
  return static_cast<size_t>(kWarps * 32 + 2 * kPruneChunk) *
         static_cast<size_t>(smem_row_bytes(d_pad, element));
}

/// A block takes kWarps * 32 tokens in the pass's order (a warp 32 of them, as assign_kernel's
/// warps): (a) the products of the chunks of their own clusters (their segments' fit), giving each
/// token a best score s; (b) their products with the chunks' means, marking every chunk where
/// some token has y . g + |y| r + margin >= s; (c) those chunks' products. Chunks stream through
/// two stages of shared memory (cp.async), in increasing order.
template <typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, 3) pruned_pass_kernel(PruneArgs<T> args) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ uint32_t likeliest[kPruneMaskWords], needed[kPruneMaskWords];
  __shared__ float norms[kWarps * 32];
  constexpr int kM = kWarps * 32, kThreads = kWarps * 32;
  const int row_bytes = smem_row_bytes(args.l.d_pad, sizeof(T));
  unsigned char* a_tile = smem;
  unsigned char* b_tiles = smem + kM * row_bytes;
  const int64_t b = blockIdx.x / args.tiles;
  const int64_t row0 = (blockIdx.x % args.tiles) * kM;
  const int64_t len = args.seq;
  const int32_t* order = args.order + b * len;
  const int pieces = args.l.d_pad * static_cast<int>(sizeof(T)) / 16;
  const int valid_bytes = args.l.d * static_cast<int>(sizeof(T));
  const int tid = static_cast<int>(threadIdx.x);
  for (int idx = tid; idx < kM * pieces; idx += kThreads) {
    const int r = idx / pieces, q = idx % pieces;
    const int64_t i = row0 + r;
    const int bytes = i < len ? max(0, min(16, valid_bytes - q * 16)) : 0;
    const unsigned char* src = reinterpret_cast<const unsigned char*>(args.keys);
    if (bytes > 0)
      src += ((b * len + order[i]) * args.l.d) * static_cast<int64_t>(sizeof(T)) + q * 16;
    copy16(a_tile + r * row_bytes + q * 16, src, bytes);
  }
  copy_commit();
  for (int w = tid; w < kPruneMaskWords; w += kThreads)
    likeliest[w] = needed[w] = 0u;
  const int chunks = args.l.chunk_first[b * (args.l.groups + 1) + args.l.groups];
  const int mean_chunks = (chunks + kPruneChunk - 1) / kPruneChunk;
  const T* operand = args.l.operand + b * args.l.chunk_slots * kPruneChunk * args.l.d_pad;
  const T* means = args.l.means + b * args.l.mean_rows * args.l.d_pad;
  const float* radius = args.l.radius + b * args.l.mean_rows;

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const unsigned char* a_base = a_tile + (warp * 32 + (lane % 16)) * row_bytes + (lane / 16) * 16;
  const int b_row = (lane % 8) + 8 * (lane / 16);
  const int b_half = ((lane / 8) % 2) * 16;
  const int steps = args.l.d_pad * static_cast<int>(sizeof(T)) / 32;
  auto load = [&](int stage, const T* rows, int chunk) {
    unsigned char* dst = b_tiles + stage * kPruneChunk * row_bytes;
    const unsigned char* src = reinterpret_cast<const unsigned char*>(
        rows + static_cast<int64_t>(chunk) * kPruneChunk * args.l.d_pad);
    for (int idx = tid; idx < kPruneChunk * pieces; idx += kThreads) {
      const int r = idx / pieces, q = idx % pieces;
      copy16(dst + r * row_bytes + q * 16, src + r * args.l.d_pad * sizeof(T) + q * 16, 16);
    }
  };
  // The first set bit at or after c of mask & ~except (shared memory), or -1.
  auto next_bit = [&](const uint32_t* mask, const uint32_t* except, int c) {
    for (int w = c / 32; w < kPruneMaskWords; ++w) {
      uint32_t bits = mask[w] & (except != nullptr ? ~except[w] : ~0u);
      if (w == c / 32) bits &= ~0u << (c % 32);
      if (bits != 0u) return w * 32 + __ffs(bits) - 1;
    }
    return -1;
  };
  // The chunks a step walks: (a) the likeliest chunks, (b) the chunk means in order, (c) the
  // other needed chunks (block-uniform).
  auto next = [&](int step, int c) {
    if (step == 1) return c < mean_chunks ? c : -1;
    return step == 0 ? next_bit(likeliest, nullptr, c) : next_bit(needed, likeliest, c);
  };
  // Each row's four lanes hold its columns interleaved: the row's smallest, lower index on a tie.
  float best[2][2];
  int best_j[2][2];
  kmeans::no_minimum(best, best_j);
  auto row_best = [&]() {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        row_minimum(best[m][h], best_j[m][h]);
    }
  };
  auto row_of = [&](int m, int h) { return warp * 32 + m * 16 + h * 8 + g; };
  // The likeliest chunks: those of the tokens' own clusters (of their segments' fit).
  __syncthreads();  // the masks are clear
  if (tid < kM && row0 + tid < len) {
    const int32_t place = args.labels[b * len + order[row0 + tid]];
    const int32_t j = __ldg(args.l.chunk_of + b * args.l.clusters + place);
    atomicOr(&likeliest[j / 32], 1u << (j % 32));
  }
  __syncthreads();
  float above[2][2];  // (b): each row's best y . c so far less the margin
  // One loop of products for the three steps, so that one copy of them is compiled.
#pragma unroll 1
  for (int step = 0; step < 3; ++step) {
    if (step == 1) {
      row_best();
      // Each row's length, from its row in shared memory (the tile has landed in (a)), read by
      // the row's own warp.
      const unsigned char* row = a_tile + (warp * 32 + lane) * row_bytes;
      float sq = 0.0f;
      for (int e = 0; e < args.l.d; ++e) {
        const float v = to_float(reinterpret_cast<const T*>(row)[e]);
        sq = fmaf(v, v, sq);
      }
      norms[warp * 32 + lane] = sqrtf(sq);
      __syncwarp();
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row_of(m, h);
          above[m][h] = row0 + r < len ? -best[m][h] - kPruneMargin * norms[r] : INFINITY;
        }
      }
    }
    const T* rows = step == 1 ? means : operand;
    int c = next(step, 0), stage = 0;
    if (c >= 0) load(0, rows, c);
    copy_commit();
    while (c >= 0) {
      const int cn = next(step, c + 1);
      if (cn >= 0) {
        load(stage ^ 1, rows, cn);
        copy_commit();
        copy_wait<1>();
      } else {
        copy_wait<0>();
      }
      __syncthreads();
      float acc[2][8][4];
      kmeans::warp_products<T>(
          acc, a_base, b_tiles + stage * kPruneChunk * row_bytes + b_row * row_bytes + b_half,
          row_bytes, steps, false);
      if (step == 1) {
        // The chunks some row needs: y . g + |y| r >= its best y . c less the margin.
        uint64_t bits = 0;  // columns 8 nt + 2 t + e of the lane, over its four rows
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = nt * 8 + 2 * t + e;
            const float rad = __ldg(radius + c * kPruneChunk + col);
            bool need = false;
#pragma unroll
            for (int m = 0; m < 2; ++m) {
#pragma unroll
              for (int h = 0; h < 2; ++h)
                need |= fmaf(norms[row_of(m, h)], rad, acc[m][nt][2 * h + e]) >= above[m][h];
            }
            if (need) bits |= uint64_t{1} << col;
          }
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1)
          bits |= __shfl_xor_sync(kFull, static_cast<unsigned long long>(bits), o);
        if (lane == 0) {
          const uint32_t low = static_cast<uint32_t>(bits),
                         high = static_cast<uint32_t>(bits >> 32);
          if (low != 0u) atomicOr(&needed[2 * c], low);
          if (high != 0u) atomicOr(&needed[2 * c + 1], high);
        }
      } else {
        // (a), (c): the largest y . c, its column by its place among the lane's (one pass).
        kmeans::chunk_minimum_placed(
            acc, [](int) { return 0.0f; }, 1.0f, t, c * kPruneChunk, best, best_j);
      }
      __syncthreads();  // the stage is refilled next
      c = cn;
      stage ^= 1;
    }
  }
  row_best();
  const int32_t* column = args.l.column + b * args.l.chunk_slots * kPruneChunk;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t i = row0 + row_of(m, h);
      if (t == 0 && i < len) args.labels[b * len + order[i]] = __ldg(column + best_j[m][h]);
    }
  }
}

/// The pass over every head (args.tiles set here): blocks of 128 tokens (rows of at most 256
/// values: 135 KB of shared memory).
template <typename T>
Status launch_pruned_pass(PruneArgs<T> args, int64_t heads, cudaStream_t stream) {
  constexpr int kWarps = 4;
  args.tiles = (args.seq + kWarps * 32 - 1) / (kWarps * 32);
  const size_t smem = prune_smem<kWarps>(args.l.d_pad, sizeof(T));
  const auto kernel = pruned_pass_kernel<T, kWarps>;
  if (Status st = kmeans::allow_smem(kernel, smem); !st.ok()) return st;
  kernel<<<static_cast<unsigned>(heads * args.tiles), kWarps * 32, smem, stream>>>(args);
  return check_launch("ivf_build", stream);
}

}  // namespace

template <typename T>
Status pruned_pass(const BuildCall& call, const T* centred, const float* centroids, int32_t* labels,
                   cudaStream_t stream) {
  constexpr const char* kOp = "ivf_build";
  const IvfShape& s = call.shape;
  const BuildLayout& w = call.layout;
  const PrunePlan& plan = call.prune;
  unsigned char* ws = call.workspace;
  const int64_t c = call.n_clusters;
  // The centroids' groups.
  KmeansResult groups;
  groups.centroids = at<float>(ws, w.group_centroids);
  groups.labels = at<int32_t>(ws, w.group_labels);
  if (Status st = cudaops::kmeans(group_points(s, centroids, c, true), group_params(plan), groups,
                                  ws + w.kmeans, w.kmeans_bytes, stream);
      !st.ok()) {
    return st;
  }
  if (Status st = cudaops::kmeans_assign(
          group_points(s, centroids, c, false),
          group_centroids(plan, static_cast<const float*>(groups.centroids)), KmeansMetric::kCosine,
          groups.labels, nullptr, ws + w.kmeans, w.kmeans_bytes, stream);
      !st.ok()) {
    return st;
  }
  Chunks<T> l;
  l.clusters = c;
  l.groups = plan.groups;
  l.d = static_cast<int>(s.dim);
  l.d_pad = static_cast<int>(plan.d_pad);
  l.chunk_slots = plan.chunk_slots;
  l.mean_rows = plan.mean_rows;
  l.chunk_first = at<int32_t>(ws, w.chunk_first);
  l.operand = at<T>(ws, w.operand);
  l.column = at<int32_t>(ws, w.column);
  l.means = at<T>(ws, w.chunk_means);
  l.radius = at<float>(ws, w.radius);
  l.position = at<int32_t>(ws, w.position);
  l.chunk_of = at<int32_t>(ws, w.chunk_of);
  int32_t* group_counts = at<int32_t>(ws, w.group_counts);
  int32_t* group_starts = at<int32_t>(ws, w.group_starts);
  int32_t* grouped = at<int32_t>(ws, w.grouped);
  // (Grouping reads the rows' count alone.)
  const kmeans::Rows<T> centroid_rows{nullptr, s.dim, c * s.dim, c, nullptr};
  if (Status st = kmeans::launch_group(kOp, centroid_rows, s.heads, groups.labels, plan.groups,
                                       group_counts, group_starts, grouped, stream);
      !st.ok()) {
    return st;
  }
  chunk_starts_kernel<<<static_cast<unsigned>(s.heads), 32, 0, stream>>>(group_counts, plan.groups,
                                                                         l.chunk_first);
  if (Status st = check_launch(kOp, stream); !st.ok()) return st;
  chunks_kernel<T><<<dim3(static_cast<unsigned>(plan.mean_rows), static_cast<unsigned>(s.heads)),
                     256, plan.d_pad * sizeof(float), stream>>>(
      ChunkArgs<T>{l, centroids, group_counts, group_starts, grouped});
  if (Status st = check_launch(kOp, stream); !st.ok()) return st;
  // The tokens by group, then by cluster within one.
  order_keys_kernel<<<blocks_for(s.heads * call.seq, 256), 256, 0, stream>>>(
      labels, s.heads, call.seq, c, l.position);
  if (Status st = check_launch(kOp, stream); !st.ok()) return st;
  int32_t* order = at<int32_t>(ws, w.perm);
  if (Status st = kmeans::launch_group(kOp, kmeans::rows_of<T>(head_points(s, centred, call.seq)),
                                       s.heads, labels, c, at<int32_t>(ws, w.counts),
                                       at<int32_t>(ws, w.starts), order, stream);
      !st.ok()) {
    return st;
  }
  return launch_pruned_pass<T>(PruneArgs<T>{l, centred, call.seq, order, 0, labels}, s.heads,
                               stream);
}

#define CUDAOPS_IVF_PRUNE_INSTANTIATE(T)                                                          \
  template Status pruned_pass<T>(const BuildCall& call, const T* centred, const float* centroids, \
                                 int32_t* labels, cudaStream_t stream);

}  // namespace cudaops::detail::ivf
