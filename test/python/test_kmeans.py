"""cudaops.kmeans: argument checks through stand-in arrays (no GPU needed), then on a GPU with
torch tensors against a float64 numpy check of what the call returns."""

import pytest

import cudaops

from conftest import requires_gpu


def test_name_exported():
    assert callable(cudaops.kmeans)
    assert "kmeans" in cudaops.__all__


def test_bad_arguments(dl):
    x = dl([2, 64, 16], "float16")
    with pytest.raises(TypeError, match=r"kmeans: n_clusters must be an int, got float"):
        cudaops.kmeans(x, 4.0)
    with pytest.raises(TypeError, match=r"kmeans: n_iters must be an int, got bool"):
        cudaops.kmeans(x, 4, n_iters=True)
    with pytest.raises(ValueError, match=r"kmeans: n_iters must be in \[0, 2\^30\], got -1"):
        cudaops.kmeans(x, 4, n_iters=-1)
    with pytest.raises(ValueError, match=r'kmeans: metric must be "l2" or "cosine", got "dot"'):
        cudaops.kmeans(x, 4, metric="dot")
    with pytest.raises(ValueError, match=r'kmeans: init must be "strided", "random" or an array'):
        cudaops.kmeans(x, 4, init="kmeans++")
    with pytest.raises(ValueError, match=r'kmeans: precision must be "exact" or "tf32", got "tf16"'):
        cudaops.kmeans(x, 4, precision="tf16")
    with pytest.raises(TypeError, match=r"kmeans: precision must be a str"):
        cudaops.kmeans(x, 4, precision=32)
    with pytest.raises(ValueError, match=r"kmeans: seed must be >= 0"):
        cudaops.kmeans(x, 4, seed=-3)
    with pytest.raises(ValueError, match=r"n_clusters \(65\) must be"):
        cudaops.kmeans(x, 65)
    with pytest.raises(ValueError, match=r"n_clusters must be >= 1, got 0"):
        cudaops.kmeans(x, 0)


def test_bad_arrays(dl):
    with pytest.raises(TypeError, match=r"kmeans: x: dtype int32 .*expected float32"):
        cudaops.kmeans(dl([64, 16], "int32"), 4)
    with pytest.raises(ValueError, match=r"kmeans: x: expected at least 2 dimensions"):
        cudaops.kmeans(dl([64], "float16"), 4)
    with pytest.raises(ValueError, match=r"kmeans: x: expected the last axis contiguous"):
        cudaops.kmeans(dl([16, 64], "float16", strides=[1, 16]), 4)
    with pytest.raises(NotImplementedError, match=r"points.d 513 is above the largest supported"):
        cudaops.kmeans(dl([4, 513], "float16"), 2)
    with pytest.raises(ValueError, match=r"kmeans: x: .*CUDA"):
        cudaops.kmeans(dl([64, 16], "float16", device=(1, 0)), 4)
    x = dl([2, 64, 16], "float16")
    with pytest.raises(ValueError, match=r"kmeans: init: expected initial centroids of shape "
                                         r"\(2, 4, 16\), got \(4, 16\)"):
        cudaops.kmeans(x, 4, init=dl([4, 16], "float32"))
    with pytest.raises(TypeError, match=r"kmeans: init: expected float32 or x's dtype"):
        cudaops.kmeans(x, 4, init=dl([2, 4, 16], "bfloat16"))


# --- on a GPU ---------------------------------------------------------------------------------


def _mixture(np, rng, batch, n, d, centres):
    means = rng.normal(size=(batch, centres, d))
    which = rng.integers(0, centres, size=(batch, n))
    x = np.take_along_axis(means, which[..., None], axis=1) + 0.1 * rng.normal(size=(batch, n, d))
    return x


@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_fit_is_consistent(dtype, metric):
    """The labels are the nearest returned centroids (but for near ties), the sizes count them,
    and the result is of x's kind and shape; the same call gives the same bits."""
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    rng = np.random.default_rng(7)
    batch, n, d, k = 3, 500, 64, 12
    host = _mixture(np, rng, batch, n, d, 6)
    x = torch.from_numpy(host).to(getattr(torch, dtype)).cuda()
    centroids, labels, sizes = cudaops.kmeans(x, k, n_iters=5, metric=metric, center=True)
    assert isinstance(centroids, torch.Tensor) and centroids.shape == (batch, k, d)
    assert centroids.dtype == torch.float32 and labels.dtype == torch.int32
    assert labels.shape == (batch, n) and sizes.shape == (batch, k)
    again = cudaops.kmeans(x, k, n_iters=5, metric=metric, center=True)
    torch.cuda.synchronize()
    assert torch.equal(centroids, again[0]) and torch.equal(labels, again[1])
    xs = x.to("cpu", torch.float64).numpy()
    z = xs - xs.mean(axis=1, keepdims=True)
    c = centroids.cpu().double().numpy()
    lab = labels.cpu().numpy()
    for b in range(batch):
        if metric == "l2":
            dist = ((z[b][:, None, :] - c[b][None, :, :]) ** 2).sum(-1)
        else:
            dist = -(z[b] @ c[b].T)
        best = dist.min(axis=1)
        got = dist[np.arange(n), lab[b]]
        scale = np.abs(dist).max() + 1.0
        assert np.all(got - best <= 1e-2 * scale), "a label is not the nearest centroid"
        assert np.array_equal(np.bincount(lab[b], minlength=k), sizes[b].cpu().numpy())


@requires_gpu
def test_given_init_and_stream():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    rng = np.random.default_rng(3)
    x = torch.from_numpy(_mixture(np, rng, 2, 300, 32, 4)).half().cuda()
    init = x[:, :5, :].contiguous()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        centroids, labels, sizes = cudaops.kmeans(x, 5, n_iters=0, init=init, stream=stream)
    stream.synchronize()
    assert centroids.dtype == torch.float16
    assert torch.equal(centroids, init)  # no iterations: the centroids given
    assert int(sizes.sum()) == 2 * 300


@requires_gpu
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_float32_precision(metric):
    """float32's exact products end within 0.1% of a float64 fit's objective from the same initial
    centroids, on isotropic Gaussian points; precision="tf32" runs too."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    gen = torch.Generator().manual_seed(11)
    batch, n, d, k, iters = 2, 4000, 64, 32, 10
    x64 = torch.randn(batch, n, d, generator=gen, dtype=torch.float64)
    init64 = x64[:, :: n // k][:, :k].clone()
    if metric == "cosine":
        init64 = init64 / init64.norm(dim=-1, keepdim=True)
    init64 = init64.float().double()

    def objective64(centroids):
        if metric == "l2":
            dist = torch.cdist(x64, centroids) ** 2
        else:
            xn = x64 / x64.norm(dim=-1, keepdim=True)
            dist = 1.0 - xn @ centroids.transpose(1, 2)
        return dist.min(dim=-1)

    c = init64.clone()
    for _ in range(iters):
        labels = objective64(c).indices
        for b in range(batch):
            pts = x64[b] if metric == "l2" else x64[b] / x64[b].norm(dim=-1, keepdim=True)
            for j in range(k):
                mine = pts[labels[b] == j]
                if len(mine) == 0:
                    continue
                s = mine.sum(0)
                c[b, j] = s / len(mine) if metric == "l2" else s / s.norm()
    want = objective64(c).values.sum(-1)
    x = x64.float().cuda()
    init = init64.float().cuda()
    got = {}
    for precision in ("exact", "tf32"):
        centroids, _, _ = cudaops.kmeans(x, k, n_iters=iters, metric=metric, init=init,
                                         precision=precision)
        got[precision] = objective64(centroids.double().cpu()).values.sum(-1)
    assert torch.all((got["exact"] / want - 1).abs() <= 1e-3), (got, want)
    assert torch.all(torch.isfinite(got["tf32"]))
