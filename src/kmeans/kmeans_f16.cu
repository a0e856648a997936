// Batched k-means of __half points.
#include "kmeans/kmeans_kernels.cuh"

CUDAOPS_KMEANS_INSTANTIATE(__half)
