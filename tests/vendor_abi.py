"""The vendor device table (csrc/runtime/vendor_api.h) mirrored in ctypes, once, for the tests that
drive a vendor library with no torch (test_cpu_sim_vendor.py, test_cuda_vendor.py). A vendor built
against another vendor_api.h than this mirror fails their table tests."""

from __future__ import annotations

import ctypes
import enum

API_VERSION = 5
KERNEL_ABI_VERSION = 1


class Status(enum.IntEnum):
    OK = 0
    ERROR = 1
    OOM = 2
    INVALID = 3
    NOT_READY = 4
    NO_DEVICE = 5
    DECLINED = 6


class MemcpyKind(enum.IntEnum):
    H2D = 0
    D2H = 1
    D2D = 2
    H2H = 3


c_int, c_size_t, c_void_p, c_float = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_float
P = ctypes.POINTER
HostFn = ctypes.CFUNCTYPE(None, c_void_p)


def _fn(*args: type) -> type:
    return ctypes.CFUNCTYPE(c_int, *args)


class DeviceProperties(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("total_memory", c_size_t),
        ("major", c_int),
        ("minor", c_int),
        ("multi_processor_count", c_int),
        ("is_integrated", c_int),
    ]


class VendorKernel(ctypes.Structure):
    _fields_ = [("op", ctypes.c_char_p), ("fn", c_void_p)]


# The device functions, in table order: what every vendor must fill.
DEVICE_FUNCTIONS = [
    ("init", _fn()),
    ("last_error", ctypes.CFUNCTYPE(ctypes.c_char_p)),
    ("device_count", _fn(P(c_int))),
    ("get_device", _fn(P(c_int))),
    ("set_device", _fn(c_int)),
    ("device_properties", _fn(c_int, P(DeviceProperties))),
    ("device_synchronize", _fn(c_int)),
    ("malloc", _fn(c_int, c_size_t, P(c_void_p))),
    ("free", _fn(c_int, c_void_p)),
    ("mem_get_info", _fn(c_int, P(c_size_t), P(c_size_t))),
    ("host_malloc", _fn(c_size_t, P(c_void_p))),
    ("host_free", _fn(c_void_p)),
    ("memcpy_sync", _fn(c_void_p, c_void_p, c_size_t, c_int)),
    ("memcpy_async", _fn(c_void_p, c_void_p, c_size_t, c_int, c_void_p)),
    ("memset_sync", _fn(c_void_p, c_int, c_size_t)),
    ("memset_async", _fn(c_void_p, c_int, c_size_t, c_void_p)),
    ("stream_priority_range", _fn(P(c_int), P(c_int))),
    ("stream_create", _fn(c_int, c_int, P(c_void_p))),
    ("stream_destroy", _fn(c_void_p)),
    ("stream_synchronize", _fn(c_void_p)),
    ("stream_query", _fn(c_void_p)),
    ("stream_wait_event", _fn(c_void_p, c_void_p)),
    ("launch_host_func", _fn(c_void_p, HostFn, c_void_p)),
    ("event_create", _fn(c_int, c_int, P(c_void_p))),
    ("event_destroy", _fn(c_void_p)),
    ("event_record", _fn(c_void_p, c_void_p)),
    ("event_synchronize", _fn(c_void_p)),
    ("event_query", _fn(c_void_p)),
    ("event_elapsed_ms", _fn(c_void_p, c_void_p, P(c_float))),
]


class AccessKind(enum.IntEnum):
    UNKNOWN = -1
    READ = 0
    WRITE = 1


class HostAccess(ctypes.Structure):
    _fields_ = [("address", ctypes.c_size_t), ("range", c_void_p), ("tag", ctypes.c_uint64), ("kind", c_int)]


class HostAccessApi(ctypes.Structure):
    _fields_ = [
        ("start", _fn(P(ctypes.c_size_t))),
        ("stop", ctypes.CFUNCTYPE(None)),
        ("watch", _fn(c_void_p, ctypes.c_size_t, ctypes.c_uint64)),
        ("unwatch", ctypes.CFUNCTYPE(None, c_void_p)),
        ("set_tag", ctypes.CFUNCTYPE(None, c_void_p, ctypes.c_uint64)),
        ("open", ctypes.CFUNCTYPE(None, c_void_p)),
        ("enter_device_work", _fn()),
        ("leave_device_work", ctypes.CFUNCTYPE(None)),
        ("take", ctypes.CFUNCTYPE(ctypes.c_size_t, P(HostAccess), ctypes.c_size_t, P(ctypes.c_uint64))),
        ("set_notifier", ctypes.CFUNCTYPE(None, c_void_p)),
    ]


# Stream and event handles are opaque pointers: c_void_p, None for the default stream.
class VendorApi(ctypes.Structure):
    _fields_ = (
        [("api_version", c_int), ("name", ctypes.c_char_p), ("compute_device_type", c_int)]
        + DEVICE_FUNCTIONS
        + [
            ("kernel_abi_version", c_int),
            ("kernels", P(VendorKernel)),
            ("collective_engine", ctypes.c_char_p),
            ("auto_priority", c_int),
            ("op_supported", ctypes.CFUNCTYPE(c_int, ctypes.c_char_p)),
            ("async_host_streams", ctypes.CFUNCTYPE(c_int)),
            ("host_access", P(HostAccessApi)),
        ]
    )


# The kernel ABI (csrc/runtime/devx_kernel_abi.h), for calling a vendor's kernel directly.
class DType(enum.IntEnum):
    BOOL = 0
    UINT8 = 1
    INT8 = 2
    INT16 = 3
    INT32 = 4
    INT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9
    COMPLEX64 = 10
    COMPLEX128 = 11


class Tensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("ndim", ctypes.c_int32),
                ("sizes", P(ctypes.c_int64)), ("strides", P(ctypes.c_int64)),
                ("device", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class KernelContext(ctypes.Structure):
    pass


KernelContext._fields_ = [
    ("device", c_int),
    ("stream", c_void_p),
    ("workspace", ctypes.CFUNCTYPE(c_int, P(KernelContext), c_size_t, P(c_void_p))),
    ("resize_output", ctypes.CFUNCTYPE(c_int, P(KernelContext), P(Tensor), ctypes.c_int32, P(ctypes.c_int64))),
    ("philox_state", ctypes.CFUNCTYPE(c_int, P(KernelContext), c_void_p, ctypes.c_uint64,
                                      P(ctypes.c_uint64), P(ctypes.c_uint64))),
    ("core", c_void_p),
]
