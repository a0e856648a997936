"""What an editor and a type checker see of cudaops: mypy --strict over this file (CI) fails when
the stubs lose a name, an argument or a result's arity. Never run."""

from typing import Any

import cudaops
import cudaops.ivf
import cudaops.jit


def decode_step(keys: Any, values: Any, queries: Any) -> tuple[Any, Any]:
    index: cudaops.ivf.Index = cudaops.ivf.build_global(keys, values, 8192, 16, capacity=200_000)
    index.extend(keys, values, 64, n_iters=5)
    index.reserve(index.size, index.n_clusters)
    o, lse = index.attention(queries, 147, 1900, return_lse=True)
    o_only = index.attention(queries, 147)
    scores, ids = index.search(queries, 100, 147)
    k, v, positions, lengths = index.retrieve(queries, 147, max_tokens=4096)
    merged, merged_lse = cudaops.attention_merge(o, lse)
    heads: int = index.heads + index.dim + index.value_dim + index.capacity + index.max_clusters
    name: str = index.dtype
    del o_only, scores, ids, k, v, positions, lengths, heads, name
    return merged, merged_lse


def rowwise(x: Any, w: Any, b: Any) -> Any:
    y, mean, rstd = cudaops.layer_norm(x, w, b, return_stats=True)
    z, r = cudaops.rms_norm(y, w, return_rstd=True)
    x2, residual = cudaops.fused_add_rms_norm(z, y, w)
    values, indices = cudaops.topk(x2, 8, index_dtype="int32")
    centroids, labels, sizes = cudaops.kmeans(x, 16, metric="cosine")
    del mean, rstd, r, residual, indices, labels, sizes, centroids
    return cudaops.softmax(values)


def module_facts() -> str:
    arch: str = cudaops.cuda_architectures
    runtime: int = cudaops.cuda_runtime_version
    devices: int = cudaops.device_count()
    array = cudaops.Array([4, 4], "float16")
    kernel: cudaops.jit.Kernel = cudaops.jit.compile("extern \"C\" __global__ void k() {}", "k")
    kernel(1, 32)
    return f"{arch} {runtime} {devices} {array.shape} {kernel.registers}"
