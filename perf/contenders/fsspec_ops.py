"""fsspec_* contender: one fsspec filesystem doing one scenario's work.

``--fs``: ``aioflux-gs`` / ``aioflux-s3`` (``AiofluxFileSystem`` on the
emulator's GCS face or its S3 face, the project's python, library
defaults: crc32c checked), ``gcsfs`` (``GCSFileSystem(token="anon",
endpoint_url=...)``, its defaults: ``consistency="none"``) or ``s3fs``
(``S3FileSystem(endpoint_url=S3 face)``, path-style, region us-east-1, its
defaults), each in its own venv, or ``aiohttp-bare`` (the ceiling of
``cat`` and ``ranges`` on the GCS face: ``fsspec_bare.BareFS``). The same calls for all (``--op``):

- ``cat``: ``fs.find(prefix)`` then ``fs.cat(paths)``: list + whole reads;
- ``find``: ``fs.find(prefix, detail=True)``: a tree's entries;
- ``ranges``: ``fs.cat_ranges`` of every file's last 64 KiB (its footer),
  the footers parsed with pyarrow, then ``fs.cat_ranges`` of the chosen
  columns' chunks in every row group of every file (what a Parquet reader
  that fetches through fsspec sends, as ``fsspec.parquet`` does);
- ``parquet``: ``pyarrow.parquet.read_table(folder, filesystem=fs)``;
- ``get``: ``fs.get_file`` of the large object into a fresh local file;
- ``put``: ``fs.put_file`` of a local file of that size (written, and
  read once into the page cache, before the timer) to one object.

The filesystem is made, pyarrow imported (``read_table`` imports
``pyarrow.dataset`` on first use) and, for ``put``, the local file written
before the timer starts.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import struct
import tempfile
from typing import Any

# Must be set before gcsfs is imported (see read_gcsfs.py).
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

from _contender import Manifest, Stopwatch, load, report

# What a Parquet reader reads first: the file's tail, the footer in it.
_FOOTER_GUESS = 64 * 1024
_BLOCK = 8 * 1024 * 1024


def new_fs(kind: str, manifest: Manifest) -> Any:
    if kind == "aiohttp-bare":
        from fsspec_bare import BareFS

        return BareFS(manifest.endpoint)
    if kind.startswith("aioflux-"):
        from aioflux.fsspec import AiofluxFileSystem

        scheme = kind.removeprefix("aioflux-")
        return AiofluxFileSystem(scheme, endpoint=manifest.s3 if scheme == "s3"
                                 else manifest.endpoint)
    if kind == "gcsfs":
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(project="perf", token="anon", endpoint_url=manifest.endpoint)
    from s3fs import S3FileSystem

    return S3FileSystem(endpoint_url=manifest.s3, client_kwargs={"region_name": "us-east-1"},
                        config_kwargs={"s3": {"addressing_style": "path"}})


def cat(fs: Any, folder: str) -> tuple[int, int]:
    paths = fs.find(folder)
    bodies = fs.cat(paths)
    return sum(len(b) for b in bodies.values()), len(bodies)


def find(fs: Any, folder: str) -> tuple[int, int]:
    entries = fs.find(folder, detail=True)
    return 0, sum(1 for e in entries.values() if e["type"] == "file")


def _footer(tail: bytes) -> tuple[int, bytes | None]:
    """The footer's length, and the footer if ``tail`` holds it."""
    length, magic = struct.unpack("<i4s", tail[-8:])
    if magic != b"PAR1":
        raise SystemExit(f"not a Parquet file: {magic!r}")
    return length, tail[-8 - length:-8] if length + 8 <= len(tail) else None


def ranges(fs: Any, files: list[tuple[str, int]], columns: list[str]) -> tuple[int, int]:
    import pyarrow.parquet as pq

    starts = [max(0, size - _FOOTER_GUESS) for _, size in files]
    tails = fs.cat_ranges([p for p, _ in files], starts, [size for _, size in files])
    nbytes, count = sum(len(t) for t in tails), len(tails)
    chunk_paths, chunk_starts, chunk_ends = [], [], []
    for (path, size), tail in zip(files, tails, strict=True):
        length, footer = _footer(tail)
        if footer is None:  # a footer longer than the guess: one more range
            footer = fs.cat_file(path, size - 8 - length, size - 8)
            nbytes, count = nbytes + len(footer), count + 1
        meta = pq.read_metadata(io.BytesIO(b"PAR1" + footer + tail[-8:]))
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        wanted = [names.index(c) for c in columns]
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in wanted:
                chunk = group.column(c)
                start = chunk.dictionary_page_offset or chunk.data_page_offset
                chunk_paths.append(path)
                chunk_starts.append(start)
                chunk_ends.append(start + chunk.total_compressed_size)
    chunks = fs.cat_ranges(chunk_paths, chunk_starts, chunk_ends)
    for got, s, e in zip(chunks, chunk_starts, chunk_ends, strict=True):
        if not isinstance(got, bytes) or len(got) != e - s:
            raise SystemExit(f"cat_ranges returned {got!r:.80} for [{s}, {e})")
    return nbytes + sum(len(c) for c in chunks), count + len(chunks)


def read_table(fs: Any, folder: str, files: list[tuple[str, int]],
               rows: int) -> tuple[int, int]:
    import pyarrow.parquet as pq

    table = pq.read_table(folder, filesystem=fs)
    if table.num_rows != rows:
        raise SystemExit(f"read {table.num_rows} rows, expected {rows}")
    return sum(size for _, size in files), len(files)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    fs = new_fs(args.fs, manifest)
    folder = f"{manifest.bucket}/{args.prefix}".rstrip("/")
    files = [(f"{manifest.bucket}/{n}", s) for n, s in manifest.objects
             if n.startswith(args.prefix)]
    scratch = tempfile.mkdtemp(prefix="fsspec-perf-", dir=args.scratch)
    local = os.path.join(scratch, "local")
    nbytes = items = 0
    try:
        if args.op in ("ranges", "parquet"):
            # Imported untimed: read_table imports pyarrow.dataset on first use.
            for module in ("pyarrow.dataset", "pyarrow.parquet"):
                importlib.import_module(module)
        if args.op == "put":  # in the page cache, as a file just saved is
            with open(local, "wb") as f:
                for done in range(0, args.size, _BLOCK):
                    f.write(os.urandom(min(_BLOCK, args.size - done)))
        with Stopwatch() as watch:
            if args.op == "cat":
                nbytes, items = cat(fs, folder)
            elif args.op == "find":
                nbytes, items = find(fs, folder)
            elif args.op == "ranges":
                nbytes, items = ranges(fs, files, args.columns.split(","))
            elif args.op == "parquet":
                nbytes, items = read_table(fs, folder, files, args.rows)
            elif args.op == "get":
                path = files[0][0]
                fs.get_file(path, local)
                nbytes, items = os.path.getsize(local), 1
            else:
                fs.put_file(local, f"{manifest.bucket}/{args.prefix}{args.fs}")
                nbytes, items = os.path.getsize(local), 1
        if args.op == "put":  # untimed: the object is whole
            stored = fs.info(f"{manifest.bucket}/{args.prefix}{args.fs}")["size"]
            if stored != nbytes:
                raise SystemExit(f"put stored {stored} bytes of {nbytes}")
    finally:
        if os.path.exists(local):
            os.unlink(local)
        os.rmdir(scratch)
    return watch, nbytes, items


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--fs", choices=["aioflux-gs", "aioflux-s3", "gcsfs", "s3fs", "aiohttp-bare"],
                   required=True)
    p.add_argument("--op", choices=["cat", "find", "ranges", "parquet", "get", "put"],
                   required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--columns", default="")
    p.add_argument("--rows", type=int, default=0)
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--scratch", default=None, help="where local files go (default: TMPDIR)")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, fs=args.fs, op=args.op)
    # gcsfs imports grpc, whose threads abort the interpreter's teardown now
    # and then ("terminate called without an active exception", after the
    # work was done and reported): every filesystem leaves without one.
    os._exit(0)
