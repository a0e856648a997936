#pragma once

// The IVF search's selection: a block finds the k best of a row's items, where an item is a unique
// 64-bit key (a score's rank key above, the complement of an id below: larger is better, ties to
// the lower id). Every pass reads the row again, from shared memory where it fits.
//
// First choice, one pass of bins (bin_pass): 2048 bins spread linearly over the range of the row's
// finite scores, so that scores spread over a range leave a few items in each bin; the bin of the
// k-th item is found by a scan of the counts, and only that bin's items (select_by_bins), or only
// the items of each selected bin among themselves (sort_by_bins, which also sorts the k best), are
// compared. Where that bin is crowded (ties, scores bunched at one value) a radix select of 11-bit
// digits from the top (select_bound) narrows the bin that holds the k-th item and stops as soon as
// that bin is taken whole, and a bitonic sort orders the k results.
#include <cub/block/block_scan.cuh>

#include <cfloat>
#include <cstdint>

namespace cudaops::detail::ivf {
namespace {

constexpr int kSelectThreads = 512;
constexpr int kDigitBits = 11;
constexpr int kDigits = 1 << kDigitBits;
constexpr int kBinsPerThread = kDigits / kSelectThreads;
static_assert(kBinsPerThread * kSelectThreads == kDigits, "every thread holds whole bins");

/// A float's rank key: unsigned order is the float's order, -0.0 below +0.0, NaN above all.
__device__ __forceinline__ uint32_t rank_key(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t ordered =
      bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
  return f != f ? 0xffffffffu : ordered;
}

__device__ __forceinline__ float rank_value(uint32_t key) {
  if (key == 0xffffffffu) return __uint_as_float(0x7fc00000u);
  return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

/// The item of a score and a non-negative id.
__device__ __forceinline__ uint64_t make_item(float score, int32_t id) {
  return (static_cast<uint64_t>(rank_key(score)) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ float item_score(uint64_t item) {
  return rank_value(static_cast<uint32_t>(item >> 32));
}

__device__ __forceinline__ int32_t item_id(uint64_t item) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(item));
}

using SelectScan = cub::BlockScan<uint32_t, kSelectThreads>;

struct SelectShared {
  uint32_t hist[kDigits];
  uint32_t start[kDigits];  // sort_by_bins: the items in the bins above each bin
  typename SelectScan::TempStorage scan;
  uint64_t all[kSelectThreads / 32];  // per warp: the AND of its items
  uint64_t any[kSelectThreads / 32];  // and the OR
  float low[kSelectThreads / 32];     // per warp: the least finite score
  float high[kSelectThreads / 32];    // and the largest
  uint64_t prefix;                    // the result: the k best are the items >= prefix
  uint64_t mask;
  uint32_t left;  // items still wanted from the bin `prefix` names
  int done;
  int top;            // bits below it differ between items
  uint32_t kth_bin;   // bin_pass: the bin of the k-th item
  uint32_t kth_need;  // how many of that bin's items are among the k best
  uint32_t kth_count;
  uint32_t crowd;  // the most items of a bin at or above it
  uint32_t taken;  // items placed so far
};

/// The rank key of -inf (an empty cluster's score).
constexpr uint32_t kNegInfKey = 0x007fffffu;

// Rows of up to this many items are first copied to shared memory (where the passes read them
// again), longer ones are read from global memory in every pass.
constexpr int64_t kStagedScores = 16384;  // the probes' rows (4-byte scores)
constexpr int64_t kStagedItems = 8192;    // the candidates' rows (8-byte items)

/// Copies row[0, n) to staged (n within its capacity), eight loads a thread in flight; the
/// caller's barrier orders it before any read.
template <typename T>
__device__ __forceinline__ void stage_row(const T* row, int64_t n, T* staged) {
  constexpr int kLoads = 8;
  for (int64_t base = 0; base < n; base += int64_t{kSelectThreads} * kLoads) {
    T v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = base + u * kSelectThreads + threadIdx.x;
      if (i < n) v[u] = row[i];
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = base + u * kSelectThreads + threadIdx.x;
      if (i < n) staged[i] = v[u];
    }
  }
}

/// A row of scores (4-byte floats) whose items are (score, index).
struct ScoreRow {
  const float* at;
  int64_t n;
  __device__ float score(uint32_t i) const { return at[i]; }
  __device__ uint64_t item(uint32_t i) const { return make_item(at[i], static_cast<int32_t>(i)); }
};

/// A row of items.
struct ItemRow {
  const uint64_t* at;
  int64_t n;
  __device__ float score(uint32_t i) const { return item_score(at[i]); }
  __device__ uint64_t item(uint32_t i) const { return at[i]; }
};

/// Calls f(i, valid) for the places of a row of n, striped over the block (neighbouring threads,
/// neighbouring places), every thread of the block the same number of times, so that f may use
/// warp collectives.
template <typename F>
__device__ __forceinline__ void for_each_place(int64_t n, F f) {
  // 32-bit places: rows are below 2^31 (token ids are int32).
  const auto end = static_cast<uint32_t>(n);
  for (uint32_t i0 = 0; i0 < end; i0 += kSelectThreads) {
    const uint32_t i = i0 + threadIdx.x;
    f(i, i < end);
  }
}

/// for_each_place calling f(item, valid) (the item 0 where not valid): select_bound's `each`.
template <typename Row, typename F>
__device__ __forceinline__ void for_each_item(const Row& row, F f) {
  for_each_place(row.n,
                 [&](uint32_t i, bool valid) { f(valid ? row.item(i) : uint64_t{0}, valid); });
}

/// This thread's counts of s.hist (c, and their sum), thread t holding bins kDigits - 1 -
/// kBinsPerThread * t downwards, and the items in the bins above them (an exclusive scan over the
/// block).
__device__ __forceinline__ uint32_t bins_above(SelectShared& s, uint32_t (&c)[kBinsPerThread],
                                               uint32_t& sum) {
  sum = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    c[j] = s.hist[kDigits - 1 - (threadIdx.x * kBinsPerThread + j)];
    sum += c[j];
  }
  uint32_t above = 0;
  SelectScan(s.scan).ExclusiveSum(sum, above);
  return above;
}

/// The bound of the k best of n items (`each(f)` calls f(item, valid) on each of the row's items
/// as for_each_item does): afterwards item x is among them exactly when
/// x >= s.prefix (s.prefix has no bits outside s.mask). With n <= k every item is.
///
/// The bits every item shares are found first (an AND and an OR over the row) and skipped, so
/// that the first digit already spreads the items; counts of one warp for one bin go in as one
/// atomic (scores of a row share their top bits, and same-address atomics would serialise).
template <typename Each>
__device__ void select_bound(int64_t n, int64_t k, Each each, SelectShared& s) {
  if (n <= k) {
    if (threadIdx.x == 0) {
      s.prefix = 0;
      s.mask = 0;
    }
    __syncthreads();
    return;
  }
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  uint64_t all = ~uint64_t{0}, any = 0;
  each([&](uint64_t item, bool valid) {
    if (valid) {
      all &= item;
      any |= item;
    }
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    all &= __shfl_xor_sync(0xffffffffu, all, o);
    any |= __shfl_xor_sync(0xffffffffu, any, o);
  }
  if (lane == 0) {
    s.all[warp] = all;
    s.any[warp] = any;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSelectThreads / 32; ++w) {
      all &= s.all[w];
      any |= s.any[w];
    }
    const int top = 64 - __clzll(static_cast<long long>(all ^ any));  // > 0: items are unique
    s.top = top;
    s.mask = top == 64 ? 0 : ~((uint64_t{1} << top) - 1);
    s.prefix = all & s.mask;
    s.left = static_cast<uint32_t>(k);
    s.done = 0;
  }
  __syncthreads();
  for (int top = s.top; top > 0; top -= kDigitBits) {
    const int shift = top > kDigitBits ? top - kDigitBits : 0;
    const uint64_t digit = (uint64_t{1} << (top - shift)) - 1;
    const uint64_t mask = s.mask, prefix = s.prefix;
    const uint32_t left = s.left;
    for (int b = threadIdx.x; b < kDigits; b += kSelectThreads)
      s.hist[b] = 0;
    __syncthreads();
    each([&](uint64_t item, bool valid) {
      const bool in = valid && (item & mask) == prefix;
      const uint32_t bin = in ? static_cast<uint32_t>((item >> shift) & digit) : kDigits;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (in && (peers & ((1u << lane) - 1)) == 0) atomicAdd(&s.hist[bin], __popc(peers));
    });
    __syncthreads();
    uint32_t c[kBinsPerThread], sum = 0;
    uint32_t above = bins_above(s, c, sum);
    if (above < left && above + sum >= left) {  // one thread: its bins hold the k-th item
#pragma unroll
      for (int j = 0; j < kBinsPerThread; ++j) {
        if (above + c[j] >= left) {
          const uint64_t bin = kDigits - 1 - (threadIdx.x * kBinsPerThread + j);
          s.prefix = prefix | (bin << shift);
          s.mask = mask | (digit << shift);
          s.left = left - above;
          s.done = c[j] == left - above;
          break;
        }
        above += c[j];
      }
    }
    __syncthreads();
    if (s.done) return;  // the same for every thread
  }
}

/// How many of items[first, end) are larger than `item` (its rank among them, from 0).
__device__ __forceinline__ uint32_t items_above(const uint64_t* items, uint32_t first, uint32_t end,
                                                uint64_t item) {
  uint32_t rank = 0;
  for (uint32_t j = first; j < end; ++j)
    rank += items[j] > item ? 1u : 0u;
  return rank;
}

constexpr uint32_t kMaxTies = 256;    // items of the k-th item's bin select_by_bins compares
constexpr uint32_t kMaxBinRun = 128;  // items of one bin sort_by_bins ranks among themselves

/// The bin of a score among kDigits spread linearly over [low, low + kDigits / scale] (low the
/// least finite score, scale > 0 and finite): monotone in the item order, so that a higher bin
/// holds only larger items. -inf goes to the lowest bin, +inf and NaN to the highest. Selects,
/// no branches: it runs for every item of every pass.
__device__ __forceinline__ uint32_t bin_of(float v, float low, float scale) {
  const float t = v != v ? static_cast<float>(kDigits - 1) : (v - low) * scale;
  return static_cast<uint32_t>(fminf(fmaxf(t, 0.0f), static_cast<float>(kDigits - 1)));
}

/// One pass of bins over a row of n > 0 items (ScoreRow, ItemRow): the counts per bin, then the
/// bin holding the k-th largest item (k <= n) in s.kth_bin, with how many of its items are among
/// the k best (s.kth_need) and its count. kStarts: also each bin's first place in descending
/// order (in s.start, and in s.hist, ready to be advanced as items are placed) and the most
/// items of any bin at or above the k-th's (s.crowd). Returns false (the same for every thread)
/// where the finite scores span no range a float can divide into bins: every one would be in
/// one bin; `s` is then free to use again. Otherwise ends with a block barrier.
template <bool kStarts, typename Row>
__device__ __forceinline__ bool bin_pass(const Row& row, int64_t k, SelectShared& s, float& low,
                                         float& scale) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  float lo = INFINITY, hi = -INFINITY;
  for_each_place(row.n, [&](uint32_t i, bool valid) {
    const float v = valid ? row.score(i) : 0.0f;
    if (valid && fabsf(v) <= FLT_MAX) {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (lane == 0) {
    s.low[warp] = lo;
    s.high[warp] = hi;
  }
  for (int b = threadIdx.x; b < kDigits; b += kSelectThreads)
    s.hist[b] = 0;
  if (threadIdx.x == 0) {
    s.crowd = 0;
    s.taken = 0;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kSelectThreads / 32; ++w) {
    lo = fminf(lo, s.low[w]);
    hi = fmaxf(hi, s.high[w]);
  }
  const float width = hi - lo;
  const float per = width > 0.0f && width <= FLT_MAX ? kDigits / width : 0.0f;
  scale = per <= FLT_MAX ? per : 0.0f;
  low = lo;
  if (scale == 0.0f) return false;
  // One atomic per item: bins spread the items, so that a warp's rarely meet (a match of the
  // warp's bins first cost more than the conflicts it saved).
  for_each_place(row.n, [&](uint32_t i, bool valid) {
    if (valid) atomicAdd(&s.hist[bin_of(row.score(i), lo, scale)], 1u);
  });
  __syncthreads();
  uint32_t c[kBinsPerThread], sum = 0;
  uint32_t above = bins_above(s, c, sum);
  const auto want = static_cast<uint32_t>(k);
  uint32_t crowd = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const uint32_t bin = kDigits - 1 - (threadIdx.x * kBinsPerThread + j);
    if (kStarts) {
      s.start[bin] = above;
      s.hist[bin] = above;  // only this thread reads or writes its bins here
      if (above < want) crowd = max(crowd, c[j]);
    }
    if (above < want && above + c[j] >= want) {
      s.kth_bin = bin;
      s.kth_need = want - above;
      s.kth_count = c[j];
    }
    above += c[j];
  }
  if (kStarts && crowd > 0) atomicMax(&s.crowd, crowd);
  __syncthreads();
  return true;
}

/// select_bound's result (s.prefix) by one pass of bins: the k-th largest item, found among the
/// items of its bin alone. Returns false, having set nothing, where the bins cannot spread the
/// scores or that bin holds more than kMaxTies items (ties: `ties` holds that many); the caller
/// then runs select_bound. Every thread is past its last use of `s` and `ties` when it returns.
template <typename Row>
__device__ __forceinline__ bool select_by_bins(const Row& row, int64_t k, SelectShared& s,
                                               uint64_t* ties) {
  if (row.n <= k) {
    select_bound(
        row.n, k, [&](auto f) { for_each_item(row, f); }, s);
    return true;
  }
  float low = 0.0f, scale = 0.0f;
  if (!bin_pass<false>(row, k, s, low, scale)) return false;
  const uint32_t kth = s.kth_bin, count = s.kth_count, need = s.kth_need;
  if (count > kMaxTies) return false;  // the same for every thread
  for_each_place(row.n, [&](uint32_t i, bool valid) {
    if (valid && bin_of(row.score(i), low, scale) == kth)
      ties[atomicAdd(&s.taken, 1u)] = row.item(i);
  });
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < count; i += kSelectThreads) {
    if (items_above(ties, 0, count, ties[i]) == need - 1) s.prefix = ties[i];
  }
  __syncthreads();
  return true;
}

/// select_by_bins' choice as marks, for a row of n > k items: bit i % 32 of marks[i / 32] set
/// where item i is among the k best, the items above the k-th's bin marked as they are binned
/// (a ballot per 32), that bin's own after they are compared. ties: kMaxTies items, at: their
/// places. Returns false, having marked nothing, as select_by_bins does. Ends with a block
/// barrier when it returns true.
template <typename Row>
__device__ __forceinline__ bool mark_by_bins(const Row& row, int64_t k, SelectShared& s,
                                             uint64_t* ties, uint32_t* at, uint32_t* marks) {
  float low = 0.0f, scale = 0.0f;
  if (!bin_pass<false>(row, k, s, low, scale)) return false;
  const uint32_t kth = s.kth_bin, count = s.kth_count, need = s.kth_need;
  if (count > kMaxTies) return false;  // the same for every thread
  const int lane = static_cast<int>(threadIdx.x % 32);
  for_each_place(row.n, [&](uint32_t i, bool valid) {
    const uint32_t bin = valid ? bin_of(row.score(i), low, scale) : 0;
    const unsigned above = __ballot_sync(0xffffffffu, valid && bin > kth);
    if (lane == 0 && valid) marks[i / 32] = above;
    if (valid && bin == kth) {
      const uint32_t t = atomicAdd(&s.taken, 1u);
      ties[t] = row.item(i);
      at[t] = static_cast<uint32_t>(i);
    }
  });
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < count; t += kSelectThreads) {
    if (items_above(ties, 0, count, ties[t]) < need) {
      atomicOr(&marks[at[t] / 32], 1u << (at[t] % 32));
    }
  }
  __syncthreads();
  return true;
}

/// The min(n, k) best of a row of n > 0 items, best first, by one pass of bins: each item of a bin
/// at or above the k-th item's is placed in its bin's range of buf (k + kMaxBinRun items), then
/// ranked among that bin's items alone; write(i, item) gets the i-th best. Returns false, having
/// written nothing, where the bins cannot spread the scores or one of those bins holds more than
/// kMaxBinRun items (ties; the caller then selects and sorts otherwise, `s` free to use again).
template <typename Row, typename Write>
__device__ __forceinline__ bool sort_by_bins(const Row& row, int64_t k, SelectShared& s,
                                             uint64_t* buf, Write write) {
  const int64_t count = min(row.n, k);
  float low = 0.0f, scale = 0.0f;
  if (!bin_pass<true>(row, count, s, low, scale) || s.crowd > kMaxBinRun) return false;
  const uint32_t kth = s.kth_bin;
  for_each_place(row.n, [&](uint32_t i, bool valid) {
    const uint32_t bin = valid ? bin_of(row.score(i), low, scale) : 0;
    if (valid && bin >= kth) buf[atomicAdd(&s.hist[bin], 1u)] = row.item(i);
  });
  __syncthreads();
  // The placed items, each ranked among its bin's.
  const uint32_t placed = s.hist[kth];
  for (uint32_t p = threadIdx.x; p < placed; p += kSelectThreads) {
    const uint64_t item = buf[p];
    const uint32_t bin = bin_of(item_score(item), low, scale);
    const uint32_t first = s.start[bin];
    const uint32_t place = first + items_above(buf, first, s.hist[bin], item);
    if (place < count) write(static_cast<int64_t>(place), item);
  }
  return true;
}

constexpr int kMaxSortRuns = 4;  // runs of 64 items a warp sorts
constexpr int kMaxSorted = kSelectThreads / 32 * kMaxSortRuns * 64;

/// Sorts buf[0, n) descending: a bitonic sort, n a power of two from 64 to kMaxSorted. Each warp
/// holds runs of 64 items in registers for the strides below 64 (shuffles, no barrier); only the
/// longer strides go through shared memory.
__device__ void sort_descending(uint64_t* buf, int n) {
  constexpr int kWarps = kSelectThreads / 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int runs = n / 64;
  uint64_t v[kMaxSortRuns][2];
  const auto move = [&](bool to_shared) {
#pragma unroll
    for (int q = 0; q < kMaxSortRuns; ++q) {
      const int r = warp + q * kWarps;
      if (r >= runs) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint64_t& at = buf[r * 64 + h * 32 + lane];
        if (to_shared) {
          at = v[q][h];
        } else {
          v[q][h] = at;
        }
      }
    }
  };
  move(false);
  for (int size = 2; size <= n; size <<= 1) {
    if (size >= 128) {
      move(true);
      __syncthreads();
      for (int stride = size / 2; stride >= 64; stride >>= 1) {
        for (int t = threadIdx.x; t < n / 2; t += kSelectThreads) {
          const int i = 2 * t - (t & (stride - 1)), j = i + stride;
          const uint64_t a = buf[i], b = buf[j];
          if ((a < b) == ((i & size) == 0)) {
            buf[i] = b;
            buf[j] = a;
          }
        }
        __syncthreads();
      }
      move(false);
    }
    for (int stride = min(size / 2, 32); stride > 0; stride >>= 1) {
#pragma unroll
      for (int q = 0; q < kMaxSortRuns; ++q) {
        const int r = warp + q * kWarps;
        if (r >= runs) continue;  // the same for the whole warp
        if (stride == 32) {
          const bool desc = ((r * 64 + lane) & size) == 0;
          const uint64_t a = v[q][0], b = v[q][1];
          if ((a < b) == desc) {
            v[q][0] = b;
            v[q][1] = a;
          }
          continue;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = r * 64 + h * 32 + lane;
          const uint64_t o = __shfl_xor_sync(0xffffffffu, v[q][h], stride);
          const bool desc = (i & size) == 0, lower = (lane & stride) == 0;
          v[q][h] = (lower == desc) ? max(v[q][h], o) : min(v[q][h], o);
        }
      }
    }
  }
  move(true);
  __syncthreads();
}

}  // namespace
}  // namespace cudaops::detail::ivf
