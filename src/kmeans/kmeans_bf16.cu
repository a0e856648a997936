// Batched k-means of __nv_bfloat16 points.
#include "kmeans/kmeans_kernels.cuh"

CUDAOPS_KMEANS_INSTANTIATE(__nv_bfloat16)
