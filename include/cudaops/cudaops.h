#pragma once

// Everything in the public API: one header per op family, and the types they share.
#include "cudaops/attention.h"
#include "cudaops/dtype.h"
#include "cudaops/elementwise.h"
#include "cudaops/ivf.h"
#include "cudaops/jit.h"
#include "cudaops/kernels.h"
#include "cudaops/kmeans.h"
#include "cudaops/rowwise.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"
#include "cudaops/topk.h"
#include "cudaops/types.h"
#include "cudaops/version.h"
