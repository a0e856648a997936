#pragma once

// The yardstick of ops bound by matrix products: a cuBLAS GEMM of the same operations, timed the
// way the ops are (CUDA events, warm-up, median).
#include "cudaops/dtype.h"
#include "cudaops/status.h"

namespace cudaops::harness {

/// TFLOP/s of a square cuBLAS GEMM (M = N = K, a multiple of 256 from 512 to 16384) of about
/// `flops` operations: float16 or bfloat16 operands with float32 accumulation, or float32
/// operands in TF32. Random inputs; measured once per dtype and size in a process.
Status gemm_yardstick(DType dtype, double flops, double* tflops);

}  // namespace cudaops::harness
