"""Memory that ends at a guard page: a read or write one byte past the data faults (SIGSEGV).

For proving that compiled kernels stay within the bytes they are given: the data is placed so
that its last byte is the last byte before a page that may not be touched (``mprotect``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap

import numpy as np

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_PROT_NONE = 0


class GuardedBuffer:
    """``size`` bytes (rounded up to pages) followed by one page that may not be touched."""

    def __init__(self, size: int) -> None:
        page = mmap.PAGESIZE
        self._size = -(-max(size, 1) // page) * page
        self._memory = mmap.mmap(-1, self._size + page)
        start = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        if _libc.mprotect(start + self._size, page, _PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
        self._bytes = np.frombuffer(self._memory, np.uint8, count=self._size)

    def ending_with(self, data: bytes) -> np.ndarray:
        """A writable array holding ``data``, whose last byte is the one before the guard."""
        if len(data) > self._size:
            raise ValueError(f"{len(data)} bytes do not fit in {self._size}")
        view = self._bytes[self._size - len(data) :]
        view[:] = np.frombuffer(data, np.uint8)
        return view

    @staticmethod
    def byte_past_the_end(array: np.ndarray) -> int:
        """Read the byte after ``array``'s last: faults when the array ends at the guard."""
        return int(ctypes.c_uint8.from_address(array.ctypes.data + len(array)).value)
