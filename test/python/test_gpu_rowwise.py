"""The row-wise ops on a GPU with torch (and CuPy) arrays, against float64 references."""

import pytest

import cudaops

from conftest import requires_gpu

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
F = torch.nn.functional

pytestmark = [requires_gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ULP = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
SUBNORMAL = {"float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}
SHAPES = [(1, 1), (7, 3), (33, 199), (16, 1000), (5, 4097), (3, 40000)]


def make(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    mag = torch.rand(shape, generator=g, dtype=torch.float64) * 1.5 + 0.5
    sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return (mag * sign * scale).to(DTYPES[dtype]).cuda()


def check(got, want, dtype, *, rel=2.0**-16, floor=2.0**-4, stats=False, scale=0.0):
    """|got - want| <= (ulp + rel) * max(|want|, floor * max(max|want|, scale), subnormal);
    scale: the largest term a gradient is a difference of."""
    torch.cuda.synchronize()
    got = got.detach().double().cpu()
    want = want.detach().double().cpu()
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.numel() == 0:
        return
    largest = max(want.abs().max().item(), float(scale))
    ulp = 0.0 if stats else ULP[dtype]
    scale = torch.clamp(want.abs(), min=max(floor * largest, SUBNORMAL[dtype]))
    err = ((got - want).abs() / scale).max().item()
    assert err <= ulp + rel, f"{dtype}: relative error {err:.3g} > {ulp + rel:.3g}"


def d(t):
    return t.detach().double()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_and_backward(path, dtype, shape):
    x, dy = make(shape, dtype, 1), make(shape, dtype, 2)
    y = cudaops.softmax(x)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
    check(y, torch.softmax(d(x), -1), dtype)
    dx = cudaops.softmax_backward(y, dy)
    yd = d(y)
    check(dx, yd * (d(dy) - (d(dy) * yd).sum(-1, keepdim=True)), dtype,
          scale=(yd * d(dy)).abs().max().item())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_and_backward(path, dtype, shape):
    cols = shape[-1]
    x, dy = make(shape, dtype, 3), make(shape, dtype, 4)
    w, b = make((cols,), dtype, 5), make((cols,), dtype, 6)
    y, mean, rstd = cudaops.layer_norm(x, w, b, 1e-5, return_stats=True)
    assert mean.dtype == torch.float32 and mean.shape == shape[:-1]
    check(y, F.layer_norm(d(x), (cols,), d(w), d(b), 1e-5), dtype)
    xd = d(x)
    m = xd.mean(-1)
    check(mean, m, dtype, rel=2.0**-18, floor=2.0**-2, stats=True)
    check(rstd, 1 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5), dtype, rel=2.0**-18, stats=True)
    dx, dw, db = cudaops.layer_norm_backward(dy, x, w, mean, rstd)
    xh = (xd - d(mean)[..., None]) * d(rstd)[..., None]
    g = d(dy) * d(w)
    want_dx = d(rstd)[..., None] * (g - g.mean(-1, keepdim=True)
                                    - xh * (g * xh).mean(-1, keepdim=True))
    check(dx, want_dx, dtype, scale=(d(rstd)[..., None] * g).abs().max().item())
    check(dw, (d(dy) * xh).reshape(-1, cols).sum(0), dtype, rel=2.0**-14)
    check(db, d(dy).reshape(-1, cols).sum(0), dtype, rel=2.0**-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_and_backward(path, dtype, shape):
    cols = shape[-1]
    x, dy, w = make(shape, dtype, 7), make(shape, dtype, 8), make((cols,), dtype, 9)
    y, rstd = cudaops.rms_norm(x, w, 1e-6, return_rstd=True)
    xd = d(x)
    want_rstd = 1 / torch.sqrt((xd * xd).mean(-1) + 1e-6)
    check(y, xd * want_rstd[..., None] * d(w), dtype)
    check(rstd, want_rstd, dtype, rel=2.0**-18, stats=True)
    dx, dw = cudaops.rms_norm_backward(dy, x, w, rstd)
    xh = xd * d(rstd)[..., None]
    g = d(dy) * d(w)
    check(dx, d(rstd)[..., None] * (g - xh * (g * xh).mean(-1, keepdim=True)), dtype,
          scale=(d(rstd)[..., None] * g).abs().max().item())
    check(dw, (d(dy) * xh).reshape(-1, cols).sum(0), dtype, rel=2.0**-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_add_rms_norm(path, dtype, shape):
    cols = shape[-1]
    x, r, w = make(shape, dtype, 10), make(shape, dtype, 11), make((cols,), dtype, 12)
    s = (x.float() + r.float()).to(x.dtype)  # the sum as the op stores it
    sd = d(s)
    want = sd / torch.sqrt((sd * sd).mean(-1, keepdim=True) + 1e-6) * d(w)
    got_x, got_r = cudaops.fused_add_rms_norm(x, r, w)
    assert got_x is x and got_r is r
    assert torch.equal(r, s)
    check(x, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_out_and_in_place(dtype):
    big = make((64, 1100), dtype, 13)
    x = big[:, 37:37 + 1000]  # rows 1100 apart, misaligned start
    out = torch.full((64, 1000), float("nan"), dtype=x.dtype, device="cuda")
    assert cudaops.softmax(x, out=out) is out
    check(out, torch.softmax(d(x), -1), dtype)
    wide = torch.full((64, 1024), float("nan"), dtype=x.dtype, device="cuda")
    view = wide[:, :1000]
    cudaops.softmax(x, out=view)
    check(view, torch.softmax(d(x), -1), dtype)
    assert torch.isnan(wide[:, 1000:]).all(), "the gap between rows was written"
    y = x.clone()
    expected = torch.softmax(d(y), -1)
    assert cudaops.softmax(y, out=y) is y
    check(y, expected, dtype)
    w = make((1000,), dtype, 14)
    z = x.clone()
    expected = d(z) / torch.sqrt((d(z) ** 2).mean(-1, keepdim=True) + 1e-6) * d(w)
    cudaops.rms_norm(z, w, out=z)
    check(z, expected, dtype)
    x3 = make((2, 3, 4, 257), dtype, 15)
    check(cudaops.layer_norm(x3, w[:257].contiguous(), w[:257].contiguous()),
          F.layer_norm(d(x3), (257,), d(w[:257]), d(w[:257]), 1e-5), dtype)


def test_backward_deterministic():
    x, dy = make((4099, 1000), "bfloat16", 16), make((4099, 1000), "bfloat16", 17)
    w, b = make((1000,), "bfloat16", 18), make((1000,), "bfloat16", 19)
    _, mean, rstd = cudaops.layer_norm(x, w, b, return_stats=True)
    first = cudaops.layer_norm_backward(dy, x, w, mean, rstd)
    for _ in range(3):
        again = cudaops.layer_norm_backward(dy, x, w, mean, rstd)
        for a, b_ in zip(first, again):
            assert torch.equal(a, b_)


def test_side_stream_ordering():
    s = torch.cuda.Stream()
    x = make((512, 4096), "float16", 20)
    w = make((4096,), "float16", 21)
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        x.mul_(2)
        y = cudaops.rms_norm(x, w, stream=s)
    s.synchronize()
    xd = d(x)
    check(y, xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * d(w), "float16")


def test_bad_eps_and_empty():
    x = make((4, 8), "float32", 22)
    w = make((8,), "float32", 23)
    for eps in [0.0, -1.0, float("nan")]:
        with pytest.raises(ValueError, match=r"rms_norm: eps must be > 0"):
            cudaops.rms_norm(x, w, eps)
    empty = torch.empty((0, 8), device="cuda")
    assert cudaops.softmax(empty).shape == (0, 8)
    dx, dw = cudaops.rms_norm_backward(empty, empty, w, torch.empty((0,), device="cuda"))
    assert dx.shape == (0, 8) and torch.equal(dw, torch.zeros_like(w))


def test_cupy_arrays():
    cp = pytest.importorskip("cupy")
    x = cp.asarray(make((33, 1000), "float32", 24).cpu().numpy())
    w = cp.asarray(make((1000,), "float32", 25).cpu().numpy())
    y = cudaops.softmax(x)
    assert isinstance(y, cp.ndarray)
    xd = torch.from_numpy(cp.asnumpy(x)).double()
    check(torch.from_numpy(cp.asnumpy(y)), torch.softmax(xd, -1), "float32")
    z, rstd = cudaops.rms_norm(x, w, return_rstd=True)
    assert isinstance(z, cp.ndarray) and isinstance(rstd, cp.ndarray)
