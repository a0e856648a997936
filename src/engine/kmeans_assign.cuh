#pragma once

// Batched k-means: the assignment (see kmeans_kernels.cuh), instantiated one dtype per
// translation unit (kmeans_assign_<dtype>.cu), apart from the rest of the call: its kernels are
// most of the family's compile time.
#include "engine/kmeans_mma.cuh"

namespace cudaops::detail::kmeans {
namespace {

// ---- the assignment
// ------------------------------------------------------------------------------

template <int kWarps>
constexpr int kRowsPerBlock = kWarps * 32;

/// Dynamic shared memory of assign_kernel: the block's points, then two stages of centroids.
inline size_t assign_smem(int warps, int d_pad, int element) {
  return static_cast<size_t>(warps * 32 + 2 * kChunk) *
         static_cast<size_t>(smem_row_bytes(d_pad, element));
}

template <typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 8 ? 2 : 1)
    assign_kernel(AssignArgs<T> args) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kM = kRowsPerBlock<kWarps>;
  constexpr int kThreads = kWarps * 32;
  const int row_bytes = smem_row_bytes(args.d_pad, sizeof(T));
  unsigned char* a_tile = smem;
  unsigned char* b_tiles = smem + kM * row_bytes;
  const int64_t b = blockIdx.x / args.tiles;
  const int64_t row0 = (blockIdx.x % args.tiles) * kM;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  if (row0 >= len || (args.moved != nullptr && args.moved[b] == 0)) return;
  const int chunks16 = args.d_pad * static_cast<int>(sizeof(T)) / 16;  // 16-byte pieces of a row
  const int row_valid_bytes = args.d * static_cast<int>(sizeof(T));
  // The block's points: rows past the problem's end and values past d are zero.
  for (int idx = threadIdx.x; idx < kM * chunks16; idx += kThreads) {
    const int r = idx / chunks16, q = idx % chunks16;
    const int64_t i = row0 + r;
    const int bytes = i < len ? max(0, min(16, row_valid_bytes - q * 16)) : 0;
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(bytes > 0 ? first + i * args.rows.ld : first);
    copy16(a_tile + r * row_bytes + q * 16, src + (bytes > 0 ? q * 16 : 0), bytes);
  }
  const T* operand = args.operand + b * args.k * args.d_pad;
  const int64_t n_chunks = (args.k + kChunk - 1) / kChunk;
  auto load_chunk = [&](int64_t chunk) {
    unsigned char* dst = b_tiles + (chunk & 1) * kChunk * row_bytes;
    const int64_t j0 = chunk * kChunk;
    for (int idx = threadIdx.x; idx < kChunk * chunks16; idx += kThreads) {
      const int r = idx / chunks16, q = idx % chunks16;
      const bool inside = j0 + r < args.k;
      const unsigned char* src =
          reinterpret_cast<const unsigned char*>(operand + (inside ? (j0 + r) * args.d_pad : 0));
      copy16(dst + r * row_bytes + q * 16, src + (inside ? q * 16 : 0), inside ? 16 : 0);
    }
  };
  load_chunk(0);
  copy_commit();
  if (args.means != nullptr || args.point_w != nullptr) {  // both read the tile first
    copy_wait<0>();
    __syncthreads();
  }
  if (args.means != nullptr) {
    // Centred in place, before rounding: the products then carry the precision of x - mean,
    // which a large mean (as attention keys have) would otherwise take.
    const float* mu = args.means + b * args.d;
    const int values = kM * args.d;
    for (int idx = threadIdx.x; idx < values; idx += kThreads) {
      const int r = idx / args.d, e = idx % args.d;
      if (row0 + r >= len) continue;
      T* v = reinterpret_cast<T*>(a_tile + r * row_bytes) + e;
      *v = from_float<T>(to_float(*v) - __ldg(mu + e));
    }
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (args.point_w != nullptr) {
    // Each point's weight, from its row in shared memory (lane r of the warp: row 32 w + r).
    const int64_t i = row0 + warp * 32 + lane;
    if (i < len) {
      const T* row = reinterpret_cast<const T*>(a_tile + (warp * 32 + lane) * row_bytes);
      float s = 0.0f;
      for (int e = 0; e < args.d; ++e) {
        const float v = to_float(row[e]);
        s = fmaf(v, v, s);
      }
      args.point_w[b * args.rows.n + i] = args.cosine ? (s > 0.0f ? 1.0f / sqrtf(s) : 0.0f) : s;
    }
  }

  const int g = lane / 4, t = lane % 4;
  float best[2][2];
  int best_j[2][2];
  no_minimum(best, best_j);
  const float* bias = args.bias + b * args.k;
  // ldmatrix addresses: A rows of this warp (lane % 16), 16-byte half (lane / 16); B rows
  // (lane % 8) + 8 * (lane / 16), half (lane / 8) % 2.
  const unsigned char* a_base = a_tile + (warp * 32 + (lane % 16)) * row_bytes + (lane / 16) * 16;
  const int b_row = (lane % 8) + 8 * (lane / 16);
  const int b_half = ((lane / 8) % 2) * 16;
  const int steps = args.d_pad * static_cast<int>(sizeof(T)) / 32;

  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    if (chunk + 1 < n_chunks) {
      load_chunk(chunk + 1);
      copy_commit();
      copy_wait<1>();
    } else {
      copy_wait<0>();
    }
    __syncthreads();
    const unsigned char* b_base =
        b_tiles + (chunk & 1) * kChunk * row_bytes + b_row * row_bytes + b_half;
    float acc[2][8][4];
    warp_products<T>(acc, a_base, b_base, row_bytes, steps, args.tf32);
    const int64_t j0 = chunk * kChunk;
    const bool full = j0 + kChunk <= args.k;
    chunk_minimum(
        acc,
        [&](int c) {
          const int64_t j = j0 + c;
          return full || j < args.k ? __ldg(bias + j) : INFINITY;
        },
        args.alpha, t, static_cast<int>(j0), best, best_j);
    __syncthreads();  // the stage is refilled next
  }
  // The four lanes of a row (t = 0..3) hold its columns interleaved: the smallest, lower index
  // on a tie.
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      write_best(args, b, row0 + warp * 32 + m * 16 + h * 8 + g, len, best[m][h], best_j[m][h],
                 t == 0);
    }
  }
}

/// Warps of the assignment's blocks (32 points each): as many as the shared memory holds for
/// rows of d_pad values (at most 8, at least 2).
inline int assign_warps(int64_t d_pad, int element) {
  for (int warps : {8, 4, 2}) {
    if (assign_smem(warps, static_cast<int>(d_pad), element) <= 200 * 1024) return warps;
  }
  return 0;
}

template <typename T, int kWarps>
Status launch_assign_warps(const AssignArgs<T>& args, int64_t batch, cudaStream_t stream) {
  const auto kernel = assign_kernel<T, kWarps>;
  const size_t smem = assign_smem(kWarps, args.d_pad, sizeof(T));
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  kernel<<<static_cast<unsigned>(batch * args.tiles), kWarps * 32, smem, stream>>>(args);
  return launched(stream);
}

}  // namespace

template <typename T>
Status launch_assign(const Call& call, cudaStream_t stream) {
#if !defined(CUDAOPS_NO_SM90A)
  if constexpr (!std::is_same_v<T, float>) {
    bool done = false;
    if (Status s = launch_assign_wgmma<T>(call, stream, &done); !s.ok() || done) return s;
  }
#endif
  const int warps = assign_warps(call.d_pad, sizeof(T));
  const AssignArgs<T> args = assign_args<T>(call, warps * 32);
  switch (warps) {
    case 8:
      return launch_assign_warps<T, 8>(args, call.points.batch, stream);
    case 4:
      return launch_assign_warps<T, 4>(args, call.points.batch, stream);
    default:
      return launch_assign_warps<T, 2>(args, call.points.batch, stream);
  }
}

}  // namespace cudaops::detail::kmeans

#define CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(T) \
  template cudaops::Status cudaops::detail::kmeans::launch_assign<T>(const Call&, cudaStream_t);
