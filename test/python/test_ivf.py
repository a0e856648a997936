"""cudaops.ivf: argument checks through stand-in arrays (no GPU needed), then on a GPU with torch
tensors: probing every cluster gives the exact top k of a float64 search; the clusters chosen for
retrieval and the blocks retrieve gathers."""

import pytest

import cudaops

from conftest import requires_gpu


def test_names_exported():
    assert "ivf" in cudaops.__all__
    assert callable(cudaops.ivf.build_global)
    assert cudaops.ivf.Index.__name__ == "IvfIndex"


def test_bad_arguments(dl):
    keys = dl([2, 1000, 64], "float16")
    values = dl([2, 1000, 32], "float16")
    build = cudaops.ivf.build_global
    with pytest.raises(TypeError, match=r"ivf.build_global: n_clusters must be an int, got float"):
        build(keys, values, 32.0, 4)
    with pytest.raises(ValueError, match=r"ivf.build_global: n_iters must be in \[0, 2\^30\]"):
        build(keys, values, 32, 4, n_iters=-1)
    with pytest.raises(ValueError, match=r"n_clusters \(30\) must be a positive multiple of "
                                         r"params.n_segments \(4\)"):
        build(keys, values, 30, 4)
    with pytest.raises(ValueError, match=r"is above the shortest segment's tokens \(250\)"):
        build(keys, values, 2000, 4)
    with pytest.raises(ValueError, match=r"keys: expected 3 dimensions \[heads, tokens, dim\]"):
        build(dl([1000, 64], "float16"), None, 32, 4)
    with pytest.raises(TypeError, match=r"keys: dtype float32 is not supported; expected float16"):
        build(dl([2, 1000, 64], "float32"), None, 32, 4)
    with pytest.raises(TypeError, match=r"values: dtype bfloat16 does not match keys's dtype"):
        build(keys, dl([2, 1000, 32], "bfloat16"), 32, 4)
    with pytest.raises(ValueError, match=r"values: expected \[heads, tokens\] of keys"):
        build(keys, dl([2, 999, 32], "float16"), 32, 4)
    with pytest.raises(ValueError, match=r"shape.dim must be a multiple of 8"):
        build(dl([2, 1000, 60], "float16"), None, 32, 4)
    with pytest.raises(ValueError, match=r"keys: expected a C-contiguous array"):
        build(dl([2, 1000, 64], "float16", strides=[64, 128, 1]), None, 32, 4)


def _clustered(torch, heads, tokens, dim, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    offset = 2.0 + 0.5 * torch.randn(heads, 1, dim, generator=g, dtype=torch.float64)
    dirs = torch.randn(heads, 8, dim, generator=g, dtype=torch.float64)
    which = torch.randint(0, 8, (heads, tokens), generator=g)
    x = offset + torch.gather(dirs, 1, which[..., None].expand(-1, -1, dim))
    x = x + 0.3 * torch.randn(heads, tokens, dim, generator=g, dtype=torch.float64)
    return x.to(dtype).cuda()


HEADS, TOKENS, DIM, CLUSTERS, SEGMENTS, Q_HEADS, Q = 2, 3000, 64, 48, 3, 8, 3


def _index_and_queries(dtype, seed):
    """torch, clustered keys and random values [HEADS, TOKENS, *] of `dtype` on the GPU, their
    index, and Q queries per query head near the first keys of their kv head."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    dt = getattr(torch, dtype)
    keys = _clustered(torch, HEADS, TOKENS, DIM, dt, seed)
    values = torch.randn(HEADS, TOKENS, 32, dtype=dt, device="cuda")
    index = cudaops.ivf.build_global(keys, values, CLUSTERS, SEGMENTS, n_iters=5)
    queries = (keys[torch.arange(Q_HEADS) // (Q_HEADS // HEADS), :Q, :] +
               0.1 * torch.randn(Q_HEADS, Q, DIM, device="cuda").to(dt)).contiguous()
    return torch, keys, values, index, queries


@requires_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_cluster_probed_is_exact(dtype):
    torch, keys, values, index, queries = _index_and_queries(dtype, 1)
    heads, tokens, clusters, q_heads, q = HEADS, TOKENS, CLUSTERS, Q_HEADS, Q
    assert index.n_clusters == clusters and index.size == tokens and index.heads == heads
    assert index.nbytes > keys.numel() * 2 + values.numel() * 2
    k = 40
    scores, ids = index.search(queries, k, clusters)
    assert isinstance(scores, torch.Tensor) and scores.shape == (q_heads, q, k)
    assert scores.dtype == torch.float32 and ids.dtype == torch.int64
    kv = keys.double()[torch.arange(q_heads) // (q_heads // heads)]
    exact = torch.einsum("gqd,gtd->gqt", queries.double(), kv)
    want, want_ids = exact.topk(k, dim=-1)
    assert torch.allclose(scores.double(), want, rtol=1e-4, atol=1e-3)
    got_exact = torch.gather(exact, 2, ids)
    assert torch.allclose(got_exact, want, rtol=1e-4, atol=1e-3), "an id is not a top-k token"
    # A few probes: fewer candidates, every result a real token with its own score.
    few, few_ids = index.search(queries, k, 4)
    real = few_ids >= 0
    assert bool(real.any())
    assert torch.allclose(few.double()[real], torch.gather(exact, 2, few_ids.clamp(min=0))[real],
                          rtol=1e-4, atol=1e-3)
    assert bool(torch.all(few.double() <= want[..., :1] + 1e-3))


@requires_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_clusters_and_retrieve(dtype):
    torch, keys, values, index, queries = _index_and_queries(dtype, 2)
    heads, tokens, dim, clusters, segments = HEADS, TOKENS, DIM, CLUSTERS, SEGMENTS
    q_heads, q = Q_HEADS, Q
    n_probe = 5
    chosen = index.clusters(queries, n_probe)
    assert isinstance(chosen, torch.Tensor) and chosen.dtype == torch.int32
    assert chosen.shape == (heads, q, n_probe)
    assert bool(torch.all(chosen >= 0)) and bool(torch.all(chosen < clusters))
    assert bool(torch.all(chosen[..., 1:] > chosen[..., :-1])), "ascending, no repeats"
    assert index.clusters(queries, n_probe, group=False).shape == (q_heads, q, n_probe)

    k_out, v_out, ids, lengths = index.retrieve(queries, n_probe)
    m = k_out.shape[2]
    assert k_out.shape == (heads, q, m, dim) and v_out.shape == (heads, q, m, 32)
    assert ids.shape == (heads, q, m) and lengths.shape == (heads, q)
    assert ids.dtype == torch.int64 and lengths.dtype == torch.int64
    for h in range(heads):
        for i in range(q):
            n = int(lengths[h, i])
            assert 0 < n <= m
            got = ids[h, i, :n]
            assert bool(torch.all(got >= 0)) and got.unique().numel() == n
            assert bool(torch.all(ids[h, i, n:] == -1))
            assert torch.equal(k_out[h, i, :n], keys[h, got])
            assert torch.equal(v_out[h, i, :n], values[h, got])
            assert bool(torch.all(k_out[h, i, n:] == 0)) and bool(torch.all(v_out[h, i, n:] == 0))
    # Cut short: the first max_tokens places of the full blocks.
    k5, v5, ids5, len5 = index.retrieve(queries, n_probe, max_tokens=5)
    assert ids5.shape == (heads, q, 5)
    assert torch.equal(len5, lengths.clamp(max=5))
    assert torch.equal(ids5, ids[..., :5]) and torch.equal(k5, k_out[..., :5, :])
    # Every cluster: every token once.
    _, _, all_ids, all_len = index.retrieve(queries, clusters)
    assert bool(torch.all(all_len == tokens))
    assert torch.equal(all_ids.sort(dim=-1).values,
                       torch.arange(tokens, device="cuda").expand(heads, q, tokens))
    with pytest.raises(ValueError, match=r"params.max_tokens must be >= 1"):
        index.retrieve(queries, n_probe, max_tokens=0)
    with pytest.raises(ValueError, match=r"n_probe must be from 1 to the index's clusters"):
        index.retrieve(queries, clusters + 1)
    keys_only = cudaops.ivf.build_global(keys, None, clusters, segments, n_iters=2)
    k_only, v_none, _, _ = keys_only.retrieve(queries, n_probe)
    assert v_none is None and k_only.shape[:2] == (heads, q)


def test_load_refuses_bad_files(tmp_path):
    with pytest.raises(OSError, match=r"ivf_saved_shape"):
        cudaops.ivf.load(tmp_path / "missing.ivf")
    junk = tmp_path / "junk.ivf"
    junk.write_bytes(b"\x89CUDAOPS" + b"\0" * 100)
    junk.chmod(0o600)
    with pytest.raises(OSError):
        cudaops.ivf.load(junk)
    with pytest.raises(TypeError):
        cudaops.ivf.load(3.5)


@requires_gpu
def test_save_and_load_give_the_same_results(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    keys = _clustered(torch, 2, 1500, 64, torch.float16, 2)
    values = torch.randn(2, 1500, 16, dtype=torch.float16, device="cuda")
    index = cudaops.ivf.build_global(keys, values, 30, 3, n_iters=3)
    queries = keys[:, :4, :].repeat(2, 1, 1).contiguous()
    scores, ids = index.search(queries, 25, 5)
    path = tmp_path / "index.ivf"
    index.save(path)
    again = cudaops.ivf.load(str(path))
    assert again.n_clusters == 30 and again.size == 1500 and again.heads == 2
    scores2, ids2 = again.search(queries, 25, 5)
    torch.cuda.synchronize()
    assert torch.equal(scores, scores2) and torch.equal(ids, ids2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match=r"CRC|checksum"):
        cudaops.ivf.load(path)


@requires_gpu
def test_extend_appends_a_segment():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    keys = _clustered(torch, 2, 1400, 64, torch.float16, 4)
    values = torch.randn(2, 1400, 16, dtype=torch.float16, device="cuda")
    index = cudaops.ivf.build_global(keys[:, :1000].contiguous(), values[:, :1000].contiguous(),
                                     20, 2, capacity=1400, max_clusters=28)
    assert index.size == 1000 and index.n_clusters == 20
    with pytest.raises(ValueError, match=r"params.n_clusters must be from 1 to"):
        index.extend(keys[:, 1000:].contiguous(), values[:, 1000:].contiguous(), 401)
    index.extend(keys[:, 1000:].contiguous(), values[:, 1000:].contiguous(), 8, n_iters=3)
    assert index.size == 1400 and index.n_clusters == 28
    queries = keys[:, 1390:1394].repeat(2, 1, 1).contiguous()
    scores, ids = index.search(queries, 20, 28)
    kv = keys.double()[torch.arange(4) // 2]
    exact = torch.einsum("gqd,gtd->gqt", queries.double(), kv)
    want = exact.topk(20, dim=-1).values
    assert torch.allclose(scores.double(), want, rtol=1e-4, atol=1e-3)
    assert bool((ids >= 1000).any()), "the new tokens are found"


def _attention_torch(torch, keys, values, queries, scale):
    """Exact attention in float64 of queries [Hq, Q, D] over keys/values [H, S, *] (GQA)."""
    group = queries.shape[0] // keys.shape[0]
    k = keys.double().repeat_interleave(group, dim=0)
    v = values.double().repeat_interleave(group, dim=0)
    logits = torch.einsum("gqd,gtd->gqt", queries.double(), k) * scale
    lse = torch.logsumexp(logits, dim=-1)
    return torch.einsum("gqt,gtd->gqd", torch.softmax(logits, dim=-1), v), lse


@requires_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_every_cluster_is_full_attention(dtype):
    torch, keys, values, index, queries = _index_and_queries(dtype, 5)
    extra_k = torch.randn(HEADS, 3, DIM, device="cuda").to(keys.dtype)
    extra_v = torch.randn(HEADS, 3, 32, device="cuda").to(keys.dtype)
    o, lse = index.attention(queries, CLUSTERS, 0, extra_keys=extra_k, extra_values=extra_v,
                             return_lse=True)
    assert isinstance(o, torch.Tensor) and o.dtype == keys.dtype and o.shape == (Q_HEADS, Q, 32)
    assert lse.dtype == torch.float32 and lse.shape == (Q_HEADS, Q)
    want, want_lse = _attention_torch(torch, torch.cat([keys, extra_k], 1),
                                      torch.cat([values, extra_v], 1), queries, DIM ** -0.5)
    err = (o.double() - want).norm(dim=-1) / want.norm(dim=-1)
    # bfloat16: two units of 2^-9 (the output's rounding alone can take one).
    bound = 4e-3 if dtype == "bfloat16" else 1e-3
    assert float(err.max()) <= bound
    assert torch.allclose(lse.double(), want_lse, rtol=bound, atol=bound)
    # out= writes in place; the same bits every run.
    out = torch.empty_like(o)
    assert index.attention(queries, CLUSTERS, 0, extra_keys=extra_k, extra_values=extra_v,
                           out=out) is out
    assert torch.equal(out, o)


@requires_gpu
def test_attention_estimate_and_arguments():
    torch, keys, values, index, queries = _index_and_queries("float16", 6)
    exact_only = index.attention(queries, 5)
    with_estimate = index.attention(queries, 5, 20)
    want, _ = _attention_torch(torch, keys, values, queries, DIM ** -0.5)
    e0 = float(((exact_only.double() - want).norm(dim=-1) / want.norm(dim=-1)).median())
    e1 = float(((with_estimate.double() - want).norm(dim=-1) / want.norm(dim=-1)).median())
    assert e1 <= e0 + 1e-3, (e0, e1)
    assert index.attention(queries, 5, 20, group=False).shape == (Q_HEADS, Q, 32)
    assert torch.equal(index.attention(queries, 5, 20, scale=DIM ** -0.5), with_estimate)
    with pytest.raises(ValueError, match=r"params.n_estimate must be from 0"):
        index.attention(queries, 5, CLUSTERS)
    with pytest.raises(ValueError, match=r"n_probe must be from 1"):
        index.attention(queries, 0)
    with pytest.raises(ValueError, match=r"scale must be finite and > 0"):
        index.attention(queries, 5, scale=-1.0)
    with pytest.raises(TypeError, match=r"scale must be a number"):
        index.attention(queries, 5, scale="x")
    with pytest.raises(ValueError, match=r"extra_keys and extra_values must be given together"):
        index.attention(queries, 5, extra_keys=keys)
    with pytest.raises(ValueError, match=r"out: expected shape"):
        index.attention(queries, 5, out=torch.empty(1, device="cuda", dtype=keys.dtype))
    keys_only = cudaops.ivf.build_global(keys, None, CLUSTERS, SEGMENTS, n_iters=2)
    with pytest.raises(ValueError, match=r"holds no values"):
        keys_only.attention(queries, 5)
    assert index.value_dim == 32 and index.dtype == "float16"
    assert index.capacity == TOKENS and index.max_clusters == CLUSTERS


def test_attention_merge_refuses_bad_arguments(dl):
    outs = dl([2, 4, 8, 16], "float16")
    with pytest.raises(TypeError, match=r"attention_merge: outs: expected one array"):
        cudaops.attention_merge([outs, outs], dl([2, 4, 8], "float32"))
    with pytest.raises(ValueError, match=r"attention_merge: lses: expected float32 of shape"):
        cudaops.attention_merge(outs, dl([2, 4], "float32"))
    with pytest.raises(ValueError, match=r"attention_merge: lses: expected float32"):
        cudaops.attention_merge(outs, dl([2, 4, 8], "float16"))
    with pytest.raises(ValueError, match=r"attention_merge: outs: expected \[parts, \.\.\., dim\]"):
        cudaops.attention_merge(dl([16], "float16"), dl([], "float32"))
    with pytest.raises(TypeError, match=r"attention_merge: outs"):
        cudaops.attention_merge(dl([2, 4, 8], "int32"), dl([2, 4], "float32"))


@requires_gpu
def test_attention_merge_of_two_halves():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    g = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(8, 2, 64, device="cuda", generator=g)
    k = torch.randn(8, 300, 64, device="cuda", generator=g)
    v = torch.randn(8, 300, 32, device="cuda", generator=g)
    logits = torch.einsum("hqd,htd->hqt", q, k) / 8.0
    parts = [(0, 120), (120, 300)]
    outs = torch.stack([torch.softmax(logits[..., a:b], -1) @ v[:, a:b] for a, b in parts])
    lses = torch.stack([torch.logsumexp(logits[..., a:b], -1) for a, b in parts])
    out, lse = cudaops.attention_merge(outs, lses)
    want = torch.softmax(logits, -1) @ v
    assert out.shape == (8, 2, 32) and lse.shape == (8, 2)
    assert torch.allclose(out, want, rtol=1e-4, atol=1e-5)
    assert torch.allclose(lse, torch.logsumexp(logits, -1), rtol=1e-5, atol=1e-5)
    # A part that attended to nothing (-inf) weighs nothing.
    empty = torch.cat([outs[:1], torch.zeros_like(outs[:1])])
    none = torch.cat([lses[:1], torch.full_like(lses[:1], float("-inf"))])
    out1, lse1 = cudaops.attention_merge(empty, none)
    assert torch.allclose(out1, outs[0], rtol=1e-5, atol=1e-6) and torch.equal(lse1, lses[0])


@requires_gpu
def test_decode_loop_in_a_cuda_graph():
    """1024 decode steps then an extend (the tokens of those steps) and one more step, captured
    once in a CUDA graph (which refuses any host synchronisation) and replayed: the same bits as
    the same loop run eagerly on an index built the same way."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    steps, start, heads, q_heads, dim, dv = 1024, 4096, 2, 8, 64, 32
    keys = _clustered(torch, heads, start + steps, dim, torch.float16, 8)
    values = torch.randn(heads, start + steps, dv, dtype=torch.float16, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(9)
    queries = torch.randn(steps + 1, q_heads, 1, dim, device="cuda", generator=g).half()
    new_k, new_v = keys[:, start:].contiguous(), values[:, start:].contiguous()
    sink_k, sink_v = keys[:, :4].contiguous(), values[:, :4].contiguous()

    def build():
        return cudaops.ivf.build_global(keys[:, :start].contiguous(),
                                        values[:, :start].contiguous(), 64, 4, n_iters=3,
                                        capacity=start + steps, max_clusters=80)

    def loop(index, outs, stream):
        for i in range(steps):
            index.attention(queries[i], 4, 16, extra_keys=sink_k, extra_values=sink_v,
                            out=outs[i], stream=stream)
        index.extend(new_k, new_v, 16, n_iters=3, stream=stream)
        index.attention(queries[steps], 4, 16, out=outs[steps], stream=stream)

    eager = torch.empty(steps + 1, q_heads, 1, dv, dtype=torch.float16, device="cuda")
    loop(build(), eager, torch.cuda.current_stream())

    index = build()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (the module's first calls)
        index.attention(queries[0], 4, 16, stream=s)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    captured = torch.full_like(eager, float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loop(index, captured, torch.cuda.current_stream())
    assert index.size == start + steps  # the host's record moved at capture time
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


@requires_gpu
def test_extend_past_the_room_grows_the_index():
    """build_global then extend without reserving: the index doubles its room (a copy) and
    answers as an index built with room from the start; reserve shrinks it to what it holds."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    keys = _clustered(torch, 2, 1600, 64, torch.bfloat16, 12)
    values = torch.randn(2, 1600, 16, dtype=torch.bfloat16, device="cuda")
    k0, v0 = keys[:, :630].contiguous(), values[:, :630].contiguous()
    grown = cudaops.ivf.build_global(k0, v0, 630 // 10 * 3 // 3, 3)
    roomy = cudaops.ivf.build_global(k0, v0, 630 // 10 * 3 // 3, 3, capacity=1600,
                                     max_clusters=200)
    assert grown.capacity == 630
    for a, b in ((630, 1000), (1000, 1600)):
        for index in (grown, roomy):
            index.extend(keys[:, a:b].contiguous(), values[:, a:b].contiguous(), 30, n_iters=3)
    assert grown.size == 1600 and grown.n_clusters == roomy.n_clusters
    assert grown.capacity >= 1600 and grown.capacity == 2 * 1260
    queries = keys[torch.arange(4) // 2, 1590:1593].contiguous()
    for index in (grown, roomy):
        assert index.size == 1600
    s_g, i_g = grown.search(queries, 32, 20)
    s_r, i_r = roomy.search(queries, 32, 20)
    assert torch.equal(s_g, s_r) and torch.equal(i_g, i_r)
    o_g = grown.attention(queries, 20, 40)
    assert torch.equal(o_g, roomy.attention(queries, 20, 40))
    grown.reserve(1600, grown.n_clusters)
    assert grown.capacity == 1600 and grown.max_clusters == grown.n_clusters
    assert torch.equal(grown.attention(queries, 20, 40), o_g)
    with pytest.raises(ValueError, match=r"Index.reserve: capacity and max_clusters must hold"):
        grown.reserve(1000)
    # A capture that would reallocate is refused, naming the way out.
    s = torch.cuda.Stream()
    more_k = torch.cat([keys[:, :100]] * 1, 1).contiguous()
    more_v = values[:, :100].contiguous()
    with torch.cuda.stream(s):
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(ValueError, match=r"reserve room first"):
            with torch.cuda.graph(graph, stream=s):
                grown.extend(more_k, more_v, 4, stream=s)
