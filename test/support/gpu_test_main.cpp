// main() of every GPU test binary: exits 77, which ctest reports as skipped, when no usable CUDA
// device is there.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/cuda_util.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (!cudaops::harness::cuda_device_usable(&why)) {
    std::printf("[  SKIPPED ] no usable CUDA device: %s\n", why.c_str());
    return 77;
  }
  return RUN_ALL_TESTS();
}
