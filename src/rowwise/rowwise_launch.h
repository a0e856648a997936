#pragma once

// Host side shared by the row-wise ops: argument checks, the choice between the cached and the
// streamed kernels, launch sizes and the workspace plan of the backward passes.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/validate.h"
#include "cudaops/dtype.h"
#include "cudaops/rowwise.h"
#include "cudaops/status.h"

namespace cudaops::detail::rowwise {

/// rows >= 0 and cols >= 0.
Status check_shape(const char* op, int64_t rows, int64_t cols);

/// The matrix check shared with the other ops (core/validate.h).
using detail::check_matrix;

/// eps > 0 and finite.
Status check_eps(const char* op, float eps);

/// True when the rows of the matrix all start on a 16-byte boundary.
inline bool rows_aligned16(const void* data, int64_t row_stride, DType dtype) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && row_stride % (16 / dtype_size(dtype)) == 0;
}
inline bool aligned16(const void* data) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0;
}

/// Elements in one 16-byte vector of dtype.
inline int vec_elems(DType dtype) {
  return static_cast<int>(16 / dtype_size(dtype));
}

/// The cached configurations, shortest rows first: kThreads threads per row, kVecs vectors each.
struct CachedConfig {
  int threads;
  int vecs;
};
inline constexpr CachedConfig kCachedLadder[] = {{32, 1},  {32, 2},  {32, 4},  {128, 2},
                                                 {128, 4}, {256, 4}, {512, 4}, {1024, 4}};
inline constexpr int kCachedCount = sizeof(kCachedLadder) / sizeof(kCachedLadder[0]);

/// The shape of the norms' backward kernel whose blocks share a row in clusters.
inline constexpr CachedConfig kBackwardSplitConfig = {128, 4};

/// Index into kCachedLadder of the smallest configuration holding cols elements of a row with
/// `vec` elements per vector, considering the first `limit` entries; -1 when none does.
inline int pick_cached(int64_t cols, int vec, int limit = kCachedCount) {
  for (int i = 0; i < limit; ++i) {
    if (static_cast<int64_t>(kCachedLadder[i].threads) * kCachedLadder[i].vecs * vec >= cols)
      return i;
  }
  return -1;
}

/// The rungs of the row-wise strategy ladder (row_ladder.cuh): rows a block holds in registers
/// (cached), rows split over the blocks of a cluster (split; split_rows: several rows per
/// cluster at once), rows brought in by a pipeline of shared-memory stages (pipelined), rows
/// walked in chunks (streamed), and for the norms' backward passes rows too long for the split
/// kernel's blocks (long).
enum class RowPath { kNone, kCached, kSplit, kSplitRows, kPipelined, kStreamed, kLong };

/// "cached", "split", "split_rows", "pipelined", "streamed", "long" or "none".
const char* row_path_name(RowPath path);

/// The rung a row-wise op takes for a shape, and its launch.
struct RowPlan {
  RowPath path = RowPath::kNone;
  int block_threads = 0;  ///< threads per block
  int row_threads = 0;    ///< threads of a block that share a row (cached and split kernels)
  int vecs = 0;           ///< 16-byte chunks per thread (cached and split kernels)
  int parts = 1;          ///< blocks that share a row (split and long kernels)
  unsigned blocks = 0;    ///< blocks launched
  size_t smem = 0;        ///< dynamic shared memory per block
};

/// softmax's and softmax_backward's ladders (softmax_api.cu), their arguments checked, rows and
/// cols > 0: launch, or with `dry` not null only say in *dry what would be launched.
Status softmax_ladder(const char* op, ConstMatrixRef x, MatrixRef y, int64_t rows, int64_t cols,
                      DType dtype, bool aligned, cudaStream_t stream, RowPlan* dry);
Status softmax_backward_ladder(const char* op, ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx,
                               int64_t rows, int64_t cols, DType dtype, bool aligned,
                               cudaStream_t stream, RowPlan* dry);

/// Blocks of a grid-stride launch over `groups` row groups.
inline unsigned grid_for(int64_t groups) {
  constexpr int64_t kMaxGrid = int64_t{1} << 30;
  return static_cast<unsigned>(groups < kMaxGrid ? (groups > 0 ? groups : 1) : kMaxGrid);
}

/// What the row-wise launches need to know of the current device.
struct DeviceLimits {
  int sms = 0;         ///< multiprocessors
  int smem_optin = 0;  ///< shared memory a block may opt into
};

/// The current device's limits, or a status when there is no usable device.
Status current_device_limits(const char* op, DeviceLimits* limits);

/// Dynamic shared memory (bytes, unused by the kernel) that holds `kernel`, launched in blocks of
/// `threads`, to at most `blocks` resident blocks per SM of the current device, where such a cap
/// was measured to pay: compute capability 9.x. 0 elsewhere, and where the kernel's registers
/// already hold it to fewer than `blocks`. Computed once per kernel and device.
Status occupancy_cap_smem(const char* op, const void* kernel, int threads, int blocks,
                          size_t* smem);

/// The launch of a streamed kernel over rows of cols elements in chunks of n.
struct StreamedLaunch {
  int threads = 0;  ///< about four chunks per thread, a multiple of 32 from 64 to 1024
  size_t smem = 0;  ///< dynamic shared memory; 0 when the arrays do not fit
};

/// Sizes a streamed launch whose kernel keeps `arrays` rows of cols elements of dtype in dynamic
/// shared memory (each row padded to 16 bytes) when they fit the device, and sets the kernel's
/// shared-memory limit to match. Without room, smem is 0 and the kernel re-reads global memory.
Status plan_streamed(const char* op, const void* kernel, int arrays, int64_t cols, int n,
                     DType dtype, StreamedLaunch* launch);

/// The most blocks that share a row (a portable thread-block cluster size).
inline constexpr int kMaxSplit = 8;
/// The most blocks that share a row where the device allows clusters larger than portable ones
/// (an H100 allows 16).
inline constexpr int kMaxNonPortableSplit = 16;

/// The most blocks of a cluster the split kernels use: kMaxNonPortableSplit, or fewer where the
/// environment variable CUDAOPS_MAX_CLUSTER_SIZE says so (read once; 8 keeps to portable
/// cluster sizes, 0 or 1 splits no row).
int max_cluster_size();

/// Blocks per row when rows of cols elements are split over a cluster of blocks of `kernel`
/// (a split cached kernel, part_cols columns per block), or 0 when they are not: a row that needs
/// more than max_parts blocks (or max_cluster_size()), a device older than sm_90, or a kernel image
/// built for an older architecture (which cannot use clusters). More than kMaxSplit parts (at most
/// kMaxNonPortableSplit) allow the kernel non-portable cluster sizes; the caller then checks
/// that such clusters fit (cudaOccupancyMaxActiveClusters).
Status split_parts(const char* op, const void* kernel, int64_t cols, int64_t part_cols, int* parts,
                   int max_parts = kMaxSplit);

// ---------------------------------------------------------------------------------------------
// The pipelined kernels (row_pipeline.cuh).

/// The most rows in flight per block.
inline constexpr int kMaxStages = 4;
/// layer_norm's pipelined blocks: up to 1024 threads of 4 16-byte vectors each (32768 16-bit or
/// 16384 float32 columns).
inline constexpr int kPipeThreads = 1024;
inline constexpr int kPipeVecs = 4;
/// softmax's: two blocks per SM of 512 threads of 8 vectors, which take each exponential twice
/// rather than hold it (64 registers). While one block waits at a barrier of its reductions, the
/// other computes (measured against one block of 1024 threads: docs/tuning/rowwise.md).
inline constexpr int kPipeSoftmaxThreads = 512;
inline constexpr int kPipeSoftmaxVecs = 8;
inline constexpr int kPipeSoftmaxBlocks = 2;
/// softmax_backward's: 512 threads of 8 (with two arrays, 1024 threads spill at 64 registers).
inline constexpr int kPipeBackwardThreads = 512;
inline constexpr int kPipeBackwardVecs = 8;

/// The launch shape of a pipelined kernel, computed on the host (plan_pipelined).
struct PipeParams {
  int stages = 0;  ///< rows in flight per block (>= 1); each stage holds a row of every array
};

/// How a pipelined kernel is launched; blocks == 0 when the rows are not pipelined.
struct PipeLaunch {
  PipeParams params;
  int threads = 0;      ///< per block
  size_t smem = 0;      ///< dynamic shared memory per block
  unsigned blocks = 0;  ///< persistent grid
};

/// Plans a pipelined launch of `kernel` (at most max_threads threads of `vecs` 16-byte vectors
/// each) for rows x cols of dtype with `arrays` input arrays per stage, or leaves blocks at 0:
/// a device older than sm_90, a kernel not built for it, cols not a whole number of 16-byte
/// vectors, a row longer than the block holds, or no room for one stage. The stages of
/// `blocks_per_sm` blocks share an SM's shared memory. Sets the kernel's shared-memory limit to
/// match.
Status plan_pipelined(const char* op, const void* kernel, int vecs, int max_threads, int arrays,
                      int blocks_per_sm, int64_t rows, int64_t cols, DType dtype,
                      PipeLaunch* launch);

// ---------------------------------------------------------------------------------------------
// The backward passes of the norms: each of `units` row units (a warp or a block) owns a
// partial row of `accumulators` x cols float32 sums in the workspace, written once; a second
// kernel adds the units' partial rows column by column in a fixed order.

struct ParamGradPlan {
  bool cached = false;   // the cached kernel (else the streamed one)
  int config = -1;       // kCachedLadder index when cached
  int split = 0;         // else blocks per row of the split cached kernel, when > 0
  int part_cols = 0;     // else, when > 0, columns per block of the long-row kernel (split blocks)
  int threads = 0;       // block size of the streamed or split kernel
  unsigned blocks = 0;   // persistent grid
  int64_t units = 0;     // partial rows per accumulator
  size_t smem = 0;       // dynamic shared memory of the streamed or long-row kernel
  size_t workspace = 0;  // bytes
};

/// How many entries of kCachedLadder each op uses; longer rows are streamed. The limits keep
/// every cached kernel free of register spills (the norms hold weights and accumulators too).
inline constexpr int kSoftmaxCachedCount = 7;
inline constexpr int kSoftmaxBackwardCachedCount = 7;
inline constexpr int kNormCachedCount = 6;
inline constexpr int kBackwardCachedCount = 5;

/// Sums partials[u][c] over u < units (fixed order) into out[c] for each of `accumulators`
/// consecutive [units][cols] arrays, out being the accumulators' output pointers. units == 0
/// writes zeros.
Status launch_reduce_partials(const char* op, const float* partials, int64_t units, int64_t cols,
                              void* const* outputs, int accumulators, DType dtype,
                              cudaStream_t stream);

}  // namespace cudaops::detail::rowwise
