// The forward norms for __nv_bfloat16.
#include "rowwise/norm_forward.cuh"

CUDAOPS_NORM_FORWARD_INSTANTIATE(__nv_bfloat16)
