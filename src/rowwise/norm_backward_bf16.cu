// The norms' backward passes for __nv_bfloat16.
#include "rowwise/norm_backward.cuh"

CUDAOPS_NORM_BACKWARD_INSTANTIATE(__nv_bfloat16)
