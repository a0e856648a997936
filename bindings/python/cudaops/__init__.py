"""Fast CUDA operators for any GPU array: torch, CuPy, JAX, Numba, or anything that speaks DLPack
or ``__cuda_array_interface__``, zero-copy, without importing any of them.

Every op takes ``stream=`` (None: the legacy default stream; an int handle; or a stream object from
torch, CuPy or CUDA Python) and runs on the device that holds its arrays. ``out=`` is written in
place; without it the result is the same kind of array as the first argument (a torch tensor for
torch inputs, a CuPy array for CuPy inputs, ...), or a :class:`cudaops.Array`.

Errors: ``ValueError`` for bad shapes, strides, alignment or values; ``TypeError`` for unsupported
dtypes or objects; :class:`cudaops.CudaError` (a ``RuntimeError``) when CUDA fails or is missing.
"""

from . import ivf, jit
from ._core import (
    Array,
    CudaError,
    __version__,
    add,
    add_scalar,
    attention_merge,
    cuda_architectures,
    cuda_runtime_version,
    device_count,
    empty_cache,
    fused_add_rms_norm,
    kmeans,
    layer_norm,
    layer_norm_backward,
    memory_reserved,
    rms_norm,
    rms_norm_backward,
    softmax,
    softmax_backward,
    topk,
)

__all__ = [
    "Array",
    "CudaError",
    "__version__",
    "add",
    "add_scalar",
    "attention_merge",
    "cuda_architectures",
    "cuda_runtime_version",
    "device_count",
    "empty_cache",
    "fused_add_rms_norm",
    "ivf",
    "jit",
    "kmeans",
    "layer_norm",
    "layer_norm_backward",
    "memory_reserved",
    "rms_norm",
    "rms_norm_backward",
    "softmax",
    "softmax_backward",
    "topk",
]
