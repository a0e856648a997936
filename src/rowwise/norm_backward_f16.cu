// The norms' backward passes for __half.
#include "rowwise/norm_backward.cuh"

CUDAOPS_NORM_BACKWARD_INSTANTIATE(__half)
