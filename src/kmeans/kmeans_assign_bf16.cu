// The k-means assignment of __nv_bfloat16 points.
#include "kmeans/kmeans_assign.cuh"

CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(__nv_bfloat16)
