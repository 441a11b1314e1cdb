"""Shards for the shard tests, written as other tools write them."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# key -> field -> bytes
Samples = dict[str, dict[str, bytes]]


def tar_shard(samples: Iterable[tuple[str, dict[str, bytes]]], *,
              fmt: int = tarfile.PAX_FORMAT, extras: bool = False) -> bytes:
    """A tar of ``samples`` (members ``key.field``) as Python's tarfile writes it;
    ``extras`` adds what a reader must skip: a directory, a macOS ``._`` file,
    a ``__meta__`` member and a name without an extension."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        if extras:
            folder = tarfile.TarInfo("images")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
        for key, fields in samples:
            for field, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            if extras:
                for junk in (f"._{key.rsplit('/', 1)[-1]}.jpg", "__meta__", "README"):
                    info = tarfile.TarInfo(junk)
                    info.size = 3
                    tar.addfile(info, io.BytesIO(b"xyz"))
    return out.getvalue()


def make_samples(prefix: str, count: int, *, size: int = 300) -> list[tuple[str, dict[str, bytes]]]:
    """``count`` samples with a jpg, a cls and a two-dot field; distinct bytes each."""
    return [(f"{prefix}{i:05d}",
             {"jpg": (f"{prefix}{i}".encode() * size)[:size + i],
              "cls": str(i % 7).encode(),
              "seg.png": bytes([i % 251]) * (i % 5)})
            for i in range(count)]


def expected_of(shards: dict[str, list[tuple[str, dict[str, bytes]]]]) -> Samples:
    return {key: fields for samples in shards.values() for key, fields in samples}


def jsonl(records: Iterable[dict[str, Any]], *, crlf: bool = False, blank: bool = False) -> bytes:
    end = b"\r\n" if crlf else b"\n"
    lines = []
    for record in records:
        lines.append(json.dumps(record).encode() + end)
        if blank:
            lines.append(end)
    return b"".join(lines)


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def zst(data: bytes) -> bytes:
    import zstandard
    return bytes(zstandard.ZstdCompressor().compress(data))


# One field each whose tar members take 3, 2, 4 and 2 blocks: the samples
# packed in another order make a shard of the same size, its samples in
# other places (an index of the first order cuts every sample wrong).
REPACK_SIZES = (1000, 100, 1500, 20)


def repack_samples(order: Iterable[int]) -> list[tuple[str, dict[str, bytes]]]:
    """Samples ``r<i>`` (a ``bin`` field of ``REPACK_SIZES[i]`` bytes) in ``order``."""
    return [(f"r{i}", {"bin": bytes([i + 1]) * REPACK_SIZES[i]}) for i in order]


def rewrite_file(path: Path, data: bytes) -> None:
    """Replace ``path``'s bytes in place as a tool that records no crc32c does,
    a second later (file times advance in ticks of a few ms: a file rewritten
    within its write's tick is the same version to every reader)."""
    before = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
