#pragma once

// Batched k-means: the assignment (see kmeans_kernels.cuh), instantiated one dtype per
// translation unit (kmeans_assign_<dtype>.cu), apart from the rest of the call: its kernels are
// most of the family's compile time.
#include "kmeans/kmeans_device.cuh"

namespace cudaops::detail::kmeans {
namespace {

// ---- the assignment
// ------------------------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

/// acc += a . b over one 32-byte step of k (16 values of 16 bits, 8 of TF32).
template <typename T>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Bytes of a row of A or B in shared memory: the padded row and 16 bytes more, so that the 8
/// rows an ldmatrix reads fall in different banks.
__host__ __device__ constexpr int smem_row_bytes(int d_pad, int element) {
  return d_pad * element + 16;
}

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
  if (row0 >= len) return;
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
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      best[m][h] = INFINITY;
      best_j[m][h] = INT32_MAX;
    }
  }
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
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[m][nt][e] = 0.0f;
      }
    }
    for (int s = 0; s < steps; ++s) {
      uint32_t a[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        ldmatrix_x4(a[m], a_base + m * 16 * row_bytes + s * 32);
        if constexpr (std::is_same_v<T, float>) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a[m][e]) : "f"(__uint_as_float(a[m][e])));
        }
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, b_base + np * 16 * row_bytes + s * 32);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          mma<T>(acc[m][2 * np], a[m], bf[0], bf[1]);
          mma<T>(acc[m][2 * np + 1], a[m], bf[2], bf[3]);
        }
      }
    }
    // Each row's running minimum: first the chunk's smallest score of the row, then, only where
    // it beats the running one, the first column that has it (columns in increasing order, so a
    // tie keeps the lower index).
    const int64_t j0 = chunk * kChunk;
    const bool full = j0 + kChunk <= args.k;
    float bj[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * t + e;
        bj[nt][e] = full || j < args.k ? __ldg(bias + j) : INFINITY;
      }
    }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float low = INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e)
            low = fminf(low, fmaf(-args.alpha, acc[m][nt][2 * h + e], bj[nt][e]));
        }
        if (low < best[m][h]) {
          int at = 0;
#pragma unroll
          for (int nt = 7; nt >= 0; --nt) {
#pragma unroll
            for (int e = 1; e >= 0; --e) {
              if (fmaf(-args.alpha, acc[m][nt][2 * h + e], bj[nt][e]) == low)
                at = nt * 8 + 2 * t + e;
            }
          }
          best[m][h] = low;
          best_j[m][h] = static_cast<int>(j0) + at;
        }
      }
    }
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
