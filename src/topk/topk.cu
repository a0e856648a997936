// Row-wise top-k by radix selection in shared memory.
//
// Every element becomes a 32-bit key whose unsigned order is the rank order (for the k largest,
// the order of the values; for the k smallest, its reverse), so that every case is "the k largest
// keys, ties to the lower column". One thread block selects from one tile of a row held in
// shared memory:
//   1. the histogram of the key's top 11 bits is counted while the tile is loaded, the bin
//      holding the k-th key is found by a block scan, then the next 11 and the last 10 bits are
//      counted among the keys of that prefix only, until the bin is taken whole or the k-th key is
//      known exactly (3 passes at most);
//   2. the tile is compacted in column order: every key above the threshold, and the first
//      `need` keys equal to it (a ballot rank per warp, a scan of the warps' counts);
//   3. the last level sorts its k results by (key, column) with a bitonic sort in shared memory
//      (one warp when k <= 64).
// Rows longer than a tile are cut into tiles whose k best (key, column) pairs go to the
// workspace; the pairs of each row are then selected again, tile by tile, until one tile holds
// them all. Pairs stay in column order through every level, so ties still go to the lower column.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <limits>
#include <sstream>
#include <vector>

#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/launch.h"
#include "core/numeric.cuh"
#include "core/validate.h"
#include "core/vector.cuh"
#include "cudaops/topk.h"
#include "topk/topk_plan.h"

namespace cudaops {
namespace detail::topk {
namespace {

// Threads per block: 128 for tiles of at most kSmallTile elements when k is at most kSmallK,
// where four warps have enough work and more blocks fit on an SM (one wave for 1024 rows of
// 4096 on an H100: 36.5 -> 26.1 us); 512 otherwise. With 128 threads a large k costs more than
// it saves (its sort and compaction: 64 x 65536, k = 1024 went from 41.7 to 53.3 us).
constexpr int kWideThreads = 512;
constexpr int kNarrowThreads = 128;
constexpr int kSmallTile = 4096;
constexpr int kSmallK = 256;
constexpr int kBins = 2048;           // 11-bit digits
constexpr uint32_t kSentinelKey = 0;  // below every element's key
constexpr uint32_t kSentinelIndex = 0xffffffffu;

// ---- keys -------------------------------------------------------------------------------------

// The rank key of a value: unsigned order = rank order. NaN is above every number when looking
// for the largest (0xffffffff) and below every number when looking for the smallest (1); 0 is
// left to the sentinel of unused pair slots.
__device__ __forceinline__ uint32_t encode(float f, bool largest) {
  if (f != f) return largest ? 0xffffffffu : 1u;
  const uint32_t bits = __float_as_uint(f);
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return largest ? ordered : ~ordered;
}

__device__ __forceinline__ float decode(uint32_t key, bool largest) {
  if (key == (largest ? 0xffffffffu : 1u)) return __uint_as_float(0x7fc00000u);
  const uint32_t ordered = largest ? key : ~key;
  const uint32_t bits = (ordered & 0x80000000u) != 0 ? (ordered & 0x7fffffffu) : ~ordered;
  return __uint_as_float(bits);
}

// ---- shared memory ----------------------------------------------------------------------------

template <int kThreads>
struct SelectShared {
  static constexpr int kWarps = kThreads / 32;
  uint32_t hist[kBins];
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
  uint32_t warp_gt[kWarps];
  uint32_t warp_eq[kWarps];
  uint32_t bin;    // the bin holding the k-th key
  uint32_t above;  // keys in the bins above it
  uint32_t count;  // keys in it
};

// What the selection found: a key is taken when (key >> shift) > prefix, or when it equals
// prefix and fewer than `need` equal keys come before it in column order.
struct Threshold {
  uint32_t prefix;
  int shift;  // 32: every key is "equal" (take the first `need`)
  uint32_t need;
};

__device__ __forceinline__ uint32_t high_bits(uint32_t key, int shift) {
  return shift >= 32 ? 0u : key >> shift;
}

// Finds the bin of hist (bins, in descending order of bins) where the count from the top
// reaches k_rem. Leaves it in shared.bin/above/count.
template <int kBinsNow, int kThreads>
__device__ void find_bin(SelectShared<kThreads>& s, uint32_t k_rem) {
  constexpr int kPer = kBinsNow / kThreads;
  static_assert(kPer >= 1 && kBinsNow % kThreads == 0, "bins per thread");
  const int t = threadIdx.x;
  uint32_t counts[kPer];
  uint32_t local = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    counts[j] = s.hist[kBinsNow - 1 - (t * kPer + j)];
    local += counts[j];
  }
  uint32_t before = 0;
  cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(local, before);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (before < k_rem && before + counts[j] >= k_rem) {
      s.bin = static_cast<uint32_t>(kBinsNow - 1 - (t * kPer + j));
      s.above = before;
      s.count = counts[j];
    }
    before += counts[j];
  }
  __syncthreads();
}

// The radix selection of the k largest of keys[0, n), given the histogram of their top 11 bits
// in s.hist (already complete and visible to the block).
template <int kThreads>
__device__ Threshold select_threshold(const uint32_t* keys, int n, uint32_t k,
                                      SelectShared<kThreads>& s) {
  uint32_t k_rem = k;
  uint32_t prefix = 0;
  // Pass 0: bits 31..21.
  find_bin<kBins, kThreads>(s, k_rem);
  prefix = s.bin;
  k_rem -= s.above;
  if (s.count == k_rem) return {prefix, 21, k_rem};
    // Pass 1: bits 20..10, among keys with that prefix; pass 2: bits 9..0.
#pragma unroll 1
  for (int pass = 1; pass < 3; ++pass) {
    const int shift = pass == 1 ? 10 : 0;
    const int bits = pass == 1 ? 11 : 10;
    const int high_shift = shift + bits;
    __syncthreads();  // everyone has read s.bin/above/count and the histogram
    for (int i = threadIdx.x; i < (1 << bits); i += kThreads)
      s.hist[i] = 0;
    __syncthreads();
    const uint32_t mask = (1u << bits) - 1;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = keys[i];
      if ((key >> high_shift) == prefix) atomicAdd(&s.hist[(key >> shift) & mask], 1u);
    }
    __syncthreads();
    if (bits == 11) {
      find_bin<2048, kThreads>(s, k_rem);
    } else {
      find_bin<1024, kThreads>(s, k_rem);
    }
    prefix = (prefix << bits) | s.bin;
    k_rem -= s.above;
    if (s.count == k_rem || pass == 2) return {prefix, shift, k_rem};
  }
  return {prefix, 0, k_rem};  // not reached
}

// Calls emit(position, i) for every taken element i of keys[0, n), position being its rank
// among the taken ones in column (i) order. Each warp walks its own contiguous segment.
template <int kThreads, typename Emit>
__device__ void compact(const uint32_t* keys, int n, Threshold th, SelectShared<kThreads>& s,
                        Emit&& emit) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int segment = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int begin = warp * segment;
  const int end = min(n, begin + segment);
  // Counts of the warp's segment.
  uint32_t gt = 0, eq = 0;
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    const uint32_t v = i < end ? high_bits(keys[i], th.shift) : 0u;
    const bool valid = i < end;
    gt += __popc(__ballot_sync(0xffffffffu, valid && v > th.prefix));
    eq += __popc(__ballot_sync(0xffffffffu, valid && v == th.prefix));
  }
  if (lane == 0) {
    s.warp_gt[warp] = gt;
    s.warp_eq[warp] = eq;
  }
  __syncthreads();
  uint32_t gt_before = 0, eq_before = 0;
  for (int w = 0; w < warp; ++w) {
    gt_before += s.warp_gt[w];
    eq_before += s.warp_eq[w];
  }
  const uint32_t below = (1u << lane) - 1u;
  for (int base = begin; base < end; base += 32) {
    const int i = base + lane;
    const bool valid = i < end;
    const uint32_t v = valid ? high_bits(keys[i], th.shift) : 0u;
    const bool is_gt = valid && v > th.prefix;
    const bool is_eq = valid && v == th.prefix;
    const uint32_t gt_mask = __ballot_sync(0xffffffffu, is_gt);
    const uint32_t eq_mask = __ballot_sync(0xffffffffu, is_eq);
    const uint32_t my_gt = gt_before + __popc(gt_mask & below);
    const uint32_t my_eq = eq_before + __popc(eq_mask & below);
    if (is_gt || (is_eq && my_eq < th.need)) emit(my_gt + min(my_eq, th.need), i);
    gt_before += __popc(gt_mask);
    eq_before += __popc(eq_mask);
  }
}

// ---- loading a tile ---------------------------------------------------------------------------

// Keys of row[0, len) into keys[], counting the histogram of their top 11 bits.
// (Plain shared atomics: aggregating equal bins per warp with __match_any_sync measured slower
// on an H100, see bench/RESULTS.md.)
template <int kThreads, typename T>
__device__ void load_values(const T* __restrict__ row, int len, bool largest, uint32_t* keys,
                            uint32_t* hist) {
  constexpr int V = kVec16<T>;
  constexpr int kUnroll = 4;
  const uintptr_t misalign = (reinterpret_cast<uintptr_t>(row) % 16) / sizeof(T);
  const int head = min(len, misalign == 0 ? 0 : static_cast<int>(V - misalign));
  auto put = [&](int i, T value) {
    const uint32_t key = encode(to_float(value), largest);
    keys[i] = key;
    atomicAdd(&hist[key >> 21], 1u);
  };
  // Keys of a whole vector go to shared memory 16 bytes at a time when the tile allows it.
  const bool wide_stores = head % 4 == 0;
  for (int i = threadIdx.x; i < head; i += kThreads)
    put(i, row[i]);
  const T* body = row + head;
  const int vectors = (len - head) / V;
  for (int v0 = threadIdx.x; v0 < vectors; v0 += kThreads * kUnroll) {
    Vec<T, V> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < vectors) x[u] = load_vec<T, V>(body + static_cast<int64_t>(v) * V);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kThreads;
      if (v < vectors) {
        uint32_t k[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          k[j] = encode(to_float(x[u].v[j]), largest);
          atomicAdd(&hist[k[j] >> 21], 1u);
        }
        uint32_t* out = keys + head + v * V;
        if (wide_stores) {
#pragma unroll
          for (int j = 0; j < V; j += 4)
            *reinterpret_cast<uint4*>(out + j) = make_uint4(k[j], k[j + 1], k[j + 2], k[j + 3]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j)
            out[j] = k[j];
        }
      }
    }
  }
  for (int i = head + vectors * V + threadIdx.x; i < len; i += kThreads)
    put(i, row[i]);
}

// (key, column) pairs [0, len) into keys[] and columns[], counting the histogram.
template <int kThreads>
__device__ void load_pairs(const uint32_t* __restrict__ in_keys,
                           const uint32_t* __restrict__ in_columns, int len, uint32_t* keys,
                           uint32_t* columns, uint32_t* hist) {
  constexpr int kUnroll = 4;
  for (int i0 = threadIdx.x; i0 < len; i0 += kThreads * kUnroll) {
    uint32_t k[kUnroll], c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i < len) {
        k[u] = in_keys[i];
        c[u] = in_columns[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * kThreads;
      if (i < len) {
        keys[i] = k[u];
        columns[i] = c[u];
        atomicAdd(&hist[k[u] >> 21], 1u);
      }
    }
  }
}

// ---- the kernel -------------------------------------------------------------------------------

// Where a level's tiles come from: the matrix itself, or the pairs of the previous level.
template <typename T>
struct Source {
  const T* x = nullptr;  // values: row r at x + r * x_stride
  int64_t x_stride = 0;
  const uint32_t* keys = nullptr;  // pairs: row r at keys/columns + r * n
  const uint32_t* columns = nullptr;
};

// Where a level's results go: pairs for the next level, or the caller's values and indices.
template <typename T>
struct Sink {
  uint32_t* keys = nullptr;  // pairs: tile t of row r at + (r * tiles + t) * k
  uint32_t* columns = nullptr;
  T* values = nullptr;
  int64_t values_stride = 0;
  void* indices = nullptr;
  int64_t indices_stride = 0;
  bool index64 = true;
};

struct Shape {
  int64_t row0;  // first row of this launch
  int64_t n;     // elements (or pairs) per row at this level
  int tile;      // elements per tile (the last tile of a row may be shorter)
  int tiles;     // tiles per row
  int k;
  bool largest;
};

// Sorts buf[0, m) (m a power of two) in descending order, bitonically: one warp when m <= 64
// (no block barriers), else the whole block.
template <int kThreads>
__device__ void bitonic_sort_descending(uint64_t* buf, int m) {
  const bool one_warp = m <= 64;
  if (one_warp && threadIdx.x >= 32) return;
  const int workers = one_warp ? 32 : kThreads;
  for (int size = 2; size <= m; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < m / 2; i += workers) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const uint64_t a = buf[lo];
        const uint64_t b = buf[hi];
        if ((a < b) == descending) {
          buf[lo] = b;
          buf[hi] = a;
        }
      }
      if (one_warp) {
        __syncwarp();
      } else {
        __syncthreads();
      }
    }
  }
}

// kPairs: the tile holds pairs (else values of T). kFinal: results to values/indices (else to
// the pairs of the next level). kSorted (final only): in rank order (else in column order).
// kThreads: threads per block. Dynamic shared memory: the tile's keys, then (pairs) its
// columns, then (sorted) the sort buffer of pow2(k) (key, ~column) items.
template <typename T, bool kPairs, bool kFinal, bool kSorted, int kThreads>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads)
    topk_tile_kernel(Source<T> source, Sink<T> sink, Shape shape) {
  extern __shared__ __align__(16) uint32_t tile_keys[];
  __shared__ SelectShared<kThreads> s;

  const int64_t row = shape.row0 + blockIdx.x / shape.tiles;
  const int tile = static_cast<int>(blockIdx.x % shape.tiles);
  const int64_t start = static_cast<int64_t>(tile) * shape.tile;
  const int len = static_cast<int>(shape.n - start < shape.tile ? shape.n - start : shape.tile);
  const int words = (shape.tile + 3) & ~3;
  uint32_t* tile_columns = tile_keys + words;  // pairs only
  // (key, ~column): descending order is rank order, ties to the lower column.
  uint64_t* sort_buf = reinterpret_cast<uint64_t*>(tile_keys + words * (kPairs ? 2 : 1));

  for (int i = threadIdx.x; i < kBins; i += kThreads)
    s.hist[i] = 0;
  __syncthreads();
  if constexpr (kPairs) {
    const int64_t offset = row * shape.n + start;
    load_pairs<kThreads>(source.keys + offset, source.columns + offset, len, tile_keys,
                         tile_columns, s.hist);
  } else {
    load_values<kThreads>(source.x + row * source.x_stride + start, len, shape.largest, tile_keys,
                          s.hist);
  }
  __syncthreads();

  const int k_tile = min(shape.k, len);
  Threshold th{0u, 32, static_cast<uint32_t>(k_tile)};  // take all
  if (k_tile < len) th = select_threshold(tile_keys, len, static_cast<uint32_t>(k_tile), s);
  auto column_of = [&](int i) -> uint32_t {
    if constexpr (kPairs) {
      return tile_columns[i];
    } else {
      return static_cast<uint32_t>(start + i);
    }
  };

  if constexpr (!kFinal) {
    // Pairs for the next level, in column order; unused slots get the sentinel.
    const int64_t out = (row * shape.tiles + tile) * shape.k;
    compact(tile_keys, len, th, s, [&](uint32_t position, int i) {
      sink.keys[out + position] = tile_keys[i];
      sink.columns[out + position] = column_of(i);
    });
    for (int j = k_tile + threadIdx.x; j < shape.k; j += kThreads) {
      sink.keys[out + j] = kSentinelKey;
      sink.columns[out + j] = kSentinelIndex;
    }
  } else {
    T* values = sink.values + row * sink.values_stride;
    auto write = [&](uint32_t position, uint32_t key, uint32_t column) {
      values[position] = from_float<T>(decode(key, shape.largest));
      if (sink.index64) {
        static_cast<int64_t*>(sink.indices)[row * sink.indices_stride + position] = column;
      } else {
        static_cast<int32_t*>(sink.indices)[row * sink.indices_stride + position] =
            static_cast<int32_t>(column);
      }
    };
    if constexpr (!kSorted) {
      compact(tile_keys, len, th, s,
              [&](uint32_t position, int i) { write(position, tile_keys[i], column_of(i)); });
    } else {
      compact(tile_keys, len, th, s, [&](uint32_t position, int i) {
        sort_buf[position] = (static_cast<uint64_t>(tile_keys[i]) << 32) | ~column_of(i);
      });
      int m = 1;
      while (m < k_tile)
        m <<= 1;
      for (int i = k_tile + threadIdx.x; i < m; i += kThreads)
        sort_buf[i] = 0;  // below every (key, column)
      __syncthreads();
      bitonic_sort_descending<kThreads>(sort_buf, m);
      __syncthreads();
      for (int rank = threadIdx.x; rank < k_tile; rank += kThreads) {
        const uint64_t item = sort_buf[rank];
        write(static_cast<uint32_t>(rank), static_cast<uint32_t>(item >> 32),
              ~static_cast<uint32_t>(item));
      }
    }
  }
}

// ---- host -------------------------------------------------------------------------------------

struct LaunchArgs {
  int64_t rows;
  const Level* level;
  bool largest;
  cudaStream_t stream;
};

template <typename T, bool kPairs, bool kFinal, bool kSorted, int kThreads>
Status launch_tiles(const char* op, const Source<T>& source, const Sink<T>& sink,
                    const LaunchArgs& args) {
  auto kernel = topk_tile_kernel<T, kPairs, kFinal, kSorted, kThreads>;
  const Level& level = *args.level;
  const int words = (level.tile + 3) & ~3;
  size_t sort_items = 0;
  if (kSorted) {
    sort_items = 1;
    while (sort_items < static_cast<size_t>(std::min(level.k, level.tile)))
      sort_items <<= 1;
  }
  const size_t smem = static_cast<size_t>(words) * sizeof(uint32_t) * (kPairs ? 2 : 1) +
                      sort_items * sizeof(uint64_t);
  // Static and dynamic shared memory together above 48 KiB need the kernel's opt-in.
  static const size_t static_smem = [&] {  // per instantiation
    cudaFuncAttributes attributes = {};
    return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess ? attributes.sharedSizeBytes
                                                                     : size_t{48 * 1024};
  }();
  if (smem + static_smem > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (error != cudaSuccess) return cuda_status(error, op, "setting the shared-memory size");
  }
  // At most 2^31 - 1 blocks per launch: rows in batches.
  const int64_t rows_per_launch =
      std::max<int64_t>(1, std::numeric_limits<int32_t>::max() / level.tiles);
  for (int64_t row0 = 0; row0 < args.rows; row0 += rows_per_launch) {
    const int64_t rows = std::min(rows_per_launch, args.rows - row0);
    Shape shape{row0, level.n, level.tile, level.tiles, level.k, args.largest};
    kernel<<<static_cast<unsigned>(rows * level.tiles), kThreads, smem, args.stream>>>(source, sink,
                                                                                       shape);
    if (Status s = check_launch(op, args.stream); !s.ok()) return s;
  }
  return Status();
}

template <typename T, bool kPairs, bool kFinal, bool kSorted>
Status launch_level(const char* op, const Source<T>& source, const Sink<T>& sink,
                    const LaunchArgs& args) {
  if (args.level->tile <= kSmallTile && args.level->k <= kSmallK) {
    return launch_tiles<T, kPairs, kFinal, kSorted, kNarrowThreads>(op, source, sink, args);
  }
  return launch_tiles<T, kPairs, kFinal, kSorted, kWideThreads>(op, source, sink, args);
}

template <typename T, bool kPairs>
Status launch_final(const char* op, const Source<T>& source, const Sink<T>& sink, bool sorted,
                    const LaunchArgs& args) {
  if (!sorted || args.level->k == 1)
    return launch_level<T, kPairs, true, false>(op, source, sink, args);
  return launch_level<T, kPairs, true, true>(op, source, sink, args);
}

}  // namespace

Status run(const char* op, const Plan& plan, ConstMatrixRef x, MatrixRef values, MatrixRef indices,
           int64_t rows, DType dtype, const TopkOptions& options, void* workspace,
           cudaStream_t stream) {
  return dispatch_float(op, dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    Sink<T> final_sink;
    final_sink.values = static_cast<T*>(values.data);
    final_sink.values_stride = values.row_stride;
    final_sink.indices = indices.data;
    final_sink.indices_stride = indices.row_stride;
    final_sink.index64 = options.index_dtype == DType::kInt64;
    Source<T> source;
    source.x = static_cast<const T*>(x.data);
    source.x_stride = x.row_stride;
    const size_t levels = plan.levels.size();
    for (size_t i = 0; i < levels; ++i) {
      const Level& level = plan.levels[i];
      LaunchArgs args{rows, &level, options.largest, stream};
      const bool last = i + 1 == levels;
      Sink<T> sink = final_sink;
      if (!last) {
        const Buffer& out = plan.buffers[i % 2];
        sink.keys = reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + out.keys_offset);
        sink.columns =
            reinterpret_cast<uint32_t*>(static_cast<char*>(workspace) + out.columns_offset);
      }
      const Status status = [&] {
        if (i == 0 && last) return launch_final<T, false>(op, source, sink, options.sorted, args);
        if (i == 0) return launch_level<T, false, false, false>(op, source, sink, args);
        if (last) return launch_final<T, true>(op, source, sink, options.sorted, args);
        return launch_level<T, true, false, false>(op, source, sink, args);
      }();
      if (!status.ok()) return status;
      source.keys = sink.keys;
      source.columns = sink.columns;
    }
    return Status();
  });
}

const void* topk_family_kernel() {
  return reinterpret_cast<const void*>(topk_tile_kernel<float, false, true, true, kWideThreads>);
}

}  // namespace detail::topk
}  // namespace cudaops
