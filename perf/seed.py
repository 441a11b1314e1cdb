"""Write a scenario's data set into the emulator, and warm the emulator up.

Seeding uses plain aiohttp JSON-API media uploads rather than aioflux so a
bug in the code under test cannot shape the data the peers read.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import tarfile
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

__all__ = ["ObjectSet", "ParquetRows", "ParquetSet", "Seeded", "ShardSet", "read_all", "seed"]

# Object bodies are windows into one random pool: distinct per object,
# incompressible, and cheap to make for hundreds of MB.
_POOL_BYTES = 8 * 1024 * 1024
# Larger objects are streamed in chunks of this size (see _large_body).
_STREAM_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class ObjectSet:
    """``count`` objects of ``size`` bytes named ``{prefix}{i:06d}``."""

    prefix: str
    count: int
    size: int

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:06d}" for i in range(self.count)]

    def sizes(self) -> list[int]:
        return [self.size] * self.count

    @property
    def total_bytes(self) -> int:
        return self.count * self.size


def _tar_member(name: str, size: int) -> bytes:
    # A plain ustar header with fixed metadata: every run seeds the same bytes.
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


@dataclass(frozen=True)
class ShardSet:
    """``count`` shards of ``samples`` samples each, named ``{prefix}{i:06d}{suffix}``.

    ``kind="tar"``: WebDataset tar shards, as ``tar`` or webdataset's
    ``TarWriter`` lay them out: per sample ``KEY.jpg`` (``sample_size``
    random bytes) then ``KEY.cls`` (three digits), each a ustar header and
    its data padded to 512 bytes, and the two zero blocks that end an
    archive. ``kind="jsonl"``: one JSON object per line, ``sample_size``
    bytes with its newline. Both are generated as they are uploaded (a
    shard is never whole in memory) and from a seed, so their sizes are
    known in advance and every run has the same bytes.
    """

    prefix: str
    count: int
    samples: int
    sample_size: int
    kind: str = "tar"
    suffix: str = ".tar"
    # "gzip": each shard compressed whole (level 6), as .jsonl.gz shards are.
    compression: str | None = None

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:06d}{self.suffix}" for i in range(self.count)]

    def sizes(self) -> list[int]:
        """Bytes of each shard as stored (compressed: made once to learn them)."""
        if self.compression is None:
            return [self.size] * self.count
        return list(self._compressed_sizes)

    @functools.cached_property
    def _compressed_sizes(self) -> tuple[int, ...]:
        pool = _pool()
        return tuple(sum(map(len, self.body(i, pool))) for i in range(self.count))

    @property
    def size(self) -> int:
        """Bytes of one shard's data, decompressed (all are the same size)."""
        if self.kind == "tar":
            jpg = tarfile.BLOCKSIZE + self.sample_size + len(_padding(self.sample_size))
            return self.samples * (jpg + 2 * tarfile.BLOCKSIZE) + 2 * tarfile.BLOCKSIZE
        return self.samples * self.sample_size

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes())

    @property
    def sample_bytes(self) -> int:
        """What a reader gets per sample: jpg and cls fields, or a line without its newline."""
        return self.sample_size + 3 if self.kind == "tar" else self.sample_size - 1

    def body(self, shard: int, pool: bytes) -> Iterator[bytes]:
        """Shard ``shard``'s bytes as stored, in pieces."""
        if self.compression is None:
            yield from self._data(shard, pool)
            return
        if self.compression != "gzip":
            raise ValueError(f"ShardSet: compression {self.compression!r} is not gzip")
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: a gzip member
        for piece in self._data(shard, pool):
            if out := packer.compress(piece):
                yield out
        yield packer.flush()

    def _data(self, shard: int, pool: bytes) -> Iterator[bytes]:
        rng = random.Random(f"{self.prefix}{shard}")
        view = memoryview(pool)
        for j in range(self.samples):
            key = f"{shard:06d}{j:06d}"
            if self.kind == "tar":
                off = rng.randrange(len(pool) - self.sample_size + 1)
                yield _tar_member(f"{key}.jpg", self.sample_size)
                yield bytes(view[off:off + self.sample_size]) + _padding(self.sample_size)
                cls = f"{j % 1000:03d}".encode()
                yield _tar_member(f"{key}.cls", len(cls)) + cls + _padding(len(cls))
            else:
                head = json.dumps({"key": key, "label": j % 1000, "text": ""})[:-2]
                fill = self.sample_size - len(head) - 3  # '"}' and the newline
                off = rng.randrange(len(pool) - fill // 2)
                text = bytes(view[off:off + fill // 2 + 1]).hex()[:fill]
                yield f'{head}{text}"}}\n'.encode()
        if self.kind == "tar":
            yield b"\0" * (2 * tarfile.BLOCKSIZE)


@dataclass(frozen=True)
class ParquetSet:
    """``count`` Parquet files named ``{prefix}{i:06d}.parquet``: ``rows`` rows
    each of an ``int64`` key and ``columns`` random ``float64`` columns, in
    row groups of ``row_group`` rows, uncompressed (random doubles do not
    compress: their size is known), the same bytes every run.

    Made with pyarrow (the project's test extra) on first use and kept.
    """

    prefix: str
    count: int
    rows: int
    columns: int = 7
    row_group: int = 65_536

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:06d}.parquet" for i in range(self.count)]

    @functools.cached_property
    def files(self) -> tuple[bytes, ...]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        out = []
        for i in range(self.count):
            rng = np.random.default_rng(i)
            table = pa.table({"key": np.arange(i * self.rows, (i + 1) * self.rows),
                              **{f"c{j}": rng.random(self.rows) for j in range(self.columns)}})
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, row_group_size=self.row_group, compression="none",
                           use_dictionary=False, write_statistics=False)
            out.append(sink.getvalue().to_pybytes())
        return tuple(out)

    def sizes(self) -> list[int]:
        return [len(f) for f in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes())


@dataclass(frozen=True)
class ParquetRows:
    """``count`` Parquet files named ``{prefix}{i:06d}.parquet`` of text rows,
    as the Hub's data sets hold them: ``id`` (int64), ``text`` (``text_min``
    to ``text_max`` characters of words), ``score`` (float64), ``lang`` (one
    of five) and ``tokens`` (a list of int32), ``groups`` row groups of
    ``rows`` rows each, snappy, page CRCs written; the same bytes every run.

    Made with pyarrow (the project's test extra) on first use and kept.
    """

    prefix: str
    count: int
    groups: int
    rows: int
    text_min: int = 200
    text_max: int = 2000

    def names(self) -> list[str]:
        return [f"{self.prefix}{i:06d}.parquet" for i in range(self.count)]

    @functools.cached_property
    def files(self) -> tuple[bytes, ...]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        words = [f"w{k:x}" for k in range(4096)]
        out = []
        for i in range(self.count):
            rng = np.random.default_rng(1000 + i)
            n = self.groups * self.rows
            lengths = rng.integers(self.text_min, self.text_max + 1, n)
            picks = rng.integers(0, len(words), int(lengths.sum()) // 4 + n)
            text, at = [], 0
            for length in lengths.tolist():
                k = length // 4 + 1
                text.append(" ".join(words[j] for j in picks[at:at + k].tolist())[:length])
                at += k
            ntok = rng.integers(8, 64, n)
            flat = rng.integers(0, 50_000, int(ntok.sum()), dtype=np.int32)
            offsets = np.concatenate([[0], np.cumsum(ntok)]).astype(np.int32)
            table = pa.table({
                "id": np.arange(i * n, (i + 1) * n, dtype=np.int64),
                "text": text,
                "score": rng.random(n),
                "lang": pa.array(np.array(["en", "de", "fr", "es", "zh"])[rng.integers(0, 5, n)]),
                "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
            })
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, row_group_size=self.rows, compression="snappy",
                           write_page_checksum=True)
            out.append(sink.getvalue().to_pybytes())
        return tuple(out)

    def sizes(self) -> list[int]:
        return [len(f) for f in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes())


def _bodies(obj: ObjectSet, pool: bytes) -> list[tuple[str, memoryview]]:
    view = memoryview(pool)
    span = len(pool) - obj.size
    rng = random.Random(obj.prefix)
    return [(name, view[(off := rng.randrange(span + 1)) : off + obj.size]) for name in obj.names()]


def _large_body(name: str, size: int, pool: bytes) -> AsyncIterator[bytes]:
    """A body larger than the pool, streamed in pool windows at random offsets.

    ``random.randbytes`` of 256 MiB raises OverflowError (it asks for 2**31
    random bits at once), and holding 8 such bodies would cost 2 GiB here on
    top of the emulator's copy; this makes the bytes as they are sent.
    """

    async def chunks() -> AsyncIterator[bytes]:
        rng = random.Random(name)
        view = memoryview(pool)
        sent = 0
        while sent < size:
            n = min(_STREAM_CHUNK, size - sent)
            off = rng.randrange(len(pool) - n + 1)
            yield bytes(view[off : off + n])
            sent += n

    return chunks()


def _pieces(make: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for piece in make():
            yield piece

    return chunks()


Body = Callable[[], bytes | AsyncIterator[bytes]]


Seeded = ObjectSet | ShardSet | ParquetSet | ParquetRows


def _makers(sets: Sequence[Seeded], pool: bytes) -> list[tuple[str, Body]]:
    """Each object's name and what makes its body afresh (once per attempt)."""
    out: list[tuple[str, Body]] = []
    for s in sets:
        if isinstance(s, (ParquetSet, ParquetRows)):
            out += [(name, functools.partial(bytes, body))
                    for name, body in zip(s.names(), s.files, strict=True)]
        elif isinstance(s, ShardSet):
            out += [(name, functools.partial(_pieces, functools.partial(s.body, i, pool)))
                    for i, name in enumerate(s.names())]
        elif s.size <= _POOL_BYTES:
            out += [(name, functools.partial(bytes, body)) for name, body in _bodies(s, pool)]
        else:
            out += [(name, functools.partial(_large_body, name, s.size, pool))
                    for name in s.names()]
    return out


def _pool() -> bytes:
    """The random pool every body is cut from (the same every run)."""
    return random.Random(0).randbytes(_POOL_BYTES)


async def _upload(endpoint: str, bucket: str, sets: Sequence[Seeded],
                  concurrency: int) -> int:
    pool = _pool()
    items = _makers(sets, pool)
    sem = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def put(name: str, body: Body) -> None:
            url = f"{endpoint}/upload/storage/v1/b/{bucket}/o"
            params = {"uploadType": "media", "name": name}
            async with sem:
                for attempt in range(5):  # the emulator may inject faults
                    data = body()
                    async with session.post(url, params=params, data=data) as resp:
                        if resp.status < 300:
                            await resp.read()
                            return
                        if resp.status not in (408, 429, 500, 502, 503, 504) or attempt == 4:
                            raise RuntimeError(
                                f"seeding {bucket}/{name}: HTTP {resp.status} {await resp.text()}"
                            )
                    await asyncio.sleep(0.1 * 2**attempt)

        await asyncio.gather(*(put(name, body) for name, body in items))
    return len(items)


def seed(endpoint: str, bucket: str, sets: Sequence[Seeded], *,
         concurrency: int = 64) -> None:
    """Upload every object of ``sets`` into ``bucket``, concurrently."""
    if not sets:
        return
    start = time.perf_counter()
    count = asyncio.run(_upload(endpoint, bucket, sets, concurrency))
    total = sum(s.total_bytes for s in sets)
    print(
        f"[perf] seeded {count} objects, {total / 1e6:.1f} MB "
        f"in {time.perf_counter() - start:.1f}s",
        flush=True,
    )


async def _read(endpoint: str, bucket: str, names: Sequence[str], concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def get(name: str) -> int:
            async with (
                sem,
                session.get(
                    f"{endpoint}/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media"
                ) as r,
            ):
                r.raise_for_status()
                return len(await r.read())

        return sum(await asyncio.gather(*(get(n) for n in names)))


def read_all(
    endpoint: str, bucket: str, sets: Sequence[Seeded], *, concurrency: int = 64
) -> None:
    """Read every seeded object once, untimed.

    Run before the first contender so that whoever goes first does not pay
    for the emulator's cold code paths and allocator growth alone.
    """
    names = [n for s in sets for n in s.names()]
    if not names:
        return
    start = time.perf_counter()
    total = asyncio.run(_read(endpoint, bucket, names, concurrency))
    print(
        f"[perf] warm-up read {len(names)} objects, {total / 1e6:.1f} MB "
        f"in {time.perf_counter() - start:.1f}s",
        flush=True,
    )
