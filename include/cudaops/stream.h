#pragma once

// The CUDA stream handle, declared exactly as the CUDA runtime declares it, so that the public
// headers need no CUDA include directory and any C++17 compiler can use them.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT(modernize-use-using): must match driver_types.h
