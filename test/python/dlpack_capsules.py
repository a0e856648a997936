"""DLPack capsules built with ctypes, as any producer could build them: stand-in tensors for the
tests that run without a GPU (the module must never dereference their data) and for the fuzz
tests, which also write fields no well-behaved producer would (a huge ndim, null shapes).

make_capsule(...) returns a "dltensor" or "dltensor_versioned" capsule; deleter_calls() says how
many of them have been released, by the consumer or by the capsule's destructor when unused."""

import ctypes

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


FLAG_READ_ONLY = 1

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _api))
# The destructor gets the capsule while it is being freed: it must not take a reference to it,
# so these take the raw pointer.
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# A capsule keeps a pointer to its name: these bytes live as long as the module.
_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"

_live = {}  # address of a managed tensor -> what keeps it and its arrays alive
_released = [0]


def _release(address):
    if _live.pop(address, None) is not None:
        _released[0] += 1


@DELETER
def _deleter(address):
    _release(address)


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_DESTRUCTOR
def _capsule_destructor(capsule):
    # An unused capsule releases its tensor, as the DLPack specification asks of producers.
    for name in (_LEGACY, _VERSIONED):
        if _is_valid(capsule, name):
            _release(_get_pointer(capsule, name))


def deleter_calls():
    """How many tensors made here have been released so far."""
    return _released[0]


def live_tensors():
    """How many tensors made here are not released yet."""
    return len(_live)


def make_capsule(ptr, shape, strides=None, type_code=2, bits=32, lanes=1, device_type=2,
                 device_id=0, byte_offset=0, versioned=True, readonly=False, major=1, minor=0,
                 ndim=None, null_shape=False, flags=None):
    """A capsule of a tensor over `ptr` (never dereferenced here). `ndim`, `null_shape` and
    `flags` override what a correct producer would write, for tests of hostile input."""
    shape = list(shape)
    shape_array = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    strides_array = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
    tensor = DLTensor()
    tensor.data = ptr
    tensor.device = DLDevice(device_type, device_id)
    tensor.ndim = len(shape) if ndim is None else ndim
    tensor.dtype = DLDataType(type_code, bits, lanes)
    if not null_shape:
        tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    if strides_array is not None:
        tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = byte_offset
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(major, minor)
        managed.flags = (FLAG_READ_ONLY if readonly else 0) if flags is None else flags
        name = _VERSIONED
    else:
        managed = DLManagedTensor()
        name = _LEGACY
    managed.dl_tensor = tensor
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    _live[address] = (managed, shape_array, strides_array)
    destructor = ctypes.cast(_capsule_destructor, ctypes.c_void_p)
    return _capsule_new(address, name, destructor)
