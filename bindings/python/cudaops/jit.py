"""Run-time compilation of CUDA C++ (NVRTC) with a safe disk cache.

    import cudaops, cudaops.jit as jit
    k = jit.compile(r'''
    extern "C" __global__ void scale(float* x, float a, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] *= a;
    }''', "scale")
    k((n + 255) // 256, 256, x, jit.float32(2.0), jit.int32(n))

``name`` is an ``extern "C"`` kernel or a name expression (``"scale<float>"``). ``options`` are
NVRTC options (``-DN=4``, ``-I/path``, ``-std=c++20``, ``-lineinfo``, ``--use_fast_math``,
``-arch=sm_90``; without ``-arch`` the current device's architecture). Array arguments are any
CUDA array (DLPack or ``__cuda_array_interface__``), passed as a pointer to their first element;
a kernel may write any array it is given, so a read-only array (a JAX array, a read-only DLPack
export) is refused unless wrapped in :func:`readonly`, the caller's promise not to write it;
scalars must be typed with the classes below, and their size is checked against the kernel's
parameter. The cache (``$CUDAOPS_CACHE_DIR``, else ``~/.cache/cudaops``; ``CUDAOPS_JIT_CACHE=0``
disables it) is keyed by the source, options, NVRTC version, architecture, library version and
the contents of every header the source can include.

Errors: :class:`CompileError` (a ``RuntimeError``) with NVRTC's log for a compile error;
``ValueError`` for bad options or kernel names; ``NotImplementedError`` when NVRTC is not installed.
"""

import math as _math
import os as _os
import struct as _struct
from collections.abc import Sequence as _Sequence
from typing import Any as _Any

from ._core import (
    CompileError,
    _jit_cache_dir,
    _jit_clear_cache,
    _jit_compile,
    _jit_nvrtc,
    _jit_set_cache,
)
from ._core import JitKernel as Kernel

__all__ = [
    "CompileError",
    "Kernel",
    "bfloat16",
    "bool_",
    "cache_dir",
    "clear_cache",
    "compile",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "nvrtc_version",
    "readonly",
    "set_cache",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def compile(source: str, name: str, *, options: _Sequence[str] = ()) -> Kernel:
    """Compiles kernel ``name`` of ``source`` (or takes it from the cache) -> :class:`Kernel`."""
    if not isinstance(source, str):
        raise TypeError(f"jit.compile: source must be a str, got {type(source).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"jit.compile: name must be a str, got {type(name).__name__}")
    return _jit_compile(source, name, options)


def clear_cache(*, memory: bool = True, disk: bool = True) -> None:
    """Forgets the kernels compiled in this process and/or removes the disk cache's entries."""
    _jit_clear_cache(memory, disk)


def cache_dir() -> str | None:
    """The directory of the disk cache's entries, or None when the disk cache is off."""
    return _jit_cache_dir()


def set_cache(*, directory: str | _os.PathLike[str] | None = None, enabled: bool | None = None,
              max_bytes: int | None = None) -> None:
    """Changes the disk cache of this process: its directory (entries go in <directory>/jit-v2),
    whether it is used, and its size bound in bytes. Arguments left None keep their value."""
    _jit_set_cache(None if directory is None else str(directory), enabled, max_bytes)


class readonly:
    """Passes a read-only array to a kernel that only reads it: the caller promises that the
    kernel does not write it (nothing checks the promise)."""

    __slots__ = ("__cudaops_readonly__",)

    def __init__(self, array: _Any) -> None:
        self.__cudaops_readonly__ = array

    def __repr__(self) -> str:
        return f"cudaops.jit.readonly({self.__cudaops_readonly__!r})"


def nvrtc_version() -> str:
    """The NVRTC in use, as "13.0 (/path/libnvrtc.so.13)"; loads it if needed."""
    return _jit_nvrtc()


class _Scalar:
    """A kernel argument of one C type."""

    __slots__ = ("value",)
    _format = ""
    _ctype = ""

    def __init__(self, value: _Any) -> None:
        self.value = value
        self.__cudaops_kernel_arg__()  # range and type checked now, not at the launch

    def __cudaops_kernel_arg__(self) -> bytes:
        try:
            return _struct.pack("<" + self._format, self.value)
        except (_struct.error, OverflowError, TypeError) as error:
            raise ValueError(f"cudaops.jit.{type(self).__name__}({self.value!r}): {error}") from None

    def __repr__(self) -> str:
        return f"cudaops.jit.{type(self).__name__}({self.value!r})"


def _scalar(name: str, fmt: str, ctype: str, integer: bool) -> type[_Scalar]:
    def check(value: _Any) -> _Any:
        if integer and (isinstance(value, bool) or not isinstance(value, int)):
            if not hasattr(value, "__index__"):
                raise TypeError(f"cudaops.jit.{name} takes an int, got {type(value).__name__}")
            value = value.__index__()
        return value

    def init(self: _Scalar, value: _Any) -> None:
        _Scalar.__init__(self, check(value))

    cls = type(name, (_Scalar,), {"__slots__": (), "_format": fmt, "_ctype": ctype,
                                  "__init__": init,
                                  "__doc__": f"A {ctype} kernel argument."})
    cls.__module__ = __name__
    return cls


int8 = _scalar("int8", "b", "int8_t", True)
int16 = _scalar("int16", "h", "int16_t", True)
int32 = _scalar("int32", "i", "int", True)
int64 = _scalar("int64", "q", "long long", True)
uint8 = _scalar("uint8", "B", "uint8_t", True)
uint16 = _scalar("uint16", "H", "uint16_t", True)
uint32 = _scalar("uint32", "I", "unsigned int", True)
uint64 = _scalar("uint64", "Q", "unsigned long long", True)
float32 = _scalar("float32", "f", "float", False)
float64 = _scalar("float64", "d", "double", False)
float16 = _scalar("float16", "e", "__half", False)


class bool_(_Scalar):
    """A bool kernel argument (one byte)."""

    __slots__ = ()

    def __cudaops_kernel_arg__(self) -> bytes:
        return b"\x01" if self.value else b"\x00"


class bfloat16(_Scalar):
    """A __nv_bfloat16 kernel argument: the float rounded to nearest even."""

    __slots__ = ()

    def __cudaops_kernel_arg__(self) -> bytes:
        try:
            value = float(self.value)
        except (TypeError, ValueError) as error:
            raise ValueError(f"cudaops.jit.bfloat16({self.value!r}): {error}") from None
        if _math.isnan(value):
            return b"\xc0\x7f"
        bits: int = _struct.unpack("<I", _struct.pack("<f", value))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)
        return _struct.pack("<H", (bits >> 16) & 0xFFFF)
