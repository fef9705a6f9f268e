"""Addresses of buffer-protocol objects, held still while the daemon uses them.

The batch ABI names memory by address (buf_id 0) or by offset in a
registration, so the client needs the address of a bytearray, a numpy array,
an mmap or a memoryview, and needs it not to move or be freed while an
ioctl runs. PyObject_GetBuffer gives both: the address, and an export that
stops the object from resizing or releasing its memory until
PyBuffer_Release. ctypes.pythonapi reaches both from pure Python (CPython).
"""
import ctypes

_PyBUF_WRITABLE = 0x0001
_PyBUF_FORMAT = 0x0004
_PyBUF_ND = 0x0008
_PyBUF_STRIDES = 0x0010 | _PyBUF_ND
_PyBUF_C_CONTIGUOUS = 0x0020 | _PyBUF_STRIDES


class _PyBuffer(ctypes.Structure):
    # Py_buffer (Include/pybuffer.h; part of the stable ABI since 3.11).
    # `obj` is a void pointer on purpose: ctypes must not touch its
    # reference count, PyBuffer_Release does.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class Pinned:
    """The memory of `obj` (C-contiguous; writable if `writable`), exported
    until release(). Raises TypeError/BufferError as memoryview(obj) would
    (not a buffer, not contiguous, read-only where writing is needed)."""

    __slots__ = ("address", "nbytes", "_view", "_held")

    def __init__(self, obj, writable):
        self._held = False
        view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | _PyBUF_FORMAT | (_PyBUF_WRITABLE if writable else 0)
        _get_buffer(obj, ctypes.byref(view), flags)  # raises on failure
        self._view = view
        self._held = True
        self.address = view.buf or 0
        self.nbytes = view.len

    def release(self):
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        self.release()


def address_of(obj):
    """Address of a buffer that outlives every use of the address (an mmap
    the caller keeps open): pinned only long enough to read it."""
    with Pinned(obj, writable=False) as p:
        return p.address
