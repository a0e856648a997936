"""Hostile input, each case once a crash, a hang or a silent wrong answer: every one must now be a
Python exception that names the argument. They run without a GPU: each is refused before any
CUDA call (or, for zero-size arrays, needs none)."""

import os
import pathlib
import subprocess
import sys

import pytest

import cudaops
import cudaops.jit as jit

import dlpack_capsules
from conftest import FAKE_PTR, requires_nvrtc


class Capsule:
    """A producer handing out whatever capsule it was given."""

    def __init__(self, **fields):
        self.fields = dict(ptr=FAKE_PTR, shape=[4])
        self.fields.update(fields)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        return dlpack_capsules.make_capsule(**self.fields)


@pytest.mark.parametrize("versioned", [True, False])
@pytest.mark.parametrize("ndim", [2**31 - 1, 65, 1000, -1])
def test_dlpack_ndim_beyond_the_shape_is_refused(versioned, ndim):
    with pytest.raises(ValueError, match=r"add: a: DLPack ndim -?\d+ is outside \[0, 64\]"):
        cudaops.add(Capsule(ndim=ndim, versioned=versioned), Capsule())


def test_dlpack_null_shape_and_bad_fields():
    with pytest.raises(ValueError, match=r"add: a: DLPack tensor with 1 dimensions and no shape"):
        cudaops.add(Capsule(null_shape=True), Capsule())
    with pytest.raises(ValueError, match=r"add: b: DLPack device id -3 is negative"):
        cudaops.add(Capsule(), Capsule(device_id=-3))
    with pytest.raises(ValueError, match=r"add: a: DLPack byte_offset \d+ is not a valid offset"):
        cudaops.add(Capsule(byte_offset=2**64 - 8), Capsule())


def test_exchange_api_address_is_trusted_only_on_dlpack_producers(cai):
    # An integer that is no table: before, it was dereferenced (a crash). A type that is no
    # DLPack producer is read through its other protocol instead.
    class Planted:
        __c_dlpack_exchange_api__ = 0x1000

        def __init__(self):
            self.__cuda_array_interface__ = cai([0]).__cuda_array_interface__

    result = cudaops.add(Planted(), Planted())
    assert result.shape == (0,)


def test_cai_read_only_flag_whose_truth_raises(cai):
    class Raises:
        def __bool__(self):
            raise RuntimeError("no truth here")

    obj = cai([4])
    obj.__cuda_array_interface__["data"] = (FAKE_PTR, Raises())
    with pytest.raises(TypeError, match=r"add: a: __cuda_array_interface__ 'data'\[1\] "
                                        r"\(read_only\) must be a bool, got .*Raises"):
        cudaops.add(obj, cai([4]))


def test_cai_missing_version_is_named(cai):
    obj = cai([4])
    del obj.__cuda_array_interface__["version"]
    with pytest.raises(TypeError, match=r"add: a: __cuda_array_interface__ has no 'version'"):
        cudaops.add(obj, cai([4]))


@pytest.mark.parametrize("stream", [0, -1, -7])
def test_cai_stream_values_the_protocol_forbids(cai, stream):
    with pytest.raises(ValueError, match=rf"add: a: __cuda_array_interface__ 'stream' {stream} "
                                         r"is not allowed"):
        cudaops.add(cai([4], stream=stream), cai([4]))


def test_cai_negative_pointer(cai):
    with pytest.raises(ValueError, match=r"add: a: .*'data'\[0\] \(the pointer\) -16 is negative"):
        cudaops.add(cai([4], ptr=-16), cai([4]))


@pytest.mark.parametrize("typestr", ["|f4", "|f2", "|i8"])
def test_typestr_without_byte_order_for_multibyte_types(cai, typestr):
    with pytest.raises(TypeError, match=rf"add: a: typestr '\{typestr}' is not supported"):
        cudaops.add(cai([4], typestr), cai([4]))


def test_cai_too_many_dimensions(cai):
    with pytest.raises(ValueError, match=r"add: a: .*'shape' has 65 dimensions; at most 64"):
        cudaops.add(cai([1] * 65), cai([1] * 65))


def test_stats_of_empty_rows_are_refused(cai):
    x, w = cai([4, 0]), cai([0])
    with pytest.raises(ValueError, match=r"layer_norm: return_stats=True with x's last axis of 0"):
        cudaops.layer_norm(x, w, w, 1e-5, return_stats=True)
    with pytest.raises(ValueError, match=r"rms_norm: return_rstd=True with x's last axis of 0"):
        cudaops.rms_norm(x, w, 1e-5, return_rstd=True)
    # Without the statistics there is nothing undefined: an empty result.
    assert cudaops.rms_norm(x, w, 1e-5).shape == (4, 0)


@requires_nvrtc
def test_jit_arguments(cai, dl, tmp_path):
    jit.set_cache(directory=tmp_path, enabled=True)
    k = jit.compile('extern "C" __global__ void touch(float* x) { x[0] = 1.0f; }', "touch",
                    options=("-arch=sm_90",))
    with pytest.raises(ValueError, match=r"shared_mem: the value does not fit in int64"):
        k(1, 1, dl((4,)), shared_mem=2**64)
    with pytest.raises(ValueError, match=r"shared_mem: expected bytes in \[0, 2\^31\)"):
        k(1, 1, dl((4,)), shared_mem=2**40)
    with pytest.raises(TypeError, match=r"shared_mem: the value must be an int"):
        k(1, 1, dl((4,)), shared_mem="16")
    # A kernel may write what it is given: a read-only array needs the caller's promise.
    with pytest.raises(ValueError, match=r"args\[0\]: the array is read-only"):
        k(1, 1, cai((4,), readonly=True))
    with pytest.raises(ValueError, match=r"args\[0\]: the array is read-only"):
        k(1, 1, dl((4,), readonly=True))
    if cudaops.device_count() == 0:  # a GPU would launch on the stand-in's fake memory
        with pytest.raises(Exception) as caught:  # promised: imported; then it needs a device
            k(1, 1, jit.readonly(dl((4,), readonly=True)))
        assert "read-only" not in str(caught.value)
    assert "readonly" in repr(jit.readonly(3))


@pytest.mark.parametrize("address", [1, 0x1000, 2**64 - 1, -1])
def test_exchange_api_integer_on_a_producer_is_ignored(address):
    # A DLPack producer whose __c_dlpack_exchange_api__ is an integer: the C exchange API is a
    # capsule (DLPack 1.3), so the integer is never an address to read. Run in a child process, so
    # that a crash fails this test instead of ending the run.
    code = f"""
import cudaops
import dlpack_capsules
class Planted:
    __c_dlpack_exchange_api__ = {address}
    def __dlpack_device__(self):
        return (2, 0)
    def __dlpack__(self, stream=None, max_version=None):
        return dlpack_capsules.make_capsule(ptr={FAKE_PTR}, shape=[4], device_id=-3)
try:
    cudaops.add(Planted(), Planted())
except (TypeError, ValueError) as e:
    print("refused:", e)
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr)
    assert "refused: add: a:" in run.stdout, run.stdout


@pytest.mark.parametrize("path", [b"/nonexistent/cudaops-index.ivf",
                                  pathlib.Path("/nonexistent/cudaops-index.ivf"),
                                  "/nonexistent/cudaops-index.ivf"])
def test_ivf_load_takes_str_bytes_and_pathlike(path):
    # Each spelling names the same file (before, bytes became the text "b'/...'").
    with pytest.raises(OSError) as error:
        cudaops.ivf.load(path)
    assert "/nonexistent/cudaops-index.ivf" in str(error.value)
    assert "b'" not in str(error.value)


@pytest.mark.parametrize("path", ["/tmp/cudaops\0index.ivf", b"/tmp/cudaops\0index.ivf"])
def test_ivf_load_refuses_an_embedded_nul(path):
    with pytest.raises(ValueError, match=r"ivf\.load: path must not contain a NUL"):
        cudaops.ivf.load(path)


@pytest.mark.parametrize("path", [3, None, 1.5])
def test_ivf_load_refuses_what_is_no_path(path):
    with pytest.raises(TypeError, match=r"ivf\.load: path must be str, bytes or os\.PathLike"):
        cudaops.ivf.load(path)


@pytest.mark.parametrize("device", [2**64, 2**31, -1])
def test_array_device_out_of_range_names_device(device):
    with pytest.raises(ValueError, match=r"cudaops\.Array: device"):
        cudaops.Array([4], device=device)


def test_a_message_quoting_undecodable_path_bytes_is_still_text():
    # The status quotes the path; Python decodes messages strictly (once a UnicodeDecodeError).
    with pytest.raises(OSError) as error:
        cudaops.ivf.load(b"/nonexistent/\xff\xfe.ivf")
    assert "\\xff\\xfe" in str(error.value)
