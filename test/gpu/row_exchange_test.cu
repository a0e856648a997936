// RowExchange (src/rowwise/row_exchange.cuh) on its own: the blocks of clusters of every size
// from 2 to 16 (sizes above 8 where the device allows them) all-reduce values whose sums are
// exact in float32, over many rows per cluster, so that both sets of slots and mbarriers are
// reused many times.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "harness/device_buffer.h"
#include "rowwise/row_exchange.cuh"

namespace cudaops::detail::rowwise {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxParts = 16;

// Every block of a cluster writes the sums it computed for each of its rows: out[row][rank].
__global__ void __launch_bounds__(kThreads) exchange_sums(float* out, int rows) {
  __shared__ RowExchange<1, 2> exchange;
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int parts = static_cast<int>(cluster.num_blocks());
  exchange.begin(parts);
  const int step = static_cast<int>(gridDim.x) / parts;
  int i = 0;
  for (int row = static_cast<int>(blockIdx.x) / parts; row < rows; row += step, ++i) {
    const int t = static_cast<int>(threadIdx.x);
    float v[2] = {static_cast<float>(row + rank * 3 + t % 5), static_cast<float>(t)};
    exchange.allreduce(0, i, v, rank, parts, SumOp{});
    if (t == 0) {
      out[(row * kMaxParts + rank) * 2] = v[0];
      out[(row * kMaxParts + rank) * 2 + 1] = v[1];
    }
  }
}

class RowExchangeSizes : public ::testing::TestWithParam<int> {};

TEST_P(RowExchangeSizes, EveryBlockGetsTheExactSums) {
  const int parts = GetParam();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  if (major < 9) GTEST_SKIP() << "thread-block clusters need sm_90 or newer";
  if (parts > 8 &&
      cudaFuncSetAttribute(exchange_sums, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no clusters of " << parts << " blocks on this device";
  }
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(parts);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kThreads);
  config.attrs = &attribute;
  config.numAttrs = 1;
  config.gridDim = dim3(static_cast<unsigned>(parts));
  int active = 0;
  if (cudaOccupancyMaxActiveClusters(&active, exchange_sums, &config) != cudaSuccess ||
      active < 1) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "clusters of " << parts << " blocks do not fit this device";
  }
  constexpr int kRows = 67;
  harness::DeviceBuffer out;
  const size_t bytes = size_t{kRows} * kMaxParts * 2 * sizeof(float);
  ASSERT_TRUE(out.allocate(static_cast<int64_t>(bytes)).ok());
  // One row per cluster, then 5 clusters walking all the rows.
  for (int clusters : {kRows, 5}) {
    SCOPED_TRACE(clusters);
    ASSERT_EQ(cudaMemset(out.get(), 0xff, bytes), cudaSuccess);  // NaN
    config.gridDim = dim3(static_cast<unsigned>(clusters * parts));
    ASSERT_EQ(cudaLaunchKernelEx(&config, exchange_sums, static_cast<float*>(out.get()), kRows),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(bytes / sizeof(float));
    ASSERT_EQ(cudaMemcpy(got.data(), out.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int row = 0; row < kRows; ++row) {
      double want0 = 0.0;
      double want1 = 0.0;
      for (int rank = 0; rank < parts; ++rank) {
        for (int t = 0; t < kThreads; ++t) {
          want0 += row + rank * 3 + t % 5;
          want1 += t;
        }
      }
      for (int rank = 0; rank < parts; ++rank) {
        const float* g = &got[static_cast<size_t>((row * kMaxParts + rank) * 2)];
        ASSERT_EQ(g[0], static_cast<float>(want0)) << "row " << row << " rank " << rank;
        ASSERT_EQ(g[1], static_cast<float>(want1)) << "row " << row << " rank " << rank;
      }
    }
  }
}

// A cluster of one block has no peer (the split kernels take at least 2).
INSTANTIATE_TEST_SUITE_P(PortableClusters, RowExchangeSizes, ::testing::Range(2, 9));
INSTANTIATE_TEST_SUITE_P(LargeClusters, RowExchangeSizes, ::testing::Range(9, kMaxParts + 1));

}  // namespace
}  // namespace cudaops::detail::rowwise
