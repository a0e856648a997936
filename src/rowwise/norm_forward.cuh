// layer_norm, rms_norm and fused_add_rms_norm: the kernels and their launch, included by one
// translation unit per dtype (norm_forward_<dtype>.cu).
#include <algorithm>

#include "core/dispatch.cuh"
#include "core/launch.h"
#include "core/validate.h"
#include "rowwise/norm_host.h"
#include "rowwise/row_common.cuh"
#include "rowwise/row_exchange.cuh"
#include "rowwise/row_ladder.cuh"
#include "rowwise/row_pipeline.cuh"
#include "rowwise/rowwise_launch.h"

namespace cudaops::detail::rowwise {
namespace {

// The unsplit cached shapes that load the parameters into registers before the reduction of the
// squares (kEarlyParams: the layer norm's weight and bias, rms_norm's weight), so that their trip
// to L1 or L2 overlaps the reduction rather than following it: the shapes where that measured
// faster in bf16 (docs/tuning/norms.md, "Parameters loaded early"). fused_add_rms_norm, with
// twice the bytes per row to hide the load, and float32 rms_norm load the weight after it.
template <Norm kNorm, int kThreads, int kVecs, int N, bool kSplit>
inline constexpr bool kEarlyParams =
    !kSplit &&
    ((kNorm == Norm::kLayer &&
      ((kVecs == 4 && kThreads <= 128) || (kVecs == 2 && kThreads == kWarp))) ||
     (kNorm == Norm::kRms && N == 8 && (kVecs == 4 || (kVecs == 2 && kThreads == kWarp))));

// Blocks per SM that the unsplit norms' register budget is set for; 0 leaves the budget to the
// compiler. The layer norm with its parameters loaded after the reduction is held to 64 registers:
// the compiler's budget left too few rows in flight to cover the memory latency. rms_norm and
// fused_add_rms_norm take no cap (docs/tuning/norms.md, "Register budgets").
template <Norm kNorm, int kThreads, int kVecs, int N, bool kSplit>
constexpr int norm_min_blocks() {
  if constexpr (kEarlyParams<kNorm, kThreads, kVecs, N, kSplit>) {
    // The layer norm's early shapes of two chunks took the compiler's budget (kEarlyParams).
    return kNorm == Norm::kLayer && kVecs != 4 ? 0 : 768 / kBlockThreads<kThreads>;
  }
  return kNorm == Norm::kLayer ? 1024 / kBlockThreads<kThreads> : 0;
}
template <Norm kNorm, int kThreads, int kVecs, int N, bool kSplit>
inline constexpr int kNormMinBlocks = norm_min_blocks<kNorm, kThreads, kVecs, N, kSplit>();

// The parameters' chunks are loaded kParamGroup at a time, after the reductions: one trip to L1 (or
// L2) per group, and fewer registers than all at once.
constexpr int kParamGroup = 2;

// Rows each cluster of the split layer norm takes, one after another: its weight and bias
// copied once serve them all, where more rows per cluster leave the device less room to even
// out the clusters' pace (docs/tuning/norms.md, "Rows per cluster").
constexpr int kLayerRowsPerCluster = 3;

/// The sum of acc's values, added pairwise.
template <int K>
__device__ __forceinline__ float pairwise_sum(float (&acc)[K]) {
  static_assert((K & (K - 1)) == 0, "a power of two");
#pragma unroll
  for (int s = K / 2; s > 0; s /= 2) {
#pragma unroll
    for (int e = 0; e < s; ++e)
      acc[e] += acc[e + s];
  }
  return acc[0];
}

// The layer norm's reductions of a thread's elements (its sum and its squares) keep N sums, one
// per element of a chunk, taken down the chunks and added pairwise at the end: a chain of
// kVecs + log2(N) dependent adds where one running sum is a chain of kVecs * N, so that the row's
// reduction, which the row's stores wait for, ends sooner. rms_norm's squares keep one running
// sum: N sums measured no faster there and took more registers (docs/tuning/norms.md, "Pairwise
// sums").

/// The sum of the squared deviations from `center` of the thread's elements of a tile of a row
/// (or part) of `cols` columns: whole chunks, then the one chunk that straddles the row's end (if
/// the thread has it), whose fill past cols is 0, which is not the center. kPairwise: N sums added
/// pairwise (see above); otherwise one running sum.
template <bool kPairwise, typename T, int kThreads, int kVecs, int N>
__device__ __forceinline__ float squares_about(const Tile<T, kThreads, kVecs, N>& tile, int cols,
                                               int t, float center) {
  using TileT = Tile<T, kThreads, kVecs, N>;
  constexpr int K = kPairwise ? N : 1;
  float acc[K];
#pragma unroll
  for (int e = 0; e < K; ++e)
    acc[e] = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const bool inside = TileT::col(j, t) + N <= cols;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float d = tile.get(j, e) - center;
      acc[e % K] = inside ? fmaf(d, d, acc[e % K]) : acc[e % K];
    }
  }
  if (const int p = TileT::partial(cols, t); p >= 0) {
    const uint4 words = tile.chunk(p);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float d = word_element<T>(words, e) - center;
      if (TileT::col(p, t) + e < cols) acc[e % K] = fmaf(d, d, acc[e % K]);
    }
  }
  return pairwise_sum(acc);
}

/// The sum of the thread's elements of a tile (fill past the row's end is 0, which adds nothing),
/// as N sums added pairwise (see above).
template <typename T, int kThreads, int kVecs, int N>
__device__ __forceinline__ float tile_sum(const Tile<T, kThreads, kVecs, N>& tile) {
  float acc[N];
#pragma unroll
  for (int e = 0; e < N; ++e)
    acc[e] = tile.get(0, e);
#pragma unroll
  for (int j = 1; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e)
      acc[e] += tile.get(j, e);
  }
  return pairwise_sum(acc);
}

// kSplit: the blocks of a cluster share each row (row_walk), their reductions meeting through
// RowExchange; otherwise kRowsPerBlock rows per block.
//
// The split layer norm's blocks copy their part of the weight and the bias into shared memory
// once (cp.async, no registers held), and take kLayerRowsPerCluster rows each, each row's x
// copied in (kStaged) while the row before is reduced: the parameters then cost no trip to L2
// per row and no registers (docs/tuning/norms.md, "Split layer norm's parameters").
template <Norm kNorm, typename T, int kThreads, int kVecs, int N, bool kSplit>
__global__ void __launch_bounds__(kBlockThreads<kThreads>,
                                  (kNormMinBlocks<kNorm, kThreads, kVecs, N, kSplit>))
    norm_cached(NormArgs<T> a) {
  enter_rows_kernel();
  // One reduction per row: the sum of squares, or for the layer norm each warp's sum and M2
  // (about the warp's own mean) combined into the row's mean and M2 (RowReducer::moments).
  constexpr int W = kNorm == Norm::kLayer ? 2 : 1;
  // The split rms_norm loads its weight before the reduction, so that the trip to L2 overlaps
  // the exchange rather than following it; the split layer norm holds both parameters in shared
  // memory instead (kHeldParams). Some of the unsplit shapes load them early too (kEarlyParams).
  constexpr bool kEarlyWeight =
      (kSplit && kNorm == Norm::kRms) || kEarlyParams<kNorm, kThreads, kVecs, N, kSplit>;
  constexpr bool kHeldParams = kSplit && kNorm == Norm::kLayer;
  static_assert(!kHeldParams || kThreads <= 256, "held parameters of 512 threads pass 48 KiB");
  // kHeldParams: the weight's and the bias's chunks of each thread, as copied.
  __shared__ uint4 held[2][kHeldParams ? kVecs : 1][kHeldParams ? kThreads : 1];
  // kStaged: the thread's chunks of the block's next row of x, copied while this one is reduced
  // (blocks of 256 threads would pass the 48 KiB of static shared memory).
  constexpr bool kStaged = kHeldParams && kThreads <= 128;
  __shared__ uint4 staged[kStaged ? kVecs : 1][kStaged ? kThreads : 1];
  __shared__ float scratch[kNorm == Norm::kLayer ? kMomentsScratch : kWarp];
  __shared__ typename RowReducer<kThreads, kSplit, 1, W>::Exchange exchange;
  using TileT = Tile<T, kThreads, kVecs, N>;
  const int t = threadIdx.x % kThreads;
  const RowWalk walk = row_walk<kThreads, kSplit>(static_cast<int>(a.cols), TileT::kCols);
  const float count = static_cast<float>(a.cols);
  const float inv_count = 1.0f / count;
  const T* weight = a.weight + walk.offset;
  const T* bias = kNorm == Norm::kLayer ? a.bias + walk.offset : nullptr;
  const T zero = from_float<T>(0.0f);
  RowReducer<kThreads, kSplit, 1, W> reduce{scratch, &exchange, walk.rank, walk.parts};
  if constexpr (kSplit) exchange.begin(walk.parts);
  if constexpr (kHeldParams) {
    TileT::copy_async(&held[0][0][0], weight, walk.cols, t);
    TileT::copy_async(&held[1][0][0], bias, walk.cols, t);
    if (kStaged && walk.first < a.rows)
      TileT::copy_async(&staged[0][0], a.x + walk.first * a.x_stride + walk.offset, walk.cols, t);
  }
  // The rows, with the block's part of each of part_cols columns: an int, or where kConstLoop and
  // the part fills the tile, the constant TileT::kCols (below).
  const auto walk_rows = [&](auto part_cols) {
    const int cols = part_cols;
    for (int64_t row = walk.first; row < a.rows; row += walk.step, reduce.next_row()) {
      TileT tile;
      if constexpr (kStaged) {
        cp_async_wait_all();  // this row (and, in the first, the parameters)
#pragma unroll
        for (int j = 0; j < kVecs; ++j)
          tile.raw[j] = staged[j][t];
        if (row + walk.step < a.rows)
          TileT::copy_async(&staged[0][0], a.x + (row + walk.step) * a.x_stride + walk.offset, cols,
                            t);
      } else {
        tile.load(a.x + row * a.x_stride + walk.offset, cols, t, zero);
      }
      // The early parameters' loads follow the row's at once (kIssueWithRow), so that their trip
      // overlaps the row's own, not only the reduction; the layer norm of one warp with two
      // chunks loads them after the squares (docs/tuning/norms.md, "Parameters with the row").
      constexpr bool kIssueWithRow = kEarlyWeight && !(kNorm == Norm::kLayer && kVecs == 2);
      [[maybe_unused]] TileT early_weight, early_bias;
      if constexpr (kIssueWithRow) early_weight.load(weight, cols, t, zero);
      if constexpr (kIssueWithRow && kNorm == Norm::kLayer) early_bias.load(bias, cols, t, zero);
      if constexpr (kNorm == Norm::kAddRms) {
        T* residual = a.residual + row * a.residual_stride + walk.offset;
        TileT r;
        r.load(residual, cols, t, zero);
#pragma unroll
        for (int j = 0; j < kVecs; ++j) {
          float sum[N];
#pragma unroll
          for (int e = 0; e < N; ++e)
            sum[e] = tile.get(j, e) + r.get(j, e);
          tile.set(j, sum);
        }
        tile.store(residual, cols, t);
      }
      [[maybe_unused]] float warp_sum = 0.0f;
      float center = 0.0f;  // the layer norm's squares are taken about the warp's mean
      if constexpr (kNorm == Norm::kLayer) {
        float sum[1] = {tile_sum(tile)};
        warp_allreduce(sum, SumOp{});
        warp_sum = sum[0];
        const int n = TileT::warp_count(cols, t / kWarp);
        // A warp past the row's end (n = 0) has a NaN center and no element that uses it.
        center = warp_sum / static_cast<float>(n);
        tile.pin();
      }
      float squares[1] = {squares_about<kNorm == Norm::kLayer>(tile, cols, t, center)};
      if constexpr (kEarlyWeight && !kIssueWithRow) early_weight.load(weight, cols, t, zero);
      if constexpr (kEarlyWeight && !kIssueWithRow && kNorm == Norm::kLayer)
        early_bias.load(bias, cols, t, zero);
      float mean = 0.0f;
      float mean_square;  // of the deviations from the mean (the layer norm) or of x
      if constexpr (kNorm == Norm::kLayer) {
        warp_allreduce(squares, SumOp{});
        const Moments m =
            reduce.moments(warp_sum, center, squares[0], static_cast<int>(a.cols), TileT::kCols,
                           inv_count, [](int c, int w) { return TileT::warp_count(c, w); });
        mean = m.mean;
        mean_square = kSplit ? m.m2 * inv_count : m.m2 / count;
      } else {
        reduce(squares, SumOp{});
        mean_square = squares[0] / count;
      }
      const float rstd = rsqrtf(mean_square + a.eps);
      tile.pin();
      if (t == 0 && walk.rank == 0) {
        if (kNorm == Norm::kLayer && a.mean != nullptr) a.mean[row] = mean;
        if (a.rstd != nullptr) a.rstd[row] = rstd;
      }
      // Unstaged, the parameters' copies are waited for here (staged, with the row's own).
      if constexpr (kHeldParams && !kStaged) cp_async_wait_all();
#pragma unroll
      for (int j0 = 0; j0 < kVecs; j0 += kParamGroup) {
        [[maybe_unused]] TileT w, b;
        if constexpr (kHeldParams) {
#pragma unroll
          for (int j = j0; j < j0 + kParamGroup && j < kVecs; ++j) {
            w.raw[j] = held[0][j][t];
            b.raw[j] = held[1][j][t];
          }
        } else if constexpr (kEarlyWeight) {
          w = early_weight;
          if constexpr (kNorm == Norm::kLayer) b = early_bias;
        } else {
          w.load_range(weight, cols, t, zero, j0, kParamGroup);
          if constexpr (kNorm == Norm::kLayer) b.load_range(bias, cols, t, zero, j0, kParamGroup);
        }
#pragma unroll
        for (int j = j0; j < j0 + kParamGroup && j < kVecs; ++j) {
          float v[N];
#pragma unroll
          for (int e = 0; e < N; ++e) {
            if constexpr (kNorm == Norm::kLayer) {
              v[e] = fmaf((tile.get(j, e) - mean) * rstd, w.get(j, e), b.get(j, e));
            } else {
              v[e] = w.get(j, e) * (tile.get(j, e) * rstd);
            }
          }
          tile.set(j, v);
        }
      }
      tile.store(a.y + row * a.y_stride + walk.offset, cols, t);
    }
  };
  // Rows (or parts) that fill the tile take, where kConstLoop, a copy of the loop in which the
  // part's columns are a constant (with_part_cols), so that none of the checks against the row's
  // end (each chunk's loads, squares, copies and stores) is left in it: the split layer norm's
  // parts, the whole-row layer norm of one or two chunks (four spill with the copy) and the
  // whole-row rms_norm of one or four chunks (docs/tuning/norms.md, "Loop copies").
  constexpr bool kConstLoop =
      kSplit ? kNorm == Norm::kLayer
             : (kNorm == Norm::kLayer && kVecs <= 2) || (kNorm == Norm::kRms && kVecs != 2);
  with_part_cols<TileT::kCols, kConstLoop>(walk.cols, walk_rows);
}

// The split layer norm of rows of at most kMaxSplit parts, G rows at once in each cluster: the
// block's threads form G groups of kThreads, group g holding the block's part of the cluster's
// row g. The block copies its part of the weight (group 0) and of the bias (group 1) into shared
// memory once (cp.async) for the G rows, so that the parameters' trips to L2 are 1 / G of x's,
// with no row waiting for another. It serves float32 rows (launch_forward has the figures).
template <typename T, int kThreads, int kVecs, int G>
__global__ void __launch_bounds__(kThreads* G, 1024 / (kThreads * G))
    layer_norm_split_rows(NormArgs<T> a) {
  enter_rows_kernel();
  static_assert(G >= 2, "groups 0 and 1 copy the weight and the bias");
  constexpr int N = kVec16<T>;
  constexpr int kWarps = kThreads / kWarp;  // of a group
  using TileT = Tile<T, kThreads, kVecs, N>;
  __shared__ uint4 held[2][kVecs][kThreads];
  __shared__ RowExchange<1, 2, G * kWarps * kMaxSplit> exchange;
  const int t = static_cast<int>(threadIdx.x) % kThreads;
  const int g = static_cast<int>(threadIdx.x) / kThreads;
  const int total = static_cast<int>(a.cols);
  // The cluster's walk of one row at a time, taken G at a time.
  const RowWalk walk = row_walk<kThreads, true>(total, TileT::kCols);
  const int rank = walk.rank;
  const int parts = walk.parts;
  const int offset = walk.offset;
  const int cols = walk.cols;  // of this block's part of the row
  const float count = static_cast<float>(a.cols);
  const float inv_count = 1.0f / count;
  const T zero = from_float<T>(0.0f);
  exchange.begin(parts);
  if (g < 2) TileT::copy_async(&held[g][0][0], (g == 0 ? a.weight : a.bias) + offset, cols, t);
  int i = 0;
  for (int64_t row0 = walk.first * G; row0 < a.rows; row0 += walk.step * G, ++i) {
    const int64_t row = row0 + g;
    // A group past the last row takes part in the exchange with a row of zeros, and stores
    // nothing.
    const bool live = row < a.rows;
    TileT tile;
    if (live) {
      tile.load(a.x + row * a.x_stride + offset, cols, t, zero);
    } else {
#pragma unroll
      for (int j = 0; j < kVecs; ++j)
        tile.raw[j] = make_uint4(0, 0, 0, 0);
    }
    float sum[1] = {tile_sum(tile)};
    warp_allreduce(sum, SumOp{});
    // A warp past the row's end (n = 0) has a NaN center and no element that uses it.
    const float center = sum[0] / static_cast<float>(TileT::warp_count(cols, t / kWarp));
    tile.pin();
    float squares[1] = {squares_about<true>(tile, cols, t, center)};
    warp_allreduce(squares, SumOp{});
    Moments m;
    const float v[2] = {center, squares[0]};
    exchange.template gather<kWarps>(
        0, i, v, rank, parts, [&](const float(&got)[2][G * kWarps * kMaxSplit], int senders) {
          const int per_row = senders / G;
          m = combine_split_moments<kWarps * kMaxSplit>(
              got[0] + g * per_row, got[1] + g * per_row, per_row, count, inv_count, [&](int s) {
                const int k = s / kWarps;
                return TileT::warp_count(min(total - k * TileT::kCols, TileT::kCols), s % kWarps);
              });
        });
    const float rstd = rsqrtf(m.m2 * inv_count + a.eps);
    tile.pin();
    if (i == 0) {
      cp_async_wait_all();  // the parameters, copied by other threads of the block
      __syncthreads();
    }
    if (live) {
      if (t == 0 && rank == 0) {
        if (a.mean != nullptr) a.mean[row] = m.mean;
        if (a.rstd != nullptr) a.rstd[row] = rstd;
      }
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        TileT w, b;
        w.raw[j] = held[0][j][t];
        b.raw[j] = held[1][j][t];
        float y[N];
#pragma unroll
        for (int e = 0; e < N; ++e)
          y[e] = fmaf((tile.get(j, e) - m.mean) * rstd, w.get(j, e), b.get(j, e));
        tile.set(j, y);
      }
      tile.store(a.y + row * a.y_stride + offset, cols, t);
    }
  }
}

// `cached`: the row (x, or x + residual) is kept in dynamic shared memory between the passes.
// Each pass takes kU chunks per thread at a time, their loads all issued before any is used.
//
// kU = 4 serves only the float32 layer norm whose cached row leaves room for one block per SM
// (kBatchedLayer); with room for two blocks its registers would leave one, and 16-bit rows,
// rms_norm and softmax measured slower with it (docs/tuning/norms.md, "Streamed chunks").
template <Norm kNorm, typename T>
inline constexpr bool kBatchedLayer = kNorm == Norm::kLayer && sizeof(T) == 4;

template <Norm kNorm, typename T, int N, int kU>
__global__ void __launch_bounds__(1024) norm_streamed(NormArgs<T> a, bool cached) {
  enter_rows_kernel();
  extern __shared__ float4 dynamic_smem[];
  T* cache = reinterpret_cast<T*>(dynamic_smem);
  __shared__ float scratch[kWarp];
  const int64_t cols = a.cols;
  const int64_t first = threadIdx.x * static_cast<int64_t>(N);
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  const T zero = from_float<T>(0.0f);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* in = a.x + row * a.x_stride;
    float mean = 0.0f;
    float squares[1] = {0.0f};
    if constexpr (kNorm == Norm::kAddRms) {
      T* residual = a.residual + row * a.residual_stride;
      for (int64_t c0 = first; c0 < cols; c0 += kU * step) {
        RawChunk<T, N> rx[kU], rr[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          rx[u] = load_raw<T, N>(in, c0 + u * step, cols, zero);
          rr[u] = load_raw<T, N>(residual, c0 + u * step, cols, zero);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t c = c0 + u * step;
          float x[N], r[N];
          raw_floats<T, N>(rx[u], x);
          raw_floats<T, N>(rr[u], r);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            x[e] = round_to<T>(x[e] + r[e]);
            squares[0] = fmaf(x[e], x[e], squares[0]);
          }
          store_chunk<T, N>(residual, c, cols, x);
          if (cached) store_chunk<T, N>(cache, c, cols, x);
        }
      }
      in = residual;  // the output pass reads the stored sum back (this thread's own columns)
    } else {
      if constexpr (kNorm == Norm::kLayer) {
        float sum[1] = {0.0f};
        for (int64_t c0 = first; c0 < cols; c0 += kU * step) {
          RawChunk<T, N> rx[kU];
#pragma unroll
          for (int u = 0; u < kU; ++u)
            rx[u] = load_raw<T, N>(in, c0 + u * step, cols, zero);
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            float x[N];
            raw_floats<T, N>(rx[u], x);
            if (cached) store_chunk<T, N>(cache, c0 + u * step, cols, x);
#pragma unroll
            for (int e = 0; e < N; ++e)
              sum[0] += x[e];
          }
        }
        row_allreduce<kWholeBlock>(sum, scratch, SumOp{});
        mean = sum[0] / static_cast<float>(cols);
      }
      for (int64_t c0 = first; c0 < cols; c0 += kU * step) {
        RawChunk<T, N> rx[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          rx[u] = kNorm == Norm::kLayer
                      ? reload_raw<T, N>(in, cache, cached, c0 + u * step, cols, zero)
                      : load_raw<T, N>(in, c0 + u * step, cols, zero);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t c = c0 + u * step;
          float x[N];
          raw_floats<T, N>(rx[u], x);
          if (kNorm != Norm::kLayer && cached) store_chunk<T, N>(cache, c, cols, x);
#pragma unroll
          for (int e = 0; e < N; ++e) {
            const float d = c + e < cols ? x[e] - mean : 0.0f;
            squares[0] = fmaf(d, d, squares[0]);
          }
        }
      }
    }
    row_allreduce<kWholeBlock>(squares, scratch, SumOp{});
    const float rstd = rsqrtf(squares[0] / static_cast<float>(cols) + a.eps);
    if (threadIdx.x == 0) {
      if (kNorm == Norm::kLayer && a.mean != nullptr) a.mean[row] = mean;
      if (a.rstd != nullptr) a.rstd[row] = rstd;
    }
    T* out = a.y + row * a.y_stride;
    // The layer norm's x, weight and bias of four chunks at a time would spill.
    constexpr int kO = kNorm == Norm::kLayer && kU > 2 ? 2 : kU;
    for (int64_t c0 = first; c0 < cols; c0 += kO * step) {
      RawChunk<T, N> rx[kO], rw[kO], rb[kO];
#pragma unroll
      for (int u = 0; u < kO; ++u) {
        rx[u] = reload_raw<T, N>(in, cache, cached, c0 + u * step, cols, zero);
        rw[u] = load_raw<T, N>(a.weight, c0 + u * step, cols, zero);
        if constexpr (kNorm == Norm::kLayer)
          rb[u] = load_raw<T, N>(a.bias, c0 + u * step, cols, zero);
      }
#pragma unroll
      for (int u = 0; u < kO; ++u) {
        const int64_t c = c0 + u * step;
        float x[N], w[N];
        raw_floats<T, N>(rx[u], x);
        raw_floats<T, N>(rw[u], w);
        if constexpr (kNorm == Norm::kLayer) {
          float b[N];
          raw_floats<T, N>(rb[u], b);
#pragma unroll
          for (int e = 0; e < N; ++e)
            x[e] = fmaf((x[e] - mean) * rstd, w[e], b[e]);
        } else {
#pragma unroll
          for (int e = 0; e < N; ++e)
            x[e] = w[e] * (x[e] * rstd);
        }
        store_chunk<T, N>(out, c, cols, x);
      }
    }
  }
}

// layer_norm's rows brought in by the pipeline (row_pipeline.cuh), then the passes of
// norm_cached over registers; the weight is held in registers across the rows, the bias read per
// row. Each of the block's reductions takes one block barrier (alternating scratch), and the
// first one also tells thread 0 that every thread has its row out of the stage, which then goes
// back to the pipeline. rms_norm and fused_add_rms_norm keep norm_streamed, which measured as
// fast.
template <typename T>
__global__ void __launch_bounds__(kPipeThreads)
    layer_norm_pipelined(NormArgs<T> a, PipeParams params) {
  enter_rows_kernel();
  constexpr int N = kVec16<T>;
  constexpr int kVecs = kPipeVecs;
  using TileT = StagedTile<T, kVecs>;
  extern __shared__ float4 dynamic_smem[];
  __shared__ uint64_t bars[kMaxStages];
  __shared__ float scratch[kAlternatingScratch<1>];
  const int cols = static_cast<int>(a.cols);
  RowPipeline<T, 1> pipe(reinterpret_cast<T*>(dynamic_smem), bars, params, {{a.x}, {a.x_stride}},
                         cols, a.rows);
  pipe.start();
  TileT weight;
  weight.load_global(a.weight, cols);
  const T zero = from_float<T>(0.0f);
  int i = 0;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, ++i) {
    weight.pin();  // converted again in each row, not hoisted out of the loop as float32
    TileT tile;
    pipe.wait(i);
    tile.load(pipe.stage(i, 0), cols, zero);
    float sum[1] = {0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        sum[0] += tile.get(j, e);
    }
    row_allreduce_alternating(sum, scratch, parity, SumOp{});
    parity ^= 1;
    pipe.release_synced(i, row);
    const float mean = sum[0] / static_cast<float>(cols);
    tile.pin();
    float squares[1] = {0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float d = TileT::valid(j, cols) ? tile.get(j, e) - mean : 0.0f;
        squares[0] = fmaf(d, d, squares[0]);
      }
    }
    row_allreduce_alternating(squares, scratch, parity, SumOp{});
    parity ^= 1;
    tile.pin();
    const float rstd = rsqrtf(squares[0] / static_cast<float>(cols) + a.eps);
    if (threadIdx.x == 0) {
      if (a.mean != nullptr) a.mean[row] = mean;
      if (a.rstd != nullptr) a.rstd[row] = rstd;
    }
    T* out = a.y + row * a.y_stride;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = TileT::col(j);
      float b[N];  // held too, the bias would spill
      load_floats<T>(a.bias + c, c < cols, b);
      float v[N];
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[e] = fmaf((tile.get(j, e) - mean) * rstd, weight.get(j, e), b[e]);
      store_floats<T>(out + c, c < cols, v);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host.

/// Launches layer_norm_split_rows, two rows at once per cluster, where rows split into at most
/// kMaxSplit parts of its groups; *launched says whether it did (or with `dry` not null, would
/// have: *dry says how).
template <typename T>
Status launch_layer_split_rows(const char* op, const NormArgs<T>& a, cudaStream_t stream,
                               RowPlan* dry, bool* launched) {
  *launched = false;
  constexpr int kThreads = 128;
  constexpr int kRows = 2;
  constexpr int64_t kPartCols = int64_t{kThreads} * 4 * kVec16<T>;
  const auto kernel = layer_norm_split_rows<T, kThreads, 4, kRows>;
  int parts = 0;
  if (Status s = split_parts(op, reinterpret_cast<const void*>(kernel), a.cols, kPartCols, &parts,
                             kMaxSplit);
      !s.ok() || parts == 0)
    return s;
  const int64_t clusters =
      std::min<int64_t>((a.rows + kRows - 1) / kRows, (int64_t{1} << 30) / parts);
  *launched = true;
  if (dry != nullptr) {
    *dry = RowPlan{RowPath::kSplitRows,
                   kThreads * kRows,
                   kThreads,
                   4,
                   parts,
                   static_cast<unsigned>(clusters * parts),
                   0};
    return Status();
  }
  return launch_split(op, Follow::kDependent, kernel, static_cast<unsigned>(clusters), parts,
                      kThreads * kRows, stream, a);
}

// The ladder's traits of the norms' forward passes (row_ladder.cuh).
//
// The ladder's traits of the norms' forward passes (row_ladder.cuh).
//
// Rows of more than 32 KiB (any row too long to be cached, in the layer norm) split over
// clusters (row_exchange.cuh) before the pipelined layer norm is tried: the split kernels keep
// each row's pass over memory single. The layer norm splits every aligned row too long for its
// cached kernels: float32 rows of up to kMaxSplit parts two at once per cluster
// (layer_norm_split_rows), others one at a time as launch_if_split does (two 16-bit rows at once
// measured slower). docs/tuning/norms.md, "Split rows", has the figures.
template <Norm kNorm, typename T>
struct NormRows : RowOpDefaults {
  using Type = T;
  using StreamedKernel = void (*)(NormArgs<T>, bool);
  static constexpr int kCachedCount = kNormCachedCount;
  template <int kThreads, int kVecs, bool kSplit>
  static constexpr auto cached() {
    return norm_cached<kNorm, T, kThreads, kVecs, kVec16<T>, kSplit>;
  }
  static constexpr bool kWideSplit = kNorm == Norm::kLayer;
  static constexpr int kRowsPerCluster = kNorm == Norm::kLayer ? kLayerRowsPerCluster : 1;
  static constexpr bool kPipelined = kNorm == Norm::kLayer;
  static constexpr PipeShape kPipe{kPipeVecs, kPipeThreads, 1, 1};
  static constexpr auto pipelined() { return layer_norm_pipelined<T>; }

  NormArgs<T> a;

  bool splits(int64_t cols) const {
    return kNorm == Norm::kLayer || cols * static_cast<int64_t>(sizeof(T)) > kSplitFromBytes;
  }
  Status split_rows(const char* op, cudaStream_t stream, RowPlan* dry, bool* launched) const {
    *launched = false;
    if constexpr (kNorm == Norm::kLayer && sizeof(T) == 4) {
      return launch_layer_split_rows(op, a, stream, dry, launched);
    }
    return Status();
  }
  Status streamed(const char* op, bool aligned, StreamedKernel* kernel,
                  StreamedLaunch* launch) const {
    *kernel = aligned ? norm_streamed<kNorm, T, kVec16<T>, 1> : norm_streamed<kNorm, T, 1, 1>;
    if (Status s = plan_streamed_rung<T>(op, *kernel, 1, a.cols, aligned, launch); !s.ok())
      return s;
    if constexpr (kBatchedLayer<kNorm, T>) {
      // The float32 layer norm whose cached row leaves room for one block per SM only: the same
      // launch, four chunks per thread at a time.
      DeviceLimits limits;
      if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
      if (aligned && 2 * launch->smem > static_cast<size_t>(limits.smem_optin)) {
        *kernel = norm_streamed<kNorm, T, kVec16<T>, 4>;
        return plan_streamed_rung<T>(op, *kernel, 1, a.cols, aligned, launch);
      }
    }
    return Status();
  }
  auto row_args() const { return std::make_tuple(a); }
  auto streamed_args() const { return std::make_tuple(a); }
};

}  // namespace

template <Norm kNorm, typename T>
Status launch_norm_forward(const char* op, const NormArgs<void>& untyped, bool aligned,
                           cudaStream_t stream, RowPlan* dry) {
  const NormRows<kNorm, T> o{
      {},
      NormArgs<T>{static_cast<const T*>(untyped.x), untyped.x_stride,
                  static_cast<T*>(untyped.residual), untyped.residual_stride,
                  static_cast<const T*>(untyped.weight), static_cast<const T*>(untyped.bias),
                  static_cast<T*>(untyped.y), untyped.y_stride, untyped.mean, untyped.rstd,
                  untyped.rows, untyped.cols, untyped.eps}};
  return run_row_ladder(op, o, untyped.rows, untyped.cols, aligned, stream, dry);
}

}  // namespace cudaops::detail::rowwise

// The forward passes of the three norms for one dtype.
#define CUDAOPS_NORM_FORWARD_INSTANTIATE_ONE(kNorm, T)                                    \
  template Status launch_norm_forward<kNorm, T>(const char*, const NormArgs<void>&, bool, \
                                                cudaStream_t, RowPlan*);
#define CUDAOPS_NORM_FORWARD_INSTANTIATE(T)              \
  namespace cudaops::detail::rowwise {                   \
  CUDAOPS_NORM_FORWARD_INSTANTIATE_ONE(Norm::kLayer, T)  \
  CUDAOPS_NORM_FORWARD_INSTANTIATE_ONE(Norm::kRms, T)    \
  CUDAOPS_NORM_FORWARD_INSTANTIATE_ONE(Norm::kAddRms, T) \
  }
