#pragma once

// What the device code of the architecture being compiled lacks, for code that takes another path
// there.

// Turing (compute capability 7.5) has no cp.async, no TF32 and no bfloat16 products: the code
// below says what it does there instead (__CUDA_ARCH__ < 800).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define CUDAOPS_DEVICE_TURING 1
#else
#define CUDAOPS_DEVICE_TURING 0
#endif
