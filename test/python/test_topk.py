"""cudaops.topk: argument checks through stand-in arrays (no GPU needed), then on a GPU against
an exact numpy reference (ties to the lower index, NaN above every number) and torch.topk."""

import pytest

import cudaops

from conftest import requires_gpu


def test_name_exported():
    assert callable(cudaops.topk)
    assert "topk" in cudaops.__all__


@pytest.mark.parametrize("k, error, message", [
    (0, ValueError, r"topk: k must be in \[1, 4096\], got 0"),
    (9, ValueError, r"topk: k \(9\) must be <= cols \(8\)"),
    (4097, ValueError, r"topk: k must be in \[1, 4096\]"),
    (2.0, TypeError, r"topk: k must be an int, got float"),
    (True, TypeError, r"topk: k must be an int, got bool"),
])
def test_bad_k(dl, k, error, message):
    with pytest.raises(error, match=message):
        cudaops.topk(dl([4, 8]), k)


def test_bad_arrays_and_options(dl):
    with pytest.raises(TypeError, match=r"topk: x: dtype int32 .*expected float32"):
        cudaops.topk(dl([4, 8], "int32"), 2)
    with pytest.raises(ValueError, match=r"topk: x: expected at least one dimension"):
        cudaops.topk(dl([]), 1)
    with pytest.raises(ValueError, match=r"topk: x: expected the last axis contiguous"):
        cudaops.topk(dl([8, 8], strides=[1, 8]), 2)
    with pytest.raises(ValueError, match=r"topk: cols .* 2\^24"):
        cudaops.topk(dl([1, (1 << 24) + 1]), 2)
    with pytest.raises(TypeError, match=r"index_dtype must be int64 or int32, got float32"):
        cudaops.topk(dl([4, 8]), 2, index_dtype="float32")
    with pytest.raises(TypeError, match=r"index_dtype"):
        cudaops.topk(dl([4, 8]), 2, index_dtype="complex")
    with pytest.raises(ValueError, match=r"topk: x: .*CUDA"):
        cudaops.topk(dl([4, 8], device=(1, 0)), 2)


# --- on a GPU ---------------------------------------------------------------------------------


def reference(x, k, largest, sorted_):
    """Exact top-k of a float64 numpy matrix: NaN highest, -0.0 below +0.0, ties to the lower
    index; sorted in rank order or in ascending index order."""
    import numpy as np
    rows, cols = x.shape
    idx = np.empty((rows, k), dtype=np.int64)
    for r in range(rows):
        v = x[r]
        nan = np.isnan(v)
        zero_sign = np.where(nan, 0.0, np.signbit(v).astype(np.float64))  # -0.0 below +0.0
        filled = np.where(nan, np.inf, v)
        primary = np.where(nan, 1.0, 0.0)
        if largest:
            order = np.lexsort((np.arange(cols), zero_sign, -filled, -primary))
        else:
            order = np.lexsort((np.arange(cols), -zero_sign, filled, primary))
        top = order[:k]
        idx[r] = top if sorted_ else np.sort(top)
    return np.take_along_axis(x, idx, axis=1), idx


@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows, cols, k", [(1, 1, 1), (7, 199, 5), (3, 4097, 2048),
                                           (2, 70000, 1000), (1, 1 << 20, 64),
                                           (2, 131072, 4096)])
@pytest.mark.parametrize("largest, sorted_", [(True, True), (False, True), (True, False)])
def test_matches_exact_reference(torch, dtype, rows, cols, k, largest, sorted_):
    import numpy as np
    g = torch.Generator().manual_seed(rows * 7 + cols)
    x = torch.randn(rows, cols, generator=g).to(getattr(torch, dtype))
    x[:, ::97] = float("nan")
    x[:, 5::113] = float("inf")
    x[:, 7::131] = 0.25  # ties
    xd = x.cuda()
    values, indices = cudaops.topk(xd, k, largest=largest, sorted=sorted_)
    assert isinstance(values, torch.Tensor) and values.dtype == xd.dtype
    assert indices.dtype == torch.int64 and indices.shape == (rows, k)
    want_values, want_indices = reference(x.double().numpy(), k, largest, sorted_)
    np.testing.assert_array_equal(indices.cpu().numpy(), want_indices)
    np.testing.assert_array_equal(values.double().cpu().numpy(), want_values)
    if sorted_:
        # The same values as torch.topk (its order among equal values is unspecified).
        tv, _ = torch.topk(xd, k, largest=largest, sorted=True)
        np.testing.assert_array_equal(values.double().cpu().numpy(), tv.double().cpu().numpy())


@requires_gpu
def test_batched_int32_and_strided_rows(torch):
    x = torch.randn(4, 3, 1000, device="cuda")
    view = x[:, :, 100:900]  # rows 1000 apart, last axis contiguous
    values, indices = cudaops.topk(view, 17, index_dtype="int32")
    assert values.shape == (4, 3, 17) and indices.dtype == torch.int32
    tv, ti = torch.topk(view, 17)
    torch.testing.assert_close(values, tv, rtol=0, atol=0)
    assert torch.equal(indices.long(), ti)


@requires_gpu
def test_cupy_and_stream(torch):
    cp = pytest.importorskip("cupy")
    x = cp.random.standard_normal((64, 65536), dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        values, indices = cudaops.topk(x, 1024, stream=stream)
    stream.synchronize()
    assert isinstance(values, cp.ndarray) and isinstance(indices, cp.ndarray)
    want = cp.sort(x, axis=1)[:, ::-1][:, :1024]
    cp.testing.assert_array_equal(values, want)
    cp.testing.assert_array_equal(cp.take_along_axis(x, indices, axis=1), values)
