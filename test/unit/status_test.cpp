#include "cudaops/status.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace cudaops {
namespace {

TEST(Status, DefaultIsSuccess) {
  const Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kSuccess);
  EXPECT_EQ(status.cuda_error(), 0);
  EXPECT_TRUE(status.message().empty());
  EXPECT_EQ(status.to_string(), "success");
}

TEST(Status, CarriesCodeMessageAndCudaError) {
  const Status status(StatusCode::kCudaError, "add: kernel launch failed", 100);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kCudaError);
  EXPECT_EQ(status.cuda_error(), 100);
  EXPECT_EQ(status.to_string(), "CUDA error: add: kernel launch failed");
}

TEST(Status, EveryCodeHasAName) {
  EXPECT_STREQ(status_code_name(StatusCode::kSuccess), "success");
  EXPECT_STREQ(status_code_name(StatusCode::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(status_code_name(StatusCode::kMisaligned), "misaligned");
  EXPECT_STREQ(status_code_name(StatusCode::kUnsupportedDtype), "unsupported dtype");
  EXPECT_STREQ(status_code_name(StatusCode::kWorkspaceTooSmall), "workspace too small");
  EXPECT_STREQ(status_code_name(StatusCode::kFileError), "file error");
  EXPECT_STREQ(status_code_name(StatusCode::kOutOfMemory), "out of memory");
  EXPECT_STREQ(status_code_name(StatusCode::kNotSupported), "not supported");
  EXPECT_STREQ(status_code_name(StatusCode::kCudaError), "CUDA error");
  EXPECT_STREQ(status_code_name(static_cast<StatusCode>(99)), "unknown status");
}

}  // namespace
}  // namespace cudaops

namespace cudaops {
namespace {

// An insufficient driver where there is no driver at all is said as such.
TEST(CudaErrorDescription, SaysWhenThereIsNoDriver) {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
  const std::string text = cuda_error_description(static_cast<int>(cudaErrorInsufficientDriver));
  if (driver == nullptr) {
    EXPECT_EQ(text, "no NVIDIA driver found (libcuda.so.1 could not be loaded)");
  } else {
    dlclose(driver);
    EXPECT_EQ(text, cudaGetErrorString(cudaErrorInsufficientDriver));
  }
  EXPECT_STREQ(cuda_error_description(static_cast<int>(cudaErrorInvalidValue)),
               cudaGetErrorString(cudaErrorInvalidValue));
}

}  // namespace
}  // namespace cudaops
