// Top-k of __half rows.
#include "topk/topk_kernels.cuh"

CUDAOPS_TOPK_INSTANTIATE(__half)
