// The k-means assignment of float points.
#include "kmeans/kmeans_assign.cuh"

CUDAOPS_KMEANS_ASSIGN_INSTANTIATE(float)
