"""Every validation path, through stand-in arrays whose memory must never be touched. These run
without a GPU: each error is raised before any CUDA call."""

import pytest

import cudaops

import dlpack_capsules


def run(fn, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info


def test_not_an_array(dl):
    with pytest.raises(TypeError, match=r"add: a: expected a CUDA array .*got int"):
        cudaops.add(3, dl([4]))
    with pytest.raises(TypeError, match=r"add: b: expected a CUDA array .*got list"):
        cudaops.add(dl([4]), [1.0, 2.0])


@pytest.mark.parametrize("dtype", ["float64", "uint8", "bool", "complex64"])
def test_unsupported_dtype_dlpack(dl, dtype):
    with pytest.raises(TypeError, match=rf"add: b: dtype {dtype} is not supported; expected "
                                        r"float32, float16, bfloat16, int32 or int64"):
        cudaops.add(dl([4]), dl([4], dtype))


def test_vector_lanes_refused(dl):
    with pytest.raises(TypeError, match=r"dtype float32x4 is not supported"):
        cudaops.add(dl([4]), dl([4], lanes=4))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_dtype_refused_by_float_op(dl, dtype):
    with pytest.raises(TypeError, match=rf"add: a: dtype {dtype} is not supported; expected "
                                        r"float32, float16 or bfloat16"):
        cudaops.add(dl([4], dtype), dl([4], dtype))


@pytest.mark.parametrize("typestr", ["<f8", "|u1", ">f4", "<V2", "<c8", "xyz"])
def test_bad_typestr(cai, typestr):
    with pytest.raises(TypeError, match=r"add: a: typestr '.*' is not supported"):
        cudaops.add(cai([4], typestr), cai([4]))


def test_mask_refused(cai):
    with pytest.raises(ValueError, match=r"add: a: masked arrays .*not supported"):
        cudaops.add(cai([4], mask=object()), cai([4]))


def test_mask_none_is_fine_up_to_the_device(cai):
    # A None mask is no mask: the call gets as far as needing a device.
    if cudaops.device_count() > 0:
        pytest.skip("needs a machine without a GPU")
    with pytest.raises(cudaops.CudaError, match=r"add: .*(CUDA|no NVIDIA driver found)"):
        cudaops.add(cai([4], mask=None), cai([4]))


@pytest.mark.parametrize("version", [0, 1, 4])
def test_cai_version(cai, version):
    with pytest.raises(ValueError, match=rf"__cuda_array_interface__ version {version} is not "
                                         r"supported \(expected 2 or 3\)"):
        cudaops.add(cai([4], version=version), cai([4]))


def test_cai_not_a_dict():
    class Odd:
        __cuda_array_interface__ = [1, 2]

    with pytest.raises(TypeError, match=r"__cuda_array_interface__ must be a dict, got list"):
        cudaops.add(Odd(), Odd())


def test_cai_bad_data(cai):
    obj = cai([4])
    obj.__cuda_array_interface__["data"] = 1234
    with pytest.raises(TypeError, match=r"'data' must be a \(pointer, read_only\) tuple"):
        cudaops.add(obj, obj)


def test_cai_stride_not_multiple_of_item(cai):
    with pytest.raises(ValueError, match=r"stride of 6 bytes is not a multiple of the 4-byte"):
        cudaops.add(cai([4], strides=(6,)), cai([4]))


def test_cai_strides_rank(cai):
    with pytest.raises(ValueError, match=r"'strides' has 2 entries for 1 dimensions"):
        cudaops.add(cai([4], strides=(4, 4)), cai([4]))


def test_cpu_array_dlpack_device(dl):
    with pytest.raises(ValueError, match=r"add: a: expected an array in CUDA device memory, got "
                                         r"one on the CPU"):
        cudaops.add(dl([4], device=(1, 0)), dl([4]))


def test_cpu_array_capsule_device(dl):
    # A producer whose __dlpack_device__ claims CUDA but whose tensor says CPU.
    with pytest.raises(ValueError, match=r"got one on the CPU"):
        cudaops.add(dl([4]), dl([4], capsule_device=(1, 0)))


def test_pinned_host_refused(dl):
    with pytest.raises(ValueError, match=r"CUDA pinned host memory"):
        cudaops.add(dl([4], device=(3, 0)), dl([4]))


def test_numpy_array_refused():
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"add: a: expected an array in CUDA device memory, got "
                                         r"one on the CPU"):
        cudaops.add(np.ones(4, np.float32), np.ones(4, np.float32))


def test_readonly_out_dlpack(dl):
    with pytest.raises(ValueError, match=r"add: out: the array is read-only \(DLPack\); an output "
                                         r"must be writable"):
        cudaops.add(dl([4]), dl([4]), out=dl([4], readonly=True))


def test_readonly_input_is_fine(dl):
    # Read-only inputs are accepted; the call then needs a device (or works on one).
    if cudaops.device_count() > 0:
        pytest.skip("needs a machine without a GPU")
    with pytest.raises(cudaops.CudaError):
        cudaops.add(dl([4], readonly=True), dl([4]))


def test_readonly_out_cai(cai):
    with pytest.raises(ValueError, match=r"add: out: the array is read-only "
                                         r"\(__cuda_array_interface__\)"):
        cudaops.add(cai([4]), cai([4]), out=cai([4], readonly=True))


def test_wrong_shapes(dl):
    with pytest.raises(ValueError, match=r"add: b: shape \(4, 3\) does not match a's shape "
                                         r"\(3, 4\)"):
        cudaops.add(dl([3, 4]), dl([4, 3]))
    with pytest.raises(ValueError, match=r"add: out: shape \(12,\) does not match a's shape "
                                         r"\(3, 4\)"):
        cudaops.add(dl([3, 4]), dl([3, 4]), out=dl([12]))


def test_wrong_dtypes(dl):
    with pytest.raises(TypeError, match=r"add: b: dtype float16 does not match a's dtype "
                                        r"float32"):
        cudaops.add(dl([4]), dl([4], "float16"))
    with pytest.raises(TypeError, match=r"add_scalar: out: dtype bfloat16 does not match a's "
                                        r"dtype float32"):
        cudaops.add_scalar(dl([4]), 1.0, out=dl([4], "bfloat16"))


def test_non_contiguous(dl, cai):
    with pytest.raises(ValueError, match=r"add: a: expected a C-contiguous array, got shape "
                                         r"\(3, 4\) with strides \(8, 2\)"):
        cudaops.add(dl([3, 4], strides=[8, 2]), dl([3, 4]))
    with pytest.raises(ValueError, match=r"add: b: expected a C-contiguous array, got shape "
                                         r"\(3, 4\) with strides \(1, 3\)"):
        cudaops.add(cai([3, 4]), cai([3, 4], strides=(4, 12)))


def test_unit_extent_strides_do_not_matter(dl):
    # A dimension of extent 1 may carry any stride; the array is still contiguous.
    if cudaops.device_count() > 0:
        pytest.skip("needs a machine without a GPU")
    with pytest.raises(cudaops.CudaError):
        cudaops.add(dl([1, 4], strides=[999, 1]), dl([1, 4]))


def test_misaligned_pointer(dl, cai):
    with pytest.raises(ValueError, match=r"add: a: data pointer 0x7f0000000002 is not aligned to "
                                         r"its 4-byte float32 elements"):
        cudaops.add(dl([4], byte_offset=2), dl([4]))
    with pytest.raises(ValueError, match=r"add: out: data pointer 0x7f0000000001 is not aligned "
                                         r"to its 2-byte float16 elements"):
        cudaops.add(cai([4], "<f2"), cai([4], "<f2"), out=cai([4], "<f2", ptr=0x7F0000000001))


def test_null_pointer_with_elements(cai):
    with pytest.raises(ValueError, match=r"add: a: null data pointer for 4 elements"):
        cudaops.add(cai([4], ptr=0), cai([4]))


def test_negative_extent(cai):
    with pytest.raises(ValueError, match=r"negative extent -1"):
        cudaops.add(cai([-1]), cai([-1]))


def test_element_count_overflow(cai):
    with pytest.raises(ValueError, match=r"overflows int64"):
        cudaops.add(cai([2**62, 8]), cai([2**62, 8]))


def test_unknown_dlpack_major_version(dl):
    before = dlpack_capsules.deleter_calls()
    with pytest.raises(ValueError, match=r"add: a: DLPack version 2\.0 is not supported "
                                         r"\(expected major version 1\)"):
        cudaops.add(dl([4], major=2), dl([4]))
    # The refused tensor was still released.
    assert dlpack_capsules.deleter_calls() == before + 1


def test_not_a_capsule():
    class Bad:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, max_version=None):
            return "capsule"

    with pytest.raises(TypeError, match=r"must return an unused \"dltensor\" or "
                                        r"\"dltensor_versioned\" capsule, got str"):
        cudaops.add(Bad(), Bad())


def test_producer_error_propagates():
    class Fails:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, max_version=None):
            raise BufferError("cannot export")

    with pytest.raises(BufferError, match="cannot export"):
        cudaops.add(Fails(), Fails())


def test_stream_and_max_version_are_passed(dl):
    a = dl([0])
    cudaops.add(a, a, out=a)
    assert a.calls[0] == {"stream": 1, "max_version": (1, 0)}
    b = dl([0])
    cudaops.add(b, b, out=b, stream=0x1234)
    assert b.calls[0]["stream"] == 0x1234


def test_legacy_fallback(dl):
    a = dl([0], legacy_only=True)
    out = dl([0], legacy_only=True)
    assert cudaops.add(a, a, out=out) is out
    assert a.calls[0]["max_version"] is None


def test_capsules_are_released(dl):
    before = dlpack_capsules.deleter_calls()
    a, b = dl([5], versioned=True), dl([5], versioned=False)
    with pytest.raises(ValueError):
        cudaops.add(a, b, out=dl([6]))
    assert dlpack_capsules.deleter_calls() == before + 3


def test_zero_size_needs_no_device(dl, cai):
    # Zero elements: validated, nothing launched, nothing touched.
    a = dl([0, 5])
    out = dl([0, 5])
    assert cudaops.add(a, a, out=out) is out
    assert cudaops.add_scalar(cai([0], ptr=0), 2.0, out=cai([0], ptr=0)) is not None
    result = cudaops.add(dl([3, 0], "bfloat16"), dl([3, 0], "bfloat16"))
    assert isinstance(result, cudaops.Array)
    assert result.shape == (3, 0) and result.dtype == "bfloat16" and result.size == 0


def test_zero_size_still_validated(dl):
    with pytest.raises(ValueError, match="does not match"):
        cudaops.add(dl([0]), dl([0, 1]))


@pytest.mark.parametrize("stream", ["s", 1.5, -1, True, object()])
def test_bad_stream(dl, stream):
    with pytest.raises((TypeError, ValueError), match=r"add: stream: "):
        cudaops.add(dl([4]), dl([4]), stream=stream)


def test_stream_objects(dl):
    class TorchLike:
        cuda_stream = 0x10

    class CupyLike:
        ptr = 0x20

    class CudaPython:
        def __cuda_stream__(self):
            return (0, 0x30)

    class Broken:
        def __cuda_stream__(self):
            return 5

    for stream, expected in [(TorchLike(), 0x10), (CupyLike(), 0x20), (CudaPython(), 0x30),
                             (None, 1), (0, 1), (2, 2)]:
        a = dl([0])
        cudaops.add(a, a, out=a, stream=stream)
        assert a.calls[0]["stream"] == expected
    with pytest.raises(TypeError, match=r"__cuda_stream__ must give a \(version, handle\) tuple"):
        cudaops.add(dl([4]), dl([4]), stream=Broken())


def test_valid_call_without_gpu_is_a_clear_error(dl, cai):
    if cudaops.device_count() > 0:
        pytest.skip("needs a machine without a GPU")
    for args in [(dl([4]), dl([4])), (cai([4]), cai([4]))]:
        with pytest.raises(cudaops.CudaError, match=r"add: .*(CUDA is not available|"
                                                    r"cannot query pointer)"):
            cudaops.add(*args)
    with pytest.raises(cudaops.CudaError):
        cudaops.Array((4,), "float32")


def test_array_arguments_without_gpu():
    with pytest.raises(TypeError, match=r"cudaops.Array: dtype: "):
        cudaops.Array((4,), "float64")
    with pytest.raises(ValueError, match=r"negative extent"):
        cudaops.Array((-4,), "float32", device=0)


def test_alpha_must_be_a_number(dl):
    with pytest.raises(TypeError):
        cudaops.add_scalar(dl([4]), "two")
