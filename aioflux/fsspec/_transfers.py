"""``get_file`` and ``put_file``: whole files between the local disk and a
store, checked, all or nothing, in bounded memory.

A get lands in a temporary file beside the target, renamed over it once
every byte was checked against the object's crc32c: the target is whole or
untouched. A put of a small file is one write, of a bigger one a stream of
parts published at its end. What get and put of many files hold at once is
bounded per filesystem (``budget``, ``streaming``), whatever fsspec's
batch: it runs up to the open-file limit / 8 files at once, unbounded
without a limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import uuid
from collections.abc import Callable

from fsspec.callbacks import Callback

from .._core.concurrency.window import LoopSemaphore, window
from .._core.errors import ChecksumMismatch, NotFound, PreconditionFailed, ProtocolError
from .._core.integrity.crc import crc32c_combine, encode_crc32c
from .._core.records.types import ObjectInfo
from .._core.storage.protocol import ObjectStore
from .._engines.async_writer import AsyncObjectWriter

__all__ = ["STREAMING_PUTS", "TRANSFER_BLOCKS", "get_file", "put_file"]

# Bytes per ranged GET of get_file, and how many are in flight: 16 took
# two thirds of the time of 8 (perf scenario fsspec, op=get, 1 GiB), and
# hold as much as the writer's default parts (17 x 8 MiB).
_GET_BLOCK = 8 * 1024 * 1024
_GET_AHEAD = 16
# Bytes per local read of put_file.
_PUT_CHUNK = 8 * 1024 * 1024
# What get and put of many files hold at once: blocks of get_file and small
# files of put_file (8 MiB each, 256 MiB in all), and streaming uploads (2,
# each at most the writer's 17 parts). 24 gets of 48 MiB files held
# 1,154 MiB at once, 24 puts 1,250.
TRANSFER_BLOCKS = 32
STREAMING_PUTS = 2


async def get_file(store: ObjectStore, info: ObjectInfo, lpath: str, *, recent: bool,
                   budget: LoopSemaphore, callback: Callback,
                   stale: Callable[[], None] | None = None) -> None:
    """The object's bytes at ``info``'s version into the local file ``lpath``.

    A ``recent`` info that proves stale is recovered from as the read file
    recovers (``ObjectReader``): before any byte reaches ``lpath``, the
    current version is read instead, and ``stale`` is called.

    Args:
        store: the store.
        info: the object's version, size and crc32c.
        lpath: the local file, replaced only once it is whole.
        recent: ``info`` is a recent listing's or stat's: if its version is
            gone (or, where the store cannot tell versions apart, the size
            read is another), the current one is read.
        budget: the transfer blocks a filesystem's gets and puts share.
        callback: fsspec's progress callback.
        stale: called once ``info`` (``recent``) proved stale: the object
            replaced or deleted since (the filesystem forgets the entry).

    Raises:
        NotFound: no such object (or, not ``recent``, the version is gone).
        ChecksumMismatch: the bytes read are not the object's.
        StorageError: a read failed.
    """
    try:
        await _get(store, info, lpath, recent=recent, budget=budget, callback=callback,
                   stale=stale)
    except (NotFound, PreconditionFailed):
        if recent and stale is not None:
            stale()  # deleted, or replaced again: the read file forgets it too
        raise


async def _get(store: ObjectStore, info: ObjectInfo, lpath: str, *, recent: bool,
               budget: LoopSemaphore, callback: Callback,
               stale: Callable[[], None] | None) -> None:
    """:func:`get_file`'s work (which forgets the entry of an object found gone)."""
    if recent and info.size == 0:
        # No byte to fetch, so no GET would find the version gone: the stat
        # finds an empty object written to since.
        info = await _current(store, info, stale) or info
        recent = False
    folder = os.path.dirname(os.path.abspath(lpath))
    # Made as open() makes a file (0o666 less the umask): mkstemp's 0o600
    # stayed on the file it became.
    tmp = os.path.join(folder, f".aioflux-get-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                callback.set_size(info.size)
                await _download(store, info, out, budget, callback)
            except (NotFound, PreconditionFailed, ProtocolError, ChecksumMismatch) as exc:
                if not recent:
                    raise
                # The version a recent entry named is gone (NotFound, S3's
                # and Azure's 412); or, where a read cannot tell versions
                # apart (no version; a file rewritten keeping its time),
                # another size was read: then the stat decides, and if it
                # names the same version and size the error is the read's own.
                current = await _current(store, info, stale)
                if current is None and not isinstance(exc, NotFound | PreconditionFailed):
                    raise
                info = current or info
                out.seek(0)
                out.truncate()
                callback.set_size(info.size)
                callback.absolute_update(0)
                await _download(store, info, out, budget, callback)
        os.replace(tmp, lpath)  # whole, or not at all
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


async def _current(store: ObjectStore, info: ObjectInfo,
                   stale: Callable[[], None] | None) -> ObjectInfo | None:
    """The object's current version, asked of the store: None if it is
    ``info``'s version and size, else its info (and ``stale`` is called).

    Raises:
        NotFound: the object is gone.
    """
    current = await store.stat(info.bucket, info.name)
    if (current.generation, current.size) == (info.generation, info.size):
        return None
    if stale is not None:
        stale()
    return current


async def _download(store: ObjectStore, info: ObjectInfo, out: io.BufferedWriter,
                    budget: LoopSemaphore, callback: Callback) -> None:
    """The object's bytes at ``info``'s version into ``out``, checked;
    ``callback`` is told each block written."""
    bucket, name = info.bucket, info.name
    # Blocks land in buffers of their own (no body grown and copied as
    # it arrives), reused once written: at most _GET_AHEAD + 1, each
    # holding one of the filesystem's transfer blocks until written. Each
    # is written at its offset as it arrives: a late GET holds its own
    # block, not the blocks behind it (in order they would all wait).
    spare: list[bytearray] = []
    crcs: dict[int, tuple[int, int]] = {}  # start -> (crc32c, length)
    slots = budget.get()
    held = 0
    out.flush()
    fd = out.fileno()

    async def block(start: int) -> tuple[bytearray, memoryview, int | None]:
        nonlocal held
        await slots.acquire()
        held += 1
        try:
            end = min(info.size, start + _GET_BLOCK)
            buf = spare.pop() if spare else bytearray(min(_GET_BLOCK, info.size))
            view = memoryview(buf)[:end - start]
            fetched = await store.fetch(
                bucket, name, start=start, end=end, into=view,
                generation=info.generation or None, size=info.size,
                want_crc=info.crc32c is not None)
        except BaseException:
            held -= 1
            slots.release()
            raise
        if fetched.count != end - start:
            raise ChecksumMismatch(
                f"get {info.url}: bytes [{start}, {end}) came back as "
                f"{fetched.count} bytes", operation="read", bucket=bucket, name=name)
        return buf, view, fetched.crc

    try:
        async with contextlib.aclosing(window(range(0, info.size, _GET_BLOCK), block,
                                              limit=_GET_AHEAD, ordered=False)) as blocks:
            async for start, (buf, view, part_crc) in blocks:
                await asyncio.to_thread(_write_at, fd, view, start)
                callback.relative_update(len(view))
                if part_crc is not None:
                    crcs[start] = (part_crc, len(view))
                view.release()
                spare.append(buf)
                held -= 1
                slots.release()
    finally:
        for _ in range(held):  # fetched, never written: the write or a block failed
            slots.release()
    if info.crc32c is None:
        return
    crc = 0
    for start in sorted(crcs):
        part_crc, length = crcs[start]
        crc = crc32c_combine(crc, part_crc, length)
    if crc != info.crc32c:
        raise ChecksumMismatch(f"get {info.url}: crc32c {encode_crc32c(crc)} of the "
                               f"bytes read != {encode_crc32c(info.crc32c)}",
                               operation="read", bucket=bucket, name=name)


def _write_at(fd: int, data: memoryview, offset: int) -> None:
    """All of ``data`` into the file at ``offset``."""
    while data:
        done = os.pwrite(fd, data, offset)
        data, offset = data[done:], offset + done


async def put_file(store: ObjectStore, lpath: str, bucket: str, name: str, *, create: bool,
                   content_type: str, metadata: dict[str, str] | None = None,
                   budget: LoopSemaphore, streaming: LoopSemaphore,
                   callback: Callback) -> None:
    """The local file ``lpath`` published as the object, whole.

    Args:
        store: the store.
        lpath: the local file.
        bucket: bucket name.
        name: object name.
        create: publish only a new object.
        content_type: the object's Content-Type.
        metadata: its custom metadata, if any.
        budget: the transfer blocks a filesystem's gets and puts share (a
            small file holds one).
        streaming: the streaming uploads a filesystem runs at once (a file
            past one block takes one).
        callback: fsspec's progress callback.

    Raises:
        PreconditionFailed: ``create`` and the object exists (nothing published).
        StorageError: the upload failed (nothing published).
    """
    size = os.path.getsize(lpath)
    callback.set_size(size)
    if size <= _PUT_CHUNK:
        async with budget.get():
            data = await asyncio.to_thread(_read_whole, lpath)
            await store.write(bucket, name, data, if_generation_match=0 if create else None,
                              content_type=content_type, metadata=metadata)
        callback.relative_update(len(data))
        return
    async with streaming.get():
        await _put_streaming(store, lpath, bucket, name, create=create,
                             content_type=content_type, metadata=metadata, callback=callback)


async def _put_streaming(store: ObjectStore, lpath: str, bucket: str, name: str, *,
                         create: bool, content_type: str, metadata: dict[str, str] | None,
                         callback: Callback) -> None:
    """``lpath`` read in chunks into the streaming writer (see :func:`put_file`)."""
    writer = AsyncObjectWriter(store, bucket, name, content_type=content_type,
                               metadata=metadata, if_generation_match=0 if create else None)
    try:
        with open(lpath, "rb") as src:
            while chunk := await asyncio.to_thread(src.read, _PUT_CHUNK):
                await writer.write(chunk)
                callback.relative_update(len(chunk))
        await writer.close()
    except BaseException:
        await writer.abort()
        raise


def _read_whole(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
