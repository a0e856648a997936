#pragma once

// The pipelined shape of the row-wise kernels (sm_90 and newer), for rows too long for the cached
// kernels: a persistent grid of one block per SM (two for softmax), each block walking its rows
// with the next ones already on their way. Each block owns `stages` buffers of shared memory; one
// thread asks the copy engine for a row (one asynchronous bulk copy per input array, completing on
// the stage's mbarrier). The block waits for its row, moves it into registers (a StagedTile: kVecs
// 16-byte vectors per thread, as the cached kernels hold a row) and hands the stage back at once
// (or at its first reduction's barrier), so the copy of a later row is under way while the block
// reduces and writes this one. Loads therefore
// never wait for the reductions, and even a single stage (two arrays of a 32768-wide bf16 row)
// keeps a row in flight per SM. Rows are whole 16-byte vectors (cols a multiple of the vector,
// every row 16-byte aligned); other rows go to the streamed kernels.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/mbarrier.cuh"
#include "rowwise/row_common.cuh"

namespace cudaops::detail::rowwise {

// ---------------------------------------------------------------------------------------------
// Bulk copies (PTX ISA 8.0, sm_90), completing on an mbarrier (device/mbarrier.cuh).

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
/// memory, completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
#else
  (void)dst;
  (void)src;
  (void)bytes;
  (void)bar;
  __trap();  // pipelined kernels are only launched where they were built for sm_90 or newer
#endif
}

// ---------------------------------------------------------------------------------------------

/// The rows of kArrays input matrices (each row 16-byte aligned) that a pipelined kernel reads.
template <typename T, int kArrays>
struct PipeInputs {
  const T* data[kArrays];
  int64_t stride[kArrays];
};

/// One block's pipeline over its rows (blockIdx.x, then every gridDim.x-th) of `rows` rows of
/// `cols` elements (a whole number of 16-byte vectors). Every thread of the block constructs it and
/// calls start() once, then for its i-th row (i = 0, 1, ...): wait(i), its reads of stage(i, a),
/// and release(i, row).
template <typename T, int kArrays>
class RowPipeline {
 public:
  __device__ RowPipeline(T* smem, uint64_t* bars, const PipeParams& params,
                         const PipeInputs<T, kArrays>& inputs, int cols, int64_t rows)
      : smem_(smem),
        bars_(bars),
        params_(params),
        inputs_(inputs),
        cols_(cols),
        bytes_(static_cast<uint32_t>(cols) * static_cast<uint32_t>(sizeof(T))),
        first_(blockIdx.x),
        step_(gridDim.x),
        rows_(rows) {}

  /// Initialises the barriers and asks for the first rows. Ends with a block barrier.
  __device__ void start() {
    if (threadIdx.x == 0) {
      for (int s = 0; s < params_.stages; ++s)
        mbarrier_init(&bars_[s], 1);
      mbarrier_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int s = 0; s < params_.stages; ++s) {
        const int64_t row = first_ + s * step_;
        if (row < rows_) issue(row, s);
      }
    }
  }

  /// Array a of the block's i-th row, once wait(i) has returned.
  __device__ const T* stage(int i, int a) const { return buffer(i % params_.stages, a); }

  __device__ void wait(int i) {
    mbarrier_wait(&bars_[i % params_.stages], static_cast<uint32_t>((i / params_.stages) & 1));
  }

  /// Hands the stage of the i-th row (`row`) back for the row `stages` further on. Starts with a
  /// block barrier: every thread has finished reading the stage.
  __device__ void release(int i, int64_t row) {
    __syncthreads();
    release_synced(i, row);
  }

  /// release() without its block barrier, for a block that has passed one since its last read of
  /// the stage (a block reduction's).
  __device__ void release_synced(int i, int64_t row) {
    if (threadIdx.x == 0) {
      const int64_t next = row + params_.stages * step_;
      if (next < rows_) issue(next, i % params_.stages);
    }
  }

 private:
  __device__ void issue(int64_t row, int s) {
    uint64_t* bar = &bars_[s];
    mbarrier_arrive_expect(bar, bytes_ * kArrays);
#pragma unroll
    for (int a = 0; a < kArrays; ++a)
      bulk_copy(buffer(s, a), inputs_.data[a] + row * inputs_.stride[a], bytes_, bar);
  }

  __device__ T* buffer(int s, int a) const {
    return smem_ + static_cast<int64_t>(s * kArrays + a) * cols_;
  }

  T* smem_;
  uint64_t* bars_;
  PipeParams params_;
  PipeInputs<T, kArrays> inputs_;
  int cols_;
  uint32_t bytes_;
  int64_t first_;
  int64_t step_;
  int64_t rows_;
};

/// A row as a thread of a pipelined kernel holds it: chunk j of thread t is the 16-byte vector at
/// column (j * blockDim.x + t) * N, kept as four 32-bit words (a vector of 16-bit elements would
/// be split into one register per element).
template <typename T, int kVecs>
struct StagedTile {
  static constexpr int N = kVec16<T>;
  uint4 raw[kVecs];

  __device__ __forceinline__ static int col(int j) {
    return (j * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * N;
  }

  /// The thread's chunks from the stage (cols a multiple of N); `fill` past cols.
  __device__ __forceinline__ void load(const T* stage, int cols, T fill) {
    const uint4 filled = fill_vector<T>(fill);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = col(j);
      raw[j] = c < cols ? *reinterpret_cast<const uint4*>(stage + c) : filled;
    }
  }

  /// The thread's chunks of a cols-long vector in global memory (weights), 0 past cols.
  __device__ __forceinline__ void load_global(const T* p, int cols) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = col(j);
      raw[j] = c < cols ? *reinterpret_cast<const uint4*>(p + c) : make_uint4(0, 0, 0, 0);
    }
  }

  __device__ __forceinline__ float get(int j, int e) const {
    return word_element<T>(raw[j], e);
  }

  /// See pin_words.
  __device__ __forceinline__ void pin() {
    pin_words(raw);
  }

  __device__ __forceinline__ static bool valid(int j, int cols) {
    return col(j) < cols;
  }
};

/// The 16-byte vector of T at p (16-byte aligned) as N floats; zeros when !inside.
template <typename T>
__device__ __forceinline__ void load_floats(const T* p, bool inside, float (&v)[kVec16<T>]) {
  const uint4 words = inside ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int e = 0; e < kVec16<T>; ++e)
    v[e] = word_element<T>(words, e);
}

/// N floats rounded to T, stored as one 16-byte vector at p (16-byte aligned) when `inside`.
template <typename T>
__device__ __forceinline__ void store_floats(T* p, bool inside, const float (&v)[kVec16<T>]) {
  if (inside) *reinterpret_cast<uint4*>(p) = pack_words<T>(v);
}

}  // namespace cudaops::detail::rowwise

// ---------------------------------------------------------------------------------------------
// Host.

namespace cudaops::detail::rowwise {

/// Plans `kernel` (plan_pipelined: vecs, max_threads, arrays, blocks_per_sm) and, when a launch
/// shape fits, launches it with `args` followed by the plan's PipeParams; *launched says whether
/// it did (or with `dry` not null, would have: *dry says how).
template <typename... Params, typename... Args>
Status launch_if_pipelined(const char* op, void (*kernel)(Params...), int vecs, int max_threads,
                           int arrays, int blocks_per_sm, int64_t rows, int64_t cols, DType dtype,
                           cudaStream_t stream, bool* launched, RowPlan* dry, Args... args) {
  *launched = false;
  PipeLaunch plan;
  if (Status s = plan_pipelined(op, reinterpret_cast<const void*>(kernel), vecs, max_threads,
                                arrays, blocks_per_sm, rows, cols, dtype, &plan);
      !s.ok() || plan.blocks == 0)
    return s;
  *launched = true;
  if (dry != nullptr) {
    *dry =
        RowPlan{RowPath::kPipelined, plan.threads, plan.threads, vecs, 1, plan.blocks, plan.smem};
    return Status();
  }
  // A persistent grid, launched plainly (Follow, row_common.cuh).
  return launch_rows(op, Follow::kPlain, kernel, plan.blocks, plan.threads, plan.smem, stream, 0,
                     args..., plan.params);
}

}  // namespace cudaops::detail::rowwise
