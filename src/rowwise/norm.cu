// layer_norm, rms_norm and fused_add_rms_norm, and the backward passes of the two norms.
#include <algorithm>

#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/launch.h"
#include "core/validate.h"
#include "cudaops/rowwise.h"
#include "rowwise/row_common.cuh"
#include "rowwise/row_exchange.cuh"
#include "rowwise/row_pipeline.cuh"
#include "rowwise/rowwise_host.h"

namespace cudaops {
namespace detail::rowwise {
namespace {

enum class Norm { kLayer, kRms, kAddRms };

template <typename T>
struct NormArgs {
  const T* x;
  int64_t x_stride;
  T* residual;  // kAddRms: read, then overwritten with x + residual
  int64_t residual_stride;
  const T* weight;
  const T* bias;  // kLayer
  T* y;           // kAddRms: x itself
  int64_t y_stride;
  float* mean;  // kLayer; may be null
  float* rstd;  // may be null
  int64_t rows;
  int64_t cols;
  float eps;
};

// The unsplit layer norm's cached shapes that load the weight and the bias into registers
// before the reduction of the squares (as the split rms_norm does its weight), so that their trip
// to L1 or L2 overlaps the reduction rather than following it. On an H100, % of copy (bf16 /
// fp16 / float32, 256 MiB of x) with the parameters loaded after the reduction in 64 registers
// (as before), and before it in 80 registers (6 blocks of 128 threads per SM) or in the
// compiler's budget (72 to 128 registers):
// clang-format off
//   threads x chunks (cols)   after, 64 registers   before, 6 blocks     before, compiler's
//   32 x 1  (256 / 128)       85.5 / 86.9 / 93.7    85.5 / 86.5 / 90.3   85.1 / 86.2 / 93.8
//   32 x 2  (512 / 256)       94.9 / 96.1 / 96.7    88.8 / 89.9 / 95.1   97.0 / 97.0 / 96.7
//   32 x 4  (1024 / 512)      96.1 / 96.3 / 96.2    96.8 / 96.7 / 96.9   95.9 / 97.3 / 96.7
//   128 x 2 (2048 / 1024)     90.7 / 92.0 / 94.3    83.7 / 85.8 / 90.2   90.6 / 91.8 / 93.6
//   128 x 4 (4096 / 2048)     96.6 / 96.5 / 96.6    97.3 / 97.5 / 97.4   92.9 / 95.0 / 96.5
//   256 x 4 (8192 / 4096)     96.8 / 96.9 / 96.8    95.0 / 96.6 / 97.8   77.6 / 80.0 / 84.4
// clang-format on
// Each shape takes the column best in bf16, the first where they tie.
//
// The unsplit rms_norm loads its weight early in the shapes of four chunks per thread and in one
// warp of two, in a budget of 6 blocks of 128 threads per SM (64 to 80 registers). On an H100
// (bf16, % of copy, two runs each; x of 128 MiB, 256 at 4096 columns, 64 at 2048): the weight
// after the reduction in the compiler's budget (as before), before it in the compiler's budget,
// before it at 6 and at 8 blocks per SM:
// clang-format off
//   threads x chunks (cols)   after       before      before, 6    before, 8
//   32 x 1  (256)             93.5 93.4   93.5 93.7   93.5 93.6   93.7 93.7
//   32 x 2  (512)             93.9 93.9   93.7 93.8   94.5 94.5   94.6 94.4
//   32 x 4  (1024)            93.2 93.3   93.6 93.6   93.9 93.7   93.4 93.8
//   128 x 2 (2048)            90.4 90.5   90.3 89.7   89.8 89.8   90.1 89.4
//   128 x 4 (4096)            96.8 96.8   97.1 97.3   97.6 97.6   97.1 97.1
//   256 x 4 (8192)            93.6 93.5   94.0 94.2   94.5 94.5   94.0 94.2
// clang-format on
// fused_add_rms_norm, with twice the bytes per row to hide the load, measured the same (within
// 0.2) in every variant, and keeps its weight after the reduction.
// float32 rms_norm (N = 4) was not measured so, and keeps its weight after the reduction.
template <Norm kNorm, int kThreads, int kVecs, int N, bool kSplit>
inline constexpr bool kEarlyParams =
    !kSplit &&
    ((kNorm == Norm::kLayer &&
      ((kVecs == 4 && kThreads <= 128) || (kVecs == 2 && kThreads == kWarp))) ||
     (kNorm == Norm::kRms && N == 8 && (kVecs == 4 || (kVecs == 2 && kThreads == kWarp))));

// Blocks per SM that the unsplit norms' register budget is set for; 0 leaves the budget to the
// compiler. The layer norm with its parameters loaded after the reduction takes 64 registers per
// thread: the compiler's budget (78 to 96 registers) left room for 5 or 6 blocks of 128 threads,
// too few rows in flight to cover the memory latency: 85.5% of copy at 32768 x 4096 bf16 on an
// H100, against 96.6% with the cap. With the parameters loaded before it, see kEarlyParams.
// rms_norm and fused_add_rms_norm with their weight loaded after it measured no faster with a cap
// (fused: slower). A minimum of 1, for them, made the compiler take 95 rather than 62 registers.
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
// out the clusters' pace. On an H100, % of copy (bf16 / fp16) by rows per cluster:
// clang-format off
//                    1            2            3            4            8        persistent
//   4096 x 32768  89.5 / 93.0  94.5 / 95.9  94.4 / 95.6  92.7 / 94.6  91.1 / 92.8  86.1 / 83.9
//   2048 x 65536       -       89.2 / 93.6  92.3 / 95.0       -            -       85.6 / 88.6
//   6144 x 24576    - / -      95.9 / -     95.3 / -          -            -       88.4 / -
// clang-format on
// The persistent grid (one cluster per place on the device, each walking its rows) measured
// the same loss for rms_norm: 90.1% against 97.3% with a cluster per row.
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
// reduction, which the row's stores wait for, ends sooner. On an H100 (bf16, % of copy, runs of
// 20 calls / one call), against one running sum:
//   4096 x 32768 (split)   95.6 -> 96.7 / 94.4 -> 95.5
//   8192 x 16384 (split)   96.5 -> 97.2 / 95.2 -> 95.8
//   65536 x 1024           96.7 -> 97.1 / 93.8 -> 94.2
// and within 0.3 at 32768 x 4096, 131072 x 512, 16384 x 2048, 8192 x 8192 and float32. rms_norm's
// squares so measured the same within 0.2 at four shapes and took up to 22 more registers in its
// split kernels: they keep one running sum. Each thread's own mean and M2, merged across the warp
// (Chan) in place of the warp's two reductions, lost: 97.0 -> 94.1 at 131072 x 512, 88.1 -> 85.5
// at 16384 x 2048, 99.4 -> 98.9 at 32768 x 4096.

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
// copied in (kStaged) while the row before is reduced. Fetching both parameters from L2 for every
// row, after the exchange, measured 77.4% of copy (bf16, 4096 x 32768, H100); holding them in
// registers at 6 blocks per SM 86.9%; in shared memory on a persistent grid 87.5-90.8%.
template <Norm kNorm, typename T, int kThreads, int kVecs, int N, bool kSplit>
__global__ void __launch_bounds__(kBlockThreads<kThreads>,
                                  (kNormMinBlocks<kNorm, kThreads, kVecs, N, kSplit>))
    norm_cached(NormArgs<T> a) {
  enter_rows_kernel();
  // One reduction per row: the sum of squares, or for the layer norm each warp's sum and M2
  // (about the warp's own mean) combined into the row's mean and M2 (RowReducer::moments).
  constexpr int W = kNorm == Norm::kLayer ? 2 : 1;
  // The split rms_norm loads its weight before the reduction, so that the trip to L2 overlaps
  // the exchange rather than following it (bf16, 4096 x 32768, H100: 97.5% of copy against
  // 92.9%). fused_add_rms_norm, with twice the bytes per row to hide it, measured no faster.
  // The split layer norm with both parameters so (one row per cluster) measured 74.0 to 79.0%
  // against 94.4% for kHeldParams. Some of the unsplit layer norm's shapes load them early too
  // (kEarlyParams), as do some of the unsplit rms_norm's.
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
      // overlaps the row's own, not only the reduction. On an H100 (bf16, % of the 1 GiB copy,
      // 128 MiB of x): rms_norm 93.7 -> 94.6 at 65536 x 1024, 94.4 -> 95.1 at 16384 x 4096,
      // 95.0 -> 95.8 at 8192 x 8192 and 94.8 -> 95.4 split (2048 x 32768); layer_norm 93.0 -> 94.1
      // at 65536 x 1024 and 93.3 -> 94.6 at 16384 x 4096. The layer norm of one warp with two
      // chunks lost (92.5 -> 91.6 at 131072 x 512), and loads them after the squares, as before.
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
  // end (each chunk's loads, squares, copies and stores) is left in it. On an H100 (% of copy, runs
  // of 20 calls / one call; the whole rows' figures from one build, each loop taken in alternate
  // runs):
  // - The split layer norm's parts (every part of a row that splits evenly), with the combine of
  //   the warps' means (combine_split_moments), bf16: 96.9 -> 97.8 at 4096 x 32768, 97.4 -> 98.0
  //   at 8192 x 16384 and 96.4 -> 98.0 at 2048 x 65536 (runs of 20).
  // - The whole-row layer norm of one or two chunks: bf16 87.7 -> 93.1 / 82.9 -> 87.6 at
  //   16384 x 2048, 95.0 -> 97.5 / 91.6 -> 94.0 at 131072 x 512, 84.4 -> 91.7 / 82.0 -> 88.9 at
  //   262144 x 256; fp16 89.4 -> 93.0 at 16384 x 2048; float32 96.0 -> 98.7 / 94.3 -> 96.8 at
  //   65536 x 1024. Its kernels of four chunks spilled with the copy (52 to 112 bytes for the
  //   16-bit kernels of 32 and 128 threads, 16 for 256) and keep the one loop.
  // - The whole-row rms_norm of one chunk: bf16 95.9 -> 97.9 / 92.7 -> 94.5 at 262144 x 256; of
  //   four, the same in runs of 20 and 0.1 to 0.4 ahead in one call (bf16 65536 x 1024, float32
  //   32768 x 2048). Its kernels of two chunks measured no faster (bf16 16384 x 2048:
  //   95.5 -> 95.5 / 90.0 -> 89.4; 131072 x 512: 98.1 -> 97.9) and keep the one loop, as does
  //   fused_add_rms_norm, the same within 0.2 at 7 shapes.
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
// (kBatchedLayer): on an H100 it measured 86.0% of copy against 67.0% with kU = 1 at
// 4096 x 32768, and 79.2% against 64.5% at 2048 x 49152. Elsewhere it measured slower: with
// room for two blocks per SM its registers leave one (66.1% against 94.1%, float32 layer norm at
// 8192 x 20480), and 16-bit rows, rms_norm and softmax lost 2 to 50 points.
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
// back to the pipeline. (rms_norm and fused_add_rms_norm measured no faster this way than
// streamed, see bench/RESULTS.md, so they keep norm_streamed.)
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
// Backward. With x_hat = (x - mean) * rstd (mean = 0 for rmsnorm) and g = dy * weight:
//   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))   (no mean(g) term for rmsnorm)
//   dweight = sum over rows of dy * x_hat, dbias = sum over rows of dy.
// Each unit (a warp or a block of the persistent grid) sums its rows' terms per column and
// writes them as its partial row; launch_reduce_partials adds the partial rows in order.

template <typename T>
struct NormBackwardArgs {
  const T* dy;
  int64_t dy_stride;
  const T* x;
  int64_t x_stride;
  const T* weight;
  const float* mean;  // layernorm
  const float* rstd;
  T* dx;
  int64_t dx_stride;
  float* partials;  // [accumulators][units][cols]
  int64_t units;
  int64_t rows;
  int64_t cols;
};

// Blocks per SM of the unsplit cached backward kernel's persistent grid. On an H100 (bf16,
// rms_norm_backward / layer_norm_backward at 32768 x 4096) 2 blocks measured 95.0% / 89.4% of copy,
// against 81.4% / 77.8% with all that fit (4 and 3 blocks of 128 threads).
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
    // Where the row's mean and rstd are asked for, and the next row's index taken, measured
    // (bf16, % of copy on an H100): the split kernels and the unsplit layer norm take the index
    // first and ask before the prefetch (split rms_norm_backward: 136 registers rather than
    // 162, 92.8% rather than 87.1% at 4096 x 32768; unsplit layer_norm_backward: 91.6% rather
    // than 88.4% at 65536 x 1024); the unsplit rms_norm_backward asks after it (94.8% rather
    // than 89.5% at 32768 x 4096, 91.2% rather than 85.4% at 65536 x 1024).
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
// thread of 256. On an H100 (bf16, % of copy, layer_norm_backward / rms_norm_backward; the
// second pass from L2):
//                     256 threads    512 threads   256 without the prefetch
//   512 x 131072      43.5 / 52.8    39.2 / 46.1   35.7 / 41.2
//   256 x 262144      30.3 / 34.3    38.7 / 44.8   23.4 / 38.4
// against 7.8 / 14.2 for the streamed kernel, which takes longer rows. Holding the part in
// registers took these to 56.1 / 67.2 (512 x 131072) and 49.3 / 59.3 (256 x 262144), and float32
// at 256 x 131072 from 59.3 / 65.6 to 80.9 / 84.0. Loading the next row into registers instead
// of asking L2 for it (before the cluster's reduction, or after it) measured slower: 36.7 to 47.3
// at the 16-bit shapes, or with the L2 request as well, within 3 points of the kernel kept. The
// kernel is bound by latency (ncu: 8 cycles between a warp's instructions, most waiting on
// loads); at 262144 columns one block per SM fits its shared memory, and 7 clusters of 16 such
// blocks fit the device, leaving 20 of its 132 SMs idle.
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
      // One chunk at a time, from L2: two (or eight in the first pass, below kLongBatch's four)
      // measured no faster, and the layer norm's 16-bit kernels spill with two.
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

/// Launches layer_norm_split_rows, two rows at once per cluster, where rows split into at most
/// kMaxSplit parts of its groups; *launched says whether it did.
template <typename T>
Status launch_layer_split_rows(const char* op, const NormArgs<T>& a, cudaStream_t stream,
                               bool* launched) {
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
  return launch_split(op, Follow::kDependent, kernel, static_cast<unsigned>(clusters), parts,
                      kThreads * kRows, stream, a);
}

template <Norm kNorm>
Status launch_forward(const char* op, const NormArgs<void>& untyped, bool aligned, DType dtype,
                      cudaStream_t stream) {
  return dispatch_float(op, dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    NormArgs<T> a{static_cast<const T*>(untyped.x),
                  untyped.x_stride,
                  static_cast<T*>(untyped.residual),
                  untyped.residual_stride,
                  static_cast<const T*>(untyped.weight),
                  static_cast<const T*>(untyped.bias),
                  static_cast<T*>(untyped.y),
                  untyped.y_stride,
                  untyped.mean,
                  untyped.rstd,
                  untyped.rows,
                  untyped.cols,
                  untyped.eps};
    const int config = aligned ? pick_cached(a.cols, V, kNormCachedCount) : -1;
    if (config >= 0) {
      return with_cached_shape<kNormCachedCount>(config, [&](auto shape) {
        using S = decltype(shape);
        constexpr int kRows = kRowsPerBlock<S::threads>;
        return launch_rows(
            op, Follow::kDependent, norm_cached<kNorm, T, S::threads, S::vecs, V, false>,
            grid_for((a.rows + kRows - 1) / kRows), kBlockThreads<S::threads>, 0, stream, 0, a);
      });
    }
    // Rows of more than 32 KiB (any row too long to be cached, in the layer norm) split over
    // clusters (row_exchange.cuh), before the pipelined layer norm. On an H100 the split layer norm
    // measured 94.1% of copy at 4096 x 32768 bf16, against 85.5% pipelined; in float32 97.1% at
    // 4096 x 32768 and 97.6% at 8192 x 16384, against 85.0% and 92.2% for the pipelined and
    // streamed kernels.
    const auto try_split = [&](bool* launched) -> Status {
      return launch_if_split<T, /*kWide=*/kNorm == Norm::kLayer>(
          op, a.rows, a.cols, launched, kNorm == Norm::kLayer ? kLayerRowsPerCluster : 1,
          [&](auto shape) {
            using S = decltype(shape);
            return norm_cached<kNorm, T, S::threads, S::vecs, V, true>;
          },
          stream, a);
    };
    // The layer norm splits every aligned row too long for its cached kernels: float32 rows of
    // up to kMaxSplit parts two at once per cluster (layer_norm_split_rows), others as
    // try_split does. On an H100 (% of copy, runs of 20 calls; before: the pipelined kernel, or
    // for float32 8192 x 16384 the split kernel of one row at a time):
    // clang-format off
    //   bf16 8192 x 16384    76.9 -> 94.8      float32 16384 x 8192    83.2 -> 99.3
    //   bf16 16384 x 12288   88.1 -> 95.6      float32 16384 x 6144    91.2 -> 98.8
    //   bf16 16384 x 10240   86.5 -> 96.5      float32 8192 x 16384    96.4 -> 97.4
    //   fp16 8192 x 16384    77.1 -> 94.4
    // clang-format on
    // Two 16-bit rows at once measured slower than rows in turn: 89.2 against 95.0 at bf16
    // 4096 x 32768, 91.0 against 94.8 at 8192 x 16384; four rows at once slower still.
    const bool long_row =
        kNorm == Norm::kLayer || a.cols * static_cast<int64_t>(sizeof(T)) > kSplitFromBytes;
    if (aligned && long_row) {
      bool launched = false;
      if constexpr (kNorm == Norm::kLayer && sizeof(T) == 4) {
        if (Status s = launch_layer_split_rows(op, a, stream, &launched); !s.ok() || launched)
          return s;
      }
      if (Status s = try_split(&launched); !s.ok() || launched) return s;
    }
    if (kNorm == Norm::kLayer && aligned) {
      bool launched = false;
      if (Status s = launch_if_pipelined(op, layer_norm_pipelined<T>, kPipeVecs, kPipeThreads, 1, 1,
                                         a.rows, a.cols, dtype, stream, &launched, a);
          !s.ok() || launched)
        return s;
    }
    auto kernel = aligned ? norm_streamed<kNorm, T, V, 1> : norm_streamed<kNorm, T, 1, 1>;
    StreamedLaunch launch;
    if (Status s = plan_streamed(op, reinterpret_cast<const void*>(kernel), 1, a.cols,
                                 aligned ? V : 1, dtype, &launch);
        !s.ok())
      return s;
    if constexpr (kBatchedLayer<kNorm, T>) {
      // The float32 layer norm whose cached row leaves room for one block per SM only: the same
      // launch, four chunks per thread at a time.
      DeviceLimits limits;
      if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
      if (aligned && 2 * launch.smem > static_cast<size_t>(limits.smem_optin)) {
        kernel = norm_streamed<kNorm, T, V, 4>;
        if (Status s = plan_streamed(op, reinterpret_cast<const void*>(kernel), 1, a.cols, V, dtype,
                                     &launch);
            !s.ok())
          return s;
      }
    }
    return launch_rows(op, Follow::kDependent, kernel, grid_for(a.rows), launch.threads,
                       launch.smem, stream, 0, a, launch.smem > 0);
  });
}

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
// all 3 that fit (168 registers). On an H100 (bf16, % of copy, one run), with 2.5 / 3 per SM:
//                    rms_norm_backward   layer_norm_backward
//   4096 x 32768       93.0 / 92.0          85.4 / 86.0
//   2048 x 65536       89.7 / 92.1          80.7 / 83.4
//   8192 x 16384       93.8 / 89.1          87.0 / 87.8
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

/// The launch of a backward pass: which kernel, its grid, and the workspace it needs.
template <bool kLayer>
Status plan_backward(const char* op, int64_t rows, int64_t cols, DType dtype, bool aligned,
                     ParamGradPlan* plan) {
  constexpr int K = kLayer ? 2 : 1;
  *plan = ParamGradPlan();
  if (rows == 0 || cols == 0) return Status();
  DeviceLimits limits;
  if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
  const int64_t sms = limits.sms;
  return dispatch_float(op, dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
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
      const void* kernel =
          aligned ? reinterpret_cast<const void*>(norm_backward_streamed<kLayer, T, V>)
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
  });
}

template <bool kLayer>
Status workspace_size(const char* op, int64_t rows, int64_t cols, DType dtype, size_t* bytes) {
  if (bytes == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": bytes must not be null");
  }
  if (Status s = check_shape(op, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(op, "dtype", dtype); !s.ok()) return s;
  ParamGradPlan vector_plan, scalar_plan;
  if (Status s = plan_backward<kLayer>(op, rows, cols, dtype, true, &vector_plan); !s.ok())
    return s;
  if (Status s = plan_backward<kLayer>(op, rows, cols, dtype, false, &scalar_plan); !s.ok())
    return s;
  *bytes = std::max(vector_plan.workspace, scalar_plan.workspace);
  return Status();
}

template <bool kLayer>
Status launch_backward(const char* op, const NormBackwardArgs<void>& untyped, void* dweight,
                       void* dbias, void* workspace, size_t workspace_bytes, bool aligned,
                       DType dtype, cudaStream_t stream) {
  constexpr int K = kLayer ? 2 : 1;
  ParamGradPlan plan;
  if (Status s = plan_backward<kLayer>(op, untyped.rows, untyped.cols, dtype, aligned, &plan);
      !s.ok())
    return s;
  if (workspace_bytes < plan.workspace) {
    return Status(StatusCode::kWorkspaceTooSmall,
                  std::string(op) + ": workspace_bytes " + std::to_string(workspace_bytes) +
                      " is less than the " + std::to_string(plan.workspace) +
                      " bytes this problem needs (see " + op + "_workspace_size)");
  }
  if (plan.workspace > 0 && (workspace == nullptr || !aligned16(workspace))) {
    return Status(workspace == nullptr ? StatusCode::kInvalidArgument : StatusCode::kMisaligned,
                  std::string(op) + ": workspace must be a 16-byte aligned device pointer");
  }
  float* partials = static_cast<float*>(workspace);
  Status status = dispatch_float(op, dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
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
  });
  if (!status.ok()) return status;
  void* outputs[2] = {dweight, dbias};
  return launch_reduce_partials(op, partials, plan.units, untyped.cols, outputs, K, dtype, stream);
}

}  // namespace

const void* norm_family_kernel() {
  return reinterpret_cast<const void*>(norm_streamed<Norm::kRms, float, kVec16<float>, 1>);
}
}  // namespace detail::rowwise

using namespace detail::rowwise;  // NOLINT(google-build-using-namespace): this file's kernels
using detail::check_float_dtype;
using detail::check_pointer;

Status layer_norm(ConstMatrixRef x, const void* d_weight, const void* d_bias, MatrixRef y,
                  float* d_mean, float* d_rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                  cudaStream_t stream) {
  constexpr const char* kOp = "layer_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  const int64_t stats = cols > 0 ? rows : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "bias", d_bias, work, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (d_mean != nullptr) {
    if (Status s = check_pointer(kOp, "mean", d_mean, stats, DType::kFloat32); !s.ok()) return s;
  }
  if (d_rstd != nullptr) {
    if (Status s = check_pointer(kOp, "rstd", d_rstd, stats, DType::kFloat32); !s.ok()) return s;
  }
  if (rows == 0 || cols == 0) return Status();
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(y.data, y.row_stride, dtype) && aligned16(d_weight) &&
                       aligned16(d_bias);
  const NormArgs<void> a{x.data,       x.row_stride, nullptr, 0,    d_weight, d_bias, y.data,
                         y.row_stride, d_mean,       d_rstd,  rows, cols,     eps};
  return launch_forward<Norm::kLayer>(kOp, a, aligned, dtype, stream);
}

Status rms_norm(ConstMatrixRef x, const void* d_weight, MatrixRef y, float* d_rstd, int64_t rows,
                int64_t cols, float eps, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "rms_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (d_rstd != nullptr) {
    if (Status s = check_pointer(kOp, "rstd", d_rstd, cols > 0 ? rows : 0, DType::kFloat32);
        !s.ok())
      return s;
  }
  if (rows == 0 || cols == 0) return Status();
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(y.data, y.row_stride, dtype) && aligned16(d_weight);
  const NormArgs<void> a{x.data,       x.row_stride, nullptr, 0,    d_weight, nullptr, y.data,
                         y.row_stride, nullptr,      d_rstd,  rows, cols,     eps};
  return launch_forward<Norm::kRms>(kOp, a, aligned, dtype, stream);
}

Status fused_add_rms_norm(MatrixRef x, MatrixRef residual, const void* d_weight, int64_t rows,
                          int64_t cols, float eps, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "fused_add_rms_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s =
          check_matrix(kOp, "residual", residual.data, residual.row_stride, rows, cols, dtype);
      !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (rows == 0 || cols == 0) return Status();
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(residual.data, residual.row_stride, dtype) &&
                       aligned16(d_weight);
  const NormArgs<void> a{x.data,   x.row_stride, residual.data, residual.row_stride,
                         d_weight, nullptr,      x.data,        x.row_stride,
                         nullptr,  nullptr,      rows,          cols,
                         eps};
  return launch_forward<Norm::kAddRms>(kOp, a, aligned, dtype, stream);
}

Status layer_norm_backward_workspace_size(int64_t rows, int64_t cols, DType dtype, size_t* bytes) {
  return workspace_size<true>("layer_norm_backward_workspace_size", rows, cols, dtype, bytes);
}

Status rms_norm_backward_workspace_size(int64_t rows, int64_t cols, DType dtype, size_t* bytes) {
  return workspace_size<false>("rms_norm_backward_workspace_size", rows, cols, dtype, bytes);
}

namespace {

Status check_backward_common(const char* op, ConstMatrixRef dy, ConstMatrixRef x,
                             const void* d_weight, const float* d_rstd, MatrixRef dx,
                             void* d_dweight, int64_t rows, int64_t cols, DType dtype) {
  if (Status s = check_shape(op, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(op, "dtype", dtype); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(op, "dy", dy.data, dy.row_stride, rows, cols, dtype); !s.ok())
    return s;
  if (Status s = check_matrix(op, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(op, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_pointer(op, "rstd", d_rstd, cols > 0 ? rows : 0, DType::kFloat32); !s.ok())
    return s;
  if (Status s = check_matrix(op, "dx", dx.data, dx.row_stride, rows, cols, dtype); !s.ok())
    return s;
  return check_pointer(op, "dweight", d_dweight, cols, dtype);
}

bool backward_aligned(ConstMatrixRef dy, ConstMatrixRef x, const void* d_weight, MatrixRef dx,
                      DType dtype) {
  return rows_aligned16(dy.data, dy.row_stride, dtype) &&
         rows_aligned16(x.data, x.row_stride, dtype) &&
         rows_aligned16(dx.data, dx.row_stride, dtype) && aligned16(d_weight);
}

}  // namespace

Status layer_norm_backward(ConstMatrixRef dy, ConstMatrixRef x, const void* d_weight,
                           const float* d_mean, const float* d_rstd, MatrixRef dx, void* d_dweight,
                           void* d_dbias, void* d_workspace, size_t workspace_bytes, int64_t rows,
                           int64_t cols, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "layer_norm_backward";
  if (Status s =
          check_backward_common(kOp, dy, x, d_weight, d_rstd, dx, d_dweight, rows, cols, dtype);
      !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "mean", d_mean, cols > 0 ? rows : 0, DType::kFloat32); !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "dbias", d_dbias, cols, dtype); !s.ok()) return s;
  if (cols == 0) return Status();
  const NormBackwardArgs<void> a{dy.data, dy.row_stride, x.data,  x.row_stride,  d_weight,
                                 d_mean,  d_rstd,        dx.data, dx.row_stride, nullptr,
                                 0,       rows,          cols};
  return launch_backward<true>(kOp, a, d_dweight, d_dbias, d_workspace, workspace_bytes,
                               backward_aligned(dy, x, d_weight, dx, dtype), dtype, stream);
}

Status rms_norm_backward(ConstMatrixRef dy, ConstMatrixRef x, const void* d_weight,
                         const float* d_rstd, MatrixRef dx, void* d_dweight, void* d_workspace,
                         size_t workspace_bytes, int64_t rows, int64_t cols, DType dtype,
                         cudaStream_t stream) {
  constexpr const char* kOp = "rms_norm_backward";
  if (Status s =
          check_backward_common(kOp, dy, x, d_weight, d_rstd, dx, d_dweight, rows, cols, dtype);
      !s.ok())
    return s;
  if (cols == 0) return Status();
  const NormBackwardArgs<void> a{dy.data, dy.row_stride, x.data,  x.row_stride,  d_weight,
                                 nullptr, d_rstd,        dx.data, dx.row_stride, nullptr,
                                 0,       rows,          cols};
  return launch_backward<false>(kOp, a, d_dweight, nullptr, d_workspace, workspace_bytes,
                                backward_aligned(dy, x, d_weight, dx, dtype), dtype, stream);
}

}  // namespace cudaops
