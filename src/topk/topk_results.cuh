#pragma once

// Row-wise top-k: a tile's results, the candidates sorted (by buckets of their keys, or merged)
// and written, or left in a slot for the next level.
#include "topk/topk_select.cuh"

namespace cudaops::detail::topk {
namespace {

// ---- results ----------------------------------------------------------------------------------

// Where a level's results go: slots of items (and their counts) for the next level, or the
// caller's values and indices.
template <typename T>
struct Out {
  uint64_t* items = nullptr;   // slot l (= row * tiles + tile) at items + l * slot
  uint32_t* counts = nullptr;  // its item count at counts[l]
  int slot = 0;
  T* values = nullptr;
  int64_t values_stride = 0;
  void* indices = nullptr;
  int64_t indices_stride = 0;
  bool index64 = true;
  bool sorted = true;
  bool largest = true;
  int column_shift = 0;  // item_primary's: the row's columns are below 2^(column_shift + kFloor)
};

// Pads buf[count, pow2(count)) with item 0 (which sorts last either way) and sorts it
// bitonically. Starts after a block barrier and ends with one.
template <int kThreads, bool kByColumn>
__device__ void pad_and_sort(uint64_t* buf, int count) {
  const int size = pow2_at_least(count);
  for (int i = count + threadIdx.x; i < size; i += kThreads)
    buf[i] = 0;
  __syncthreads();
  bitonic_sort_descending<kThreads, kByColumn>(buf, size);
  __syncthreads();
}

// A merge sort of buf[0, count) through registers, kItems per thread (count <= kThreads *
// kItems), with buf[0, kThreads * kItems] (one more item) as its shared storage.
template <int kThreads, int kItems, bool kByColumn>
__device__ void merge_sort(uint64_t* buf, int count) {
  using Sort = cub::BlockMergeSort<uint64_t, kThreads, kItems>;
  static_assert(sizeof(typename Sort::TempStorage) <= (kThreads * kItems + 1) * sizeof(uint64_t),
                "the sort's storage fits in the buffer");
  uint64_t items[kItems];
  __syncthreads();  // buf is written
  // Any placement sorts; striped loads keep the banks apart. Padding with item 0 sorts last.
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    items[j] = i < count ? buf[i] : 0u;
  }
  __syncthreads();
  Sort(*reinterpret_cast<typename Sort::TempStorage*>(buf)).Sort(items, Before<kByColumn>());
  __syncthreads();
  const int first = static_cast<int>(threadIdx.x) * kItems;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (first + j < count) buf[first + j] = items[j];
  }
  __syncthreads();
}

// Any placement of the items on the threads sorts. Neighbouring items were often written by
// neighbouring threads from neighbouring columns: tied 16-bit keys then fall in one bucket, or
// in buckets a multiple of 32 apart, for a whole warp. Each full 1024 items are therefore read
// transposed (a warp takes every 32nd), with the low bits swizzled so that the 8-byte loads
// stay two wavefronts.
__device__ __forceinline__ int spread_index(int i, int count) {
  if ((i | 1023) >= count) return i;
  const int lane = i & 31;
  return (i & ~1023) | (lane << 5) | (((i >> 5) ^ lane) & 31);
}

// A counting sort of buf[0, count) (at most kItems per thread) by buckets of the primary word
// (item_primary<kFloor>, or kByColumn the low word), then by comparison inside each bucket: a few
// barriers and no merge rounds. The buckets are 4 * kThreads equal ranges of the block's span of
// primary words, so that spread data leave at most about one item in each. Sorts nothing and
// returns false when a bucket would hold more than kBucketItems (ties, clustered data). Needs
// no barrier after the writes of buf; ends with a block barrier.
template <int kThreads, int kItems, bool kByColumn, int kFloor>
__device__ bool bucket_sort(uint64_t* buf, int count, SelectShared<kThreads>& s, int column_shift) {
  constexpr int kPer = 4;  // buckets per thread
  constexpr int kBuckets = kPer * kThreads;
  constexpr int kBucketBits = kThreads == 512 ? 11 : kThreads == 256 ? 10 : 9;
  static_assert(kBuckets == 1 << kBucketBits && kBuckets <= kBins, "buckets in s.hist");
  const int t = static_cast<int>(threadIdx.x);
  const Before<kByColumn> before;
  auto primary = [column_shift](uint64_t item) {
    return kByColumn ? static_cast<uint32_t>(item) : item_primary<kFloor>(item, column_shift);
  };
  __syncthreads();  // buf is written
  uint64_t item[kItems];
  uint32_t high = 0, low = 0xffffffffu;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kThreads + t;
    item[j] = i < count ? buf[spread_index(i, count)] : 0u;
    if (i < count) {
      high = max(high, primary(item[j]));
      low = min(low, primary(item[j]));
    }
  }
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    s.hist[q * kThreads + t] = 0;
  uint32_t unused = 0;
  block_spread(high, low, unused, s);  // its barrier also orders the zeroed buckets
  const uint32_t span = high - low;
  const int shift = max(32 - __clz(span) - kBucketBits, 0);  // span >> shift < kBuckets
  uint32_t place[kItems];                                    // the bucket, then the position
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) place[j] = (high - primary(item[j])) >> shift;
  }
  uint32_t slot[kItems];  // the arrival order in the bucket
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) slot[j] = atomicAdd(&s.hist[place[j]], 1u);
  }
  __syncthreads();
  // Bucket offsets: an exclusive scan of the counts, in place.
  // The thread's kPer = 4 buckets in one 16-byte piece (words 4 apart would conflict 4 ways).
  static_assert(kPer == 4, "a thread's buckets are one uint4");
  const uint4 counts = reinterpret_cast<const uint4*>(s.hist)[t];
  const uint32_t c[kPer] = {counts.x, counts.y, counts.z, counts.w};
  uint32_t sum = 0, most = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    sum += c[q];
    most = max(most, c[q]);
  }
  uint32_t offset = 0;
  cub::BlockScan<uint32_t, kThreads>(s.scan).ExclusiveSum(sum, offset);
  if (__syncthreads_or(most > kBucketItems)) return false;
  reinterpret_cast<uint4*>(s.hist)[t] =
      make_uint4(offset, offset + c[0], offset + c[0] + c[1], offset + c[0] + c[1] + c[2]);
  __syncthreads();
  // Each item to its bucket, in arrival order; then its rank among the bucket's.
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) buf[s.hist[place[j]] + slot[j]] = item[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) {
      const uint32_t first = s.hist[place[j]];
      const uint32_t end =
          place[j] + 1 < kBuckets ? s.hist[place[j] + 1] : static_cast<uint32_t>(count);
      uint32_t rank = 0;
      for (uint32_t i = first; i < end; ++i)
        rank += before(buf[i], item[j]) ? 1u : 0u;
      place[j] = first + rank;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (j * kThreads + t < count) buf[place[j]] = item[j];
  }
  __syncthreads();
  return true;
}

// bucket_sort, else (kMerge) a merge sort, else a bitonic sort.
template <int kThreads, int kItems, bool kByColumn, bool kMerge, int kFloor>
__device__ void bucket_or_merge_sort(uint64_t* buf, int count, SelectShared<kThreads>& s,
                                     int column_shift) {
  if (bucket_sort<kThreads, kItems, kByColumn, kFloor>(buf, count, s, column_shift)) return;
  if (kMerge && count > 256) {
    merge_sort<kThreads, kItems, kByColumn>(buf, count);
  } else {
    pad_and_sort<kThreads, kByColumn>(buf, count);
  }
}

// Sorts buf[0, count) in descending order (kByColumn: in ascending columns). Up to
// kBucketSortItems per thread, by buckets where the data are spread (bucket_sort); else, up to
// kMaxItems per thread, a merge sort through registers, or for at most 256 items a bitonic sort
// in one warp. Otherwise a bitonic sort of the whole block. The two limits bound the registers
// the sorts take (the merge sort's are the more). buf holds max(pow2(count), kThreads) + 1
// items. kFloor: the constant low bits of the keys (kKeyFloor). Needs no barrier after the writes
// of buf; ends with a block barrier.
template <int kThreads, int kMaxItems, bool kByColumn, int kBucketSortItems = kMaxItems,
          int kFloor = 0>
__device__ void sort_items(uint64_t* buf, int count, SelectShared<kThreads>& s,
                           int column_shift = 0) {
  static_assert(kBucketSortItems >= kMaxItems && kBucketSortItems <= 8, "bucket limits");
  if (count <= 1) {
    __syncthreads();
    return;
  }
  if (count <= kThreads) {
    bucket_or_merge_sort<kThreads, 1, kByColumn, true, kFloor>(buf, count, s, column_shift);
  } else if (kBucketSortItems >= 2 && count <= 2 * kThreads) {
    bucket_or_merge_sort<kThreads, 2, kByColumn, (kMaxItems >= 2), kFloor>(buf, count, s,
                                                                           column_shift);
  } else if (kBucketSortItems >= 4 && count <= 4 * kThreads) {
    bucket_or_merge_sort<kThreads, 4, kByColumn, (kMaxItems >= 4), kFloor>(buf, count, s,
                                                                           column_shift);
  } else if (kBucketSortItems >= 8 && count <= 8 * kThreads) {
    bucket_or_merge_sort<kThreads, 8, kByColumn, (kMaxItems >= 8), kFloor>(buf, count, s,
                                                                           column_shift);
  } else {
    __syncthreads();
    pad_and_sort<kThreads, kByColumn>(buf, count);
  }
}

// Writes best[0, k) (in descending order) to row `row` of the values and indices; unsorted
// results are first re-sorted by column (best must hold pow2(k) items). Starts after a block
// barrier.
template <typename T, int kThreads, int kMaxItems, int kBucketSortItems = kMaxItems>
__device__ void write_final(uint64_t* best, int k, const Out<T>& out, int64_t row,
                            SelectShared<kThreads>& s) {
  if (!out.sorted) sort_items<kThreads, kMaxItems, true, kBucketSortItems>(best, k, s);
  T* values = out.values + row * out.values_stride;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    const uint64_t item = best[i];
    values[i] = from_float<T>(decode(item_key(item), out.largest));
    const uint32_t column = item_column(item);
    if (out.index64) {
      static_cast<int64_t*>(out.indices)[row * out.indices_stride + i] = column;
    } else {
      static_cast<int32_t*>(out.indices)[row * out.indices_stride + i] =
          static_cast<int32_t>(column);
    }
  }
}

// Sorts the `count` items of buf (which holds pow2(count)) and writes the first k as the row's
// result. Starts after a block barrier.
template <typename T, int kThreads, int kMaxItems, int kBucketSortItems = kMaxItems>
__device__ void sort_and_write_final(uint64_t* buf, int count, int k, const Out<T>& out,
                                     int64_t row, SelectShared<kThreads>& s) {
  sort_items<kThreads, kMaxItems, false, kBucketSortItems, kKeyFloor<T>>(buf, count, s,
                                                                         out.column_shift);
  write_final<T, kThreads, kMaxItems, kBucketSortItems>(buf, k, out, row, s);
}

}  // namespace
}  // namespace cudaops::detail::topk
