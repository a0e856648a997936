// Batched k-means of __nv_bfloat16 points.
#include "engine/kmeans_fit.cuh"

CUDAOPS_KMEANS_INSTANTIATE(__nv_bfloat16)
