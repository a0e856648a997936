// Top-k of __nv_bfloat16 rows.
#include "topk/topk_kernels.cuh"

CUDAOPS_TOPK_INSTANTIATE(__nv_bfloat16)
