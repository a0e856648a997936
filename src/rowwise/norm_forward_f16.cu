// The forward norms for __half.
#include "rowwise/norm_forward.cuh"

CUDAOPS_NORM_FORWARD_INSTANTIATE(__half)
