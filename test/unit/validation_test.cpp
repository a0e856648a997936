// Argument validation of the public ops. These run with every GPU hidden
// (CUDA_VISIBLE_DEVICES=-1): a check that reached the device would report a CUDA error instead
// of the status expected here.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cudaops/elementwise.h"
#include "harness/cuda_util.h"
#include "status_assertions.h"

namespace cudaops {
namespace {

using testing::FailsWith;
using testing::fake;

void* const kA = fake(0x10000);
void* const kB = fake(0x20000);
void* const kOut = fake(0x30000);

TEST(AddValidation, NullPointers) {
  EXPECT_TRUE(FailsWith(add(nullptr, kB, kOut, 10, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_a", "null"}));
  EXPECT_TRUE(FailsWith(add(kA, nullptr, kOut, 10, DType::kFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_b"}));
  EXPECT_TRUE(FailsWith(add(kA, kB, nullptr, 1, DType::kBFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_out"}));
}

TEST(AddValidation, NegativeCount) {
  EXPECT_TRUE(FailsWith(add(kA, kB, kOut, -1, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add", "num_items", "-1"}));
}

TEST(AddValidation, UnsupportedDtypes) {
  EXPECT_TRUE(FailsWith(add(kA, kB, kOut, 10, DType::kInt32, nullptr),
                        StatusCode::kUnsupportedDtype, {"add", "int32"}));
  EXPECT_TRUE(FailsWith(add(kA, kB, kOut, 10, DType::kInt64, nullptr),
                        StatusCode::kUnsupportedDtype, {"int64"}));
  EXPECT_TRUE(FailsWith(add(kA, kB, kOut, 10, static_cast<DType>(77), nullptr),
                        StatusCode::kUnsupportedDtype, {"invalid", "77"}));
  // Checked even when there is nothing to do.
  EXPECT_TRUE(FailsWith(add(nullptr, nullptr, nullptr, 0, DType::kInt32, nullptr),
                        StatusCode::kUnsupportedDtype, {"int32"}));
}

TEST(AddValidation, Misaligned) {
  EXPECT_TRUE(FailsWith(add(fake(0x10002), kB, kOut, 10, DType::kFloat32, nullptr),
                        StatusCode::kMisaligned, {"add", "d_a", "4 bytes", "float32"}));
  EXPECT_TRUE(FailsWith(add(kA, kB, fake(0x30001), 10, DType::kFloat16, nullptr),
                        StatusCode::kMisaligned, {"d_out", "2 bytes"}));
}

TEST(AddValidation, ZeroItemsSucceedWithoutLaunch) {
  EXPECT_TRUE(add(nullptr, nullptr, nullptr, 0, DType::kFloat32, nullptr).ok());
  EXPECT_TRUE(add(kA, kB, kOut, 0, DType::kBFloat16, static_cast<cudaStream_t>(fake(0x1234))).ok());
}

// Valid arguments reach the launch, which must fail cleanly with no device. The fake pointers
// would fault on a real device, so this runs only where none is visible.
TEST(AddValidation, ValidArgumentsWithoutDeviceReportCudaError) {
  if (harness::cuda_device_usable(nullptr)) GTEST_SKIP() << "a CUDA device is visible";
  const Status status = add(kA, kB, kOut, 10, DType::kFloat32, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kCudaError) << status.to_string();
  EXPECT_NE(status.cuda_error(), 0);
  EXPECT_NE(status.message().find("add"), std::string::npos) << status.message();
}

TEST(AddValidation, PartialOverlapIsRefusedExactAliasingIsNot) {
  auto* a = static_cast<char*>(kA);
  // out = a shifted by one element (add(a[:-1], b, out=a[1:])): refused, nothing launched.
  EXPECT_TRUE(FailsWith(add(a, kB, a + 4, 100, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_a", "d_out", "overlap"}));
  EXPECT_TRUE(FailsWith(add(kB, a, a - 2, 100, DType::kFloat16, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_b", "d_out", "overlap"}));
  EXPECT_TRUE(FailsWith(add_scalar(a, 1.0f, a + 8, 100, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add_scalar", "overlap"}));
  // Inputs may overlap each other; an output may be an input exactly. Without a device these
  // reach the launch and fail there, not in validation.
  if (harness::cuda_device_usable(nullptr)) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_EQ(add(a, a + 4, kOut, 100, DType::kFloat32, nullptr).code(), StatusCode::kCudaError);
  EXPECT_EQ(add(a, kB, a, 100, DType::kFloat32, nullptr).code(), StatusCode::kCudaError);
  EXPECT_EQ(add_scalar(a, 1.0f, a, 100, DType::kFloat32, nullptr).code(), StatusCode::kCudaError);
}

TEST(AddValidation, CountsWhoseBytesOverflow) {
  EXPECT_TRUE(FailsWith(add(kA, kB, kOut, INT64_MAX / 2, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add", "d_a", "2^63"}));
}

TEST(AddScalarValidation, Arguments) {
  EXPECT_TRUE(FailsWith(add_scalar(nullptr, 1.0f, kOut, 3, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add_scalar", "d_a"}));
  EXPECT_TRUE(FailsWith(add_scalar(kA, 1.0f, nullptr, 3, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"add_scalar", "d_out"}));
  EXPECT_TRUE(FailsWith(add_scalar(kA, 1.0f, kOut, -5, DType::kFloat32, nullptr),
                        StatusCode::kInvalidArgument, {"num_items", "-5"}));
  EXPECT_TRUE(FailsWith(add_scalar(kA, 1.0f, kOut, 3, DType::kInt64, nullptr),
                        StatusCode::kUnsupportedDtype, {"add_scalar", "int64"}));
  EXPECT_TRUE(FailsWith(add_scalar(fake(0x10006), 1.0f, kOut, 3, DType::kFloat32, nullptr),
                        StatusCode::kMisaligned, {"d_a"}));
  EXPECT_TRUE(add_scalar(nullptr, 1.0f, nullptr, 0, DType::kFloat16, nullptr).ok());
}

TEST(AddScalarValidation, ValidArgumentsWithoutDeviceReportCudaError) {
  if (harness::cuda_device_usable(nullptr)) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_EQ(add_scalar(kA, 1.0f, kOut, 3, DType::kFloat16, nullptr).code(), StatusCode::kCudaError);
}

}  // namespace
}  // namespace cudaops
