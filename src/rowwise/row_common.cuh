#pragma once

// Building blocks of the row-wise kernels.
//
// Two kernel shapes serve every op:
// - "cached": a row is held in registers by kThreads threads (one warp, four rows to a block of
//   128 threads; or a whole block of 128 to 1024 threads) as kVecs 16-byte vectors each. Every
//   element is read from memory once and written once. Used when rows are 16-byte aligned and
//   fit the largest configuration.
// - "streamed": one block per row walks the row in chunks of N elements (N = a 16-byte vector, or
//   1 for misaligned rows) once per pass, re-reading it (from L2 when it fits) between passes.
//   Used for misaligned rows and rows too long for registers.
// - "pipelined" (softmax, softmax_backward and layer_norm on sm_90 and newer, row_pipeline.cuh):
//   rows too long for the cached kernels arrive in shared memory by asynchronous bulk copies
//   issued rows ahead, then are held in registers like the cached shape.
// - "split" (sm_90 and newer, row_exchange.cuh): the cached shape, with each row shared by the
//   blocks of a thread-block cluster, whose reductions meet through distributed shared memory.
//   Forward rows of more than kSplitFromBytes, softmax_backward rows too long for its cached
//   kernels, and the norm backward passes on rows too long for one block (which keep their
//   parameter-gradient accumulators per block). The norm backward rows too long for the split
//   blocks' registers take a long-row kernel (norm.cu): the blocks of a cluster share each row,
//   walking their parts twice, the second time from registers where the part fits them, else
//   from L2. softmax_backward takes the pipelined kernel where its rows cannot be split.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/launch_config.h"
#include "device/cluster.cuh"
#include "device/numeric.cuh"
#include "device/shared_memory.cuh"
#include "device/vector.cuh"

namespace cudaops::detail::rowwise {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

/// The first statement of every row-wise kernel, before it touches global memory. The host
/// launches the kernels as dependent on the kernel before them in the stream where the device
/// allows (launch_rows, launch_split): their blocks may then be placed while that kernel's last
/// ones run, and wait here for it to finish and its writes to be visible. Each lets the next
/// kernel of the stream be launched once all its own blocks have started (that kernel waits in
/// turn for this one to finish, whatever it does before).
__device__ __forceinline__ void enter_rows_kernel() {
  wait_for_prior_kernels();
  allow_next_kernel();
}

// ---------------------------------------------------------------------------------------------
// Reductions. Every lane (thread) ends with the same bits: the xor butterfly combines the same
// pair of values in both lanes of each exchange, and the order is fixed.

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  static constexpr float kIdentity = -__builtin_huge_valf();
};

template <int K, class Op>
__device__ __forceinline__ void warp_allreduce(float (&v)[K], Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      v[k] = op(v[k], __shfl_xor_sync(kFullMask, v[k], offset));
  }
}

/// A row's mean and the sum of its squared deviations from the mean (M2).
struct Moments {
  float mean;
  float m2;
};

/// Floats of scratch for RowReducer::moments over a whole block: two sets of 2 * 32 slots.
inline constexpr int kMomentsScratch = 4 * kWarp;

/// Combines the sums and the M2s (each about its own mean) of `parts` parts of a row of `count`
/// elements, part p holding count_of(p) elements (Chan, Golub and LeVeque): the row's mean is
/// the sum over count, and its M2 the parts' M2s plus n_p (mean_p - mean)^2 each, two warp
/// reductions in turn. Every warp that calls it reads the same values in the same order, so all
/// end with the same bits. The whole-block rows take it; split rows, combine_split_moments.
template <class CountOf>
__device__ __forceinline__ Moments combine_moments(const float* sums, const float* m2s, int parts,
                                                   float count, CountOf count_of) {
  const int lane = threadIdx.x % kWarp;
  float sum[1] = {0.0f};
  for (int p = lane; p < parts; p += kWarp)
    sum[0] += sums[p];
  warp_allreduce(sum, SumOp{});
  const float mean = sum[0] / count;
  float m2[1] = {0.0f};
  for (int p = lane; p < parts; p += kWarp) {
    const float n = static_cast<float>(count_of(p));
    if (n > 0.0f) {
      const float d = sums[p] / n - mean;
      m2[0] += fmaf(n * d, d, m2s[p]);
    }
  }
  warp_allreduce(m2, SumOp{});
  return {mean, m2[0]};
}

/// The row's mean and M2 from the means and M2s (each about its own mean) that the warps of a
/// split row exchange (at most kMaxParts of them), part p holding count_of(p) elements, in one
/// warp reduction of two values where combine_moments takes two in turn. The deviations are
/// taken about part 0's mean k, known before any reduction:
/// sum n_p (mean_p - k)^2 = sum n_p (mean_p - mean)^2 + count (mean - k)^2, and the last term is
/// taken off at the end. That loses at most the bits of the ratio of the total about k to the M2
/// about the mean, which is at most 1 + count / count_of(0) (the M2 holds count_of(0) (k - mean)^2
/// at least): with part 0 a whole warp's share, the warps sharing the row plus one, 33 to 65 for
/// the split kernels, 6 or 7 of float32's 24 bits. The split rows gain by it over two reductions;
/// whole-block rows lose by it and keep combine_moments (docs/tuning/rowwise.md).
///
/// No division is left in it: the warps send their means (the centers their squares were taken
/// about, computed already) rather than their sums, the sum is rebuilt as sum n_p mean_p, and
/// inv_count is 1 / count. A part of no elements (whose mean is NaN) is skipped. Every warp that
/// calls it reads the same values in the same order, so all end with the same bits. (The mean
/// taken as k plus the mean deviation from k, with no sum, lost float32's tolerance of a row's
/// mean where the mean is near zero and k is not.)
template <int kMaxParts, class CountOf>
__device__ __forceinline__ Moments combine_split_moments(const float* means, const float* m2s,
                                                         int parts, float count, float inv_count,
                                                         CountOf count_of) {
  const int lane = threadIdx.x % kWarp;
  // Part 0 (the first warp of the row) holds at least one element.
  const float k = means[0];
  float v[2] = {0.0f, 0.0f};
#pragma unroll
  for (int q = 0; q < (kMaxParts + kWarp - 1) / kWarp; ++q) {
    const int p = lane + q * kWarp;
    const float n = p < parts ? static_cast<float>(count_of(p)) : 0.0f;
    if (n > 0.0f) {
      const float d = means[p] - k;
      v[0] = fmaf(n, means[p], v[0]);
      v[1] += fmaf(n * d, d, m2s[p]);
    }
  }
  warp_allreduce(v, SumOp{});
  const float mean = v[0] * inv_count;
  const float dk = mean - k;
  return {mean, fmaxf(fmaf(-count * dk, dk, v[1]), 0.0f)};
}

// ---------------------------------------------------------------------------------------------
// Split rows: on sm_90 and newer the blocks of a thread-block cluster may share a row, each
// holding one part of it (row_walk); their reductions meet through RowExchange
// (row_exchange.cuh). Every block of a cluster walks the same rows.

/// The rows a thread of a cached-shape kernel walks, and the part of each row its block holds.
struct RowWalk {
  int64_t first;  ///< the thread's first row
  int64_t step;   ///< rows between two of its rows
  int offset;     ///< first column of the block's part
  int cols;       ///< columns in the part (the whole row when rows are not split)
  int group;      ///< the block's index among the blocks (or clusters) of the grid
  int rank = 0;   ///< the block's part of the row
  int parts = 1;  ///< blocks sharing each row
};

/// Calls walk(part_cols) once, with the columns of the block's part of each row: the constant
/// kCols where kConstant and the part fills the tile, so that the walk's copy for it has no check
/// against the row's end in its loads, reductions and stores; otherwise the int cols. (walk is
/// taken by reference: passed by value, it changed some kernels' register allocation.)
template <int kCols, bool kConstant, class Walk>
__device__ __forceinline__ void with_part_cols(int cols, const Walk& walk) {
  if constexpr (kConstant) {
    if (cols == kCols) {
      walk(std::integral_constant<int, kCols>{});
      return;
    }
  }
  walk(cols);
}

/// kSplit: the block is part `rank` of a cluster of blocks sharing each row, holding columns
/// [rank * part_cols, (rank + 1) * part_cols). Otherwise kRowsPerBlock rows per block.
template <int kThreads, bool kSplit>
__device__ __forceinline__ RowWalk row_walk(int cols, int part_cols);

/// The block-wide step of a reduction whose warps have each reduced their values (every lane
/// holding its warp's): lane 0 of each of the `warps` warps writes them to `slots` (K * 32 floats
/// of shared memory), and after a block barrier every warp reduces the slots.
template <int K, class Op>
__device__ __forceinline__ void combine_warps(float (&v)[K], float* slots, int warps, Op op) {
  const int lane = threadIdx.x % kWarp;
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      slots[k * kWarp + threadIdx.x / kWarp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k)
    v[k] = lane < warps ? slots[k * kWarp + lane] : Op::kIdentity;
  warp_allreduce(v, op);
}

/// All-reduce over the threads that share a row: kThreads == 32 is one warp; more is the whole
/// block (one row per block); 0 is the whole block of any blockDim.x (a multiple of 32), as the
/// streamed kernels launch. Goes through `scratch` (K * 32 floats of shared memory).
template <int kThreads, int K, class Op>
__device__ __forceinline__ void row_allreduce(float (&v)[K], float* scratch, Op op) {
  warp_allreduce(v, op);
  if constexpr (kThreads != kWarp) {
    const int warps = kThreads > 0 ? kThreads / kWarp : static_cast<int>(blockDim.x) / kWarp;
    if (warps == 1) return;
    combine_warps(v, scratch, warps, op);
    __syncthreads();  // scratch may be reused at once
  }
}

/// The threads of a streamed kernel's row: the whole block, whatever its size.
inline constexpr int kWholeBlock = 0;

/// Floats of scratch for an alternating block reduction of K values (row_allreduce_alternating).
template <int K>
inline constexpr int kAlternatingScratch = 2 * K* kWarp;

/// row_allreduce over the whole block (any blockDim.x, a multiple of 32) with one block barrier
/// rather than two. `scratch` (kAlternatingScratch<K> floats) holds two sets of slots, and the
/// block's consecutive reductions use them in turn (`parity` 0, 1, 0, ...): a set is written
/// again two reductions later, when every thread that read it has passed the barrier of the
/// reduction in between.
template <int K, class Op>
__device__ __forceinline__ void row_allreduce_alternating(float (&v)[K], float* scratch, int parity,
                                                          Op op) {
  warp_allreduce(v, op);
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  if (warps == 1) return;
  combine_warps(v, scratch + parity * K * kWarp, warps, op);
}

// ---------------------------------------------------------------------------------------------
// Chunks of N elements at column c of a row: a vector access when all N are inside the row
// (the row start being 16-byte aligned when N > 1), element by element at the row's end.

template <typename T, int N>
__device__ __forceinline__ void load_chunk(const T* row, int64_t c, int64_t cols, float (&v)[N],
                                           float fill) {
  if (c + N <= cols) {
    const Vec<T, N> raw = load_vec<T, N>(row + c);
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[e] = to_float(raw.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e)
      v[e] = c + e < cols ? to_float(row[c + e]) : fill;
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_chunk(T* row, int64_t c, int64_t cols, const float (&v)[N]) {
  if (c + N <= cols) {
    Vec<T, N> raw;
#pragma unroll
    for (int e = 0; e < N; ++e)
      raw.v[e] = from_float<T>(v[e]);
    store_vec<T, N>(row + c, raw);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      if (c + e < cols) row[c + e] = from_float<T>(v[e]);
    }
  }
}

/// Elements between two rows kept one after the other in shared memory: a multiple of 8, so that
/// each row starts 16-byte aligned.
__host__ __device__ __forceinline__ int64_t padded_cols(int64_t cols) {
  return (cols + 7) / 8 * 8;
}

/// Reads a chunk again in a later pass of a streamed kernel: from the block's shared-memory copy
/// of the row when there is one, else from global memory.
template <typename T, int N>
__device__ __forceinline__ void reload_chunk(const T* global_row, const T* cached_row, bool cached,
                                             int64_t c, int64_t cols, float (&v)[N], float fill) {
  if (cached) {
    load_chunk<T, N>(cached_row, c, cols, v, fill);
  } else {
    load_chunk<T, N>(global_row, c, cols, v, fill);
  }
}

/// Rounds a float32 value to T and back: what storing it in T and reading it again gives.
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

/// The bits of element e of a 16-byte vector of T held as four 32-bit words, as float32.
template <typename T>
__device__ __forceinline__ float word_element(const uint4& words, int e) {
  const uint32_t w[4] = {words.x, words.y, words.z, words.w};
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w[e]);
  } else {
    const uint32_t word = w[e / 2];
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __uint_as_float((e & 1) != 0 ? word & 0xffff0000u : word << 16);
    } else {
      return __half2float(__ushort_as_half(
          static_cast<unsigned short>((e & 1) != 0 ? word >> 16 : word & 0xffffu)));
    }
  }
}

/// A chunk of N elements as loaded: four 32-bit words for a 16-byte vector (a vector of 16-bit
/// elements would take one register per element), else the elements.
template <typename T, int N>
using RawChunk = std::conditional_t<sizeof(T) * N == 16, uint4, Vec<T, N>>;

/// load_chunk in two steps, so that several chunks' loads are in flight before any is used: the
/// chunk as stored (fill past cols), then as floats.
template <typename T, int N>
__device__ __forceinline__ RawChunk<T, N> load_raw(const T* row, int64_t c, int64_t cols, T fill) {
  Vec<T, N> raw;
  if (c + N <= cols) {
    raw = load_vec<T, N>(row + c);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e)
      raw.v[e] = c + e < cols ? row[c + e] : fill;
  }
  if constexpr (sizeof(T) * N == 16) {
    uint4 words;
    memcpy(&words, &raw, sizeof(words));
    return words;
  } else {
    return raw;
  }
}
/// load_raw from the row's copy in shared memory when `cached`, else from global memory (two
/// loads in two branches: a pointer chosen between the two would be read with generic loads).
template <typename T, int N>
__device__ __forceinline__ RawChunk<T, N> reload_raw(const T* global_row, const T* cached_row,
                                                     bool cached, int64_t c, int64_t cols, T fill) {
  if (cached) return load_raw<T, N>(cached_row, c, cols, fill);
  return load_raw<T, N>(global_row, c, cols, fill);
}
template <typename T, int N>
__device__ __forceinline__ void raw_floats(const RawChunk<T, N>& raw, float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    if constexpr (sizeof(T) * N == 16) {
      v[e] = word_element<T>(raw, e);
    } else {
      v[e] = to_float(raw.v[e]);
    }
  }
}

/// The bits of T: 16 or 32 of them.
template <typename T>
__device__ __forceinline__ uint32_t element_bits(T x) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(x);
  } else {
    unsigned short bits;
    memcpy(&bits, &x, 2);
    return bits;
  }
}

/// Copies the first `bytes` (0 to 16) of the 16 bytes at src (global, 16-byte aligned) to the 16
/// bytes at dst (shared), zero-filling the rest, without holding registers (cp.async, sm_80);
/// cp_async_wait_all waits for the thread's copies. Used only where clusters are (sm_90).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(bytes)
               : "memory");
#else
  (void)dst;
  (void)src;
  (void)bytes;
  __trap();
#endif
}

__device__ __forceinline__ void cp_async_wait_all() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

/// Sixteen bytes of `fill`.
template <typename T>
__device__ __forceinline__ uint4 fill_vector(T fill) {
  uint32_t word = element_bits<T>(fill);
  if constexpr (sizeof(T) == 2) word |= word << 16;
  return make_uint4(word, word, word, word);
}

/// N floats rounded to T and packed into a 16-byte vector held as four 32-bit words.
template <typename T>
__device__ __forceinline__ uint4 pack_words(const float (&v)[kVec16<T>]) {
  if constexpr (sizeof(T) == 4) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  } else {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = element_bits<T>(from_float<T>(v[2 * i])) |
             (element_bits<T>(from_float<T>(v[2 * i + 1])) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// Makes the words opaque to the compiler, so that a later pass over a held row converts them
/// again rather than keeping the float32 values of an earlier pass alive (twice the registers
/// for 16-bit types).
template <int K>
__device__ __forceinline__ void pin_words(uint4 (&raw)[K]) {
#pragma unroll
  for (int j = 0; j < K; ++j)
    asm volatile("" : "+r"(raw[j].x), "+r"(raw[j].y), "+r"(raw[j].z), "+r"(raw[j].w));
}

// ---------------------------------------------------------------------------------------------
// The cached shape: thread t of a row holds the chunks at columns (j * kThreads + t) * N,
// j < kVecs, 16-byte vectors in their storage type (so that a 16-bit row costs half the
// registers), each kept as four 32-bit words: a vector of 16-bit elements would be split into one
// register per element.

template <typename T, int kThreads, int kVecs, int N>
struct Tile {
  static_assert(N == kVec16<T>, "a tile's chunks are 16-byte vectors");
  static constexpr int kCols = kThreads * kVecs * N;  // the longest row it holds
  uint4 raw[kVecs];

  __device__ __forceinline__ static int col(int j, int t) { return (j * kThreads + t) * N; }

  /// Elements of a row of `cols` columns (at most kCols) that warp w of the row's threads holds.
  __device__ __forceinline__ static int warp_count(int cols, int w) {
    int n = 0;
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
      n += min(max(cols - col(j, w * kWarp), 0), kWarp * N);
    return n;
  }

  /// The thread's chunk that straddles the row's end (cols not a multiple of N), or -1. A row
  /// has at most one such chunk, so it is handled once, after the vector accesses: handling it
  /// in every chunk's place costs the kernels a set of registers per chunk.
  __device__ __forceinline__ static int partial(int cols, int t) {
    const int v = cols / N;  // the straddling chunk's index in the row
    if (v * N == cols || v % kThreads != t || v / kThreads >= kVecs) return -1;
    return v / kThreads;
  }

  /// Loads the thread's chunks; elements past cols are set to `fill`.
  __device__ __forceinline__ void load(const T* row, int cols, int t, T fill) {
    load_range(row, cols, t, fill, 0, kVecs);
  }

  /// Loads chunks [first, first + count) only (constants once unrolled).
  __device__ __forceinline__ void load_range(const T* row, int cols, int t, T fill, int first,
                                             int count) {
    const uint4 filled = fill_vector<T>(fill);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (j < first || j >= first + count) continue;
      const int c = col(j, t);
      raw[j] = c + N <= cols ? *reinterpret_cast<const uint4*>(row + c) : filled;
    }
    const int p = partial(cols, t);
    if (p >= first && p < first + count) {
      const int c = col(p, t);
      float part[N];
#pragma unroll
      for (int e = 0; e < N; ++e)
        part[e] = to_float(c + e < cols ? row[c + e] : fill);
      const uint4 words = pack_words<T>(part);
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        if (j == p) raw[j] = words;
      }
    }
  }

  /// Asks L2 for the thread's chunks of a row that will be loaded later (no registers held).
  __device__ __forceinline__ static void prefetch(const T* row, int cols, int t) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = col(j, t);
      if (c < cols) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + c));
    }
  }

  /// Copies the thread's chunks of a row into shared memory with cp.async (no registers held):
  /// chunk j to dst[j * kThreads + t], zero past cols, as load() with a fill of 0 would hold it.
  /// A thread copies and reads only its own chunks, so no barrier is needed; it waits for its
  /// copies with cp_async_wait_all.
  __device__ __forceinline__ static void copy_async(uint4* dst, const T* row, int cols, int t) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = col(j, t);
      const int bytes = min(max(cols - c, 0), N) * static_cast<int>(sizeof(T));
      cp_async16(dst + j * kThreads + t, bytes > 0 ? row + c : row, bytes);
    }
  }

  __device__ __forceinline__ float get(int j, int e) const {
    return word_element<T>(raw[j], e);
  }
  /// See pin_words.
  __device__ __forceinline__ void pin() {
    pin_words(raw);
  }
  /// Sets chunk j to N float values rounded to T.
  __device__ __forceinline__ void set(int j, const float (&v)[N]) {
    raw[j] = pack_words<T>(v);
  }
  /// Chunk j for an index j known only at run time (no local-memory array).
  __device__ __forceinline__ uint4 chunk(int j) const {
    uint4 words = raw[0];
#pragma unroll
    for (int i = 1; i < kVecs; ++i) {
      if (i == j) words = raw[i];
    }
    return words;
  }

  /// Stores the chunks as they are held.
  __device__ __forceinline__ void store(T* row, int cols, int t) const {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int c = col(j, t);
      if (c + N <= cols) *reinterpret_cast<uint4*>(row + c) = raw[j];
    }
    const int p = partial(cols, t);
    if (p >= 0) {
      const uint4 words = chunk(p);
      const int c = col(p, t);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if (c + e < cols) row[c + e] = from_float<T>(word_element<T>(words, e));
      }
    }
  }
};

/// Stores float values laid out as a Tile's chunks.
template <typename T, int kThreads, int kVecs, int N>
__device__ __forceinline__ void store_tile(T* row, int cols, int t, const float (&v)[kVecs][N]) {
  using TileT = Tile<T, kThreads, kVecs, N>;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int c = TileT::col(j, t);
    if (c + N <= cols) *reinterpret_cast<uint4*>(row + c) = pack_words<T>(v[j]);
  }
  if (const int p = TileT::partial(cols, t); p >= 0) {
    const int c = TileT::col(p, t);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      if (j != p) continue;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        if (c + e < cols) row[c + e] = from_float<T>(v[j][e]);
      }
    }
  }
}

/// Threads of a cached-shape block: one warp per row in blocks of four rows, or one row per block.
template <int kThreads>
inline constexpr int kRowsPerBlock = kThreads == kWarp ? 4 : 1;
template <int kThreads>
inline constexpr int kBlockThreads = kThreads* kRowsPerBlock<kThreads>;

template <int kThreads, bool kSplit>
__device__ __forceinline__ RowWalk row_walk(int cols, int part_cols) {
  if constexpr (kSplit) {
    static_assert(kRowsPerBlock<kThreads> == 1, "a split row takes whole blocks");
    int rank = 0;
    int parts = 1;
#if CUDAOPS_HAS_CLUSTERS
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    rank = static_cast<int>(cluster.block_rank());
    parts = static_cast<int>(cluster.num_blocks());
#endif
    // One-dimensional clusters take consecutive blocks.
    const int group = static_cast<int>(blockIdx.x) / parts;
    const int offset = rank * part_cols;
    return {group,  static_cast<int64_t>(gridDim.x / parts),
            offset, min(cols - offset, part_cols),
            group,  rank,
            parts};
  } else {
    constexpr int kRows = kRowsPerBlock<kThreads>;
    return {static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kThreads,
            static_cast<int64_t>(gridDim.x) * kRows, 0, cols, static_cast<int>(blockIdx.x)};
  }
}

}  // namespace cudaops::detail::rowwise

// ---------------------------------------------------------------------------------------------
// Host: from a kCachedLadder index to the template arguments.
#include <type_traits>

#include "core/launch.h"
#include "cudaops/status.h"
#include "rowwise/rowwise_launch.h"

namespace cudaops::detail::rowwise {

template <int kThreads, int kVecs>
struct CachedShape {
  static constexpr int threads = kThreads;
  static constexpr int vecs = kVecs;
};

/// Calls f(CachedShape<threads, vecs>{}) for kCachedLadder[index] (the ladder of rowwise_launch.h);
/// only the first kLimit entries are instantiated.
template <int kLimit = 8, class F>
Status with_cached_shape(int index, F&& f) {
  if (index >= kLimit) index = -1;
  switch (index) {
    case 0:
      return f(CachedShape<32, 1>{});
    case 1:
      return f(CachedShape<32, 2>{});
    case 2:
      return f(CachedShape<32, 4>{});
    case 3:
      if constexpr (kLimit > 3) return f(CachedShape<128, 2>{});
      break;
    case 4:
      if constexpr (kLimit > 4) return f(CachedShape<128, 4>{});
      break;
    case 5:
      if constexpr (kLimit > 5) return f(CachedShape<256, 4>{});
      break;
    case 6:
      if constexpr (kLimit > 6) return f(CachedShape<512, 4>{});
      break;
    case 7:
      if constexpr (kLimit > 7) return f(CachedShape<1024, 4>{});
      break;
    default:
      break;
  }
  return Status(StatusCode::kNotSupported, "row-wise: no cached kernel for this row length");
}

/// The cached shape of the norm backward kernel whose blocks share a row in clusters (row_walk).
using BackwardSplitShape = CachedShape<kBackwardSplitConfig.threads, kBackwardSplitConfig.vecs>;

/// How a row-wise kernel follows the kernel before it in the stream.
enum class Follow {
  kDependent,  ///< launched as dependent on it, where dependent_launch (core/launch.h) allows
  kPlain,      ///< launched once it has finished
};

/// Launches `kernel` as `blocks` blocks of `threads` threads with `smem` bytes of dynamic shared
/// memory, in clusters of `cluster` blocks when it is > 0, following the kernel before it as
/// `follow` says.
///
/// Dependent launches let a call's kernel start while the one before it finishes: the forward
/// kernels gain by it in a stream of calls. Kernels on persistent grids launch plainly (the norm
/// backward passes and the pipelined kernels): such a grid has as many blocks as an idle device
/// spreads evenly, and launched early it finds part of the device still busy and loses more than
/// it gains. The measurements are in docs/tuning/rowwise.md.
template <typename... Params, typename... Args>
Status launch_rows(const char* op, Follow follow, void (*kernel)(Params...), unsigned blocks,
                   int threads, size_t smem, cudaStream_t stream, int cluster, Args... args) {
  bool dependent = false;
  if (follow == Follow::kDependent) {
    if (Status s = detail::dependent_launch(op, reinterpret_cast<const void*>(kernel), &dependent);
        !s.ok())
      return s;
  }
  const LaunchConfig config(blocks, threads, smem, stream, cluster, dependent);
  const cudaError_t error = config.launch(kernel, args...);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // the launch error is reported here, not by a later call
    return detail::cuda_status(error, op, "kernel launch failed");
  }
  return detail::check_launch(op, stream);
}

/// Launches a split kernel: `clusters` clusters of `parts` blocks of `threads` threads.
template <typename... Params, typename... Args>
Status launch_split(const char* op, Follow follow, void (*kernel)(Params...), unsigned clusters,
                    int parts, int threads, cudaStream_t stream, Args... args) {
  return launch_rows(op, follow, kernel, clusters * static_cast<unsigned>(parts), threads, 0,
                     stream, parts, args...);
}

}  // namespace cudaops::detail::rowwise
