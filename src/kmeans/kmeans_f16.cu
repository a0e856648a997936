// Batched k-means of __half points.
#include "engine/kmeans_fit.cuh"

CUDAOPS_KMEANS_INSTANTIATE(__half)
