// The k-means assignment of __half points.
#include "engine/kmeans_assign.cuh"

CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(__half)
