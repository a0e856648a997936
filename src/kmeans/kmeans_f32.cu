// Batched k-means of float points.
#include "kmeans/kmeans_kernels.cuh"

CUDAOPS_KMEANS_INSTANTIATE(float)
