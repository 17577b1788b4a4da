"""numba's compiler as the hot paths use it: cached machine code, and a memcpy (executor).

The loops that cut XRANGE replies (``atlasbus.decoding.kernels.cut_one_layout``) and parse flat JSON
maps (``atlasbus.decoding.kernels.flat_json_maps``) are compiled once per installation and loaded
from disk by each worker. Only modules that work on column pages import this, so decoding alone
never loads the compiler.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

import numba
import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba import njit, types
from numba.core import caching, cgutils
from numba.core.caching import FunctionCache
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic


def binary_column(values: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """The bytes and the offsets (one more than the rows) of a binary column, for compiled
    loops to read where they lie; None for any other type, a null or no rows."""
    if values.type != pa.binary() or values.null_count or len(values) == 0:
        return None
    _, offsets_buffer, data_buffer = values.buffers()
    end = values.offset + len(values) + 1
    offsets = np.frombuffer(offsets_buffer, np.int32)[values.offset : end]
    if data_buffer is None:  # every value empty
        return np.empty(0, np.uint8), offsets
    return np.frombuffer(data_buffer, np.uint8), offsets


def compiled(function: Callable[..., Any]) -> Any:
    """``function`` compiled by numba, its machine code cached on disk (``_PackageCache``).

    The cache lies beside the module, else in the user's cache directory (numba's own
    choices), else in a folder of this user's in the temporary directory
    (``private_cache_folder``), else nowhere: the code is then compiled in each process. The
    code cached for one set of atlasbus's sources is never loaded for another.
    """
    return _jit(function)


def inlined(function: Callable[..., Any]) -> Any:
    """A small helper of compiled loops, compiled into each loop that calls it.

    Called as a function of its own, each call to a scanner's helpers (whitespace, a string, a
    number) cost about as much as its work: the JSON object check took a fifth longer.
    """
    return _jit(function, inline="always")


def _jit(function: Callable[..., Any], **options: Any) -> Any:
    dispatcher = njit(nogil=True, **options)(function)
    if numba.config.DISABLE_JIT:  # the plain function: nothing to cache
        return dispatcher
    # RuntimeError: "cannot cache function ...: no locator available for file ...". numba's
    # null cache stays: the code is compiled in each process.
    with contextlib.suppress(RuntimeError):
        dispatcher._cache = _PackageCache(function)
    return dispatcher


def private_cache_folder() -> Path | None:
    """``atlasbus-numba-<uid>`` in the temporary directory, this user's alone; None if not.

    Made with mode 0700. One that exists is used only if it is a real folder (not a link),
    owned by this user, and neither group nor others may enter it: in a shared temporary
    directory another local user could have made it first, and code loaded from it would run
    as this user.
    """
    folder = Path(tempfile.gettempdir()) / f"atlasbus-numba-{os.getuid()}"
    if not _safe_parent(folder.parent):
        warnings.warn(
            f"atlasbus: other users may replace folders in {folder.parent} (not sticky, not "
            "this user's): compiled code is not cached on disk. Set NUMBA_CACHE_DIR to a "
            "folder of your own",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        status = folder.lstat()
    except OSError:
        return None
    private = (
        stat.S_ISDIR(status.st_mode)
        and status.st_uid == os.getuid()
        and stat.S_IMODE(status.st_mode) & 0o077 == 0
    )
    if not private:
        warnings.warn(
            f"atlasbus: {folder} is not a private folder of this user (owner uid "
            f"{status.st_uid}, mode {stat.S_IMODE(status.st_mode):o}): compiled code is not "
            "cached on disk. Remove it, or set NUMBA_CACHE_DIR to a folder of your own",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return folder


def _safe_parent(parent: Path) -> bool:
    """Whether no other user can rename or replace a folder in ``parent``: it is this user's
    or root's, and only its owner may write in it, or its sticky bit is set (as /tmp's is)."""
    try:
        status = parent.stat()
    except OSError:
        return False
    owner_only = not status.st_mode & 0o022 or bool(status.st_mode & stat.S_ISVTX)
    return status.st_uid in (os.getuid(), 0) and owner_only


def _package_sources() -> str:
    """A digest of the atlasbus package's Python sources (about 5 ms), taken at import, when
    numba reads each loop's own module: code compiled later in a process that outlived an
    upgrade is saved under the digest of the sources it was compiled from. A source that
    cannot be read (an editor's lock file, say) cannot be imported either, and is left out.
    """
    package = Path(__file__).resolve().parents[2]  # atlasbus/decoding/kernels/compiler.py
    digest = hashlib.sha256()
    for source in sorted(package.rglob("*.py")):
        if source.name.startswith("."):
            continue
        try:
            text = source.read_bytes()
        except OSError:
            continue
        digest.update(str(source.relative_to(package)).encode())
        digest.update(text)
    return digest.hexdigest()


_PACKAGE_SOURCES = _package_sources()


class _PackageCache(FunctionCache):  # type: ignore[misc]
    """numba's cache of a compiled loop, valid only for the atlasbus sources it was built from.

    numba keys a loop's machine code on its own module's text and its own bytecode. The helpers
    compiled into it (``inlined``, the scanners of ``atlasbus.decoding.kernels.json_lexer``) and the
    constants it reads live in other modules, so a release that changed only those would run the old
    code, cached beside the module and kept by pip across the upgrade.
    """

    def _index_key(self, signature: Any, codegen: Any) -> Any:
        return (*super()._index_key(signature, codegen), _PACKAGE_SOURCES)


def _try_the_private_folder_last() -> None:
    """Add ``private_cache_folder`` as the last place numba caches this package's loops.

    numba's caching API here is private (0.68's names; earlier releases prefix them with an
    underscore): on a numba whose API differs, its own places serve and nothing more.
    """
    provided: Any = getattr(
        caching, "UserProvidedCacheLocator", getattr(caching, "_UserProvidedCacheLocator", None)
    )

    class PrivateTemporaryLocator(provided):  # type: ignore[misc]
        def __init__(self, py_func: Any, py_file: str) -> None:
            super().__init__(py_func, py_file)
            folder = private_cache_folder()
            assert folder is not None  # from_function checked
            self._cache_path = str(folder / self.get_suitable_cache_subpath(py_file))

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if private_cache_folder() is None:
                return None
            # the user-provided locator's parent: the folder is made and checked writable
            return super(provided, cls).from_function(py_func, py_file)

    class PackageCacheImpl(FunctionCache._impl_class):  # type: ignore[misc]
        _locator_classes = [*FunctionCache._impl_class._locator_classes, PrivateTemporaryLocator]

    _PackageCache._impl_class = PackageCacheImpl


with contextlib.suppress(AttributeError, TypeError):
    _try_the_private_folder_last()


def _element(builder: Any, address: Any, index: Any, bits: int) -> Any:
    """In generated code: a pointer to element ``index`` of the ``bits``-wide integers at the
    integer ``address``, for the loads and stores below."""
    pointer = builder.inttoptr(address, ir.IntType(bits).as_pointer())
    return builder.gep(pointer, [index])


@intrinsic
def byte_at(typing_context: Any, address: Any, index: Any) -> Any:
    """The byte at ``address + index``, unchecked.

    Compiled helpers that take an array make numba count references to it at every call: two
    atomic operations per call, which cost five times the parsing in a loop of small helpers
    over a JSON text. Given the buffer's address (an integer) they count nothing. Callers keep
    the buffer alive and the index within it.
    """
    signature = types.uint8(types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value = args
        return builder.load(_element(builder, address_value, index_value, 8))

    return signature, generate


@intrinsic
def word_at(typing_context: Any, address: Any, index: Any) -> Any:
    """The 8 bytes at ``address + index`` as one little-endian integer, unchecked and unaligned.

    For scanning text a word at a time (``bytes_below``, ``bytes_equal``). Callers keep the
    8 bytes within the buffer.
    """
    signature = types.uint64(types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value = args
        return builder.load(_unaligned(builder, address_value, index_value, 64), align=1)

    return signature, generate


def _unaligned(builder: Any, address: Any, index: Any, bits: int) -> Any:
    """In generated code: a pointer to the ``bits``-wide integer at ``address + index``."""
    byte = _element(builder, address, index, 8)
    return builder.bitcast(byte, ir.IntType(bits).as_pointer())


@intrinsic
def half_word_at(typing_context: Any, address: Any, index: Any) -> Any:
    """The 4 bytes at ``address + index`` as one little-endian integer, unaligned."""
    signature = types.uint32(types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value = args
        return builder.load(_unaligned(builder, address_value, index_value, 32), align=1)

    return signature, generate


def _unaligned_store(bits: int) -> Any:
    """An intrinsic ``(address, index, value)`` storing the ``bits``-wide unsigned ``value`` at
    ``address + index``, little-endian and unaligned, as the loads above read it."""
    value_type = types.uint64 if bits == 64 else types.uint32

    @intrinsic
    def store(typing_context: Any, address: Any, index: Any, value: Any) -> Any:
        signature = types.void(types.intp, types.intp, value_type)

        def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            address_value, index_value, integer = args
            builder.store(integer, _unaligned(builder, address_value, index_value, bits), align=1)
            return context.get_dummy_value()

        return signature, generate

    return store


put_word = _unaligned_store(64)
put_half_word = _unaligned_store(32)


@intrinsic
def put_byte(typing_context: Any, address: Any, index: Any, value: Any) -> Any:
    """Store ``value`` as the byte at ``address + index``, unchecked.

    For helpers that note things in an array their caller owns: writing through an array
    argument made numba count references to it at every call (15 ns, more than a short
    JSON text's parse), even in a helper compiled into its caller. Callers keep the array
    alive and the index within it.
    """
    signature = types.void(types.intp, types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value, byte_value = args
        byte = builder.trunc(byte_value, ir.IntType(8))
        builder.store(byte, _element(builder, address_value, index_value, 8))
        return context.get_dummy_value()

    return signature, generate


@intrinsic
def put_int(typing_context: Any, address: Any, index: Any, value: Any) -> Any:
    """Store ``value`` as element ``index`` of the int64 array at ``address``, unchecked, for
    the reason ``put_byte`` gives."""
    signature = types.void(types.intp, types.intp, types.int64)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address_value, index_value, int_value = args
        builder.store(int_value, _element(builder, address_value, index_value, 64))
        return context.get_dummy_value()

    return signature, generate


@inlined
def copy_bytes(target: int, target_at: int, source: int, source_at: int, size: int) -> None:
    """``size`` bytes from ``source + source_at`` to ``target + target_at`` (addresses), unchecked.

    Up to 16 bytes move as two words (or half-words) that may overlap, as memcpy moves them,
    but without calling it: most of an envelope's values are that short, and the call cost
    more than the copy. Neither side is read or written outside its range; callers keep both
    ranges within their buffers, which must not overlap.
    """
    if size > 16:
        _memcpy(target + target_at, source + source_at, size)
    elif size >= 8:
        put_word(target, target_at, word_at(source, source_at))
        put_word(target, target_at + size - 8, word_at(source, source_at + size - 8))
    elif size >= 4:
        put_half_word(target, target_at, half_word_at(source, source_at))
        put_half_word(target, target_at + size - 4, half_word_at(source, source_at + size - 4))
    else:
        for k in range(size):
            put_byte(target, target_at + k, byte_at(source, source_at + k))


@inlined
def same_bytes(address: int, start: int, other: int, size: int) -> bool:
    """Whether the ``size`` bytes at ``start`` and at ``other`` of the buffer at ``address`` are
    equal, compared a word at a time."""
    at = 0
    while at + 8 <= size:
        if word_at(address, start + at) != word_at(address, other + at):
            return False
        at += 8
    while at < size:
        if byte_at(address, start + at) != byte_at(address, other + at):
            return False
        at += 1
    return True


@intrinsic
def _memcpy(typing_context: Any, target: Any, source: Any, size: Any) -> Any:
    """memcpy from the address ``source`` to the address ``target``.

    A loop over the bytes (what numba makes of a slice assignment) cost 15 times as much.
    """
    signature = types.void(types.intp, types.intp, types.intp)

    def generate(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        target_value, source_value, count = args
        bytes_pointer = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(
            builder,
            builder.inttoptr(target_value, bytes_pointer),
            builder.inttoptr(source_value, bytes_pointer),
            count,
            1,
        )
        return context.get_dummy_value()

    return signature, generate


# numba types an integer by its Python value: these stay unsigned 64-bit, as the words are
# (a signed operand would make numba compute in floating point).
_LOW_BITS = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)
NO_BITS = np.uint64(0)  # a word's zero, unsigned as the words are
# A word as compiled code holds it (uint64); numpy's scalar arithmetic gives mypy no type.
Word: TypeAlias = Any


@inlined
def bytes_below(word: Word, limit: int) -> Word:
    """The high bit of each of the 8 bytes of ``word`` below ``limit`` (at most 128), branch-free.

    Exact at the lowest marked byte; a byte above it may be marked by the borrow, so callers
    take only the first (``first_marked``) or whether there is any.
    """
    return (word - _LOW_BITS * np.uint64(limit)) & ~word & _HIGH_BITS


@inlined
def bytes_equal(word: Word, byte: int) -> Word:
    """The high bit of each of the 8 bytes of ``word`` that is ``byte``, as ``bytes_below``."""
    return bytes_below(word ^ (_LOW_BITS * np.uint64(byte)), 1)


@inlined
def first_marked(marks: Word) -> int:
    """The index (0-7) of the lowest byte marked by ``bytes_below``; ``marks`` is not zero."""
    return int(trailing_zeros(marks)) >> 3


@inlined
def has_high_byte(word: int) -> bool:
    """Whether any of the 8 bytes of ``word`` is 128 or more: not ASCII."""
    return bool(word & _HIGH_BITS != NO_BITS)
