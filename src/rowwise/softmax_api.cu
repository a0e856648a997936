// softmax and softmax_backward along the last axis.
#include <cstring>
#include <type_traits>

#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/launch.h"
#include "core/validate.h"
#include "cudaops/rowwise.h"
#include "rowwise/row_common.cuh"
#include "rowwise/row_ladder.cuh"
#include "rowwise/rowwise_launch.h"

namespace cudaops {
namespace detail::rowwise {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();

// exp(v - max), with exp(-inf - max) = 0 even when max is -inf (a row of -inf then sums to 0
// and its outputs are 0 / 0 = NaN, as in the reference).
__device__ __forceinline__ float exp_shifted(float v, float max) {
  return v == kNegInf ? 0.0f : __expf(v - max);
}

// The held row's exponentials are taken as 2^((x - max) * log2(e) + 24) = exp(x - max) * 2^24:
// the approximate 2^x that flushes results below 2^-126 to zero needs no instructions of its own
// to handle them (__expf spends three per element on it), and the shift keeps every result
// that matters normal. The 2^24 is common to a row's terms and cancels in their quotient; the
// products of the last step (exp * 2^24 times 1 / sum, at most 2^-24) come out as float32
// subnormals where they are that small.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kExpShift = 24.0f;

__device__ __forceinline__ float exp2_flushed(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// exp(x - max) * 2^24.
__device__ __forceinline__ float exp_scaled(float x, float max) {
  return exp2_flushed(fmaf(x - max, kLog2e, kExpShift));
}

// The largest element of a held row's chunks (fill included), two 16-bit elements at a time
// where the architecture has the paired instruction. NaN elements are passed over, as fmaxf
// does (they reach the outputs through their exponentials).
template <typename T, int kVecs>
__device__ __forceinline__ float chunks_max(const uint4 (&raw)[kVecs]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (sizeof(T) == 2) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const auto pair = [](uint32_t word) {
      T2 p;
      memcpy(&p, &word, sizeof(p));
      return p;
    };
    T2 m = pair(raw[0].x);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (j > 0) m = __hmax2(m, pair(raw[j].x));
      m = __hmax2(m, pair(raw[j].y));
      m = __hmax2(m, pair(raw[j].z));
      m = __hmax2(m, pair(raw[j].w));
    }
    return fmaxf(__low2float(m), __high2float(m));
  }
#endif
  float m = kNegInf;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < kVec16<T>; ++e)
      m = fmaxf(m, word_element<T>(raw[j], e));
  }
  return m;
}

// The softmax of a row held in registers (a Tile: chunks j < kVecs of N elements) into v, with
// its two row-wide reductions taken by `reduce` (RowReducer). A -inf entry (or fill) of a row
// with a finite max gives exp(-inf) = 0, and a row whose max is -inf gives NaN outputs
// (-inf - -inf), as the reference does (0 / 0).
template <typename T, int kVecs, int N, class TileT, class Reduce>
__device__ __forceinline__ void softmax_of_tile(const TileT& tile, float (&v)[kVecs][N],
                                                Reduce& reduce) {
  float max[1] = {chunks_max<T>(tile.raw)};
  reduce(max, MaxOp{});
  float sum[1] = {0.0f};
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      v[j][e] = exp_scaled(tile.get(j, e), max[0]);
      sum[0] += v[j][e];
    }
  }
  reduce(sum, SumOp{});
  const float inv = 1.0f / sum[0];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[j][e] *= inv;
  }
}

// kSplit: the blocks of a cluster share each row (row_walk), their reductions meeting through
// RowExchange; otherwise kRowsPerBlock rows per block.
template <typename T, int kThreads, int kVecs, int N, bool kSplit>
__global__ void __launch_bounds__(kBlockThreads<kThreads>)
    softmax_cached(const T* x, int64_t x_stride, T* y, int64_t y_stride, int64_t rows, int cols) {
  enter_rows_kernel();
  __shared__ float scratch[kWarp];
  __shared__ typename RowReducer<kThreads, kSplit, 2>::Exchange exchange;
  using TileT = Tile<T, kThreads, kVecs, N>;
  const int t = threadIdx.x % kThreads;
  const RowWalk walk = row_walk<kThreads, kSplit>(cols, TileT::kCols);
  RowReducer<kThreads, kSplit, 2> reduce{scratch, &exchange, walk.rank, walk.parts};
  if constexpr (kSplit) exchange.begin(walk.parts);
  const auto walk_rows = [&](auto part_cols) {
    const int pc = part_cols;
    for (int64_t row = walk.first; row < rows; row += walk.step, reduce.next_row()) {
      TileT tile;
      tile.load(x + row * x_stride + walk.offset, pc, t, from_float<T>(kNegInf));
      float v[kVecs][N];
      softmax_of_tile<T>(tile, v, reduce);
      store_tile<T, kThreads, kVecs, N>(y + row * y_stride + walk.offset, pc, t, v);
    }
  };
  // Whole rows that fill the tile take a copy of the loop in which the row's columns are a
  // constant (with_part_cols), with no check against the row's end in its loads and stores: it
  // gains on short rows (docs/tuning/rowwise.md). Split parts keep the one loop.
  with_part_cols<TileT::kCols, !kSplit>(walk.cols, walk_rows);
}

// `cached`: the row is kept in dynamic shared memory (cols elements) between the passes.
template <typename T, int N>
__global__ void __launch_bounds__(1024)
    softmax_streamed(const T* x, int64_t x_stride, T* y, int64_t y_stride, int64_t rows,
                     int64_t cols, bool cached) {
  enter_rows_kernel();
  extern __shared__ float4 dynamic_smem[];
  T* cache = reinterpret_cast<T*>(dynamic_smem);
  __shared__ float scratch[kWarp];
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * x_stride;
    // Pass 1: this thread's running max and sum of exp(v - max), then merged across the block.
    float max = kNegInf;
    float sum = 0.0f;
    for (int64_t c = threadIdx.x * static_cast<int64_t>(N); c < cols; c += step) {
      float v[N];
      load_chunk<T, N>(in, c, cols, v, kNegInf);
      if (cached) store_chunk<T, N>(cache, c, cols, v);
      float chunk_max = v[0];
#pragma unroll
      for (int e = 1; e < N; ++e)
        chunk_max = fmaxf(chunk_max, v[e]);
      const float new_max = fmaxf(max, chunk_max);
      sum = max == new_max ? sum : sum * __expf(max - new_max);
#pragma unroll
      for (int e = 0; e < N; ++e)
        sum += exp_shifted(v[e], new_max);
      max = new_max;
    }
    float row_max[1] = {max};
    row_allreduce<kWholeBlock>(row_max, scratch, MaxOp{});
    float row_sum[1] = {max == row_max[0] ? sum : sum * __expf(max - row_max[0])};
    row_allreduce<kWholeBlock>(row_sum, scratch, SumOp{});
    const float inv = 1.0f / row_sum[0];
    // Pass 2: the outputs.
    T* out = y + row * y_stride;
    for (int64_t c = threadIdx.x * static_cast<int64_t>(N); c < cols; c += step) {
      float v[N];
      reload_chunk<T, N>(in, cache, cached, c, cols, v, kNegInf);
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[e] = exp_shifted(v[e], row_max[0]) * inv;
      store_chunk<T, N>(out, c, cols, v);
    }
  }
}

// Rows brought in by the pipeline (row_pipeline.cuh), then held in registers as by
// softmax_cached; with kPipeSoftmaxBlocks blocks per SM, each exponential is taken twice (for the
// sum, then for the output) rather than held. Each of the block's reductions takes one block
// barrier (alternating scratch), and the first one also tells thread 0 that every thread has
// its row out of the stage, which then goes back to the pipeline.
template <typename T>
__global__ void __launch_bounds__(kPipeSoftmaxThreads, kPipeSoftmaxBlocks)
    softmax_pipelined(const T* x, int64_t x_stride, T* y, int64_t y_stride, int64_t rows, int cols,
                      PipeParams params) {
  enter_rows_kernel();
  constexpr int N = kVec16<T>;
  constexpr int kVecs = kPipeSoftmaxVecs;
  extern __shared__ float4 dynamic_smem[];
  __shared__ uint64_t bars[kMaxStages];
  __shared__ float scratch[kAlternatingScratch<1>];
  RowPipeline<T, 1> pipe(reinterpret_cast<T*>(dynamic_smem), bars, params, {{x}, {x_stride}}, cols,
                         rows);
  pipe.start();
  int i = 0;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, ++i) {
    StagedTile<T, kVecs> tile;
    pipe.wait(i);
    tile.load(pipe.stage(i, 0), cols, from_float<T>(kNegInf));
    float max[1] = {chunks_max<T>(tile.raw)};
    row_allreduce_alternating(max, scratch, parity, MaxOp{});
    parity ^= 1;
    pipe.release_synced(i, row);
    tile.pin();  // the floats of one pass are not kept for the next
    float sum[1] = {0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        sum[0] += exp_scaled(tile.get(j, e), max[0]);
    }
    row_allreduce_alternating(sum, scratch, parity, SumOp{});
    parity ^= 1;
    tile.pin();
    const float inv = 1.0f / sum[0];
    T* out = y + row * y_stride;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      float v[N];
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[e] = exp_scaled(tile.get(j, e), max[0]) * inv;
      const int c = StagedTile<T, kVecs>::col(j);
      store_floats<T>(out + c, c < cols, v);
    }
  }
}

// kSplit: the blocks of a cluster share each row (row_walk), their reductions meeting through
// RowExchange, as in softmax_cached; otherwise kRowsPerBlock rows per block.
template <typename T, int kThreads, int kVecs, int N, bool kSplit>
__global__ void __launch_bounds__(kBlockThreads<kThreads>)
    softmax_backward_cached(const T* y, int64_t y_stride, const T* dy, int64_t dy_stride, T* dx,
                            int64_t dx_stride, int64_t rows, int cols) {
  enter_rows_kernel();
  __shared__ float scratch[kWarp];
  __shared__ typename RowReducer<kThreads, kSplit, 1>::Exchange exchange;
  using TileT = Tile<T, kThreads, kVecs, N>;
  const int t = threadIdx.x % kThreads;
  const RowWalk walk = row_walk<kThreads, kSplit>(cols, TileT::kCols);
  RowReducer<kThreads, kSplit, 1> reduce{scratch, &exchange, walk.rank, walk.parts};
  if constexpr (kSplit) exchange.begin(walk.parts);
  const T zero = from_float<T>(0.0f);
  for (int64_t row = walk.first; row < rows; row += walk.step, reduce.next_row()) {
    TileT ty, tdy;
    ty.load(y + row * y_stride + walk.offset, walk.cols, t, zero);
    tdy.load(dy + row * dy_stride + walk.offset, walk.cols, t, zero);
    float dot[1] = {0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        dot[0] = fmaf(ty.get(j, e), tdy.get(j, e), dot[0]);
    }
    reduce(dot, SumOp{});
    float v[kVecs][N];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[j][e] = ty.get(j, e) * (tdy.get(j, e) - dot[0]);
    }
    store_tile<T, kThreads, kVecs, N>(dx + row * dx_stride + walk.offset, walk.cols, t, v);
  }
}

// `cached`: y and dy are kept in dynamic shared memory (2 x cols elements) between the passes.
template <typename T, int N>
__global__ void __launch_bounds__(1024)
    softmax_backward_streamed(const T* y, int64_t y_stride, const T* dy, int64_t dy_stride, T* dx,
                              int64_t dx_stride, int64_t rows, int64_t cols, bool cached) {
  enter_rows_kernel();
  extern __shared__ float4 dynamic_smem[];
  T* cache_y = reinterpret_cast<T*>(dynamic_smem);
  T* cache_dy = cache_y + padded_cols(cols);
  __shared__ float scratch[kWarp];
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * y_stride;
    const T* dyr = dy + row * dy_stride;
    float dot[1] = {0.0f};
    for (int64_t c = threadIdx.x * static_cast<int64_t>(N); c < cols; c += step) {
      float a[N], b[N];
      load_chunk<T, N>(yr, c, cols, a, 0.0f);
      load_chunk<T, N>(dyr, c, cols, b, 0.0f);
      if (cached) {
        store_chunk<T, N>(cache_y, c, cols, a);
        store_chunk<T, N>(cache_dy, c, cols, b);
      }
#pragma unroll
      for (int e = 0; e < N; ++e)
        dot[0] = fmaf(a[e], b[e], dot[0]);
    }
    row_allreduce<kWholeBlock>(dot, scratch, SumOp{});
    T* out = dx + row * dx_stride;
    for (int64_t c = threadIdx.x * static_cast<int64_t>(N); c < cols; c += step) {
      float a[N], b[N];
      reload_chunk<T, N>(yr, cache_y, cached, c, cols, a, 0.0f);
      reload_chunk<T, N>(dyr, cache_dy, cached, c, cols, b, 0.0f);
#pragma unroll
      for (int e = 0; e < N; ++e)
        a[e] = a[e] * (b[e] - dot[0]);
      store_chunk<T, N>(out, c, cols, a);
    }
  }
}

// The pipelined softmax_backward: y and dy per stage.
template <typename T>
__global__ void __launch_bounds__(kPipeBackwardThreads)
    softmax_backward_pipelined(const T* y, int64_t y_stride, const T* dy, int64_t dy_stride, T* dx,
                               int64_t dx_stride, int64_t rows, int cols, PipeParams params) {
  enter_rows_kernel();
  constexpr int N = kVec16<T>;
  constexpr int kVecs = kPipeBackwardVecs;
  extern __shared__ float4 dynamic_smem[];
  __shared__ uint64_t bars[kMaxStages];
  __shared__ float scratch[kWarp];
  RowPipeline<T, 2> pipe(reinterpret_cast<T*>(dynamic_smem), bars, params,
                         {{y, dy}, {y_stride, dy_stride}}, cols, rows);
  pipe.start();
  const T zero = from_float<T>(0.0f);
  int i = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, ++i) {
    StagedTile<T, kVecs> ty, tdy;
    pipe.wait(i);
    ty.load(pipe.stage(i, 0), cols, zero);
    tdy.load(pipe.stage(i, 1), cols, zero);
    pipe.release(i, row);
    float dot[1] = {0.0f};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e)
        dot[0] = fmaf(ty.get(j, e), tdy.get(j, e), dot[0]);
    }
    row_allreduce<kWholeBlock>(dot, scratch, SumOp{});
    ty.pin();
    tdy.pin();
    T* out = dx + row * dx_stride;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      float v[N];
#pragma unroll
      for (int e = 0; e < N; ++e)
        v[e] = ty.get(j, e) * (tdy.get(j, e) - dot[0]);
      const int c = StagedTile<T, kVecs>::col(j);
      store_floats<T>(out + c, c < cols, v);
    }
  }
}

}  // namespace

// Blocks per SM the unsplit softmax of one warp per row is held to (occupancy_cap_smem): about
// 48 KiB of rows in flight per SM, 6 blocks of four rows of four chunks, 12 of two chunks (the
// sweep over the caps is in docs/tuning/rowwise.md).
// With four chunks, fewer rows in flight paid; with two, the same 12 blocks paid with the shared
// memory taken (an SM then keeps less of its 256 KiB as L1). One chunk takes no cap.
template <int kThreads, int kVecs>
inline constexpr int kSoftmaxCapBlocks = (kThreads == kWarp && kVecs >= 2) ? 6 * 4 / kVecs : 0;

namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(softmax_streamed<float, kVec16<float>>);
}
CUDAOPS_KERNEL_FAMILY("softmax", "softmax_api.cu", family_kernel);

// The ladder's traits of softmax (row_ladder.cuh).
template <typename T>
struct SoftmaxRows : RowOpDefaults {
  using Type = T;
  using StreamedKernel = void (*)(const T*, int64_t, T*, int64_t, int64_t, int64_t, bool);
  static constexpr int kCachedCount = kSoftmaxCachedCount;
  template <int kThreads, int kVecs, bool kSplit>
  static constexpr auto cached() {
    return softmax_cached<T, kThreads, kVecs, kVec16<T>, kSplit>;
  }
  template <int kThreads, int kVecs>
  static constexpr int cap_blocks() {
    return kSoftmaxCapBlocks<kThreads, kVecs>;
  }
  static constexpr bool kPipelined = true;
  static constexpr PipeShape kPipe{kPipeSoftmaxVecs, kPipeSoftmaxThreads, 1, kPipeSoftmaxBlocks};
  static constexpr auto pipelined() { return softmax_pipelined<T>; }

  const T* x;
  int64_t x_stride;
  T* y;
  int64_t y_stride;
  int64_t rows;
  int64_t cols;

  Status streamed(const char* op, bool aligned, StreamedKernel* kernel,
                  StreamedLaunch* launch) const {
    *kernel = aligned ? softmax_streamed<T, kVec16<T>> : softmax_streamed<T, 1>;
    return plan_streamed_rung<T>(op, *kernel, 1, cols, aligned, launch);
  }
  auto row_args() const {
    return std::make_tuple(x, x_stride, y, y_stride, rows, static_cast<int>(cols));
  }
  auto streamed_args() const { return std::make_tuple(x, x_stride, y, y_stride, rows, cols); }
};

// The ladder's traits of softmax_backward.
template <typename T>
struct SoftmaxBackwardRows : RowOpDefaults {
  using Type = T;
  using StreamedKernel = void (*)(const T*, int64_t, const T*, int64_t, T*, int64_t, int64_t,
                                  int64_t, bool);
  static constexpr int kCachedCount = kSoftmaxBackwardCachedCount;
  template <int kThreads, int kVecs, bool kSplit>
  static constexpr auto cached() {
    return softmax_backward_cached<T, kThreads, kVecs, kVec16<T>, kSplit>;
  }
  static constexpr bool kPipelined = true;
  static constexpr PipeShape kPipe{kPipeBackwardVecs, kPipeBackwardThreads, 2, 1};
  static constexpr auto pipelined() { return softmax_backward_pipelined<T>; }

  const T* y;
  int64_t y_stride;
  const T* dy;
  int64_t dy_stride;
  T* dx;
  int64_t dx_stride;
  int64_t rows;
  int64_t cols;

  Status streamed(const char* op, bool aligned, StreamedKernel* kernel,
                  StreamedLaunch* launch) const {
    *kernel = aligned ? softmax_backward_streamed<T, kVec16<T>> : softmax_backward_streamed<T, 1>;
    return plan_streamed_rung<T>(op, *kernel, 2, cols, aligned, launch);
  }
  auto row_args() const {
    return std::make_tuple(y, y_stride, dy, dy_stride, dx, dx_stride, rows, static_cast<int>(cols));
  }
  auto streamed_args() const {
    return std::make_tuple(y, y_stride, dy, dy_stride, dx, dx_stride, rows, cols);
  }
};

}  // namespace

Status softmax_ladder(const char* op, ConstMatrixRef x, MatrixRef y, int64_t rows, int64_t cols,
                      DType dtype, bool aligned, cudaStream_t stream, RowPlan* dry) {
  return dispatch_float(op, dtype, [&](auto tag) {
    using T = decltype(tag);
    const SoftmaxRows<T> o{{},           static_cast<const T*>(x.data),
                           x.row_stride, static_cast<T*>(y.data),
                           y.row_stride, rows,
                           cols};
    return run_row_ladder(op, o, rows, cols, aligned, stream, dry);
  });
}

Status softmax_backward_ladder(const char* op, ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx,
                               int64_t rows, int64_t cols, DType dtype, bool aligned,
                               cudaStream_t stream, RowPlan* dry) {
  return dispatch_float(op, dtype, [&](auto tag) {
    using T = decltype(tag);
    const SoftmaxBackwardRows<T> o{{},
                                   static_cast<const T*>(y.data),
                                   y.row_stride,
                                   static_cast<const T*>(dy.data),
                                   dy.row_stride,
                                   static_cast<T*>(dx.data),
                                   dx.row_stride,
                                   rows,
                                   cols};
    return run_row_ladder(op, o, rows, cols, aligned, stream, dry);
  });
}

}  // namespace detail::rowwise

using namespace detail::rowwise;  // NOLINT(google-build-using-namespace): this file's kernels

using namespace detail::rowwise;  // NOLINT(google-build-using-namespace): this file's kernels

Status softmax(ConstMatrixRef x, MatrixRef y, int64_t rows, int64_t cols, DType dtype,
               cudaStream_t stream) {
  constexpr const char* kOp = "softmax";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (rows == 0 || cols == 0) return Status();
  if (Status s = detail::check_overlaps(
          kOp, {detail::matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                detail::matrix_region("y", y.data, y.row_stride, rows, cols, dtype, true)});
      !s.ok())
    return s;
  const bool aligned =
      rows_aligned16(x.data, x.row_stride, dtype) && rows_aligned16(y.data, y.row_stride, dtype);
  return softmax_ladder(kOp, x, y, rows, cols, dtype, aligned, stream, nullptr);
}

Status softmax_backward(ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx, int64_t rows,
                        int64_t cols, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "softmax_backward";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "dy", dy.data, dy.row_stride, rows, cols, dtype); !s.ok())
    return s;
  if (Status s = check_matrix(kOp, "dx", dx.data, dx.row_stride, rows, cols, dtype); !s.ok())
    return s;
  if (rows == 0 || cols == 0) return Status();
  if (Status s = detail::check_overlaps(
          kOp, {detail::matrix_region("y", y.data, y.row_stride, rows, cols, dtype, false),
                detail::matrix_region("dy", dy.data, dy.row_stride, rows, cols, dtype, false),
                detail::matrix_region("dx", dx.data, dx.row_stride, rows, cols, dtype, true)});
      !s.ok())
    return s;
  const bool aligned = rows_aligned16(y.data, y.row_stride, dtype) &&
                       rows_aligned16(dy.data, dy.row_stride, dtype) &&
                       rows_aligned16(dx.data, dx.row_stride, dtype);
  return softmax_backward_ladder(kOp, y, dy, dx, rows, cols, dtype, aligned, stream, nullptr);
}

}  // namespace cudaops
