"""cudaops as torch operators: ``import cudaops.torch`` registers every op under
``torch.ops.cudaops`` with a fake implementation (output shapes and dtypes), so that
``torch.compile(fullgraph=True)`` traces through them, and autograd for softmax, layer_norm and
rms_norm through the library's backward kernels.

    import torch, cudaops, cudaops.torch as ct
    y = ct.rms_norm(x, weight)                       # torch.ops.cudaops.rms_norm underneath
    index = ct.Index(cudaops.ivf.build_global(keys, values, 8192, 16))
    o = ct.ivf_attention(index, queries, 147, 1900)

Each op runs on torch's current stream of its tensors' device (so CUDA graphs capture it).
Importing ``cudaops`` alone never imports torch; this module needs torch 2.4 or later.

An index crosses the operator boundary as a uint8 tensor over its device buffer (so that the
compiler orders an ``extend``, which writes it, before the reads that follow) and an integer
handle to the Python index, which keeps the host's record of its shape: torch operators take
only tensors and scalars, and a handle works on every torch version the module supports.
"""

from __future__ import annotations

import itertools
import weakref

import torch

import cudaops

__all__ = [
    "Index",
    "add",
    "context_parallel_attention",
    "context_parallel_slice",
    "head_slice",
    "add_scalar",
    "attention_merge",
    "fused_add_rms_norm",
    "ivf_attention",
    "ivf_clusters",
    "ivf_extend",
    "ivf_retrieve",
    "ivf_search",
    "kmeans",
    "layer_norm",
    "rms_norm",
    "softmax",
    "topk",
]

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError("cudaops.torch needs torch 2.4 or later (torch.library.custom_op)")


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


def _op(name, schema, mutates=()):
    """Registers cudaops::name with an explicit schema (the implementation is the function
    decorated); returns the decorator's result, the op's Python handle."""
    return torch.library.custom_op(f"cudaops::{name}", mutates_args=mutates, device_types="cuda",
                                   schema=schema)


def _rows(x):
    return x.shape[:-1]


def _like(x, *_):
    """The fake result of an op whose result has its first argument's shape and dtype."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Element-wise and row-wise ops.

@_op("add", "(Tensor a, Tensor b) -> Tensor")
def _add(a, b):
    return cudaops.add(a, b, stream=_stream(a))


@_add.register_fake
def _(a, b):
    torch._check(a.shape == b.shape, lambda: "cudaops.add: a and b must have the same shape")
    return _like(a)


@_op("add_scalar", "(Tensor a, float alpha) -> Tensor")
def _add_scalar(a, alpha):
    return cudaops.add_scalar(a, alpha, stream=_stream(a))


@_op("softmax", "(Tensor x) -> Tensor")
def _softmax(x):
    return cudaops.softmax(x, stream=_stream(x))


@_op("softmax_backward", "(Tensor y, Tensor dy) -> Tensor")
def _softmax_backward(y, dy):
    return cudaops.softmax_backward(y, dy, stream=_stream(y))


# Their results have the first argument's shape and dtype.
for _fake_like in (_add_scalar, _softmax, _softmax_backward):
    _fake_like.register_fake(_like)

@_op("layer_norm", "(Tensor x, Tensor weight, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)")
def _layer_norm(x, weight, bias, eps):
    return cudaops.layer_norm(x, weight, bias, eps, return_stats=True, stream=_stream(x))


@_layer_norm.register_fake
def _(x, weight, bias, eps):
    stats = x.new_empty(_rows(x), dtype=torch.float32)
    return _like(x), stats, stats.clone()


@_op("layer_norm_backward",
     "(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> (Tensor, Tensor, Tensor)")
def _layer_norm_backward(dy, x, weight, mean, rstd):
    return cudaops.layer_norm_backward(dy, x, weight, mean, rstd, stream=_stream(x))


@_layer_norm_backward.register_fake
def _(dy, x, weight, mean, rstd):
    dw = x.new_empty(x.shape[-1:])
    return _like(x), dw, dw.clone()


@_op("rms_norm", "(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)")
def _rms_norm(x, weight, eps):
    return cudaops.rms_norm(x, weight, eps, return_rstd=True, stream=_stream(x))


@_rms_norm.register_fake
def _(x, weight, eps):
    return _like(x), x.new_empty(_rows(x), dtype=torch.float32)


@_op("rms_norm_backward", "(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> (Tensor, Tensor)")
def _rms_norm_backward(dy, x, weight, rstd):
    return cudaops.rms_norm_backward(dy, x, weight, rstd, stream=_stream(x))


@_rms_norm_backward.register_fake
def _(dy, x, weight, rstd):
    return _like(x), x.new_empty(x.shape[-1:])


@_op("fused_add_rms_norm", "(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()",
     mutates=("x", "residual"))
def _fused_add_rms_norm(x, residual, weight, eps):
    cudaops.fused_add_rms_norm(x, residual, weight, eps, stream=_stream(x))


@_fused_add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return None


# Autograd through the library's backward kernels (the statistics are saved by the forward).

def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return _softmax_backward(y, dy.contiguous())


_softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)


def _layer_norm_setup(ctx, inputs, output):
    x, weight, _, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)


def _layer_norm_grad(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_backward(dy.contiguous(), x, weight, mean, rstd)
    return dx, dw, db, None


_layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.mark_non_differentiable(rstd)


def _rms_norm_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _rms_norm_backward(dy.contiguous(), x, weight, rstd)
    return dx, dw, None


_rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_setup)


# Selection, clustering and merging.

@_op("topk", "(Tensor x, int k, bool largest, bool sorted, bool int32) -> (Tensor, Tensor)")
def _topk(x, k, largest, sorted, int32):
    return cudaops.topk(x, k, largest=largest, sorted=sorted,
                        index_dtype="int32" if int32 else "int64", stream=_stream(x))


@_topk.register_fake
def _(x, k, largest, sorted, int32):
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int32 if int32 else torch.int64)


@_op("kmeans", "(Tensor x, int n_clusters, int n_iters, str metric, bool center, str init, "
     "int seed, Tensor? centroids, str precision) -> (Tensor, Tensor, Tensor)")
def _kmeans(x, n_clusters, n_iters, metric, center, init, seed, centroids, precision):
    return cudaops.kmeans(x, n_clusters, n_iters, metric, center,
                          init if centroids is None else centroids, seed, precision=precision,
                          stream=_stream(x))


@_kmeans.register_fake
def _(x, n_clusters, n_iters, metric, center, init, seed, centroids, precision):
    lead = x.shape[:-2]
    dtype = torch.float32 if centroids is None else centroids.dtype
    return (x.new_empty((*lead, n_clusters, x.shape[-1]), dtype=dtype),
            x.new_empty((*lead, x.shape[-2]), dtype=torch.int32),
            x.new_empty((*lead, n_clusters), dtype=torch.int32))


@_op("attention_merge", "(Tensor outs, Tensor lses) -> (Tensor, Tensor)")
def _attention_merge(outs, lses):
    return cudaops.attention_merge(outs, lses, stream=_stream(outs))


@_attention_merge.register_fake
def _(outs, lses):
    return outs.new_empty(outs.shape[1:]), lses.new_empty(lses.shape[1:])


# The index.

_INDEXES: dict[int, weakref.ref] = {}
_HANDLES = itertools.count(1)


class Index:
    """A cudaops.ivf.Index as torch operators see it: ``buffer`` (a uint8 tensor over the
    index's device memory) and ``handle`` (an int naming the Python index). Build it outside a
    compiled function; pass it into one. ``size``, ``n_clusters`` and the shape are the index's.
    """

    def __init__(self, index):
        if not isinstance(index, cudaops.ivf.Index):
            raise TypeError(f"cudaops.torch.Index: expected a cudaops.ivf.Index, got "
                            f"{type(index).__name__}")
        self.index = index
        self.handle = next(_HANDLES)
        _INDEXES[self.handle] = weakref.ref(index)
        weakref.finalize(self, _INDEXES.pop, self.handle, None)
        self._refresh()

    def _refresh(self):
        self.buffer = torch.from_dlpack(self.index._buffer()).view(torch.uint8)

    def extend(self, keys, values, n_clusters, n_iters=10, *, stream=None):
        """Index.extend outside a compiled function (it may grow the index: a new buffer)."""
        self.index.extend(keys, values, n_clusters, n_iters, stream=stream)
        self._refresh()

    def reserve(self, capacity, max_clusters=None, *, stream=None):
        """Index.reserve (a new buffer)."""
        self.index.reserve(capacity, max_clusters, stream=stream)
        self._refresh()

    def __getattr__(self, name):
        if name in ("index", "buffer", "handle"):
            raise AttributeError(name)
        return getattr(self.index, name)

    def __repr__(self):
        return f"cudaops.torch.Index({self.index!r}, handle={self.handle})"


def _index(handle: int, op: str):
    ref = _INDEXES.get(handle)
    index = ref() if ref is not None else None
    if index is None:
        raise ValueError(f"{op}: no live index has handle {handle}")
    return index


def _dtype(index):
    return getattr(torch, index.dtype)


@_op("ivf_search", "(Tensor buffer, int handle, Tensor queries, int k, int n_probe, "
     "int max_candidates) -> (Tensor, Tensor)")
def _ivf_search(buffer, handle, queries, k, n_probe, max_candidates):
    return _index(handle, "ivf_search").search(
        queries, k, n_probe, max_candidates=max_candidates or None, stream=_stream(queries))


@_ivf_search.register_fake
def _(buffer, handle, queries, k, n_probe, max_candidates):
    shape = (queries.shape[0], queries.shape[1], k)
    return (queries.new_empty(shape, dtype=torch.float32),
            queries.new_empty(shape, dtype=torch.int64))


@_op("ivf_clusters", "(Tensor buffer, int handle, Tensor queries, int n_probe, bool group) "
     "-> Tensor")
def _ivf_clusters(buffer, handle, queries, n_probe, group):
    return _index(handle, "ivf_clusters").clusters(queries, n_probe, group,
                                                   stream=_stream(queries))


@_ivf_clusters.register_fake
def _(buffer, handle, queries, n_probe, group):
    heads = _index(handle, "ivf_clusters").heads if group else queries.shape[0]
    return queries.new_empty((heads, queries.shape[1], n_probe), dtype=torch.int32)


@_op("ivf_retrieve", "(Tensor buffer, int handle, Tensor queries, int n_probe, int max_tokens) "
     "-> (Tensor, Tensor, Tensor, Tensor)")
def _ivf_retrieve(buffer, handle, queries, n_probe, max_tokens):
    index = _index(handle, "ivf_retrieve")
    keys, values, ids, lengths = index.retrieve(queries, n_probe, max_tokens=max_tokens,
                                                stream=_stream(queries))
    if values is None:  # an index of keys alone: an empty block keeps the op's signature
        values = keys.new_empty((*keys.shape[:3], 0))
    return keys, values, ids, lengths


@_ivf_retrieve.register_fake
def _(buffer, handle, queries, n_probe, max_tokens):
    index = _index(handle, "ivf_retrieve")
    h, n = index.heads, queries.shape[1]
    return (queries.new_empty((h, n, max_tokens, index.dim)),
            queries.new_empty((h, n, max_tokens, index.value_dim)),
            queries.new_empty((h, n, max_tokens), dtype=torch.int64),
            queries.new_empty((h, n), dtype=torch.int64))


@_op("ivf_attention", "(Tensor buffer, int handle, Tensor queries, int n_probe, int n_estimate, "
     "float? scale, bool group, Tensor? extra_keys, Tensor? extra_values) -> (Tensor, Tensor)")
def _ivf_attention(buffer, handle, queries, n_probe, n_estimate, scale, group, extra_keys,
                   extra_values):
    return _index(handle, "ivf_attention").attention(
        queries, n_probe, n_estimate, extra_keys=extra_keys, extra_values=extra_values,
        scale=scale, return_lse=True, group=group, stream=_stream(queries))


@_ivf_attention.register_fake
def _(buffer, handle, queries, n_probe, n_estimate, scale, group, extra_keys, extra_values):
    index = _index(handle, "ivf_attention")
    return (queries.new_empty((queries.shape[0], queries.shape[1], index.value_dim)),
            queries.new_empty(queries.shape[:2], dtype=torch.float32))


@_op("ivf_extend", "(Tensor(a!) buffer, int handle, Tensor keys, Tensor? values, int n_clusters, "
     "int n_iters) -> ()", mutates=("buffer",))
def _ivf_extend(buffer, handle, keys, values, n_clusters, n_iters):
    index = _index(handle, "ivf_extend")
    if index.size + keys.shape[1] > index.capacity:
        raise ValueError(f"cudaops.torch.ivf_extend: {keys.shape[1]} tokens do not fit the "
                         f"index's room ({index.capacity - index.size} of capacity "
                         f"{index.capacity}); a registered extend never reallocates: reserve "
                         f"capacity= when building")
    index.extend(keys, values, n_clusters, n_iters, stream=_stream(keys))


@_ivf_extend.register_fake
def _(buffer, handle, keys, values, n_clusters, n_iters):
    return None


# The functions users call: the library's signatures, torch's operators underneath.

def add(a, b):
    """cudaops.add as torch.ops.cudaops.add."""
    return _add(a, b)


def add_scalar(a, alpha):
    """cudaops.add_scalar as torch.ops.cudaops.add_scalar."""
    return _add_scalar(a, float(alpha))


def softmax(x):
    """cudaops.softmax along the last axis, differentiable."""
    return _softmax(x)


def layer_norm(x, weight, bias, eps=1e-5, *, return_stats=False):
    """cudaops.layer_norm, differentiable in x, weight and bias."""
    y, mean, rstd = _layer_norm(x, weight, bias, float(eps))
    return (y, mean, rstd) if return_stats else y


def rms_norm(x, weight, eps=1e-6, *, return_rstd=False):
    """cudaops.rms_norm, differentiable in x and weight."""
    y, rstd = _rms_norm(x, weight, float(eps))
    return (y, rstd) if return_rstd else y


def fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """cudaops.fused_add_rms_norm, in place on x and residual; returns (x, residual)."""
    _fused_add_rms_norm(x, residual, weight, float(eps))
    return x, residual


def topk(x, k, *, largest=True, sorted=True, index_dtype="int64"):
    """cudaops.topk: (values, indices)."""
    if index_dtype not in ("int64", "int32"):
        raise ValueError(f"cudaops.torch.topk: index_dtype must be 'int64' or 'int32', got "
                         f"{index_dtype!r}")
    return _topk(x, int(k), bool(largest), bool(sorted), index_dtype == "int32")


def kmeans(x, n_clusters, n_iters=10, metric="l2", center=False, init="strided", seed=0, *,
           precision="exact"):
    """cudaops.kmeans: (centroids, labels, sizes); init may be a tensor of initial centroids."""
    centroids = init if isinstance(init, torch.Tensor) else None
    return _kmeans(x, int(n_clusters), int(n_iters), metric, bool(center),
                   "strided" if centroids is not None else init, int(seed), centroids, precision)


def attention_merge(outs, lses):
    """cudaops.attention_merge: (out, lse)."""
    return _attention_merge(outs, lses)


def ivf_search(index: Index, queries, k, n_probe, *, max_candidates=None):
    """Index.search: (scores, ids)."""
    return _ivf_search(index.buffer, index.handle, queries, int(k), int(n_probe),
                       int(max_candidates or 0))


def ivf_clusters(index: Index, queries, n_probe, group=True):
    """Index.clusters."""
    return _ivf_clusters(index.buffer, index.handle, queries, int(n_probe), bool(group))


def ivf_retrieve(index: Index, queries, n_probe, max_tokens):
    """Index.retrieve with a static max_tokens: (keys, values, ids, lengths); values [..., 0]
    for an index of keys alone."""
    return _ivf_retrieve(index.buffer, index.handle, queries, int(n_probe), int(max_tokens))


def ivf_attention(index: Index, queries, n_probe, n_estimate=0, *, extra_keys=None,
                  extra_values=None, scale=None, return_lse=False, group=True):
    """Index.attention: o (and lse with return_lse)."""
    o, lse = _ivf_attention(index.buffer, index.handle, queries, int(n_probe), int(n_estimate),
                            None if scale is None else float(scale), bool(group), extra_keys,
                            extra_values)
    return (o, lse) if return_lse else o


def ivf_extend(index: Index, keys, values, n_clusters, n_iters=10):
    """Index.extend within the room reserved at build time (never reallocates, so that it can
    be captured in a CUDA graph)."""
    _ivf_extend(index.buffer, index.handle, keys, values, int(n_clusters), int(n_iters))


# Several GPUs through torch.distributed (docs/torch.md).

def head_slice(cache, rank, world):
    """Rank `rank`'s kv heads of a [kv_heads, tokens, dim] cache (tensor parallelism: each rank
    indexes and attends its own heads; its query heads are the matching slice of the queries,
    ``head_slice(queries, rank, world)``). Heads must divide evenly among the ranks."""
    heads = cache.shape[0]
    if world < 1 or not 0 <= rank < world or heads % world != 0:
        raise ValueError(f"cudaops.torch.head_slice: {heads} heads do not split evenly over "
                         f"{world} ranks (rank {rank})")
    step = heads // world
    return cache[rank * step:(rank + 1) * step].contiguous()


def context_parallel_slice(cache, rank, world):
    """Rank `rank`'s contiguous part of every head's tokens of a [kv_heads, tokens, dim] cache
    (context parallelism): tokens [r * S // R, (r + 1) * S // R)."""
    tokens = cache.shape[1]
    if world < 1 or not 0 <= rank < world or tokens < world:
        raise ValueError(f"cudaops.torch.context_parallel_slice: {tokens} tokens over {world} "
                         f"ranks (rank {rank})")
    return cache[:, rank * tokens // world:(rank + 1) * tokens // world].contiguous()


def context_parallel_attention(index, queries, n_probe, n_estimate=0, *, extra_keys=None,
                               extra_values=None, scale=None, group=None, return_lse=False):
    """One decode step over a context split across the ranks of `group` (torch.distributed; None:
    the default group): each rank attends its own index (its n_probe exact and n_estimate
    estimated clusters, and the extra tokens it is given: pass them on one rank), then one
    all_gather of the partial outputs and log-sum-exps, merged exactly by attention_merge. Every
    rank returns the same o [q_heads, Q, value_dim] (and lse)."""
    import torch.distributed as dist

    inner = index.index if isinstance(index, Index) else index
    o, lse = inner.attention(queries, n_probe, n_estimate, extra_keys=extra_keys,
                             extra_values=extra_values, scale=scale, return_lse=True,
                             stream=_stream(queries))
    world = dist.get_world_size(group)
    if world == 1:
        return (o, lse) if return_lse else o
    # Gloo moves CUDA tensors through the host; NCCL gathers them in place.
    host = dist.get_backend(group) == "gloo"
    parts_o = [torch.empty_like(o, device="cpu" if host else o.device) for _ in range(world)]
    parts_l = [torch.empty_like(lse, device="cpu" if host else lse.device) for _ in range(world)]
    dist.all_gather(parts_o, o.cpu() if host else o, group=group)
    dist.all_gather(parts_l, lse.cpu() if host else lse, group=group)
    outs = torch.stack(parts_o).to(o.device)
    lses = torch.stack(parts_l).to(o.device)
    merged, merged_lse = cudaops.attention_merge(outs, lses, stream=_stream(queries))
    return (merged, merged_lse) if return_lse else merged
