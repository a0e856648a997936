// The norms' backward passes for float.
#include "rowwise/norm_backward.cuh"

CUDAOPS_NORM_BACKWARD_INSTANTIATE(float)
