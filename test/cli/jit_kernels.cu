// Kernels for the `cudaops jit` tests. jit_params.h is found through -I jit_include.
#include "jit_params.h"

extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] * SCALE;
}

template <typename T>
__global__ void scale(T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a;
}
