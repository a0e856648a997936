"""Generated hostile input for the importers (DLPack capsules, legacy and versioned, built with
ctypes; __cuda_array_interface__ dicts), without a GPU: no case may crash the process, and every
refusal is a Python exception that names the op and the argument. Hypothesis explores (and
shrinks what fails) a few hundred cases per test; a seeded generator of the same fields runs
thousands more in about a second (Hypothesis spends ~10 ms drawing each of its cases).

A producer's memory contract is kept where a consumer cannot check it (shape and strides arrays
hold ndim entries whenever ndim is one the module accepts); every field it can check is random."""

import random

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudaops  # noqa: E402

import dlpack_capsules  # noqa: E402
from conftest import FAKE_PTR, DLPackStandIn  # noqa: E402

EXPECTED = (TypeError, ValueError, BufferError, OverflowError, cudaops.CudaError)
FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

int64 = st.integers(-(2**63), 2**63 - 1)
small_extent = st.integers(-2, 9)
extent = st.one_of(small_extent, int64)
pointer = st.sampled_from([0, FAKE_PTR, FAKE_PTR + 1, FAKE_PTR + 2, FAKE_PTR + 8, 2**64 - 16])


def check_refusal(error, op, names):
    assert isinstance(error, EXPECTED), f"{type(error).__name__}: {error}"
    text = str(error)
    assert text.startswith(op), text
    if isinstance(error, (TypeError, ValueError)) and not isinstance(error, cudaops.CudaError):
        assert any(f"{op}: {name}" in text for name in names), text


@st.composite
def capsule_fields(draw):
    ndim = draw(st.one_of(st.integers(0, 6), st.integers(-(2**31), 2**31 - 1),
                          st.sampled_from([64, 65, 2**31 - 1, -1])))
    accepted = 0 <= ndim <= 64
    # A shape array always as long as an accepted ndim (the consumer reads ndim entries).
    length = ndim if accepted else draw(st.integers(0, 4))
    shape = draw(st.lists(extent, min_size=length, max_size=length))
    strides = draw(st.one_of(st.none(), st.lists(extent, min_size=length, max_size=length)))
    return dict(
        ptr=draw(pointer),
        shape=shape,
        strides=strides,
        ndim=ndim,
        null_shape=draw(st.booleans()) if length > 0 else False,
        type_code=draw(st.one_of(st.sampled_from([0, 1, 2, 4, 5, 6]), st.integers(0, 255))),
        bits=draw(st.one_of(st.sampled_from([8, 16, 32, 64]), st.integers(0, 255))),
        lanes=draw(st.one_of(st.just(1), st.integers(0, 65535))),
        device_type=draw(st.one_of(st.sampled_from([1, 2, 3, 13]), st.integers(-(2**31), 2**31 - 1))),
        device_id=draw(st.one_of(st.integers(-1, 2), st.integers(-(2**31), 2**31 - 1))),
        byte_offset=draw(st.one_of(st.just(0), st.integers(0, 2**64 - 1))),
        versioned=draw(st.booleans()),
        major=draw(st.one_of(st.just(1), st.integers(0, 2**32 - 1))),
        minor=draw(st.integers(0, 2**32 - 1)),
        flags=draw(st.one_of(st.none(), st.integers(0, 2**64 - 1))),
    )


class Producer:
    def __init__(self, fields, device=(2, 0)):
        self.fields = fields
        self.device = device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        return dlpack_capsules.make_capsule(**self.fields)


@FUZZ
@given(capsule_fields(), capsule_fields())
def test_dlpack_capsules(a, b):
    live = dlpack_capsules.live_tensors()
    try:
        cudaops.add(Producer(a), Producer(b))
    except Exception as error:
        check_refusal(error, "add", ("a", "b"))
    # Whatever happened, every tensor handed over was released.
    assert dlpack_capsules.live_tensors() == live


junk = st.one_of(st.none(), st.booleans(), int64, st.integers(), st.floats(), st.text(max_size=8),
                 st.binary(max_size=8), st.tuples(), st.lists(st.integers(), max_size=3))


@st.composite
def cai_dicts(draw):
    ndim = draw(st.integers(0, 4))
    d = {}
    optional = {
        "version": st.one_of(st.sampled_from([2, 3]), junk),
        "shape": st.one_of(st.lists(extent, min_size=ndim, max_size=ndim).map(tuple), junk,
                           st.lists(junk, max_size=3).map(tuple)),
        "typestr": st.one_of(st.sampled_from(["<f4", "<f2", "|f4", ">f4", "<i8", "|u1", "<f8",
                                              "|V12", "", "<", "<f", "<f99999999999"]), junk),
        "data": st.one_of(st.tuples(pointer, st.booleans()), st.tuples(int64, junk),
                          st.tuples(st.integers(), st.booleans()), st.tuples(pointer), junk),
        "strides": st.one_of(st.none(), st.lists(extent, min_size=ndim, max_size=ndim).map(tuple),
                             junk),
        "mask": st.one_of(st.none(), junk),
        "stream": st.one_of(st.none(), st.integers(-3, 3), int64, junk),
    }
    for key, strategy in optional.items():
        if draw(st.integers(0, 9)) > 0:  # mostly present
            d[key] = draw(strategy)
    return d


class CAI:
    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


@FUZZ
@given(cai_dicts(), cai_dicts())
def test_cuda_array_interface(a, b):
    try:
        cudaops.add(CAI(a), CAI(b))
    except Exception as error:
        check_refusal(error, "add", ("a", "b"))


@FUZZ
@given(cai_dicts(), st.one_of(st.none(), st.integers(-3, 3), int64, junk))
def test_row_ops_and_streams(x, stream):
    for call, names in ((lambda: cudaops.softmax(CAI(x), stream=stream), ("x", "stream")),
                        (lambda: cudaops.topk(CAI(x), 1, stream=stream), ("x", "stream", "k"))):
        try:
            call()
        except Exception as error:
            check_refusal(error, "softmax" if names[-1] == "stream" else "topk", names)


# ---- the seeded generator ------------------------------------------------------------------

def random_int64(rng):
    return rng.choice([rng.randint(-2, 9), rng.randint(-(2**63), 2**63 - 1), 2**62, -(2**62)])


def random_capsule_fields(rng):
    ndim = rng.choice([rng.randint(0, 6), rng.randint(-(2**31), 2**31 - 1), 64, 65, -1])
    accepted = 0 <= ndim <= 64
    length = ndim if accepted else rng.randint(0, 4)
    return dict(
        ptr=rng.choice([0, FAKE_PTR, FAKE_PTR + 1, FAKE_PTR + 2, FAKE_PTR + 8, 2**64 - 16]),
        shape=[random_int64(rng) for _ in range(length)],
        strides=None if rng.random() < 0.5 else [random_int64(rng) for _ in range(length)],
        ndim=ndim,
        null_shape=length > 0 and rng.random() < 0.1,
        type_code=rng.choice([0, 1, 2, 4, 5, 6, rng.randint(0, 255)]),
        bits=rng.choice([8, 16, 32, 64, rng.randint(0, 255)]),
        lanes=rng.choice([1, 1, 1, rng.randint(0, 65535)]),
        device_type=rng.choice([2, 2, 1, 3, 13, rng.randint(-(2**31), 2**31 - 1)]),
        device_id=rng.choice([0, 0, 1, -1, rng.randint(-(2**31), 2**31 - 1)]),
        byte_offset=rng.choice([0, 0, rng.randint(0, 2**64 - 1)]),
        versioned=rng.random() < 0.5,
        major=rng.choice([1, 1, 0, 2, rng.randint(0, 2**32 - 1)]),
        minor=rng.randint(0, 2**32 - 1),
        flags=rng.choice([None, 0, 1, rng.randint(0, 2**64 - 1)]),
    )


def random_junk(rng):
    return rng.choice([None, True, 3, -1, 2**64, 1.5, "x", b"\xff", (), [1, 2], object()])


def random_cai(rng):
    ndim = rng.randint(0, 4)
    candidates = {
        "version": lambda: rng.choice([2, 3, 3, random_junk(rng)]),
        "shape": lambda: rng.choice([tuple(random_int64(rng) for _ in range(ndim)),
                                     random_junk(rng), (random_junk(rng),)]),
        "typestr": lambda: rng.choice(["<f4", "<f2", "|f4", ">f4", "<i8", "|u1", "<f8", "|V12",
                                       "", "<", "<f99999999999", random_junk(rng)]),
        "data": lambda: rng.choice([(FAKE_PTR, False), (FAKE_PTR, True), (0, False),
                                    (random_int64(rng), random_junk(rng)), (FAKE_PTR,),
                                    random_junk(rng)]),
        "strides": lambda: rng.choice([None, tuple(random_int64(rng) for _ in range(ndim)),
                                       random_junk(rng)]),
        "mask": lambda: rng.choice([None, None, random_junk(rng)]),
        "stream": lambda: rng.choice([None, 1, 2, 0, -1, random_int64(rng), random_junk(rng)]),
    }
    return {key: make() for key, make in candidates.items() if rng.random() < 0.9}


@pytest.mark.parametrize("seed", range(4))
def test_dlpack_capsules_seeded(seed):
    rng = random.Random(seed)
    live = dlpack_capsules.live_tensors()
    for _ in range(2500):
        try:
            cudaops.add(Producer(random_capsule_fields(rng)), Producer(random_capsule_fields(rng)))
        except Exception as error:
            check_refusal(error, "add", ("a", "b"))
    assert dlpack_capsules.live_tensors() == live


@pytest.mark.parametrize("seed", range(4))
def test_cuda_array_interface_seeded(seed):
    rng = random.Random(seed)
    for _ in range(2500):
        try:
            cudaops.add(CAI(random_cai(rng)), CAI(random_cai(rng)))
        except Exception as error:
            check_refusal(error, "add", ("a", "b"))


# ---- k-means and the index: their arguments, seeded -------------------------------------------

ARG_EXPECTED = EXPECTED + (NotImplementedError, OSError)


def random_standin(rng, ndim_choices=(1, 2, 3, 4)):
    ndim = rng.choice(ndim_choices)
    shape = [rng.choice([0, 1, 2, 7, 8, 16, 64, 199, 513, 2**31, 2**40]) for _ in range(ndim)]
    dtype = rng.choice(["float16", "bfloat16", "float32", "int32", "float64", "uint8"])
    strides = None
    if rng.random() < 0.2:
        strides = [random_int64(rng) for _ in range(ndim)]
    return DLPackStandIn(shape, dtype, strides=strides,
                         ptr=rng.choice([FAKE_PTR, FAKE_PTR + 2, FAKE_PTR + 16, 0]),
                         device=rng.choice([(2, 0), (2, 0), (1, 0), (2, 7)]))


def random_arg(rng, good):
    return rng.choice([good, good, random_junk(rng), random_int64(rng)])


# Where a Python call reports a C++ entry point's status, the message names that entry point.
NATIVE_NAMES = {"kmeans": ("kmeans",), "ivf.build_global": ("ivf_build", "ivf_index_size"),
                "ivf.load": ("ivf_saved_shape", "ivf_load")}


def check_arg_refusal(error, op):
    assert isinstance(error, ARG_EXPECTED), f"{type(error).__name__}: {error}"
    assert not isinstance(error, UnicodeError), f"{type(error).__name__}: {error}"
    text = str(error)
    assert text.startswith((op, "cudaops") + NATIVE_NAMES.get(op, ())), text
    assert "incompatible function arguments" not in text, text


@pytest.mark.parametrize("seed", range(2))
def test_kmeans_arguments_seeded(seed):
    rng = random.Random(seed)
    for _ in range(1500):
        x = random_standin(rng)
        kwargs = {}
        if rng.random() < 0.7:
            kwargs["n_iters"] = random_arg(rng, rng.randint(0, 20))
        if rng.random() < 0.5:
            kwargs["metric"] = random_arg(rng, rng.choice(["l2", "cosine"]))
        if rng.random() < 0.3:
            kwargs["center"] = random_arg(rng, rng.random() < 0.5)
        if rng.random() < 0.3:
            kwargs["init"] = rng.choice(["strided", "random", "kmeans++", random_standin(rng),
                                         random_junk(rng)])
        if rng.random() < 0.3:
            kwargs["seed"] = random_arg(rng, rng.randint(0, 100))
        try:
            cudaops.kmeans(x, random_arg(rng, rng.choice([1, 4, 64, 2**31])), **kwargs)
        except Exception as error:
            check_arg_refusal(error, "kmeans")


@pytest.mark.parametrize("seed", range(2))
def test_ivf_build_arguments_seeded(seed):
    rng = random.Random(seed)
    for _ in range(1500):
        keys = random_standin(rng, (2, 3, 3, 3))
        values = rng.choice([None, random_standin(rng, (3,)), keys])
        kwargs = {}
        if rng.random() < 0.5:
            kwargs["n_iters"] = random_arg(rng, rng.randint(0, 20))
        if rng.random() < 0.3:
            kwargs["global_pass"] = random_arg(rng, rng.random() < 0.5)
        try:
            cudaops.ivf.build_global(keys, values, random_arg(rng, rng.choice([8, 64, 4096])),
                                     random_arg(rng, rng.choice([1, 2, 4, 16])), **kwargs)
        except Exception as error:
            check_arg_refusal(error, "ivf.build_global")


@pytest.mark.parametrize("seed", range(2))
def test_ivf_load_paths_seeded(seed, tmp_path):
    rng = random.Random(seed)
    junk_file = tmp_path / "junk.ivf"
    for _ in range(300):
        junk_file.write_bytes(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))))
        path = rng.choice([str(junk_file), bytes(junk_file), junk_file, str(tmp_path),
                           str(tmp_path / "missing"), "", "\0", b"a\0b", random_junk(rng)])
        try:
            cudaops.ivf.load(path, device=rng.choice([None, 0, -1, 2**64, "x"]))
        except Exception as error:
            check_arg_refusal(error, "ivf.load")
