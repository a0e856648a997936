// A program linked against the installed libcudaops: validates without a GPU, adds with one.
#include <cuda_runtime.h>
#include <cudaops/cudaops.h>

#include <cstdio>
#include <vector>

int main() {
  std::printf("libcudaops %s (headers %s), built for %s\n", cudaops::version_string(),
              CUDAOPS_VERSION_STRING, cudaops::build_cuda_architectures());
  const cudaops::Status bad =
      cudaops::add(nullptr, nullptr, nullptr, 1, cudaops::DType::kFloat32, nullptr);
  if (bad.code() != cudaops::StatusCode::kInvalidArgument) {
    std::printf("expected invalid argument, got %s\n", bad.to_string().c_str());
    return 1;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: validation checked, nothing to run\n");
    return 77;
  }
  const int n = 1000;
  std::vector<float> a(n), b(n), out(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) + 0.5f;
    b[i] = 2.0f * static_cast<float>(i);
  }
  float *d_a = nullptr, *d_b = nullptr;
  if (cudaMalloc(&d_a, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&d_b, n * sizeof(float)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(d_a, a.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_b, b.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  const cudaops::Status status = cudaops::add(d_a, d_b, d_a, n, cudaops::DType::kFloat32, nullptr);
  if (!status.ok()) {
    std::printf("add failed: %s\n", status.to_string().c_str());
    return 1;
  }
  cudaMemcpy(out.data(), d_a, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d_a);
  cudaFree(d_b);
  for (int i = 0; i < n; ++i) {
    if (out[i] != a[i] + b[i]) {
      std::printf("wrong result at %d: %g\n", i, out[i]);
      return 1;
    }
  }
  std::printf("add of %d floats in place: ok\n", n);
  return 0;
}
