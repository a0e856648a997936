"""Shared fixtures: stand-in array objects for the tests that run without a GPU, the GPU switch
for the ones that need one, and the torch and CuPy modules for the tests that use them."""

import os

import pytest

# JAX would otherwise take 75% of the GPU memory at its first use, starving the other frameworks.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import cudaops

import dlpack_capsules

# A fake device address: the module must never dereference it.
FAKE_PTR = 0x7F0000000000

DLPACK_DTYPES = {
    # name: (DLPack type code, bits)
    "float32": (2, 32),
    "float16": (2, 16),
    "bfloat16": (4, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "float64": (2, 64),
    "uint8": (1, 8),
    "bool": (6, 8),
    "complex64": (5, 64),
}


class DLPackStandIn:
    """An object exporting a DLPack tensor that describes memory nobody may touch."""

    def __init__(self, shape, dtype="float32", *, ptr=FAKE_PTR, strides=None, device=(2, 0),
                 byte_offset=0, versioned=True, legacy_only=False, readonly=False, major=1,
                 lanes=1, capsule_device=None):
        code, bits = DLPACK_DTYPES[dtype] if isinstance(dtype, str) else dtype
        self.kwargs = dict(ptr=ptr, shape=list(shape), strides=strides, type_code=code,
                           bits=bits, lanes=lanes, byte_offset=byte_offset, readonly=readonly,
                           major=major)
        self.device = device
        self.capsule_device = capsule_device or device
        self.versioned = versioned
        self.legacy_only = legacy_only
        self.calls = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **extra):
        if self.legacy_only and (max_version is not None or extra):
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append({"stream": stream, "max_version": max_version})
        versioned = self.versioned and max_version is not None and max_version[0] >= 1
        return dlpack_capsules.make_capsule(device_type=self.capsule_device[0],
                                            device_id=self.capsule_device[1],
                                            versioned=versioned, **self.kwargs)


class CAIStandIn:
    """An object with a __cuda_array_interface__ dict and nothing else."""

    def __init__(self, shape, typestr="<f4", *, ptr=FAKE_PTR, strides=None, readonly=False,
                 version=3, stream=None, **extra):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, readonly),
            "version": version,
            "strides": strides,
            **extra,
        }
        if version >= 3:
            self.__cuda_array_interface__["stream"] = stream


@pytest.fixture
def dl():
    return DLPackStandIn


@pytest.fixture
def cai():
    return CAIStandIn


def has_gpu():
    return cudaops.device_count() > 0


requires_gpu = pytest.mark.skipif(not has_gpu(), reason="no CUDA device")


def nvrtc_available():
    import cudaops.jit

    try:
        cudaops.jit.nvrtc_version()
        return True
    except NotImplementedError:
        return False


requires_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed")


# The frameworks, each skipping the test when it is missing or sees no GPU.
@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch


@pytest.fixture
def cupy():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("CuPy sees no GPU")
    return cp


@pytest.fixture(params=[True, False], ids=["direct", "protocol"])
def path(request):
    """Runs a test twice: arrays read directly (DLPack C exchange API, torch and CuPy attributes)
    and through the Python protocols only (__dlpack__, __cuda_array_interface__)."""
    cudaops._core._set_fast_paths(request.param)
    yield request.param
    cudaops._core._set_fast_paths(True)
