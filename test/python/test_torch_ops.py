"""cudaops.torch: the ops as torch.library custom ops. Without a GPU (torch only): every op is
registered, the fake implementations give the
shapes and dtypes the library gives, and a decoder layer traces into one graph of them. On a GPU:
torch.library.opcheck for every op, autograd against torch's own ops in float64, a decoder layer
under torch.compile(fullgraph=True) equal to eager, and a decode step captured in a CUDA graph
and replayed."""

import weakref

import pytest

import cudaops

from conftest import requires_gpu

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cudaops.torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

OPS = ["add", "add_scalar", "softmax", "softmax_backward", "layer_norm", "layer_norm_backward",
       "rms_norm", "rms_norm_backward", "fused_add_rms_norm", "topk", "kmeans", "attention_merge",
       "ivf_search", "ivf_clusters", "ivf_retrieve", "ivf_attention", "ivf_extend"]


def test_every_op_is_registered():
    for name in OPS:
        assert hasattr(torch.ops.cudaops, name), name
    schema = str(torch.ops.cudaops.fused_add_rms_norm.default._schema)
    assert "Tensor(a!) x" in schema and "Tensor(b!) residual" in schema
    assert "Tensor(a!) buffer" in str(torch.ops.cudaops.ivf_extend.default._schema)
    assert "(a!)" not in str(torch.ops.cudaops.ivf_attention.default._schema)


class _StandInIndex:
    """What the fake implementations read of an index: its shape."""
    heads, dim, value_dim, size, capacity, dtype = 2, 64, 32, 1000, 2000, "float16"


@pytest.fixture
def stand_in():
    obj = _StandInIndex()
    handle = 10 ** 9
    ct._INDEXES[handle] = weakref.ref(obj)
    index = type("I", (), {})()
    index.handle = handle
    yield obj, index
    ct._INDEXES.pop(handle, None)


def test_fake_shapes(stand_in):
    _, index = stand_in
    with FakeTensorMode():
        h = torch.float16
        x = torch.empty(6, 5, 96, device="cuda", dtype=h)
        w = torch.empty(96, device="cuda", dtype=h)
        assert ct.add(x, x).shape == x.shape
        assert ct.softmax(x).dtype == h
        y, mean, rstd = ct.layer_norm(x, w, w, return_stats=True)
        assert y.shape == x.shape and mean.shape == (6, 5) and rstd.dtype == torch.float32
        y, rstd = ct.rms_norm(x, w, return_rstd=True)
        assert rstd.shape == (6, 5) and rstd.dtype == torch.float32
        v, i = ct.topk(x, 7)
        assert v.shape == (6, 5, 7) and v.dtype == h and i.dtype == torch.int64
        assert ct.topk(x, 7, index_dtype="int32")[1].dtype == torch.int32
        c, labels, sizes = ct.kmeans(x, 4)
        assert c.shape == (6, 4, 96) and c.dtype == torch.float32
        assert labels.shape == (6, 5) and sizes.shape == (6, 4) and sizes.dtype == torch.int32
        o, lse = ct.attention_merge(torch.empty(3, 8, 2, 32, device="cuda", dtype=h),
                                    torch.empty(3, 8, 2, device="cuda"))
        assert o.shape == (8, 2, 32) and lse.shape == (8, 2)
        index.buffer = torch.empty(4096, device="cuda", dtype=torch.uint8)
        q = torch.empty(8, 3, 64, device="cuda", dtype=h)
        scores, ids = ct.ivf_search(index, q, 10, 4)
        assert scores.shape == (8, 3, 10) and ids.dtype == torch.int64
        assert ct.ivf_clusters(index, q, 5).shape == (2, 3, 5)
        assert ct.ivf_clusters(index, q, 5, group=False).shape == (8, 3, 5)
        k, vals, ids, lengths = ct.ivf_retrieve(index, q, 5, 300)
        assert k.shape == (2, 3, 300, 64) and vals.shape == (2, 3, 300, 32)
        assert lengths.shape == (2, 3)
        o, lse = ct.ivf_attention(index, q, 5, 20, return_lse=True)
        assert o.shape == (8, 3, 32) and o.dtype == h and lse.shape == (8, 3)


def test_a_decoder_layer_traces_into_cudaops_ops(stand_in):
    _, index = stand_in
    from torch.fx.experimental.proxy_tensor import make_fx

    def layer(x, residual, w, q):
        ct.fused_add_rms_norm(x, residual, w)
        o = ct.ivf_attention(index, q, 5, 20)
        return ct.add(o.reshape(x.shape), x)

    with FakeTensorMode():
        index.buffer = torch.empty(4096, device="cuda", dtype=torch.uint8)
        x = torch.empty(8, 32, device="cuda", dtype=torch.float16)
        w = torch.empty(32, device="cuda", dtype=torch.float16)
        q = torch.empty(8, 1, 64, device="cuda", dtype=torch.float16)
        graph = make_fx(layer, tracing_mode="fake")(x, x.clone(), w, q)
    text = str(graph.graph)
    for name in ("cudaops.fused_add_rms_norm", "cudaops.ivf_attention", "cudaops.add"):
        assert name in text, text


def test_index_wrapper_refuses_other_objects():
    with pytest.raises(TypeError, match=r"expected a cudaops.ivf.Index"):
        ct.Index(object())
    with pytest.raises(ValueError, match=r"index_dtype must be"):
        ct.topk(torch.empty(2, 2), 1, index_dtype="int16")


# On a GPU.

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")


def _small_index(dtype=torch.float16, capacity=None):
    g = torch.Generator(device="cuda").manual_seed(1)
    keys = torch.randn(2, 1500, 64, device="cuda", generator=g).to(dtype)
    values = torch.randn(2, 1500, 32, device="cuda", generator=g).to(dtype)
    built = cudaops.ivf.build_global(keys[:, :1000].contiguous(), values[:, :1000].contiguous(),
                                     24, 2, n_iters=3, capacity=capacity or 1000,
                                     max_clusters=40)
    return ct.Index(built), keys, values


@requires_gpu
def test_opcheck_every_op():
    _cuda()
    opcheck = torch.library.opcheck
    h = torch.float16
    x = torch.randn(4, 7, 96, device="cuda", dtype=h)
    w = torch.randn(96, device="cuda", dtype=h)
    f32 = torch.randn(4, 7, 96, device="cuda")
    opcheck(torch.ops.cudaops.add, (x, x))
    opcheck(torch.ops.cudaops.add_scalar, (x, 0.5))
    opcheck(torch.ops.cudaops.softmax, (f32.requires_grad_(),))
    y = torch.softmax(f32.detach(), -1)
    opcheck(torch.ops.cudaops.softmax_backward, (y, torch.randn_like(y)))
    opcheck(torch.ops.cudaops.layer_norm, (f32, torch.randn(96, device="cuda"),
                                           torch.randn(96, device="cuda"), 1e-5))
    opcheck(torch.ops.cudaops.rms_norm, (x, w, 1e-6))
    _, rstd = ct.rms_norm(x, w, return_rstd=True)
    opcheck(torch.ops.cudaops.rms_norm_backward, (torch.randn_like(x), x, w, rstd))
    _, mean, rstd = ct.layer_norm(x, w, w, return_stats=True)
    opcheck(torch.ops.cudaops.layer_norm_backward, (torch.randn_like(x), x, w, mean, rstd))
    opcheck(torch.ops.cudaops.fused_add_rms_norm, (x.clone(), x.clone(), w, 1e-6))
    opcheck(torch.ops.cudaops.topk, (x, 5, True, True, False))
    opcheck(torch.ops.cudaops.kmeans, (x, 3, 2, "l2", False, "strided", 0, None))
    opcheck(torch.ops.cudaops.attention_merge, (torch.randn(3, 4, 2, 32, device="cuda"),
                                                torch.randn(3, 4, 2, device="cuda")))
    index, keys, values = _small_index(capacity=1500)
    q = keys[torch.arange(8) // 4, 1000:1002].contiguous()
    opcheck(torch.ops.cudaops.ivf_search, (index.buffer, index.handle, q, 10, 4, 0))
    opcheck(torch.ops.cudaops.ivf_clusters, (index.buffer, index.handle, q, 4, True))
    opcheck(torch.ops.cudaops.ivf_retrieve, (index.buffer, index.handle, q, 4, 400))
    opcheck(torch.ops.cudaops.ivf_attention,
            (index.buffer, index.handle, q, 4, 8, None, True, None, None))
    # opcheck runs the op several times: each run appends a segment of 50 tokens.
    opcheck(torch.ops.cudaops.ivf_extend,
            (index.buffer, index.handle, keys[:, 1000:1050].contiguous(),
             values[:, 1000:1050].contiguous(), 2, 2),
            test_utils=("test_schema", "test_faketensor"))


@requires_gpu
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms_norm"])
def test_autograd_matches_torch_in_float64(name):
    _cuda()
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(33, 257, device="cuda", generator=g)
    w = torch.randn(257, device="cuda", generator=g)
    b = torch.randn(257, device="cuda", generator=g)
    dy = torch.randn(33, 257, device="cuda", generator=g)

    def run(f, *args):
        leaves = [a.clone().requires_grad_() for a in args]
        out = f(*leaves)
        out.backward(dy.to(out.dtype))
        return [out] + [leaf.grad for leaf in leaves]

    if name == "softmax":
        ours = run(ct.softmax, x)
        want = run(lambda t: torch.softmax(t, -1), x.double())
    elif name == "layer_norm":
        ours = run(lambda t, u, v: ct.layer_norm(t, u, v), x, w, b)
        want = run(lambda t, u, v: torch.nn.functional.layer_norm(t, (257,), u, v),
                   x.double(), w.double(), b.double())
    else:
        ours = run(lambda t, u: ct.rms_norm(t, u), x, w)
        want = run(lambda t, u: torch.nn.functional.rms_norm(t, (257,), u, eps=1e-6),
                   x.double(), w.double())
    for a, e in zip(ours, want):
        err = float((a.double() - e).norm() / e.norm())
        assert err < 1e-5, (name, err)


@requires_gpu
def test_decoder_layer_compiles_without_graph_breaks():
    _cuda()
    index, keys, _ = _small_index()
    w = torch.randn(64, device="cuda", dtype=torch.float16)
    sink_k = keys[:, :4].contiguous()
    sink_v = torch.randn(2, 4, 32, device="cuda", dtype=torch.float16)

    def layer(x, residual, q):
        x, residual = ct.fused_add_rms_norm(x, residual, w)
        h = ct.rms_norm(q, w)
        o = ct.ivf_attention(index, h, 6, 10, extra_keys=sink_k, extra_values=sink_v)
        return ct.add(o.reshape(x.shape[0], -1), x[:, :32]), residual

    x = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    r = torch.randn(8, 64, device="cuda", dtype=torch.float16)
    q = torch.randn(8, 1, 64, device="cuda", dtype=torch.float16)
    eager = layer(x.clone(), r.clone(), q)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True)
    got = compiled(x.clone(), r.clone(), q)
    for a, e in zip(got, eager):
        assert torch.equal(a, e)


@requires_gpu
def test_decode_step_in_a_cuda_graph_replayed():
    _cuda()
    index, keys, _ = _small_index()
    q = torch.randn(8, 1, 64, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ct.ivf_attention(index, q, 6, 10)
        ct.ivf_search(index, q, 16, 6)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = ct.ivf_attention(index, q, 6, 10)
        scores, ids = ct.ivf_search(index, q, 16, 6)
    for step in range(100):
        q.copy_(torch.randn_like(q))
        graph.replay()
        if step % 25 == 0:
            assert torch.equal(o, ct.ivf_attention(index, q, 6, 10))
            assert torch.equal(ids, ct.ivf_search(index, q, 16, 6)[1])
    torch.cuda.synchronize()


@requires_gpu
def test_registered_extend_stays_within_capacity():
    _cuda()
    index, keys, values = _small_index(capacity=1200)
    ct.ivf_extend(index, keys[:, 1000:1200].contiguous(), values[:, 1000:1200].contiguous(), 8)
    assert index.size == 1200 and index.n_clusters == 32
    with pytest.raises(ValueError, match=r"a registered extend never reallocates"):
        ct.ivf_extend(index, keys[:, 1200:1300].contiguous(), values[:, 1200:1300].contiguous(),
                      4)
