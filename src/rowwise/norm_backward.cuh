// The backward passes of layer_norm and rms_norm: the kernels, their plan and launch, included
// by one translation unit per dtype (norm_backward_<dtype>.cu).
#include <algorithm>

#include "core/launch.h"
#include "core/validate.h"
#include "rowwise/norm_host.h"
#include "rowwise/row_common.cuh"
#include "rowwise/row_exchange.cuh"
#include "rowwise/rowwise_launch.h"

namespace cudaops::detail::rowwise {
namespace {

// Blocks per SM of the unsplit cached backward kernel's persistent grid: fewer than fit, so that
// the rows each block asks L2 for are still there when it loads them (docs/tuning/norms.md,
// "Backward grid").
constexpr int kBackwardBlocksPerSm = 2;

// kSplit: the blocks of a cluster share each row (row_walk); a cluster is then one unit.
template <bool kLayer, typename T, int kThreads, int kVecs, int N, bool kSplit>
__global__ void __launch_bounds__(kBlockThreads<kThreads>)
    norm_backward_cached(NormBackwardArgs<T> a) {
  enter_rows_kernel();
  constexpr int K = kLayer ? 2 : 1;
  __shared__ float scratch[K * kWarp];
  __shared__ typename RowReducer<kThreads, kSplit, 1, K>::Exchange exchange;
  constexpr int kRows = kRowsPerBlock<kThreads>;
  using TileT = Tile<T, kThreads, kVecs, N>;
  const int t = threadIdx.x % kThreads;
  const RowWalk walk = row_walk<kThreads, kSplit>(static_cast<int>(a.cols), TileT::kCols);
  const int cols = walk.cols;  // of this block's part of the row
  const T* weight = a.weight + walk.offset;
  const T zero = from_float<T>(0.0f);
  float dw[kVecs][N];
  float db[kVecs][N];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      dw[j][e] = 0.0f;
      db[j][e] = 0.0f;
    }
  }
  RowReducer<kThreads, kSplit, 1, K> reduce{scratch, &exchange, walk.rank, walk.parts};
  if constexpr (kSplit) exchange.begin(walk.parts);
  for (int64_t row = walk.first; row < a.rows; row += walk.step, reduce.next_row()) {
    // Where the row's mean and rstd are asked for, and the next row's index taken: the split
    // kernels and the unsplit layer norm take the index first and ask before the prefetch; the
    // unsplit rms_norm_backward asks after it (docs/tuning/norms.md, "Backward statistics").
    constexpr bool kStatsFirst = kSplit || kLayer;
    TileT tdy, tx, tw;
    float mean = 0.0f;
    float rstd;
    if constexpr (kStatsFirst) {
      const int64_t next = row + walk.step;
      tdy.load(a.dy + row * a.dy_stride + walk.offset, cols, t, zero);
      tx.load(a.x + row * a.x_stride + walk.offset, cols, t, zero);
      tw.load(weight, cols, t, zero);  // all chunks in flight at once, used by both passes
      if constexpr (kLayer) mean = a.mean[row];
      rstd = a.rstd[row];
      if (next < a.rows) {
        // The next row's loads then find it in L2 (issued after this row's, which they would
        // otherwise delay, and before the reductions, which wait for them).
        TileT::prefetch(a.dy + next * a.dy_stride + walk.offset, cols, t);
        TileT::prefetch(a.x + next * a.x_stride + walk.offset, cols, t);
      }
    } else {
      tdy.load(a.dy + row * a.dy_stride + walk.offset, cols, t, zero);
      tx.load(a.x + row * a.x_stride + walk.offset, cols, t, zero);
      tw.load(weight, cols, t, zero);
      if (row + walk.step < a.rows) {
        TileT::prefetch(a.dy + (row + walk.step) * a.dy_stride + walk.offset, cols, t);
        TileT::prefetch(a.x + (row + walk.step) * a.x_stride + walk.offset, cols, t);
      }
      rstd = a.rstd[row];
    }
    float s[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      s[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float xh = (tx.get(j, e) - mean) * rstd;
        const float g =
            __fmul_rn(tdy.get(j, e), tw.get(j, e));  // never contracted: the same g below
        if constexpr (kLayer) s[0] += g;
        s[K - 1] = fmaf(g, xh, s[K - 1]);
      }
    }
    reduce(s, SumOp{});
    tdy.pin();  // the second pass converts again rather than holding the first pass's floats
    tx.pin();
    tw.pin();
    const float mean_g = kLayer ? s[0] / static_cast<float>(a.cols) : 0.0f;
    const float mean_gx = s[K - 1] / static_cast<float>(a.cols);
    T* dxr = a.dx + row * a.dx_stride + walk.offset;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      float v[N];
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = tdy.get(j, e);
        const float xh = (tx.get(j, e) - mean) * rstd;
        dw[j][e] = fmaf(d, xh, dw[j][e]);
        if constexpr (kLayer) db[j][e] += d;
        v[e] = rstd * (__fmul_rn(d, tw.get(j, e)) - mean_g - xh * mean_gx);
      }
      tx.set(j, v);  // x's chunk j is not read again
    }
    tx.store(dxr, cols, t);
  }
  // One partial row per block: the warps of a block add theirs first, in warp order.
  if constexpr (kRows > 1) {
    __shared__ float others[K][kRows - 1][TileT::kCols];
    const int sub = threadIdx.x / kThreads;
    if (sub > 0) {
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const int c = TileT::col(j, t) + e;
          others[0][sub - 1][c] = dw[j][e];
          if constexpr (kLayer) others[K - 1][sub - 1][c] = db[j][e];
        }
      }
    }
    __syncthreads();
    if (sub > 0) return;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const int c = TileT::col(j, t) + e;
        for (int w = 0; w < kRows - 1; ++w) {
          dw[j][e] += others[0][w][c];
          if constexpr (kLayer) db[j][e] += others[K - 1][w][c];
        }
      }
    }
  }
  float* partial = a.partials + static_cast<int64_t>(walk.group) * a.cols + walk.offset;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const int c = TileT::col(j, t) + e;
      if (c < cols) {
        partial[c] = dw[j][e];
        if constexpr (kLayer) partial[a.units * a.cols + c] = db[j][e];
      }
    }
  }
}

// Rows too long for the split kernel's blocks to hold (16-bit rows above 65536 columns, float32
// above 32768; or above half that where clusters keep to 8 blocks): the blocks of a cluster
// share each row, each walking its part in chunks of 16 bytes per thread twice. Where a part
// has at most kLongBatch chunks per thread (16-bit rows up to 262144 columns, float32 up to
// 131072, in clusters of 16), the first pass's loads take the whole part and the second pass
// uses them from registers; longer parts are read again from L2 in the second pass. Each block
// keeps its part of the weight and its accumulators in dynamic shared memory
// (long_backward_smem), every thread only its own chunks, so no barrier is taken; each block
// asks L2 for its part of the cluster's next row, so that the memory keeps streaming while the
// cluster reduces. Blocks of 256 threads, or of 512 where a part has more than four chunks per
// thread of 256. Holding the part in registers for the second pass, and asking L2 for the next
// row rather than loading it, measured fastest; the kernel is bound by latency
// (docs/tuning/norms.md, "Long rows, backward").
constexpr int kLongThreads = 256;
constexpr int kLongWideThreads = 512;
// Chunks per thread of the first pass loaded before any is used.
constexpr int kLongBatch = 4;

/// Chunks of a part of part_cols columns, as laid out: a whole number per thread.
template <typename T, int kThreads>
__host__ __device__ constexpr int long_chunks(int part_cols) {
  constexpr int kPerRound = kThreads * kVec16<T>;
  return (part_cols + kPerRound - 1) / kPerRound * kThreads;
}

/// Dynamic shared memory of norm_backward_long: the weight's chunks (16 bytes each), then K
/// accumulators of N floats per chunk.
template <bool kLayer, typename T, int kThreads>
__host__ __device__ constexpr int64_t long_backward_smem(int part_cols) {
  constexpr int K = kLayer ? 2 : 1;
  return int64_t{long_chunks<T, kThreads>(part_cols)} * 16 * (1 + K * kVec16<T> / 4);
}

__device__ __forceinline__ void load_float4(const float4& v, float* out) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

template <bool kLayer, typename T, int kThreads>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads / 2)
    norm_backward_long(NormBackwardArgs<T> a, int part_cols) {
  enter_rows_kernel();
  constexpr int K = kLayer ? 2 : 1;
  constexpr int N = kVec16<T>;
  constexpr int H = N / 4;  // float4s per chunk and accumulator
  constexpr int U = kLongBatch;
  __shared__ typename RowReducer<kThreads, true, 1, K>::Exchange exchange;
  extern __shared__ uint4 long_smem[];
  const int t = static_cast<int>(threadIdx.x);
  const RowWalk walk = row_walk<kThreads, true>(static_cast<int>(a.cols), part_cols);
  const int cols = walk.cols;  // of this block's part of the row
  const int64_t offset = walk.offset;
  const int chunks = long_chunks<T, kThreads>(part_cols);
  const int per_thread = chunks / kThreads;
  uint4* held_weight = long_smem;                               // [chunks]
  float4* acc = reinterpret_cast<float4*>(long_smem + chunks);  // [K][H][chunks]
  const T zero = from_float<T>(0.0f);
  // The weight, zero past the row's end, so that the chunks there add nothing.
  for (int i = 0; i < per_thread; ++i) {
    const int q = i * kThreads + t;
    held_weight[q] = load_raw<T, N>(a.weight + offset, q * N, cols, zero);
#pragma unroll
    for (int k = 0; k < K * H; ++k)
      acc[k * chunks + q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  RowReducer<kThreads, true, 1, K> reduce{nullptr, &exchange, walk.rank, walk.parts};
  exchange.begin(walk.parts);
  const int64_t step = walk.step;
  // held: the first pass's loads take the whole part (up to kLongBatch chunks per thread), and
  // the second pass uses them rather than reading the row again from L2.
  const bool held = per_thread <= U;
  // The second pass over chunk q of the block's part of the row: dx, and the accumulators.
  const auto second = [&](int q, const uint4& d, const uint4& x, T* dxr, float mean, float rstd,
                          float mean_g, float mean_gx) {
    const int c = q * N;
    const uint4 w = held_weight[q];
    float dw[N], db[N];
#pragma unroll
    for (int h = 0; h < H; ++h) {
      load_float4(acc[h * chunks + q], &dw[4 * h]);
      if constexpr (kLayer) load_float4(acc[(H + h) * chunks + q], &db[4 * h]);
    }
    float v[N];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float dv = word_element<T>(d, e);
      const float xh = (word_element<T>(x, e) - mean) * rstd;
      dw[e] = fmaf(dv, xh, dw[e]);
      if constexpr (kLayer) db[e] += dv;
      v[e] = rstd * (__fmul_rn(dv, word_element<T>(w, e)) - mean_g - xh * mean_gx);
    }
#pragma unroll
    for (int h = 0; h < H; ++h) {
      acc[h * chunks + q] = make_float4(dw[4 * h], dw[4 * h + 1], dw[4 * h + 2], dw[4 * h + 3]);
      if constexpr (kLayer) {
        acc[(H + h) * chunks + q] =
            make_float4(db[4 * h], db[4 * h + 1], db[4 * h + 2], db[4 * h + 3]);
      }
    }
    if (c + N <= cols) {
      *reinterpret_cast<uint4*>(dxr + c) = pack_words<T>(v);
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if (c + e < cols) dxr[c + e] = from_float<T>(v[e]);
      }
    }
  };
  for (int64_t row = walk.first; row < a.rows; row += step, reduce.next_row()) {
    const T* dyr = a.dy + row * a.dy_stride + offset;
    const T* xr = a.x + row * a.x_stride + offset;
    const float mean = kLayer ? a.mean[row] : 0.0f;
    const float rstd = a.rstd[row];
    // Chunks j0 to j0 + U of the thread, those it has.
    uint4 d[U], x[U];
    const auto load_batch = [&](int j0) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = ((j0 + u) * kThreads + t) * N;
        if (j0 + u < per_thread) {
          d[u] = load_raw<T, N>(dyr, c, cols, zero);
          x[u] = load_raw<T, N>(xr, c, cols, zero);
        }
      }
    };
    // Held rows ask L2 for the next row after their own loads; the others before, where their
    // first batch would otherwise wait behind the prefetches of the whole part.
    if (held) load_batch(0);
    if (row + step < a.rows) {
      const T* next_dy = a.dy + (row + step) * a.dy_stride + offset;
      const T* next_x = a.x + (row + step) * a.x_stride + offset;
      for (int j = 0; j < per_thread; ++j) {
        const int c = (j * kThreads + t) * N;
        if (c < cols) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(next_dy + c));
          asm volatile("prefetch.global.L2 [%0];" ::"l"(next_x + c));
        }
      }
    }
    float s[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      s[k] = 0.0f;
#pragma unroll 1
    for (int j0 = 0; j0 < per_thread; j0 += U) {
      if (!held) load_batch(j0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (j0 + u >= per_thread) continue;
        const uint4 w = held_weight[(j0 + u) * kThreads + t];
#pragma unroll
        for (int e = 0; e < N; ++e) {
          const float xh = (word_element<T>(x[u], e) - mean) * rstd;
          // never contracted: the same g in the second pass
          const float g = __fmul_rn(word_element<T>(d[u], e), word_element<T>(w, e));
          if constexpr (kLayer) s[0] += g;
          s[K - 1] = fmaf(g, xh, s[K - 1]);
        }
      }
    }
    reduce(s, SumOp{});
    const float mean_g = kLayer ? s[0] / static_cast<float>(a.cols) : 0.0f;
    const float mean_gx = s[K - 1] / static_cast<float>(a.cols);
    T* dxr = a.dx + row * a.dx_stride + offset;
    if (held) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u < per_thread) second(u * kThreads + t, d[u], x[u], dxr, mean, rstd, mean_g, mean_gx);
      }
    } else {
      // One chunk at a time, from L2: more at once measured no faster, and the layer norm's
      // 16-bit kernels spill with two.
#pragma unroll 1
      for (int j = 0; j < per_thread; ++j) {
        const int q = j * kThreads + t;
        second(q, load_raw<T, N>(dyr, q * N, cols, zero), load_raw<T, N>(xr, q * N, cols, zero),
               dxr, mean, rstd, mean_g, mean_gx);
      }
    }
  }
  // The cluster's partial row: each block its part.
  float* partial = a.partials + static_cast<int64_t>(walk.group) * a.cols + offset;
  for (int j = 0; j < per_thread; ++j) {
    const int q = j * kThreads + t;
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int h = 0; h < H; ++h) {
        const float4 v = acc[(k * H + h) * chunks + q];
        const float got[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = q * N + h * 4 + e;
          if (c < cols) partial[k * a.units * a.cols + c] = got[e];
        }
      }
    }
  }
}

// One block per row of a persistent grid. The accumulators are in dynamic shared memory when
// `smem_acc` (K x cols floats), else in the block's own partial rows in global memory.
template <bool kLayer, typename T, int N>
__global__ void __launch_bounds__(1024)
    norm_backward_streamed(NormBackwardArgs<T> a, bool smem_acc) {
  enter_rows_kernel();
  constexpr int K = kLayer ? 2 : 1;
  extern __shared__ float acc_smem[];
  __shared__ float scratch[K * kWarp];
  const int64_t cols = a.cols;
  const int64_t first = threadIdx.x * static_cast<int64_t>(N);
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  const int64_t unit = blockIdx.x;
  float* global_acc = a.partials + unit * cols;
  float* acc = smem_acc ? acc_smem : global_acc;
  const int64_t acc_stride = smem_acc ? cols : a.units * cols;
  // Each thread owns the columns of its chunks: no synchronisation around the accumulators.
  for (int64_t c = first; c < cols; c += step) {
    for (int e = 0; e < N && c + e < cols; ++e) {
#pragma unroll
      for (int k = 0; k < K; ++k)
        acc[k * acc_stride + c + e] = 0.0f;
    }
  }
  for (int64_t row = unit; row < a.rows; row += gridDim.x) {
    const T* dyr = a.dy + row * a.dy_stride;
    const T* xr = a.x + row * a.x_stride;
    const float mean = kLayer ? a.mean[row] : 0.0f;
    const float rstd = a.rstd[row];
    float s[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      s[k] = 0.0f;
    for (int64_t c = first; c < cols; c += step) {
      float d[N], x[N], w[N];
      load_chunk<T, N>(dyr, c, cols, d, 0.0f);
      load_chunk<T, N>(xr, c, cols, x, 0.0f);
      load_chunk<T, N>(a.weight, c, cols, w, 0.0f);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float g = __fmul_rn(d[e], w[e]);  // never contracted: the same g below
        if constexpr (kLayer) s[0] += g;
        s[K - 1] = fmaf(g, (x[e] - mean) * rstd, s[K - 1]);
      }
    }
    row_allreduce<kWholeBlock>(s, scratch, SumOp{});
    const float mean_g = kLayer ? s[0] / static_cast<float>(cols) : 0.0f;
    const float mean_gx = s[K - 1] / static_cast<float>(cols);
    T* dxr = a.dx + row * a.dx_stride;
    for (int64_t c = first; c < cols; c += step) {
      float d[N], x[N], w[N];
      load_chunk<T, N>(dyr, c, cols, d, 0.0f);
      load_chunk<T, N>(xr, c, cols, x, 0.0f);
      load_chunk<T, N>(a.weight, c, cols, w, 0.0f);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float xh = (x[e] - mean) * rstd;
        if (c + e < cols) {
          acc[c + e] = fmaf(d[e], xh, acc[c + e]);
          if constexpr (kLayer) acc[acc_stride + c + e] += d[e];
        }
        w[e] = rstd * (__fmul_rn(d[e], w[e]) - mean_g - xh * mean_gx);
      }
      store_chunk<T, N>(dxr, c, cols, w);
    }
  }
  if (smem_acc) {
    for (int64_t c = first; c < cols; c += step) {
      for (int e = 0; e < N && c + e < cols; ++e) {
#pragma unroll
        for (int k = 0; k < K; ++k)
          global_acc[k * a.units * cols + c + e] = acc[k * cols + c + e];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host.

/// The split kernel of a backward pass, and the columns each of its blocks holds.
template <bool kLayer, typename T>
auto split_kernel() {
  using S = BackwardSplitShape;
  return norm_backward_cached<kLayer, T, S::threads, S::vecs, kVec16<T>, true>;
}
template <typename T>
constexpr int64_t kBackwardSplitCols =
    int64_t{BackwardSplitShape::threads} * BackwardSplitShape::vecs* kVec16<T>;

// The split backward kernel's clusters hold kSplitBlocksPerSmTimes2 / 2 blocks per SM on average:
// for rms_norm 2.5, fewer than the 3 that fit (136 registers, 128 threads), for the layer norm
// all 3 that fit (168 registers), each the faster at most shapes (docs/tuning/norms.md,
// "Split backward occupancy").
template <bool kLayer>
constexpr int kSplitBlocksPerSmTimes2 = kLayer ? 6 : 5;

/// The long-row kernel for parts of part_cols columns: blocks of 256 threads, or of 512 where a
/// part has more than four chunks per thread of 256.
template <typename T>
bool long_wide(int64_t part_cols) {
  return part_cols > int64_t{4} * kLongThreads * kVec16<T>;
}

/// Plans norm_backward_long for rows of `cols` (16-byte aligned) where clusters allow: the most
/// blocks per row that fit (16 where the device allows non-portable clusters, else 8), the
/// fewer where the larger clusters do not fit; *planned says whether it did.
template <bool kLayer, typename T>
Status plan_long_backward(const char* op, int64_t rows, int64_t cols, int smem_optin,
                          ParamGradPlan* plan, bool* planned) {
  *planned = false;
  constexpr int N = kVec16<T>;
  for (int max_parts = std::min(kMaxNonPortableSplit, max_cluster_size()); max_parts >= 2;
       max_parts = max_parts > kMaxSplit ? kMaxSplit : 0) {
    const int64_t part_cols = ((cols + max_parts - 1) / max_parts + N - 1) / N * N;
    const int parts = static_cast<int>((cols + part_cols - 1) / part_cols);
    if (parts < 2) return Status();
    const bool wide = long_wide<T>(part_cols);
    const auto kernel = wide ? norm_backward_long<kLayer, T, kLongWideThreads>
                             : norm_backward_long<kLayer, T, kLongThreads>;
    const int threads = wide ? kLongWideThreads : kLongThreads;
    const int64_t smem = wide ? long_backward_smem<kLayer, T, kLongWideThreads>(part_cols)
                              : long_backward_smem<kLayer, T, kLongThreads>(part_cols);
    cudaFuncAttributes attributes = {};
    bool ok = false;
    if (Status s = cluster_image(op, reinterpret_cast<const void*>(kernel), &attributes, &ok);
        !s.ok() || !ok)
      return s;
    // Fewer parts take more shared memory each.
    if (smem + static_cast<int64_t>(attributes.sharedSizeBytes) > smem_optin) return Status();
    if (parts > kMaxSplit &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
            cudaSuccess) {
      (void)cudaGetLastError();  // no clusters this large here: try portable ones
      continue;
    }
    if (const cudaError_t error = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        error != cudaSuccess)
      return cuda_status(error, op, "setting the shared-memory size");
    int clusters = 0;
    if (max_active_clusters(kernel, parts, threads, &clusters, static_cast<size_t>(smem)) !=
            cudaSuccess ||
        clusters < 1)
      continue;
    plan->split = parts;
    plan->part_cols = static_cast<int>(part_cols);
    plan->threads = threads;
    plan->smem = static_cast<size_t>(smem);
    plan->units = std::min<int64_t>(rows, clusters);
    plan->blocks = static_cast<unsigned>(plan->units * parts);
    *planned = true;
    return Status();
  }
  return Status();
}

}  // namespace

template <bool kLayer, typename T>
Status plan_norm_backward(const char* op, int64_t rows, int64_t cols, bool aligned,
                          const DeviceLimits& limits, ParamGradPlan* plan) {
  constexpr int K = kLayer ? 2 : 1;
  const int64_t sms = limits.sms;
  constexpr int V = kVec16<T>;
  const int config = aligned ? pick_cached(cols, V, kBackwardCachedCount) : -1;
  int parts = 0;  // blocks per row of the split kernel
  if (config < 0 && aligned) {
    static_assert(kMaxNonPortableSplit * (BackwardSplitShape::threads / kWarp) <= kExchangeSlots,
                  "exchange slots");
    if (Status s = split_parts(op, reinterpret_cast<const void*>(split_kernel<kLayer, T>()), cols,
                               kBackwardSplitCols<T>, &parts, kMaxNonPortableSplit);
        !s.ok())
      return s;
  }
  int clusters = 0;  // of the split kernel that fit the device at once
  if (parts > 0) {
    const cudaError_t error = max_active_clusters(split_kernel<kLayer, T>(), parts,
                                                  BackwardSplitShape::threads, &clusters);
    if (error != cudaSuccess && parts <= kMaxSplit)
      return cuda_status(error, op, "sizing the launch");
    // Clusters this large do not fit (or a non-portable size is refused): the rows stay whole.
    if (error != cudaSuccess || clusters < 1) parts = 0;
  }
  int per_sm = 0;
  cudaError_t error = cudaSuccess;
  if (config >= 0) {
    Status status = with_cached_shape<kBackwardCachedCount>(config, [&](auto shape) {
      using S = decltype(shape);
      constexpr int kRows = kRowsPerBlock<S::threads>;
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, norm_backward_cached<kLayer, T, S::threads, S::vecs, V, false>,
          kBlockThreads<S::threads>, 0);
      // At most kBackwardBlocksPerSm blocks per SM, even where more fit: each block asks L2
      // for its next row before the reductions of its current one, and with fewer rows in
      // flight per SM those prefetched rows are still in L2 when they are loaded.
      per_sm = std::min(per_sm, kBackwardBlocksPerSm);
      const int64_t groups = (rows + kRows - 1) / kRows;
      plan->blocks = static_cast<unsigned>(std::min<int64_t>(groups, sms * std::max(per_sm, 1)));
      plan->units = plan->blocks;
      return Status();
    });
    if (!status.ok()) return status;
    plan->cached = true;
    plan->config = config;
  } else if (parts > 0) {
    // Clusters of `parts` blocks share each row; each cluster is one unit.
    using S = BackwardSplitShape;
    const int64_t wanted = sms * kSplitBlocksPerSmTimes2<kLayer> / (2 * parts);
    plan->split = parts;
    plan->units =
        std::min<int64_t>(rows, std::max<int64_t>(std::min<int64_t>(clusters, wanted), 1));
    plan->blocks = static_cast<unsigned>(plan->units * parts);
    plan->threads = S::threads;
  } else {
    bool planned = false;
    if (aligned) {
      if (Status s =
              plan_long_backward<kLayer, T>(op, rows, cols, limits.smem_optin, plan, &planned);
          !s.ok())
        return s;
    }
    if (planned) {
      plan->workspace = static_cast<size_t>(K * plan->units * cols) * sizeof(float);
      return Status();
    }
    // The accumulators (K x cols float32) are what the streamed kernel keeps in shared memory.
    const void* kernel = aligned
                             ? reinterpret_cast<const void*>(norm_backward_streamed<kLayer, T, V>)
                             : reinterpret_cast<const void*>(norm_backward_streamed<kLayer, T, 1>);
    StreamedLaunch launch;
    if (Status s = plan_streamed(op, kernel, K, cols, aligned ? V : 1, DType::kFloat32, &launch);
        !s.ok())
      return s;
    plan->threads = launch.threads;
    plan->smem = launch.smem;
    error =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, plan->threads, plan->smem);
    plan->blocks = static_cast<unsigned>(std::min<int64_t>(rows, sms * std::max(per_sm, 1)));
    plan->units = plan->blocks;
  }
  if (error != cudaSuccess) return cuda_status(error, op, "sizing the launch");
  plan->workspace = static_cast<size_t>(K * plan->units * cols) * sizeof(float);
  return Status();
}

template <bool kLayer, typename T>
Status launch_norm_backward(const char* op, const NormBackwardArgs<void>& untyped,
                            const ParamGradPlan& plan, float* partials, bool aligned,
                            cudaStream_t stream) {
  constexpr int V = kVec16<T>;
  if (plan.units == 0) return Status();
  NormBackwardArgs<T> a{static_cast<const T*>(untyped.dy),
                        untyped.dy_stride,
                        static_cast<const T*>(untyped.x),
                        untyped.x_stride,
                        static_cast<const T*>(untyped.weight),
                        untyped.mean,
                        untyped.rstd,
                        static_cast<T*>(untyped.dx),
                        untyped.dx_stride,
                        partials,
                        plan.units,
                        untyped.rows,
                        untyped.cols};
  if (plan.cached) {
    return with_cached_shape<kBackwardCachedCount>(plan.config, [&](auto shape) {
      using S = decltype(shape);
      return launch_rows(op, Follow::kPlain,
                         norm_backward_cached<kLayer, T, S::threads, S::vecs, V, false>,
                         plan.blocks, kBlockThreads<S::threads>, 0, stream, 0, a);
    });
  }
  if (plan.part_cols > 0) {
    return long_wide<T>(plan.part_cols)
               ? launch_rows(op, Follow::kPlain, norm_backward_long<kLayer, T, kLongWideThreads>,
                             plan.blocks, plan.threads, plan.smem, stream, plan.split, a,
                             plan.part_cols)
               : launch_rows(op, Follow::kPlain, norm_backward_long<kLayer, T, kLongThreads>,
                             plan.blocks, plan.threads, plan.smem, stream, plan.split, a,
                             plan.part_cols);
  }
  if (plan.split > 0) {
    return launch_split(op, Follow::kPlain, split_kernel<kLayer, T>(),
                        static_cast<unsigned>(plan.units), plan.split, plan.threads, stream, a);
  }
  return launch_rows(
      op, Follow::kPlain,
      aligned ? norm_backward_streamed<kLayer, T, V> : norm_backward_streamed<kLayer, T, 1>,
      plan.blocks, plan.threads, plan.smem, stream, 0, a, plan.smem > 0);
}

}  // namespace cudaops::detail::rowwise

// The backward passes of both norms for one dtype.
#define CUDAOPS_NORM_BACKWARD_INSTANTIATE_ONE(kLayer, T)                                      \
  template Status plan_norm_backward<kLayer, T>(const char*, int64_t, int64_t, bool,          \
                                                const DeviceLimits&, ParamGradPlan*);         \
  template Status launch_norm_backward<kLayer, T>(const char*, const NormBackwardArgs<void>&, \
                                                  const ParamGradPlan&, float*, bool,         \
                                                  cudaStream_t);
#define CUDAOPS_NORM_BACKWARD_INSTANTIATE(T)      \
  namespace cudaops::detail::rowwise {            \
  CUDAOPS_NORM_BACKWARD_INSTANTIATE_ONE(true, T)  \
  CUDAOPS_NORM_BACKWARD_INSTANTIATE_ONE(false, T) \
  }
