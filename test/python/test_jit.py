"""cudaops.jit: compile without a GPU (explicit -arch), argument checks with stand-in arrays, and
on a GPU: launches on torch and CuPy arrays, template kernels, streams, the disk cache across
processes (racing, corrupted entries)."""

import os
import subprocess
import sys
import textwrap

import pytest

import cudaops
import cudaops.jit as jit

from conftest import requires_gpu, requires_nvrtc

SAXPY = textwrap.dedent(
    """
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = a * x[i] + y[i];
    }
    template <typename T> __global__ void scale(T* x, T a, long long n) {
      long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
      if (i < n) x[i] = x[i] * a;
    }
    extern "C" __global__ void fill_shared(float* out) {
      extern __shared__ float tile[];
      tile[threadIdx.x] = threadIdx.x;
      __syncthreads();
      out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
    }
    """
)




@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Each test gets its own cache directory, through the environment of child processes and a
    fresh in-process cache."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("CUDAOPS_CACHE_DIR", str(directory))
    previous = jit.cache_dir()
    jit.set_cache(directory=directory, enabled=True)
    jit.clear_cache(disk=False)
    yield directory
    if previous is not None:
        jit.set_cache(directory=os.path.dirname(previous))


def compile_in(directory, source, name, options=()):
    """Compiles in a fresh process with `directory` as cache; returns its from_cache."""
    code = (
        "import sys, cudaops.jit as jit\n"
        f"k = jit.compile({source!r}, {name!r}, options={tuple(options)!r})\n"
        "print(k.from_cache)\n"
    )
    env = dict(os.environ, CUDAOPS_CACHE_DIR=str(directory))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# --- without a GPU ----------------------------------------------------------------------------


def test_api_names():
    assert callable(jit.compile)
    assert issubclass(jit.CompileError, RuntimeError)
    for name in ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "bool_"]:
        assert hasattr(jit, name), name
    assert cudaops.jit is jit


def test_scalars_pack_their_c_type():
    assert jit.int32(-2).__cudaops_kernel_arg__() == (-2).to_bytes(4, "little", signed=True)
    assert jit.uint64(2**64 - 1).__cudaops_kernel_arg__() == b"\xff" * 8
    assert jit.int8(-1).__cudaops_kernel_arg__() == b"\xff"
    assert jit.float32(1.5).__cudaops_kernel_arg__() == b"\x00\x00\xc0\x3f"
    assert jit.float64(1.0).__cudaops_kernel_arg__() == b"\x00\x00\x00\x00\x00\x00\xf0\x3f"
    assert jit.float16(1.0).__cudaops_kernel_arg__() == b"\x00\x3c"
    assert jit.bfloat16(1.0).__cudaops_kernel_arg__() == b"\x80\x3f"
    assert jit.bfloat16(1.00390625).__cudaops_kernel_arg__() == b"\x80\x3f"  # ties to even
    assert jit.bfloat16(float("nan")).__cudaops_kernel_arg__() == b"\xc0\x7f"
    assert jit.bool_(True).__cudaops_kernel_arg__() == b"\x01"
    assert "int32(7)" in repr(jit.int32(7))


@pytest.mark.parametrize("make", [lambda: jit.int32(2**31), lambda: jit.uint8(-1),
                                  lambda: jit.int16(70000), lambda: jit.float32(1e40)])
def test_scalars_refuse_values_out_of_range(make):
    with pytest.raises(ValueError):
        make()


def test_integer_scalars_refuse_floats():
    with pytest.raises(TypeError, match="takes an int"):
        jit.int32(1.5)


def test_compile_argument_types():
    with pytest.raises(TypeError, match="source must be a str"):
        jit.compile(b"bytes", "k")
    with pytest.raises(TypeError, match="name must be a str"):
        jit.compile("x", 3)
    with pytest.raises(TypeError, match="sequence of strings"):
        jit.compile("x", "k", options="-DX=1")
    with pytest.raises(TypeError, match=r"options\[1\] must be a str"):
        jit.compile("x", "k", options=("-DX=1", 2))


@requires_nvrtc
def test_compile_for_an_explicit_architecture(cache_dir):
    k = jit.compile(SAXPY, "saxpy", options=("-arch=sm_90",))
    assert k.name == "saxpy" and k.arch == "sm_90"
    assert k.registers > 0 and k.spill_store_bytes == 0 and k.spill_load_bytes == 0
    assert k.from_cache is None and k.compile_ms > 0
    assert ".entry saxpy(" in k.ptx and len(k.cubin) > 0
    assert len(k.key) == 64
    assert jit.compile(SAXPY, "saxpy", options=["-arch=sm_90"]).from_cache == "memory"
    assert jit.cache_dir() == str(cache_dir / "jit-v2")
    assert len(list((cache_dir / "jit-v2").glob("*.entry"))) == 1
    jit.clear_cache(disk=False)
    assert jit.compile(SAXPY, "saxpy", options=("-arch=sm_90",)).from_cache == "disk"
    jit.clear_cache()
    assert not list((cache_dir / "jit-v2").glob("*.entry"))
    jit.set_cache(enabled=False)
    assert jit.cache_dir() is None
    assert jit.compile(SAXPY, "saxpy", options=("-arch=sm_90",)).from_cache is None
    assert not list((cache_dir / "jit-v2").glob("*.entry"))
    jit.set_cache(enabled=True)


@requires_nvrtc
def test_template_name_expression():
    k = jit.compile(SAXPY, "scale<double>", options=("-arch=sm_90",))
    assert k.name.startswith("_Z5scaleIdE")


@requires_nvrtc
def test_compile_error_has_the_log():
    with pytest.raises(jit.CompileError, match=r"\(3\): error: identifier \"oops\" is undefined"):
        jit.compile("// one\n// two\n__global__ void k() { oops; }\n", "k",
                    options=("-arch=sm_90",))


@requires_nvrtc
@pytest.mark.parametrize("options, message", [
    (("lineinfo",), "not an option"),
    (("-std=c++99",), "c\\+\\+20"),
    (("-time=x.csv",), "not supported by the JIT"),
    (("-arch=sm_90", "--no-such-option"), "refused"),
])
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        jit.compile(SAXPY, "saxpy", options=options)


@requires_nvrtc
def test_not_a_kernel():
    with pytest.raises(ValueError, match="not a __global__ function"):
        jit.compile(SAXPY, "no_such_kernel", options=("-arch=sm_90",))


@requires_nvrtc
def test_disk_cache_in_a_fresh_process(cache_dir):
    assert compile_in(cache_dir, SAXPY, "saxpy", ("-arch=sm_90",)) == "None"
    assert compile_in(cache_dir, SAXPY, "saxpy", ("-arch=sm_90",)) == "disk"
    entries = list((cache_dir / "jit-v2").glob("*.entry"))
    assert len(entries) == 1
    data = bytearray(entries[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    entries[0].write_bytes(bytes(data))
    assert compile_in(cache_dir, SAXPY, "saxpy", ("-arch=sm_90",)) == "None"  # recompiled
    assert compile_in(cache_dir, SAXPY, "saxpy", ("-arch=sm_90",)) == "disk"


@requires_nvrtc
def test_header_change_recompiles(tmp_path, cache_dir):
    include = tmp_path / "include"
    include.mkdir()
    (include / "params.h").write_text("#define FACTOR 2.0f\n")
    source = '#include <params.h>\nextern "C" __global__ void k(float* x) { x[0] *= FACTOR; }\n'
    options = ("-arch=sm_90", f"-I{include}")
    assert compile_in(cache_dir, source, "k", options) == "None"
    assert compile_in(cache_dir, source, "k", options) == "disk"
    (include / "params.h").write_text("#define FACTOR 3.0f\n")
    assert compile_in(cache_dir, source, "k", options) == "None"


@requires_nvrtc
def test_launch_argument_checks_before_any_device_work(dl):
    k = jit.compile(SAXPY, "saxpy", options=("-arch=sm_90",))
    with pytest.raises(TypeError, match=r"args\[0\]: a Python float has no C type"):
        k(1, 32, 2.0, dl((4,)), dl((4,)), jit.int32(4))
    with pytest.raises(TypeError, match=r"args\[3\]: a Python int"):
        k(1, 32, jit.float32(2.0), dl((4,)), dl((4,)), 4)
    with pytest.raises(ValueError, match=r"grid\[0\] must be >= 1"):
        k(0, 32)
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        k((1, 1, 1, 1), 32)
    with pytest.raises(TypeError, match="block must be an int"):
        k(1, 32.0)
    with pytest.raises(ValueError, match="shared_mem"):
        k(1, 32, shared_mem=-1)
    with pytest.raises(ValueError, match=r"args\[1\].*CUDA"):
        k(1, 32, jit.float32(2.0), dl((4,), device=(1, 0)), dl((4,)), jit.int32(4))


@requires_nvrtc
def test_array_arguments_of_any_element_type(dl, cai):
    """Array arguments are pointers: any element type of whole bytes is taken (its size checks the
    alignment), beyond the dtypes the library's own ops compute in."""
    k = jit.compile(SAXPY, "saxpy", options=("-arch=sm_90",))
    a, n = jit.float32(2.0), jit.int32(4)
    misaligned = 0x7F0000000004
    with pytest.raises(ValueError, match=r"args\[1\].*aligned to its 8-byte float64"):
        k(1, 32, a, dl((4,), "float64", ptr=misaligned), dl((4,)), n)
    with pytest.raises(ValueError, match=r"args\[1\].*aligned to its 8-byte complex64"):
        k(1, 32, a, dl((4,), "complex64", ptr=misaligned), dl((4,)), n)
    with pytest.raises(ValueError, match=r"args\[1\].*aligned to its 8-byte <f8"):
        k(1, 32, a, cai((4,), "<f8", ptr=misaligned), dl((4,)), n)
    with pytest.raises(ValueError, match=r"args\[1\].*aligned to its 12-byte \|V12"):
        k(1, 32, a, cai((4,), "|V12", ptr=0x7F0000000002), dl((4,)), n)
    with pytest.raises(TypeError, match=r"args\[1\].*no whole number of bytes"):
        k(1, 32, a, dl((4,), (1, 4)), dl((4,)), n)
    with pytest.raises(TypeError, match=r"args\[1\].*typestr '>f8' is not supported"):
        k(1, 32, a, cai((4,), ">f8"), dl((4,)), n)
    # Byte-sized element types are imported at any address; the call then fails on its missing
    # argument (or, without a GPU, on the device), never launching on the fake memory.
    for dtype in ("uint8", "bool"):
        with pytest.raises(Exception) as caught:
            k(1, 32, a, dl((3,), dtype, ptr=0x7F0000000001), dl((4,)))
        assert "aligned" not in str(caught.value) and "dtype" not in str(caught.value)


# --- on a GPU ---------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("n", [1, 7, 199, 4097, (1 << 20) + 3])
def test_saxpy_on_torch(torch, n):
    k = jit.compile(SAXPY, "saxpy")
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    expected = 2.5 * x + y
    k((n + 255) // 256, 256, jit.float32(2.5), x, y, jit.int32(n))
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)


@requires_gpu
def test_template_kernels_on_cupy(cupy):
    np = pytest.importorskip("numpy")
    # Any element type: the ops' own dtypes and the rest (float64, int8, uint8, int16, uint64).
    for dtype, name, scalar in [("int64", "scale<long long>", jit.int64),
                                ("int32", "scale<int>", jit.int32),
                                ("float32", "scale<float>", jit.float32),
                                ("float64", "scale<double>", jit.float64),
                                ("int8", "scale<signed char>", jit.int8),
                                ("uint8", "scale<unsigned char>", jit.uint8),
                                ("int16", "scale<short>", jit.int16),
                                ("uint64", "scale<unsigned long long>", jit.uint64)]:
        n = 1000
        x = cupy.arange(n, dtype=dtype) % 40
        k = jit.compile(SAXPY, name)
        k(4, 256, x, scalar(3), jit.int64(n))
        np.testing.assert_array_equal(cupy.asnumpy(x), (np.arange(n, dtype=dtype) % 40) * 3)


@requires_gpu
def test_bool_and_float64_arrays_on_torch(torch):
    source = textwrap.dedent(
        """
        extern "C" __global__ void where_positive(const double* x, bool* mask, double* y, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) { mask[i] = x[i] > 0.0; y[i] = mask[i] ? x[i] : 0.0; }
        }
        """
    )
    k = jit.compile(source, "where_positive")
    n = 4099
    x = torch.randn(n, device="cuda", dtype=torch.float64)
    mask = torch.zeros(n, device="cuda", dtype=torch.bool)
    y = torch.full((n,), float("nan"), device="cuda", dtype=torch.float64)
    k((n + 127) // 128, 128, x, mask, y, jit.int32(n))
    assert torch.equal(mask, x > 0)
    assert torch.equal(y, torch.where(x > 0, x, torch.zeros_like(x)))


@requires_gpu
def test_wrong_argument_count_and_sizes(torch):
    k = jit.compile(SAXPY, "saxpy")
    x = torch.zeros(4, device="cuda")
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        k(1, 32, jit.float32(1), x, x)
    with pytest.raises(TypeError, match=r"args\[0\]: parameter 0 takes 4 bytes, got .*float64"):
        k(1, 32, jit.float64(1), x, x, jit.int32(4))
    with pytest.raises(TypeError, match=r"args\[3\]: parameter 3 takes 4 bytes, got an array"):
        k(1, 32, jit.float32(1), x, x, x)
    with pytest.raises(ValueError, match="threads per block"):
        k(1, 2048, jit.float32(1), x, x, jit.int32(4))
    assert k.num_params == 4
    assert k.max_threads_per_block >= 256


@requires_gpu
def test_dynamic_shared_memory_above_48k(torch):
    k = jit.compile(SAXPY, "fill_shared")
    out = torch.zeros(1024, device="cuda")
    k(1, 1024, out, shared_mem=64 * 1024)
    torch.testing.assert_close(out.cpu(), torch.arange(1023, -1, -1, dtype=torch.float32))
    with pytest.raises(ValueError, match="shared_mem"):
        k(1, 1024, out, shared_mem=1 << 30)


@requires_gpu
def test_runs_on_the_callers_stream(torch):
    k = jit.compile(SAXPY, "scale<float>")
    stream = torch.cuda.Stream()
    n = 1 << 22
    with torch.cuda.stream(stream):
        x = torch.ones(n, device="cuda")
        k((n + 255) // 256, 256, x, jit.float32(2), jit.int64(n), stream=stream)
    stream.synchronize()
    assert bool((x == 2).all())


@requires_gpu
def test_processes_racing_then_launch(torch, cache_dir):
    code = textwrap.dedent(
        f"""
        import cudaops.jit as jit
        k = jit.compile({SAXPY!r}, "scale<float>")
        print(k.from_cache)
        """
    )
    env = dict(os.environ, CUDAOPS_CACHE_DIR=str(cache_dir))
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    assert compile_in(cache_dir, SAXPY, "scale<float>") == "disk"
    assert not list((cache_dir / "jit-v2").glob(".tmp-*"))
    jit.clear_cache(disk=False)
    k = jit.compile(SAXPY, "scale<float>")
    assert k.from_cache == "disk"
    x = torch.ones(100, device="cuda")
    k(1, 128, x, jit.float32(5), jit.int64(100))
    assert bool((x == 5).all())
