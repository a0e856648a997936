"""cudaops with CuPy, JAX and Numba arrays on a GPU."""

import pytest

import cudaops

from conftest import requires_gpu
from gpu_reference import check_close, random_values

np = pytest.importorskip("numpy")

pytestmark = requires_gpu

SIZES = [0, 1, 7, 199, 4097, (1 << 20) + 3]


class CAIOnly:
    """Hides every protocol but __cuda_array_interface__."""

    def __init__(self, array):
        self.__cuda_array_interface__ = array.__cuda_array_interface__


# --- CuPy -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n", SIZES)
def test_cupy_add(cupy, path, dtype, n):
    rng = np.random.default_rng(n)
    a_h = random_values(rng, (n,)).astype(dtype)
    b_h = random_values(rng, (n,)).astype(dtype)
    a, b = cupy.asarray(a_h), cupy.asarray(b_h)
    c = cudaops.add(a, b)
    assert isinstance(c, cupy.ndarray) and c.dtype == a.dtype and c.shape == a.shape
    check_close(cupy.asnumpy(c), a_h.astype(np.float64) + b_h.astype(np.float64), dtype)
    out = cupy.full_like(a, np.nan)
    assert cudaops.add_scalar(a, -1.25, out=out) is out
    check_close(cupy.asnumpy(out), a_h.astype(np.float64) - 1.25, dtype)


def test_cupy_stream_with_pending_work(cupy, path):
    """The op must wait for work still queued on CuPy's current stream."""
    n = 1 << 22
    s = cupy.cuda.Stream(non_blocking=True)
    a = cupy.zeros(n, dtype=cupy.float32)
    cupy.cuda.runtime.deviceSynchronize()
    with s:
        cupy.cuda.runtime.deviceSynchronize()
        for _ in range(20):  # enough queued work to still be running at the call
            a += 0.125
        c = cudaops.add_scalar(a, 1.0)  # stream=None: ordered after CuPy's current stream
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((c == 3.5).all())


def test_cupy_results_come_from_cupys_pool(cupy):
    # On CuPy's current stream the results are CuPy's own arrays, from its memory pool; on another
    # stream, from the module's pool (the memory must outlive the op on that stream).
    rng = np.random.default_rng(11)
    x_h = random_values(rng, (512, 1024)).astype(np.float32)
    x = cupy.asarray(x_h)
    pool = cupy.get_default_memory_pool()
    dev = x.device.id
    cupy.cuda.runtime.deviceSynchronize()
    cudaops.empty_cache()
    ours = cudaops.memory_reserved(dev)
    used = pool.used_bytes()
    values, indices = cudaops.topk(x, 16)
    assert pool.used_bytes() >= used + values.nbytes + indices.nbytes
    assert cudaops.memory_reserved(dev) == ours
    expected = -np.sort(-x_h, axis=1)[:, :16]
    check_close(cupy.asnumpy(values), expected, "float32")
    assert np.array_equal(np.take_along_axis(x_h, cupy.asnumpy(indices), 1), expected)
    big_h = random_values(rng, (4096, 4096)).astype(np.float32)  # 64 MiB: more than is free
    big = cupy.asarray(big_h)
    s = cupy.cuda.Stream(non_blocking=True)
    y = cudaops.add_scalar(big, 1.0, stream=s)
    s.synchronize()
    assert cudaops.memory_reserved(dev) >= ours + y.nbytes
    check_close(cupy.asnumpy(y), big_h.astype(np.float64) + 1.0, "float32")


def test_cupy_cai_and_stream(cupy):
    rng = np.random.default_rng(7)
    a_h = random_values(rng, (3, 1000)).astype(np.float32)
    a = cupy.asarray(a_h)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        out = cupy.empty_like(a)
        # The CAI v3 "stream" of these arrays is `s`: the op's stream waits on it.
        cudaops.add(CAIOnly(a), CAIOnly(a), out=CAIOnly(out), stream=s)
    s.synchronize()
    check_close(cupy.asnumpy(out), 2.0 * a_h.astype(np.float64), "float32")


def test_cupy_sliced_and_in_place(cupy, path):
    base = cupy.arange(1, 2001, dtype=cupy.float32)
    a = base[3:]
    cudaops.add(a, a, out=a)
    cupy.cuda.runtime.deviceSynchronize()
    host = cupy.asnumpy(base)
    assert np.array_equal(host[:3], [1, 2, 3])
    assert np.array_equal(host[3:], 2.0 * np.arange(4, 2001, dtype=np.float32))
    with pytest.raises(ValueError, match=r"C-contiguous"):
        cudaops.add(base[::2], base[::2])


# --- JAX --------------------------------------------------------------------------------------


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    try:
        if not jax.devices("gpu"):
            pytest.skip("JAX sees no GPU")
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    return jax


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 199, (1 << 20) + 3])
def test_jax_add(jax, dtype, n):
    jnp = jax.numpy
    rng = np.random.default_rng(n)
    a = jnp.asarray(random_values(rng, (n,)), dtype=dtype)
    b = jnp.asarray(random_values(rng, (n,)), dtype=dtype)
    c = cudaops.add(a, b)
    assert isinstance(c, jax.Array) and c.dtype == a.dtype and c.shape == a.shape
    expected = np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    check_close(np.asarray(c, dtype=np.float64), expected, dtype)
    d = cudaops.add_scalar(a, 2.0)
    check_close(np.asarray(d, dtype=np.float64), np.asarray(a, dtype=np.float64) + 2.0, dtype)


def test_jax_out_refused(jax):
    a = jax.numpy.ones(4)
    with pytest.raises(TypeError, match=r"JAX arrays are immutable"):
        cudaops.add(a, a, out=a)


# --- Numba ------------------------------------------------------------------------------------


@pytest.fixture
def numba_cuda():
    pytest.importorskip("numba")
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("Numba sees no GPU")
    return cuda


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n", SIZES)
def test_numba_add(numba_cuda, dtype, n):
    rng = np.random.default_rng(n)
    a_h = random_values(rng, (n,)).astype(dtype)
    b_h = random_values(rng, (n,)).astype(dtype)
    a, b = numba_cuda.to_device(a_h), numba_cuda.to_device(b_h)
    c = cudaops.add(a, b)
    assert numba_cuda.is_cuda_array(c) and type(c).__module__.startswith("numba")
    check_close(c.copy_to_host(), a_h.astype(np.float64) + b_h.astype(np.float64), dtype)
    out = numba_cuda.device_array_like(a)
    assert cudaops.add(a, b, out=out) is out
    check_close(out.copy_to_host(), a_h.astype(np.float64) + b_h.astype(np.float64), dtype)


def test_numba_stream(numba_cuda):
    s = numba_cuda.stream()
    a_h = np.linspace(1, 2, 5000, dtype=np.float32)
    a = numba_cuda.to_device(a_h, stream=s)
    out = numba_cuda.device_array_like(a, stream=s)
    # The stream object itself where it speaks __cuda_stream__, else its raw handle.
    if hasattr(s, "__cuda_stream__"):
        stream = s
    else:
        handle = s.handle
        stream = handle.value if hasattr(handle, "value") else int(handle)
    cudaops.add_scalar(a, 1.0, out=out, stream=stream)
    s.synchronize()
    check_close(out.copy_to_host(), a_h.astype(np.float64) + 1.0, "float32")


# --- Arrays handed from one framework to another ----------------------------------------------


def test_cudaops_array_into_frameworks(cupy, numba_cuda):
    arr = cudaops.Array((1000,), "float32")
    c = cupy.from_dlpack(arr)
    assert c.data.ptr == arr.ptr
    c[...] = 1.5
    r = cudaops.add(arr, arr)
    assert isinstance(r, cudaops.Array)
    n = numba_cuda.as_cuda_array(r)
    assert np.all(n.copy_to_host() == 3.0)
    assert cupy.asarray(r).data.ptr == r.ptr  # through __cuda_array_interface__
