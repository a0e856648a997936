"""An IVF-Flat index over attention KV caches, every kv head in one call.

    import cudaops
    index = cudaops.ivf.build_global(keys, values, n_clusters=8192, n_segments=16)
    scores, ids = index.search(queries, k=1024, n_probe=147)
    keys_b, values_b, ids_b, lengths = index.retrieve(queries, n_probe=147)

``keys`` and ``values`` are ``[kv_heads, tokens, dim]`` float16 or bfloat16 arrays of any
framework; ``queries`` are ``[q_heads, Q, dim]`` with ``q_heads`` a multiple of ``kv_heads``
(grouped-query attention). Each head's keys are centred by its mean and clustered segment by
segment by spherical k-means, all heads and segments in one batched call; a query scores its
head's centroids, probes the ``n_probe`` best clusters and scores their tokens exactly. Results
are arrays of the queries' kind: ``scores`` float32 and ``ids`` int64 token positions, best
first, ``(-inf, -1)`` past the candidates. ``index.clusters(queries, n_probe)`` chooses clusters
as RetroInfer does (softmax of q . c / sqrt(dim) summed over each kv head's query heads) and
``index.retrieve`` gathers their keys, values and positions into padded blocks per (kv head,
query) for an attention kernel, and ``index.attention(queries, n_probe, n_estimate)`` is the
decode step itself: exact attention over those clusters (and any extra tokens not yet indexed)
plus an estimate of the next ones, in one call. ``index.extend`` appends a segment. ``index.save(path)`` and
``cudaops.ivf.load(path)`` write and read a checked, versioned file.
"""

from ._core import IvfIndex as Index
from ._core import ivf_build_global as build_global
from ._core import ivf_load as load

__all__ = ["Index", "build_global", "load"]
