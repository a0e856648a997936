// Argument validation of the row-wise ops, run with every GPU hidden: each bad argument must be
// reported by name before anything reaches the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "cudaops/rowwise.h"
#include "harness/cuda_util.h"
#include "status_assertions.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

void* const kX = fake(0x100000);
void* const kY = fake(0x200000);
void* const kW = fake(0x300000);
void* const kB = fake(0x400000);
float* const kStats = static_cast<float*>(fake(0x500000));
void* const kWork = fake(0x600000);
constexpr DType kF16 = DType::kFloat16;

TEST(RowwiseValidation, Plan) {
  RowwisePlan plan;
  EXPECT_TRUE(FailsWith(rowwise_plan(RowwiseOp::kSoftmax, 4, 8, kF16, true, nullptr),
                        StatusCode::kInvalidArgument, {"rowwise_plan", "plan"}));
  EXPECT_TRUE(FailsWith(rowwise_plan(RowwiseOp::kSoftmax, -1, 8, kF16, true, &plan),
                        StatusCode::kInvalidArgument, {"rowwise_plan", "rows", "-1"}));
  EXPECT_TRUE(FailsWith(rowwise_plan(RowwiseOp::kLayerNorm, 4, 8, DType::kInt32, true, &plan),
                        StatusCode::kUnsupportedDtype, {"rowwise_plan", "dtype"}));
  EXPECT_TRUE(FailsWith(rowwise_plan(static_cast<RowwiseOp>(99), 4, 8, kF16, true, &plan),
                        StatusCode::kInvalidArgument, {"rowwise_plan", "op", "99"}));
  // No work: no launch, so no device needed.
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kRmsNormBackward, 0, 8, kF16, true, &plan).ok());
  EXPECT_STREQ(plan.path, "none");
  // Rows a block holds need nothing of the device; longer ones ask it (hidden here): a CUDA
  // error, not a crash.
  ASSERT_TRUE(rowwise_plan(RowwiseOp::kSoftmax, 4, 8, kF16, true, &plan).ok());
  EXPECT_STREQ(plan.path, "cached");
  EXPECT_EQ(rowwise_plan(RowwiseOp::kSoftmax, 4, 1 << 20, kF16, true, &plan).code(),
            StatusCode::kCudaError);
}

TEST(RowwiseValidation, Shapes) {
  EXPECT_TRUE(FailsWith(softmax({kX, 8}, {kY, 8}, -1, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "rows", "-1"}));
  EXPECT_TRUE(FailsWith(softmax({kX, 8}, {kY, 8}, 4, -8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "cols"}));
  EXPECT_TRUE(FailsWith(softmax({kX, 7}, {kY, 8}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "row_stride", "cols"}));
  EXPECT_TRUE(FailsWith(softmax_backward({kX, 8}, {kY, 8}, {kY, 4}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax_backward", "dx", "row_stride"}));
  EXPECT_TRUE(FailsWith(softmax({kX, int64_t{1} << 62}, {kY, 8}, 16, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "2^63"}));
}

TEST(RowwiseValidation, SizesWhoseProductsOverflow) {
  const int64_t big = int64_t{1} << 32;
  // rows x cols overflows int64 before any span is looked at.
  EXPECT_TRUE(FailsWith(softmax({kX, big}, {kY, big}, big, big, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "rows", "cols", "64-bit"}));
  // One row of 2^62 float32 spans 2^64 bytes: refused though there is no second row.
  const int64_t huge = int64_t{1} << 62;
  EXPECT_TRUE(FailsWith(softmax({kX, huge}, {kY, huge}, 1, huge, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "64-bit"}));
  EXPECT_TRUE(FailsWith(softmax({kX, huge}, {kY, 8}, 1, 8, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "2^63", "row_stride"}));
  EXPECT_TRUE(FailsWith(softmax({kX, INT64_MAX}, {kY, 8}, 2, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "2^63"}));
  // The size queries refuse what the ops refuse (no device needed to say so).
  size_t bytes = 0;
  EXPECT_TRUE(FailsWith(layer_norm_backward_workspace_size({1, int64_t{1} << 61, kF16}, &bytes),
                        StatusCode::kInvalidArgument,
                        {"layer_norm_backward_workspace_size", "cols"}));
  EXPECT_TRUE(FailsWith(rms_norm_backward_workspace_size({big, big, kF16}, &bytes),
                        StatusCode::kInvalidArgument,
                        {"rms_norm_backward_workspace_size", "rows"}));
}

TEST(RowwiseValidation, OverlapsOtherThanExactInPlace) {
  auto* x = static_cast<char*>(kX);
  // y one row into x: refused.
  EXPECT_TRUE(FailsWith(softmax({x, 8}, {x + 16, 8}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "y", "overlap"}));
  // y = buf[:, 8:16] beside x = buf[:, :8] (stride 16): apart, so validation passes (and,
  // without a device, the launch fails).
  if (!harness::cuda_device_usable(nullptr)) {
    EXPECT_EQ(softmax({x, 16}, {x + 16, 16}, 4, 8, kF16, nullptr).code(), StatusCode::kCudaError);
  }
  EXPECT_TRUE(FailsWith(softmax({x, 16}, {x + 14, 16}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "overlap"}));
  // Same pointer, another stride: not the same matrix.
  EXPECT_TRUE(FailsWith(softmax({x, 16}, {x, 8}, 4, 8, kF16, nullptr), StatusCode::kInvalidArgument,
                        {"softmax", "overlap"}));
  EXPECT_TRUE(FailsWith(softmax_backward({kX, 8}, {kY, 8}, {x + 2, 8}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax_backward", "y", "dx"}));
  // fused_add_rms_norm writes both: even the same matrix is refused.
  EXPECT_TRUE(FailsWith(fused_add_rms_norm({kX, 8}, {kX, 8}, kW, 4, 8, 1e-6f, kF16, nullptr),
                        StatusCode::kInvalidArgument,
                        {"fused_add_rms_norm", "x", "residual", "both are written"}));
  // Statistics over the output, a weight under the output.
  EXPECT_TRUE(FailsWith(layer_norm({kX, 8}, kW, kB, {kY, 8}, static_cast<float*>(kY), kStats, 4, 8,
                                   1e-5f, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"layer_norm", "y", "mean"}));
  EXPECT_TRUE(FailsWith(rms_norm({kX, 8}, kY, {kY, 8}, nullptr, 4, 8, 1e-5f, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"rms_norm", "weight", "y"}));
  EXPECT_TRUE(FailsWith(rms_norm_backward({{kX, 8}, {kY, 8}, kW, kStats, {kB, 8}, kB}, {4, 8, kF16},
                                          {kWork, size_t{1} << 20}, nullptr),
                        StatusCode::kInvalidArgument, {"rms_norm_backward", "dx", "dweight"}));
}

TEST(RowwiseValidation, NullAndMisalignedPointers) {
  EXPECT_TRUE(FailsWith(softmax({nullptr, 8}, {kY, 8}, 4, 8, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "x", "null"}));
  EXPECT_TRUE(FailsWith(
      layer_norm({kX, 8}, nullptr, kB, {kY, 8}, nullptr, nullptr, 4, 8, 1e-5f, kF16, nullptr),
      StatusCode::kInvalidArgument, {"layer_norm", "weight", "null"}));
  EXPECT_TRUE(FailsWith(
      layer_norm({kX, 8}, kW, nullptr, {kY, 8}, nullptr, nullptr, 4, 8, 1e-5f, kF16, nullptr),
      StatusCode::kInvalidArgument, {"layer_norm", "bias", "null"}));
  EXPECT_TRUE(
      FailsWith(rms_norm({fake(0x100001), 8}, kW, {kY, 8}, nullptr, 4, 8, 1e-6f, kF16, nullptr),
                StatusCode::kMisaligned, {"rms_norm", "x", "aligned"}));
  EXPECT_TRUE(FailsWith(rms_norm({kX, 8}, kW, {kY, 8}, static_cast<float*>(fake(0x500002)), 4, 8,
                                 1e-6f, kF16, nullptr),
                        StatusCode::kMisaligned, {"rms_norm", "rstd"}));
  EXPECT_TRUE(FailsWith(fused_add_rms_norm({kX, 8}, {nullptr, 8}, kW, 4, 8, 1e-6f, kF16, nullptr),
                        StatusCode::kInvalidArgument, {"fused_add_rms_norm", "residual"}));
  EXPECT_TRUE(
      FailsWith(layer_norm_backward({{kX, 8}, {kX, 8}, kW, nullptr, kStats, {kY, 8}, kW, kB},
                                    {4, 8, kF16}, {kWork, 1 << 20}, nullptr),
                StatusCode::kInvalidArgument, {"layer_norm_backward", "mean"}));
  EXPECT_TRUE(
      FailsWith(layer_norm_backward({{kX, 8}, {kX, 8}, kW, kStats, kStats, {kY, 8}, kW, nullptr},
                                    {4, 8, kF16}, {kWork, 1 << 20}, nullptr),
                StatusCode::kInvalidArgument, {"layer_norm_backward", "dbias"}));
  EXPECT_TRUE(FailsWith(rms_norm_backward({{kX, 8}, {kX, 8}, kW, nullptr, {kY, 8}, kW},
                                          {4, 8, kF16}, {kWork, 1 << 20}, nullptr),
                        StatusCode::kInvalidArgument, {"rms_norm_backward", "rstd"}));
  EXPECT_TRUE(FailsWith(rms_norm_backward({{kX, 8}, {kX, 8}, kW, kStats, {kY, 8}, nullptr},
                                          {0, 8, kF16}, {kWork, 1 << 20}, nullptr),
                        StatusCode::kInvalidArgument, {"rms_norm_backward", "dweight"}));
}

TEST(RowwiseValidation, Eps) {
  for (float eps : {0.0f, -1e-5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    EXPECT_TRUE(
        FailsWith(layer_norm({kX, 8}, kW, kB, {kY, 8}, nullptr, nullptr, 4, 8, eps, kF16, nullptr),
                  StatusCode::kInvalidArgument, {"layer_norm", "eps"}));
    EXPECT_TRUE(FailsWith(rms_norm({kX, 8}, kW, {kY, 8}, nullptr, 4, 8, eps, kF16, nullptr),
                          StatusCode::kInvalidArgument, {"rms_norm", "eps"}));
    EXPECT_TRUE(FailsWith(fused_add_rms_norm({kX, 8}, {kY, 8}, kW, 4, 8, eps, kF16, nullptr),
                          StatusCode::kInvalidArgument, {"fused_add_rms_norm", "eps"}));
  }
}

TEST(RowwiseValidation, Dtypes) {
  for (DType dtype : {DType::kInt32, DType::kInt64, static_cast<DType>(42)}) {
    EXPECT_TRUE(FailsWith(softmax({kX, 8}, {kY, 8}, 4, 8, dtype, nullptr),
                          StatusCode::kUnsupportedDtype, {"softmax", "dtype"}));
    EXPECT_TRUE(FailsWith(rms_norm({kX, 8}, kW, {kY, 8}, nullptr, 4, 8, 1e-6f, dtype, nullptr),
                          StatusCode::kUnsupportedDtype, {"rms_norm", "dtype"}));
    size_t bytes = 0;
    EXPECT_TRUE(FailsWith(layer_norm_backward_workspace_size({4, 8, dtype}, &bytes),
                          StatusCode::kUnsupportedDtype, {"dtype"}));
  }
  EXPECT_TRUE(FailsWith(rms_norm_backward_workspace_size({4, 8, kF16}, nullptr),
                        StatusCode::kInvalidArgument, {"bytes"}));
}

TEST(RowwiseValidation, EmptyProblemsSucceedWithoutDevice) {
  EXPECT_TRUE(softmax({nullptr, 0}, {nullptr, 0}, 0, 8, kF16, nullptr).ok());
  EXPECT_TRUE(softmax({nullptr, 0}, {nullptr, 0}, 5, 0, kF16, nullptr).ok());
  EXPECT_TRUE(layer_norm({nullptr, 0}, nullptr, nullptr, {nullptr, 0}, nullptr, nullptr, 0, 8,
                         1e-5f, kF16, nullptr)
                  .ok());
  EXPECT_TRUE(
      fused_add_rms_norm({nullptr, 0}, {nullptr, 0}, nullptr, 3, 0, 1e-6f, kF16, nullptr).ok());
  EXPECT_TRUE(
      rms_norm_backward({{nullptr, 0}, {nullptr, 0}, nullptr, nullptr, {nullptr, 0}, nullptr},
                        {7, 0, kF16}, {nullptr, 0}, nullptr)
          .ok());
}

TEST(RowwiseValidation, ValidArgumentsWithoutDeviceReportCudaError) {
  if (harness::cuda_device_usable(nullptr)) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_EQ(softmax({kX, 8}, {kY, 8}, 4, 8, kF16, nullptr).code(), StatusCode::kCudaError);
  size_t bytes = 0;
  EXPECT_EQ(layer_norm_backward_workspace_size({4, 8, kF16}, &bytes).code(),
            StatusCode::kCudaError);
}

// The argument structs are aggregates with the positional forms' defaults, and reach the same
// checks (same messages) through the same entry points.
static_assert(std::is_aggregate_v<SoftmaxArgs> && std::is_aggregate_v<SoftmaxBackwardArgs>);
static_assert(std::is_aggregate_v<LayerNormArgs> && std::is_aggregate_v<RmsNormArgs>);
static_assert(std::is_aggregate_v<FusedAddRmsNormArgs> && std::is_aggregate_v<RowShape>);

TEST(RowwiseValidation, ArgumentStructs) {
  EXPECT_EQ(LayerNormArgs{}.eps, 1e-5f);
  EXPECT_EQ(RmsNormArgs{}.eps, 1e-6f);
  EXPECT_EQ(FusedAddRmsNormArgs{}.eps, 1e-6f);
  const RowShape shape{4, 8, kF16};
  EXPECT_TRUE(FailsWith(softmax(SoftmaxArgs{{kX, 7}, {kY, 8}}, shape, nullptr),
                        StatusCode::kInvalidArgument, {"softmax", "row_stride"}));
  EXPECT_TRUE(FailsWith(
      softmax_backward(SoftmaxBackwardArgs{{kX, 8}, {nullptr, 8}, {kY, 8}}, shape, nullptr),
      StatusCode::kInvalidArgument, {"softmax_backward", "dy"}));
  LayerNormArgs ln{{kX, 8}, kW, kB, {kY, 8}};
  ln.eps = -1.0f;
  EXPECT_TRUE(FailsWith(layer_norm(ln, shape, nullptr), StatusCode::kInvalidArgument,
                        {"layer_norm", "eps"}));
  EXPECT_TRUE(FailsWith(rms_norm(RmsNormArgs{{kX, 8}, nullptr, {kY, 8}}, shape, nullptr),
                        StatusCode::kInvalidArgument, {"rms_norm", "weight"}));
  EXPECT_TRUE(FailsWith(
      fused_add_rms_norm(FusedAddRmsNormArgs{{kX, 8}, {kY, 8}, kW}, {4, 8, DType::kInt32}, nullptr),
      StatusCode::kUnsupportedDtype, {"fused_add_rms_norm", "dtype"}));
  EXPECT_TRUE(softmax(SoftmaxArgs{}, {0, 8, kF16}, nullptr).ok());
}

}  // namespace
}  // namespace cudaops
