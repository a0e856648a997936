// Argument validation of batched k-means (no GPU: CUDA_VISIBLE_DEVICES=-1, so a check that
// reached the device would report a CUDA error instead of the status expected here).
#include <gtest/gtest.h>

#include <cstdint>

#include "cudaops/kmeans.h"
#include "status_assertions.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

KmeansPoints Points() {
  KmeansPoints p;
  p.data = fake(0x100000);
  p.dtype = DType::kFloat16;
  p.batch = 4;
  p.n = 1000;
  p.d = 64;
  return p;
}

KmeansParams Params() {
  KmeansParams params;
  params.n_clusters = 16;
  return params;
}

KmeansResult Result() {
  KmeansResult r;
  r.centroids = fake(0x10000000);
  r.labels = static_cast<int32_t*>(fake(0x20000000));
  return r;
}

void* const kWorkspace = fake(0x40000000);
constexpr size_t kBytes = size_t{1} << 30;

TEST(KmeansValidation, CountsAndSizes) {
  KmeansParams params = Params();
  params.n_clusters = 0;
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"kmeans", "n_clusters", ">= 1"}));
  params.n_clusters = 1001;
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"n_clusters (1001)", "points.n (1000)"}));
  KmeansPoints p = Points();
  p.d = 0;
  EXPECT_TRUE(FailsWith(kmeans(p, Params(), Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"points.d", ">= 1"}));
  params = Params();
  params.n_iters = -1;
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"n_iters", "-1"}));
  params = Params();
  params.precision = static_cast<KmeansPrecision>(2);
  size_t bytes = 0;
  EXPECT_TRUE(FailsWith(kmeans_workspace_size(Points(), params, &bytes),
                        StatusCode::kInvalidArgument, {"precision 2", "kExact", "kTf32"}));
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"precision 2"}));
}

TEST(KmeansValidation, WorkspaceTooSmall) {
  size_t bytes = 0;
  ASSERT_TRUE(kmeans_workspace_size(Points(), Params(), &bytes).ok());
  EXPECT_GT(bytes, 0u);
  // The query's size covers either centroid dtype; a float32 result needs less, not 64 bytes.
  EXPECT_TRUE(FailsWith(kmeans(Points(), Params(), Result(), kWorkspace, 64, nullptr),
                        StatusCode::kWorkspaceTooSmall, {"kmeans", "workspace_bytes 64"}));
}

// Given means: one per problem, read only, not with center, and result.means is then not written.
TEST(KmeansValidation, GivenMeans) {
  KmeansParams params = Params();
  params.means = static_cast<const float*>(fake(0x30000000));
  params.center = true;
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"kmeans", "params.center", "params.means"}));
  params.center = false;
  params.means = static_cast<const float*>(fake(0x30000002));
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kMisaligned, {"kmeans", "params.means"}));
  params.means = static_cast<const float*>(fake(0x30000000));
  KmeansResult result = Result();
  result.means = static_cast<float*>(fake(0x38000000));
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, result, kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"result.means", "params.means"}));
  // Overlapping an output.
  params.means = static_cast<const float*>(fake(0x20000000 + 64));
  EXPECT_TRUE(FailsWith(kmeans(Points(), params, Result(), kWorkspace, kBytes, nullptr),
                        StatusCode::kInvalidArgument, {"kmeans", "params.means", "result.labels"}));
  // Given means need no workspace of their own: the size is that of a call without centring.
  size_t plain = 0, given = 0, centred = 0;
  ASSERT_TRUE(kmeans_workspace_size(Points(), Params(), &plain).ok());
  params.means = static_cast<const float*>(fake(0x30000000));
  ASSERT_TRUE(kmeans_workspace_size(Points(), params, &given).ok());
  KmeansParams center = Params();
  center.center = true;
  ASSERT_TRUE(kmeans_workspace_size(Points(), center, &centred).ok());
  EXPECT_EQ(given, plain);
  EXPECT_GE(centred, plain);
}

// Sizes near 2^63: refused by checked arithmetic before any product of them (UBSan's build of
// these tests catches a product that overflows first).
TEST(KmeansValidation, HugeSizesDoNotOverflow) {
  constexpr int64_t kHuge = int64_t{1} << 62;
  size_t bytes = 0;
  KmeansPoints p = Points();
  p.d = kHuge;
  EXPECT_TRUE(FailsWith(kmeans_workspace_size(p, Params(), &bytes), StatusCode::kNotSupported,
                        {"points.d"}));
  p = Points();
  p.ld = kHuge;
  EXPECT_TRUE(FailsWith(kmeans_workspace_size(p, Params(), &bytes), StatusCode::kInvalidArgument,
                        {"points.ld", "overflows"}));
  p = Points();
  p.batch_stride = kHuge;
  EXPECT_TRUE(FailsWith(kmeans_workspace_size(p, Params(), &bytes), StatusCode::kInvalidArgument,
                        {"points.batch_stride", "overflows"}));
  p = Points();
  p.batch_stride = kHuge / 2 + 8;
  EXPECT_FALSE(kmeans_workspace_size(p, Params(), &bytes).ok());
}

// Labels are int32: no more clusters than int32 can name.
TEST(KmeansValidation, AssignClustersFitInt32) {
  KmeansCentroids c;
  c.data = fake(0x50000000);
  c.dtype = DType::kFloat32;
  c.n_clusters = int64_t{1} << 31;
  size_t bytes = 0;
  EXPECT_TRUE(FailsWith(kmeans_assign_workspace_size(Points(), c, KmeansMetric::kL2, &bytes),
                        StatusCode::kInvalidArgument, {"centroids.n_clusters", "int32"}));
  EXPECT_TRUE(FailsWith(
      kmeans_assign(Points(), c, KmeansMetric::kL2, static_cast<int32_t*>(fake(0x20000000)),
                    nullptr, kWorkspace, kBytes, nullptr),
      StatusCode::kInvalidArgument, {"kmeans_assign", "centroids.n_clusters"}));
}

}  // namespace
}  // namespace cudaops
