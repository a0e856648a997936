// The k-means assignment of __nv_bfloat16 points.
#include "engine/kmeans_assign.cuh"

CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(__nv_bfloat16)
