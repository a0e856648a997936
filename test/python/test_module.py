"""The package itself: import, version, what it exposes. No GPU needed."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import cudaops

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(\s*cudaops\s+VERSION\s+([0-9.]+)", text).group(1)


def test_version_comes_from_cmake():
    assert cudaops.__version__ == cmake_version()


def test_public_names():
    for name in ["add", "add_scalar", "Array", "CudaError", "__version__"]:
        assert hasattr(cudaops, name), name
    assert issubclass(cudaops.CudaError, RuntimeError)


def test_import_pulls_in_no_framework():
    code = ("import sys, cudaops; "
            "print(sorted(m for m in ('torch', 'cupy', 'jax', 'numba', 'numpy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]"


def test_build_info():
    assert cudaops.cuda_runtime_version >= 12000
    assert cudaops.cuda_architectures


def test_device_count_never_raises():
    assert cudaops.device_count() >= 0


def test_memory_pool_queries():
    cudaops.empty_cache()  # nothing to hand back: no error, with or without a GPU
    assert cudaops.memory_reserved(0) >= 0
    with pytest.raises(ValueError, match="device"):
        cudaops.memory_reserved(-1)
    with pytest.raises(TypeError):
        cudaops.memory_reserved("0")


def test_module_links_neither_cudart_nor_a_framework():
    if shutil.which("ldd") is None:
        pytest.skip("no ldd")
    text = subprocess.run(["ldd", cudaops._core.__file__], check=True, capture_output=True,
                          text=True).stdout
    for name in ["libcudart", "libtorch", "libc10", "libcuda.so"]:
        assert name not in text, text


def test_importing_cudaops_does_not_import_torch():
    # cudaops.torch is imported by name alone; the rest of the package never needs torch.
    code = ("import sys, cudaops, cudaops.ivf, cudaops.jit; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_signatures_are_pythons():
    # help() and inspect.signature show each op's Python arguments, none of pybind11's C++ types.
    import inspect
    callables = [getattr(cudaops, name) for name in cudaops.__all__
                 if callable(getattr(cudaops, name)) and not isinstance(getattr(cudaops, name), type)]
    callables += [cudaops.ivf.Index.attention, cudaops.ivf.Index.search, cudaops.ivf.Index.extend,
                  cudaops.ivf.build_global, cudaops.ivf.load, cudaops.Array.__init__]
    for fn in callables:
        text = str(inspect.signature(fn))
        assert "object" not in text and "typing" not in text and "cudaops._core" not in text, text
        assert not fn.__doc__.startswith(fn.__name__ + "("), fn.__doc__[:80]
    assert str(inspect.signature(cudaops.add)) == "(a, b, *, out=None, stream=None)"
