#pragma once

// The decode attention over the index (docs/ivf.md), included by one translation unit per keys'
// dtype (ivf_attention_<dtype>.cu). On the caller's stream, every kernel dependent on the one
// before it:
//   ranking:   the search's cluster scores (tensor cores), with `group` the softmax weights summed
//              over each kv head's query heads (ivf_retrieve.cuh's kernels);
//   zones:     the probes' selection twice over the same ranking: the n_probe best (the exact
//              zone, with each probe's first token and place) and the n_probe + n_estimate best
//              (their difference is the estimated zone; one total order, so the first is inside
//              the second);
//   split:     blocks of a row's work (its exact tokens in place in the index, its estimated
//              clusters, the caller's extra tokens) each fold their part into a running maximum,
//              denominator and numerator per query head (flash-decoding's split over the keys),
//              the row's query heads sharing every key and value load;
//   merge:     a block per (row, query head) adds the splits' parts in order: the output and its
//              log-sum-exp.
#include <cmath>
#include <type_traits>

#include "ivf/ivf_retrieve.cuh"

namespace cudaops::detail::ivf {
namespace {

constexpr const char* kAttention = "ivf_attention";
constexpr int kAttnThreads = 128;  // 8 half warps: one item (token or cluster) each
constexpr int kAttnHalves = kAttnThreads / 16;
constexpr int kMergeThreads = 128;

template <typename T>
struct AttnArgs {
  const T* queries;         // [Hq, Q, D]
  const T* keys;            // the index's, [H, capacity, D] in cluster order
  const T* values;          // [H, capacity, Dv]
  const T* key_means;       // [H, max_clusters, D]
  const float* value_sums;  // [H, max_clusters, Dv]
  const int32_t* sizes;     // [H, max_clusters]
  const T* extra_keys;      // [H, X, D] or null
  const T* extra_values;    // [H, X, Dv]
  int64_t extra_tokens;     // X
  const int32_t* probes;    // [R, n_probe] the exact zone, ascending, -1 past the non-empty
  const int64_t* starts;    // [R, n_probe]
  const int64_t* places;    // [R, n_probe + 1]
  const int64_t* lengths;   // [R] the exact zone's tokens
  const int32_t* wide;      // [R, n_wide] the exact and estimated zones, or null
  int64_t n_wide;
  int64_t n_probe, n_clusters, capacity, max_clusters, n_queries;
  int64_t q_group;    // Hq / H
  int64_t row_heads;  // query heads a row holds: q_group with `group`, else 1
  int d, dv;
  float scale;
  int splits;
  float* partial_ml;   // [R, row_heads, splits, 2]: running maximum, denominator
  float* partial_acc;  // [R, row_heads, splits, Dv]
};

/// The state of a softmax being folded: maximum m, denominator l and numerator acc (of the
/// scores seen, each scaled by exp(score - m)). Two states combine exactly (flash-decoding).
__device__ __forceinline__ void rescale_factors(float m1, float m2, float* f1, float* f2,
                                                float* m) {
  *m = fmaxf(m1, m2);
  *f1 = *m == -INFINITY ? 0.0f : __expf(m1 - *m);
  *f2 = *m == -INFINITY ? 0.0f : __expf(m2 - *m);
}

/// Block (row blockIdx.x, split blockIdx.y, query heads blockIdx.z * kHeads on): the split's items
/// of the row, half a warp each. A lane holds 16-byte pieces lane, lane + 16, ... (kC of them)
/// of a key row and of a value row: d, dv <= 128 * kC.
template <typename T, int kC, int kHeads>
__global__ void __launch_bounds__(kAttnThreads) attention_split_kernel(AttnArgs<T> a) {
  __shared__ __align__(16) float qs[kHeads][kMaxDim];
  extern __shared__ __align__(16) unsigned char attn_smem[];
  follow_prior_kernels();
  const int64_t r = blockIdx.x;
  const int split = static_cast<int>(blockIdx.y);
  const int64_t head0 = static_cast<int64_t>(blockIdx.z) * kHeads;
  const int nh = static_cast<int>(min(static_cast<int64_t>(kHeads), a.row_heads - head0));
  const int64_t q = r % a.n_queries;
  // The row's first query head and its kv head: rows are (kv head, query) with the group's
  // heads, or (query head, query) alone.
  const int64_t g_first = (r / a.n_queries) * a.row_heads;
  const int64_t h = g_first / a.q_group;
  const int d = a.d, dv = a.dv;
  for (int i = threadIdx.x; i < kHeads * d; i += kAttnThreads) {
    const int hi = i / d, e = i % d;
    qs[hi][e] =
        hi < nh ? to_float(a.queries[((g_first + head0 + hi) * a.n_queries + q) * d + e]) : 0.0f;
  }
  // The exact zone's clusters as bits, so that the estimated zone skips them in one test.
  auto* exact = reinterpret_cast<uint32_t*>(attn_smem);
  const int words = a.wide != nullptr ? static_cast<int>((a.n_clusters + 31) / 32) : 0;
  for (int i = threadIdx.x; i < words; i += kAttnThreads)
    exact[i] = 0u;
  __syncthreads();
  if (a.wide != nullptr) {
    for (int64_t p = threadIdx.x; p < a.n_probe; p += kAttnThreads) {
      const int32_t c = a.probes[r * a.n_probe + p];
      if (c >= 0) atomicOr(&exact[c / 32], 1u << (c % 32));
    }
  }
  __syncthreads();

  const int64_t exact_n = a.lengths[r];
  const int64_t wide_n = a.wide != nullptr ? a.n_wide : 0;
  const int64_t work = exact_n + wide_n + a.extra_tokens;
  const int64_t begin = work * split / a.splits, end = work * (split + 1) / a.splits;
  const int half = static_cast<int>(threadIdx.x) / 16, lane = static_cast<int>(threadIdx.x) % 16;
  const unsigned mask = 0xffffu << (16 * ((threadIdx.x / 16) % 2));
  const int64_t* place = a.places + r * (a.n_probe + 1);
  const int64_t* start = a.starts + r * a.n_probe;

  float m[kHeads], l[kHeads], acc[kHeads][kC][8];
#pragma unroll
  for (int hi = 0; hi < kHeads; ++hi) {
    m[hi] = -INFINITY;
    l[hi] = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[hi][c][e] = 0.0f;
    }
  }
  // The probe holding exact place i: found once, then walked forward as i grows.
  int64_t probe = 0;
  {
    const int64_t i0 = min(begin + half, exact_n);
    int64_t lo = 0, hi = a.n_probe - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (place[mid] <= i0) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    probe = lo;
  }
  for (int64_t i = begin + half; i < end; i += kAttnHalves) {
    const T* krow;
    const void* vrow;
    bool sums = false;
    float weight = 1.0f;
    if (i < exact_n) {
      while (probe + 1 < a.n_probe && place[probe + 1] <= i)
        ++probe;
      const int64_t slot = h * a.capacity + start[probe] + (i - place[probe]);
      krow = a.keys + slot * d;
      vrow = a.values + slot * dv;
    } else if (i < exact_n + wide_n) {
      const int32_t c = a.wide[r * a.n_wide + (i - exact_n)];
      if (c < 0 || (exact[c / 32] >> (c % 32) & 1u) != 0) continue;
      const int32_t n = a.sizes[h * a.max_clusters + c];
      if (n <= 0) continue;
      krow = a.key_means + (h * a.max_clusters + c) * d;
      vrow = a.value_sums + (h * a.max_clusters + c) * dv;
      sums = true;
      weight = static_cast<float>(n);
    } else {
      const int64_t t = h * a.extra_tokens + (i - exact_n - wide_n);
      krow = a.extra_keys + t * d;
      vrow = a.extra_values + t * dv;
    }
    // The key's pieces, then every head's score (the half warp's sum of its lanes' parts).
    float k[kC][8];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int piece = lane + 16 * c;
      if (piece * 8 < d) {
        const Vec<T, 8> v = load_vec<T, 8>(krow + piece * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          k[c][e] = to_float(v.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          k[c][e] = 0.0f;
      }
    }
    // The value's pieces, loaded before the scores' shuffles so that both loads are in flight.
    float v[kC][8];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int piece = lane + 16 * c;
      if (piece * 8 < dv) {
        if (sums) {
          const auto* src = static_cast<const float*>(vrow) + piece * 8;
          const float4 lo4 = *reinterpret_cast<const float4*>(src);
          const float4 hi4 = *reinterpret_cast<const float4*>(src + 4);
          v[c][0] = lo4.x, v[c][1] = lo4.y, v[c][2] = lo4.z, v[c][3] = lo4.w;
          v[c][4] = hi4.x, v[c][5] = hi4.y, v[c][6] = hi4.z, v[c][7] = hi4.w;
        } else {
          const Vec<T, 8> x = load_vec<T, 8>(static_cast<const T*>(vrow) + piece * 8);
#pragma unroll
          for (int e = 0; e < 8; ++e)
            v[c][e] = to_float(x.v[e]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[c][e] = 0.0f;
      }
    }
#pragma unroll
    for (int hi = 0; hi < kHeads; ++hi) {
      if (hi >= nh) break;
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int piece = lane + 16 * c;
        if (piece * 8 < d) {
          const float4 q0 = *reinterpret_cast<const float4*>(&qs[hi][piece * 8]);
          const float4 q1 = *reinterpret_cast<const float4*>(&qs[hi][piece * 8 + 4]);
          dot = fmaf(q0.x, k[c][0], dot);
          dot = fmaf(q0.y, k[c][1], dot);
          dot = fmaf(q0.z, k[c][2], dot);
          dot = fmaf(q0.w, k[c][3], dot);
          dot = fmaf(q1.x, k[c][4], dot);
          dot = fmaf(q1.y, k[c][5], dot);
          dot = fmaf(q1.z, k[c][6], dot);
          dot = fmaf(q1.w, k[c][7], dot);
        }
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)
        dot += __shfl_xor_sync(mask, dot, o, 16);
      const float score = dot * a.scale;
      const float m_new = fmaxf(m[hi], score);
      const float keep = __expf(m[hi] - m_new);  // 0 while m is -inf
      const float p = __expf(score - m_new);
      m[hi] = m_new;
      l[hi] = fmaf(l[hi], keep, weight * p);
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[hi][c][e] = fmaf(acc[hi][c][e], keep, p * v[c][e]);
      }
    }
  }

  // The two halves of each warp combined, then the warps through shared memory, in order.
#pragma unroll
  for (int hi = 0; hi < kHeads; ++hi) {
    const float om = __shfl_xor_sync(0xffffffffu, m[hi], 16);
    const float ol = __shfl_xor_sync(0xffffffffu, l[hi], 16);
    float f_lo, f_hi, mm;
    // The lower half first, whichever lane computes it.
    const bool upper = (threadIdx.x / 16) % 2 != 0;
    rescale_factors(upper ? om : m[hi], upper ? m[hi] : om, &f_lo, &f_hi, &mm);
    const float f_self = upper ? f_hi : f_lo, f_other = upper ? f_lo : f_hi;
    l[hi] = upper ? ol * f_other + l[hi] * f_self : l[hi] * f_self + ol * f_other;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, acc[hi][c][e], 16);
        acc[hi][c][e] = upper ? other * f_other + acc[hi][c][e] * f_self
                              : acc[hi][c][e] * f_self + other * f_other;
      }
    }
    m[hi] = mm;
  }
  constexpr int kWarps = kAttnThreads / 32;
  auto* warp_ml = reinterpret_cast<float*>(attn_smem + ((words * 4 + 15) / 16) * 16);  // [W][H][2]
  float* warp_acc = warp_ml + kWarps * kHeads * 2;                                     // [W][H][dv]
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (threadIdx.x % 32 < 16) {
#pragma unroll
    for (int hi = 0; hi < kHeads; ++hi) {
      if (lane == 0) {
        warp_ml[(warp * kHeads + hi) * 2] = m[hi];
        warp_ml[(warp * kHeads + hi) * 2 + 1] = l[hi];
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int piece = lane + 16 * c;
        if (piece * 8 < dv) {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            warp_acc[(warp * kHeads + hi) * dv + piece * 8 + e] = acc[hi][c][e];
        }
      }
    }
  }
  __syncthreads();
  const int64_t part = (r * a.row_heads + head0) * a.splits + split;  // of head hi: + hi * splits
  for (int i = threadIdx.x; i < nh * dv; i += kAttnThreads) {
    const int hi = i / dv, e = i % dv;
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w)
      mm = fmaxf(mm, warp_ml[(w * kHeads + hi) * 2]);
    float sum_l = 0.0f, sum_a = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float f = mm == -INFINITY ? 0.0f : __expf(warp_ml[(w * kHeads + hi) * 2] - mm);
      sum_l = fmaf(warp_ml[(w * kHeads + hi) * 2 + 1], f, sum_l);
      sum_a = fmaf(warp_acc[(w * kHeads + hi) * dv + e], f, sum_a);
    }
    const int64_t at = part + hi * a.splits;
    a.partial_acc[at * dv + e] = sum_a;
    if (e == 0) {
      a.partial_ml[2 * at] = mm;
      a.partial_ml[2 * at + 1] = sum_l;
    }
  }
}

/// A block per (row, head of the row): the splits' parts added in order; the output row in T and
/// its log-sum-exp (natural log of the denominator plus the maximum; -inf where nothing was
/// attended, with a zero output).
template <typename T>
__global__ void __launch_bounds__(kMergeThreads)
    attention_merge_kernel(const float* partial_ml, const float* partial_acc, int64_t n_queries,
                           int64_t row_heads, int splits, int dv, T* out, float* lse) {
  follow_prior_kernels();
  const int64_t i = blockIdx.x;  // r * row_heads + hi
  const int64_t r = i / row_heads, hi = i % row_heads;
  const int64_t q = r % n_queries;
  const int64_t g = (r / n_queries) * row_heads + hi;
  const float* ml = partial_ml + 2 * i * splits;
  const float* pa = partial_acc + i * splits * dv;
  float mm = -INFINITY;
  for (int s = 0; s < splits; ++s)
    mm = fmaxf(mm, ml[2 * s]);
  float sum_l = 0.0f;
  for (int s = 0; s < splits; ++s)
    sum_l += mm == -INFINITY ? 0.0f : ml[2 * s + 1] * __expf(ml[2 * s] - mm);
  const float inv = sum_l > 0.0f ? 1.0f / sum_l : 0.0f;
  const int64_t row = g * n_queries + q;
  for (int e = threadIdx.x; e < dv; e += kMergeThreads) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s)
      sum += mm == -INFINITY ? 0.0f : pa[s * dv + e] * __expf(ml[2 * s] - mm);
    out[row * dv + e] = from_float<T>(sum * inv);
  }
  if (lse != nullptr && threadIdx.x == 0) lse[row] = sum_l > 0.0f ? mm + logf(sum_l) : -INFINITY;
}

}  // namespace

template <typename T>
Status launch_attention(const AttentionCall& call, cudaStream_t stream) {
  const IvfShape& s = call.shape;
  const AttentionLayout& w = call.layout;
  unsigned char* ws = call.workspace;
  const unsigned char* ix = call.buffer;
  const char* op = kAttention;
  const int64_t query_rows = call.q_heads * call.n_queries;
  if (query_rows == 0) return Status();
  const int64_t q_group = call.q_heads / s.heads;
  const int64_t rows = w.rows;
  const T* queries = static_cast<const T*>(call.queries);
  const float* ranked = nullptr;
  if (Status st = launch_ranking(
          op, s, call.index, ix, queries, call.q_heads, call.n_queries, call.n_clusters, call.group,
          reinterpret_cast<float*>(ws + w.cluster_scores), reinterpret_cast<float*>(ws + w.stats),
          reinterpret_cast<float*>(ws + w.group_scores), &ranked, stream);
      !st.ok()) {
    return st;
  }
  const int64_t row_group = call.group ? 1 : q_group;
  const auto* offsets = reinterpret_cast<const int64_t*>(ix + call.index.offsets);
  const int64_t n_wide = call.n_probe + call.n_estimate;
  if (call.n_estimate > 0) {
    if (Status st = launch_probes(op, rows, ranked, offsets, call.n_clusters, call.n_queries,
                                  row_group, s.max_clusters, n_wide, call.tokens,
                                  reinterpret_cast<int32_t*>(ws + w.wide_probes),
                                  reinterpret_cast<int64_t*>(ws + w.wide_starts),
                                  reinterpret_cast<int64_t*>(ws + w.wide_places),
                                  reinterpret_cast<int64_t*>(ws + w.wide_lengths), stream);
        !st.ok()) {
      return st;
    }
  }
  if (Status st = launch_probes(
          op, rows, ranked, offsets, call.n_clusters, call.n_queries, row_group, s.max_clusters,
          call.n_probe, call.tokens, reinterpret_cast<int32_t*>(ws + w.probes),
          reinterpret_cast<int64_t*>(ws + w.starts), reinterpret_cast<int64_t*>(ws + w.places),
          reinterpret_cast<int64_t*>(ws + w.lengths), stream);
      !st.ok()) {
    return st;
  }
  AttnArgs<T> a;
  a.queries = queries;
  a.keys = reinterpret_cast<const T*>(ix + call.index.keys);
  a.values = reinterpret_cast<const T*>(ix + call.index.values);
  a.key_means = reinterpret_cast<const T*>(ix + call.index.key_means);
  a.value_sums = reinterpret_cast<const float*>(ix + call.index.value_sums);
  a.sizes = reinterpret_cast<const int32_t*>(ix + call.index.sizes);
  a.extra_keys = static_cast<const T*>(call.extra.keys);
  a.extra_values = static_cast<const T*>(call.extra.values);
  a.extra_tokens = call.extra.tokens;
  a.probes = reinterpret_cast<const int32_t*>(ws + w.probes);
  a.starts = reinterpret_cast<const int64_t*>(ws + w.starts);
  a.places = reinterpret_cast<const int64_t*>(ws + w.places);
  a.lengths = reinterpret_cast<const int64_t*>(ws + w.lengths);
  a.wide = call.n_estimate > 0 ? reinterpret_cast<const int32_t*>(ws + w.wide_probes) : nullptr;
  a.n_wide = n_wide;
  a.n_probe = call.n_probe;
  a.n_clusters = call.n_clusters;
  a.capacity = s.capacity;
  a.max_clusters = s.max_clusters;
  a.n_queries = call.n_queries;
  a.q_group = q_group;
  a.row_heads = w.row_heads;
  a.d = static_cast<int>(s.dim);
  a.dv = static_cast<int>(s.value_dim);
  a.scale = call.scale;
  a.splits = static_cast<int>(w.splits);
  a.partial_ml = reinterpret_cast<float*>(ws + w.partial_ml);
  a.partial_acc = reinterpret_cast<float*>(ws + w.partial_acc);
  constexpr int kHeads = static_cast<int>(kAttentionHeads);
  const int64_t words = call.n_estimate > 0 ? (call.n_clusters + 31) / 32 : 0;
  const size_t smem = static_cast<size_t>((words * 4 + 15) / 16 * 16) +
                      static_cast<size_t>(4 * kHeads * (2 + s.value_dim)) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(w.splits),
                  static_cast<unsigned>((w.row_heads + kHeads - 1) / kHeads));
  const int64_t widest = std::max(s.dim, s.value_dim);
  const auto with = [&](auto chunks) {
    constexpr int kC = decltype(chunks)::value;
    const auto kernel = attention_split_kernel<T, kC, kHeads>;
    if (Status st = allow_dynamic_smem(op, reinterpret_cast<const void*>(kernel), smem); !st.ok()) {
      return st;
    }
    return launch_after(op, kernel, grid, kAttnThreads, smem, stream, a);
  };
  const Status split = widest <= 128   ? with(std::integral_constant<int, 1>{})
                       : widest <= 256 ? with(std::integral_constant<int, 2>{})
                                       : with(std::integral_constant<int, 4>{});
  if (!split.ok()) return split;
  return launch_after(
      op, attention_merge_kernel<T>, dim3(static_cast<unsigned>(rows * w.row_heads)), kMergeThreads,
      0, stream, static_cast<const float*>(a.partial_ml), static_cast<const float*>(a.partial_acc),
      call.n_queries, w.row_heads, a.splits, a.dv, static_cast<T*>(call.out), call.lse);
}

#define CUDAOPS_IVF_ATTENTION_INSTANTIATE(T) \
  template Status launch_attention<T>(const AttentionCall& call, cudaStream_t stream);

}  // namespace cudaops::detail::ivf
