// The k-means assignment of float points.
#include "engine/kmeans_assign.cuh"

CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(float)
