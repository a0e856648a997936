"""cudaops with torch tensors on a GPU: results, kinds, streams, slices, graphs."""

import pytest

import cudaops

from conftest import requires_gpu
from gpu_reference import check_close, random_values

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

pytestmark = [requires_gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SIZES = [0, 1, 7, 199, 4097, (1 << 20) + 3]


def make(rng, shape, dtype, device="cuda"):
    host = torch.from_numpy(random_values(rng, shape))
    return host.to(DTYPES[dtype]).to(device)


def to64(t):
    return t.detach().to("cpu", torch.float64).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_add(path, dtype, n):
    rng = np.random.default_rng(n)
    a, b = make(rng, (n,), dtype), make(rng, (n,), dtype)
    c = cudaops.add(a, b)
    assert isinstance(c, torch.Tensor)
    assert c.dtype == a.dtype and c.shape == a.shape and c.device == a.device
    torch.cuda.synchronize()
    check_close(to64(c), to64(a) + to64(b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_out_and_in_place(path, dtype):
    rng = np.random.default_rng(1)
    a, b = make(rng, (33, 65), dtype), make(rng, (33, 65), dtype)
    expected = to64(a) + to64(b)
    out = torch.full_like(a, float("nan"))
    assert cudaops.add(a, b, out=out) is out
    torch.cuda.synchronize()
    check_close(to64(out), expected, dtype)
    assert cudaops.add(a, b, out=a) is a
    torch.cuda.synchronize()
    check_close(to64(a), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_scalar(path, dtype):
    rng = np.random.default_rng(2)
    a = make(rng, (1000, 3), dtype)
    c = cudaops.add_scalar(a, 0.75)
    torch.cuda.synchronize()
    check_close(to64(c), to64(a) + 0.75, dtype)


def test_sliced_with_byte_offset(path):
    rng = np.random.default_rng(3)
    base_a, base_b = make(rng, (1001,), "float16"), make(rng, (1003,), "float16")
    a, b = base_a[1:], base_b[3:1003]  # offsets of 2 and 6 bytes
    out_base = torch.full((1005,), float("nan"), dtype=torch.float16, device="cuda")
    out = out_base[5:]
    cudaops.add(a, b, out=out)
    torch.cuda.synchronize()
    check_close(to64(out), to64(a) + to64(b), "float16")
    assert torch.isnan(out_base[:5]).all()  # nothing written outside the slice
    rows = make(rng, (8, 100), "float32")[2:5]  # contiguous rows of a larger matrix
    check_close(to64(cudaops.add_scalar(rows, 1.0)), to64(rows) + 1.0, "float32")


def test_non_contiguous_refused(path):
    x = torch.ones(8, 8, device="cuda")
    with pytest.raises(ValueError, match=r"add: a: expected a C-contiguous array"):
        cudaops.add(x[:, ::2], x[:, ::2])
    with pytest.raises(ValueError, match=r"C-contiguous"):
        cudaops.add(x.t(), x)


def test_errors(path):
    x = torch.ones(4, device="cuda")
    with pytest.raises(ValueError, match=r"CUDA device memory, got one on the CPU"):
        cudaops.add(torch.ones(4), torch.ones(4))
    with pytest.raises(TypeError, match=r"dtype float64 is not supported"):
        cudaops.add(x.double(), x.double())
    with pytest.raises(TypeError, match=r"dtype int32 is not supported; expected float32"):
        cudaops.add(x.int(), x.int())
    with pytest.raises(ValueError, match=r"shape \(5,\) does not match"):
        cudaops.add(x, torch.ones(5, device="cuda"))


def test_side_stream_with_pending_work(path):
    """The op must wait for work still queued on torch's current stream."""
    n = 1 << 22
    a = torch.zeros(n, device="cuda")
    b = torch.ones(n, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keeps `side` busy for a while
        a.fill_(2.0)
        c = cudaops.add(a, b)  # stream=None: the legacy default stream, ordered after `side`
    torch.cuda.synchronize()
    assert torch.all(c == 3.0)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        a.fill_(5.0)
    out = torch.empty_like(a)
    cudaops.add(a, b, out=out, stream=side)  # a torch stream object
    side.synchronize()
    assert torch.all(out == 6.0)


def test_stream_handles(path):
    s = torch.cuda.Stream()
    a = torch.ones(1000, device="cuda")
    for stream in [s, s.cuda_stream, None, 0]:
        out = torch.zeros_like(a)
        cudaops.add_scalar(a, 1.0, out=out, stream=stream)
        torch.cuda.synchronize()
        assert torch.all(out == 2.0)


def test_result_is_usable_on_another_stream(path):
    s = torch.cuda.Stream()
    a = torch.ones(1 << 20, device="cuda")
    s.wait_stream(torch.cuda.current_stream())  # a is made on the current stream, used on s
    with torch.cuda.stream(s):
        c = cudaops.add_scalar(a, 1.0, stream=s)
        d = c * 2  # torch imported c on `s`
    s.synchronize()
    assert torch.all(d == 4.0)


def test_graph_capture(path):
    a = torch.ones(4097, device="cuda")
    b = torch.full_like(a, 2.0)
    out = torch.zeros_like(a)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        cudaops.add(a, b, out=out, stream=s)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cudaops.add(a, b, out=out, stream=torch.cuda.current_stream())
    out.zero_()
    b.fill_(5.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.all(out == 6.0)


def test_current_device_is_restored(path):
    before = torch.cuda.current_device()
    cudaops.add(torch.ones(4, device="cuda"), torch.ones(4, device="cuda"))
    assert torch.cuda.current_device() == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_other_device(path):
    torch.cuda.set_device(0)
    a = torch.ones(10, device="cuda:1")
    c = cudaops.add(a, a)
    assert c.device == a.device and torch.cuda.current_device() == 0
    assert torch.all(c == 2)
    with pytest.raises(ValueError, match=r"all arrays must be on one device"):
        cudaops.add(a, torch.ones(10, device="cuda:0"))


def test_array_round_trip():
    arr = cudaops.Array((3, 5), "bfloat16")
    assert arr.shape == (3, 5) and arr.dtype == "bfloat16" and arr.nbytes == 30
    assert arr.__dlpack_device__() == (2, torch.cuda.current_device())
    t = torch.from_dlpack(arr)  # zero-copy view of the same memory
    assert t.data_ptr() == arr.ptr and t.dtype == torch.bfloat16
    t.fill_(1.5)
    r = cudaops.add(arr, arr)
    assert isinstance(r, cudaops.Array)
    assert torch.all(torch.from_dlpack(r) == 3.0)
    with pytest.raises(AttributeError, match="bfloat16 has no __cuda_array_interface__"):
        _ = arr.__cuda_array_interface__
    f = cudaops.Array((4,), "float32")
    cai = f.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f4" and cai["data"][0] == f.ptr


def test_huge_array():
    """More than 2^31 elements (float16: 4 GiB per array)."""
    n = (1 << 31) + 5
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * 2 * n + (1 << 30):
        pytest.skip("not enough GPU memory")
    a = torch.ones(n, dtype=torch.float16, device="cuda")
    a[-7:] = 3.0
    c = cudaops.add_scalar(a, 1.0, out=a)
    torch.cuda.synchronize()
    assert c is a
    assert float(a[0]) == 2.0 and float(a[-1]) == 4.0 and float(a[n - 8]) == 2.0
    assert int((a == 2.0).sum()) == n - 7


def test_results_memory_is_kept_for_the_next_call_until_empty_cache():
    # On a stream torch is not using, results come from the module's pool. They are 64 MiB, more
    # than the pool can have free after empty_cache(), so each new one grows it.
    dev = torch.cuda.current_device()
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    cudaops.empty_cache()
    base = cudaops.memory_reserved(dev)
    y = cudaops.rms_norm(x, w, stream=s)
    assert cudaops.memory_reserved(dev) >= base + y.numel() * 4
    del y
    torch.cuda.synchronize()
    kept = cudaops.memory_reserved(dev)
    assert kept >= base + x.numel() * 4  # not handed back at the synchronisation
    y = cudaops.rms_norm(x, w, stream=s)
    torch.cuda.synchronize()
    assert cudaops.memory_reserved(dev) == kept  # the next result takes the kept memory
    del y
    torch.cuda.synchronize()
    cudaops.empty_cache()
    assert cudaops.memory_reserved(dev) < kept


@pytest.mark.skipif(not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"),
                    reason="this torch has no DLPack C exchange API")
def test_results_of_torch_tensors_come_from_torchs_allocator():
    dev = torch.cuda.current_device()
    rng = np.random.default_rng(5)
    x = make(rng, (4096, 1024), "float32")
    w = make(rng, (1024,), "float32")
    torch.cuda.synchronize()
    cudaops.empty_cache()
    pool = cudaops.memory_reserved(dev)
    before = torch.cuda.memory_allocated(dev)
    y, rstd = cudaops.rms_norm(x, w, 1e-6, return_rstd=True)
    values, indices = cudaops.topk(x, 100)  # its workspace too, freed with the call
    results = [y, rstd, values, indices]
    assert torch.cuda.memory_allocated(dev) == before + sum(
        (t.numel() * t.element_size() + 511) // 512 * 512 for t in results)
    assert cudaops.memory_reserved(dev) == pool
    torch.cuda.synchronize()
    check_close(to64(y), to64(torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)), "float32")
    check_close(to64(values), to64(torch.topk(x, 100).values), "float32")
    del y, rstd, values, indices, results
    assert torch.cuda.memory_allocated(dev) == before


def test_results_on_a_stream_torch_is_not_using_come_from_the_pool(path):
    dev = torch.cuda.current_device()
    x = torch.randn(4096, 4096, device="cuda")  # 64 MiB: more than the pool has free
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    torch.cuda.synchronize()
    cudaops.empty_cache()
    pool = cudaops.memory_reserved(dev)
    y = cudaops.add_scalar(x, 1.0, stream=s)
    assert cudaops.memory_reserved(dev) >= pool + y.numel() * 4
    s.synchronize()
    assert torch.equal(y, x + 1.0)


@pytest.mark.skipif(not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"),
                    reason="this torch has no DLPack C exchange API")
def test_new_results_in_graph_capture():
    # The results and the workspace come from torch's allocator, which captures them.
    x = torch.randn(64, 4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        cudaops.topk(x, 32, stream=s)  # warm-up outside capture
        cudaops.softmax(x, stream=s)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream()
        values, indices = cudaops.topk(x, 32, stream=stream)
        y = cudaops.softmax(x, stream=stream)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.topk(x, 32)
    assert torch.equal(values, expected.values)
    assert torch.equal(indices, expected.indices)
    assert torch.equal(y, cudaops.softmax(x))  # the same bits as a call outside the graph


def test_partial_overlap_refused_in_place_allowed(path):
    a = torch.arange(64, device="cuda", dtype=torch.float32)
    b = torch.ones(63, device="cuda", dtype=torch.float32)
    before = a.clone()
    with pytest.raises(ValueError, match=r"add: d_a and d_out overlap without being the same"):
        cudaops.add(a[:-1], b, out=a[1:])
    torch.cuda.synchronize()
    assert torch.equal(a, before), "nothing was written"
    cudaops.add(a[:-1], b, out=a[:-1])  # exactly in place
    torch.cuda.synchronize()
    assert torch.equal(a[:-1], before[:-1] + 1)


def test_array_dlpack_stream_values():
    a = cudaops.Array((4,), "float32")
    for bad in (0, -2):
        with pytest.raises(ValueError, match=rf"__dlpack__: stream {bad} is not allowed for CUDA"):
            a.__dlpack__(stream=bad)
    with pytest.raises(TypeError, match=r"__dlpack__: stream: the value must be an int"):
        a.__dlpack__(stream="default")
    a.__dlpack__(stream=-1)  # no ordering asked: allowed


def test_failure_after_allocating_frees_on_the_ops_stream(path):
    # The results are made before the op refuses eps: they go back to the pool after the op's
    # stream, and the pool stays usable.
    x = torch.randn(64, 256, device="cuda")
    w = torch.ones(256, device="cuda")
    s = torch.cuda.Stream()
    for _ in range(3):
        with pytest.raises(ValueError, match=r"rms_norm: eps must be > 0"):
            cudaops.rms_norm(x, w, -1.0, return_rstd=True, stream=s.cuda_stream)
    y = cudaops.rms_norm(x, w, 1e-6)
    torch.cuda.synchronize()
    assert torch.isfinite(y).all()


def test_jit_read_only_arguments_need_the_callers_promise(cai):
    import cudaops.jit as jit

    k = jit.compile('extern "C" __global__ void twice(const float* x, float* y) '
                    "{ y[threadIdx.x] = 2.0f * x[threadIdx.x]; }", "twice")
    x = torch.arange(32, device="cuda", dtype=torch.float32)
    y = torch.zeros(32, device="cuda")
    frozen = cai((32,), ptr=x.data_ptr(), readonly=True)
    with pytest.raises(ValueError, match=r"args\[0\]: the array is read-only"):
        k(1, 32, frozen, y)
    k(1, 32, jit.readonly(frozen), y)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)
