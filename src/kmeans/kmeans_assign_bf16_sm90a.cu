// The Hopper (wgmma) k-means assignment of __nv_bfloat16 points.
#include "engine/kmeans_assign_sm90a.cuh"

CUDAOPS_KMEANS_ASSIGN_SM90A_INSTANTIATE(__nv_bfloat16)
