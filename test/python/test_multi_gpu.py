"""Several GPUs in one process: every op with arrays on device 1 while device 0 is current (the
results on device 1, the same bits as on device 0, the current device restored, after an error
too), arrays of two devices refused, a stream of another device refused, the memory pool per
device, a JIT kernel compiled with device 0 current launched on device 1; torch and CuPy.
Skipped with fewer than two devices."""

import pytest

import cudaops

from conftest import requires_gpu, requires_nvrtc

torch = pytest.importorskip("torch")

pytestmark = [requires_gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")]


@pytest.fixture(autouse=True)
def _device_0_current():
    """Each test starts and ends with device 0 current (JAX, for one, leaves another device
    current in this thread when it sets up its devices)."""
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(0)


def _inputs(device, dtype=torch.float16):
    g = torch.Generator(device="cpu").manual_seed(5)
    x = torch.randn(64, 4096, generator=g).to(dtype).to(device)
    y = torch.randn(64, 4096, generator=g).to(dtype).to(device)
    w = torch.randn(4096, generator=g).to(dtype).to(device)
    b = torch.randn(4096, generator=g).to(dtype).to(device)
    pts = torch.randn(4, 512, 64, generator=g).to(dtype).to(device)
    return x, y, w, b, pts


def _every_op(device):
    """Each op's results (a flat list of tensors) on `device`."""
    x, y, w, b, pts = _inputs(device)
    out = []
    out.append(cudaops.add(x, y))
    out.append(cudaops.add_scalar(x, 1.5))
    s = cudaops.softmax(x)
    out += [s, cudaops.softmax_backward(s, y)]
    ln, mean, rstd = cudaops.layer_norm(x, w, b, return_stats=True)
    out += [ln, mean, rstd, *cudaops.layer_norm_backward(y, x, w, mean, rstd)]
    rn, rr = cudaops.rms_norm(x, w, return_rstd=True)
    out += [rn, rr, *cudaops.rms_norm_backward(y, x, w, rr)]
    xx, res = x.clone(), y.clone()
    cudaops.fused_add_rms_norm(xx, res, w)
    out += [xx, res]
    out += list(cudaops.topk(x, 64))
    out += list(cudaops.kmeans(pts, 16, n_iters=3, metric="cosine", center=True))
    return out


def test_every_op_on_device_1_while_0_is_current():
    torch.cuda.set_device(0)
    on1 = _every_op("cuda:1")
    assert torch.cuda.current_device() == 0
    assert all(t.device == torch.device("cuda:1") for t in on1)
    on0 = _every_op("cuda:0")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    for i, (a, b) in enumerate(zip(on0, on1)):
        assert torch.equal(a.cpu(), b.cpu()), f"result {i} differs between the devices"
    # And with device 1 current, arrays on device 0.
    torch.cuda.set_device(1)
    try:
        again = _every_op("cuda:0")
        assert torch.cuda.current_device() == 1
        assert all(t.device == torch.device("cuda:0") for t in again)
    finally:
        torch.cuda.set_device(0)


def test_two_devices_in_one_call_refused_and_device_restored():
    torch.cuda.set_device(0)
    a = torch.ones(10, device="cuda:1")
    with pytest.raises(ValueError, match=r"add: b: is on CUDA device 0 but a is on CUDA device 1"):
        cudaops.add(a, torch.ones(10, device="cuda:0"))
    assert torch.cuda.current_device() == 0
    x = torch.randn(8, 64, device="cuda:1")
    with pytest.raises(ValueError, match=r"rms_norm: weight: is on CUDA device 0"):
        cudaops.rms_norm(x, torch.ones(64, device="cuda:0"))
    assert torch.cuda.current_device() == 0


def test_stream_of_another_device_refused():
    torch.cuda.set_device(0)
    a = torch.ones(10, device="cuda:1")
    stream0 = torch.cuda.Stream(device=0)
    with pytest.raises(ValueError, match=r"add: stream is a stream of CUDA device 0 but the "
                                         r"arrays are on CUDA device 1"):
        cudaops.add(a, a, stream=stream0)
    assert torch.cuda.current_device() == 0
    stream1 = torch.cuda.Stream(device=1)
    c = cudaops.add(a, a, stream=stream1)
    stream1.synchronize()
    assert c.device == a.device and torch.all(c == 2)


def test_pool_per_device():
    torch.cuda.set_device(0)
    a = torch.ones(1 << 20, device="cuda:1")
    keep = cudaops.add(a, a)
    torch.cuda.synchronize(1)
    assert cudaops.memory_reserved(1) > 0
    del keep
    cudaops.empty_cache()
    torch.cuda.synchronize(1)
    c = cudaops.add(a, a)  # the pool of device 1 serves again after emptying
    torch.cuda.synchronize(1)
    assert torch.all(c == 2)
    with pytest.raises(ValueError, match=r"device: expected an index >= 0"):
        cudaops.memory_reserved(-1)


@requires_nvrtc
def test_jit_kernel_compiled_on_0_runs_on_1():
    torch.cuda.set_device(0)
    k = cudaops.jit.compile(
        'extern "C" __global__ void twice(float* x, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) x[i] *= 2.0f;\n"
        "}\n", "twice")
    for device in ("cuda:1", "cuda:0"):
        x = torch.arange(1000, dtype=torch.float32, device=device)
        k((1000 + 127) // 128, 128, x, cudaops.jit.int32(1000))
        torch.cuda.synchronize(x.device)
        assert torch.equal(x.cpu(), torch.arange(1000, dtype=torch.float32) * 2)
        assert torch.cuda.current_device() == 0


def test_cupy_device_1():
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(1):
        a = cupy.arange(1000, dtype=cupy.float32)
        x = cupy.random.standard_normal((16, 256), dtype=cupy.float32)
    with cupy.cuda.Device(0):
        c = cudaops.add(a, a)
        s = cudaops.softmax(x)
        assert cupy.cuda.runtime.getDevice() == 0
    assert c.device.id == 1 and s.device.id == 1
    with cupy.cuda.Device(1):
        assert bool(cupy.all(c == 2 * a))
        assert float(cupy.abs(s.sum(axis=1) - 1).max()) < 1e-5


def test_torch_device_context():
    """Inside `torch.cuda.device(1)`, arrays of device 0: the call runs there, the context's device
    stays current, and an error inside the context leaves it current too."""
    a = torch.randn(32, 256, device="cuda:0")
    with torch.cuda.device(1):
        s = cudaops.softmax(a)
        assert torch.cuda.current_device() == 1
        with pytest.raises(ValueError, match=r"softmax: out: shape \(32, 255\) does not match"):
            cudaops.softmax(a, out=torch.empty(32, 255, device="cuda:0"))
        assert torch.cuda.current_device() == 1
    assert s.device == a.device
    torch.cuda.synchronize(0)
    assert torch.allclose(s, torch.softmax(a, dim=1), atol=1e-6)


def test_jax_device_1():
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX sees no GPU")
    if len(gpus) < 2:
        pytest.skip("JAX sees fewer than two GPUs")
    a = jax.device_put(jax.numpy.arange(1000, dtype=jax.numpy.float32), gpus[1])
    torch.cuda.set_device(0)
    c = cudaops.add(a, a)
    assert torch.cuda.current_device() == 0
    assert c.devices() == {gpus[1]}
    assert bool((c == 2 * a).all())
