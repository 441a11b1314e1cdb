"""``aioflux shards ls|index|verify URL``: a sharded dataset's shards and their indexes.

URL names the shards: a folder (every object in it but the ``.idx``
sidecars), a brace pattern (``gs://b/train-{000..099}.tar``) or one shard.
Each shard's format is ``--format``, else its name's, by the table the
datasets read too (``_engines/shards/_names.py``): ``.tar`` is tar;
``.jsonl``, ``.json``, ``.ndjson`` and ``.txt`` are lines (each also
compressed: ``.gz``, ``.zst``, ``.bz2``, ``.xz``; ``.tgz`` is a tar);
``.parquet`` is Parquet, whose index is its footer: ``ls`` reads the
footer (by range) for its row count, ``index`` puts the rows in the
manifest and the footers in the footers object beside it (no sidecar),
``verify`` reads every row group, page CRCs verified, and holds its rows
to the footer's.

``ls`` reads no shard: its sample counts are those of the sidecars that
match their shard (size and crc32c; where the store keeps no crc32c for
the shard, size and version: see
:func:`~aioflux._engines.shards.sidecar_matches`). ``index`` streams each
shard without such a sidecar once
(:func:`~aioflux._engines.shards.stream_index`, checked against the
shard's crc32c) and writes its sidecar, then adds every indexed shard to
the manifest of their folder (``_aioflux_manifest.jsonl``: each shard's
sample count, from which a dataset counts every shard with one GET).
``verify``
streams every shard, and holds the result against the sidecar where
there is one, sample by sample; it decodes each line of a lines shard as
the dataset will (``--decode``, by default JSON for ``.jsonl``, ``.json``
and ``.ndjson`` shards). All three print each shard's row as the
listing brings it: what they hold is a page and the reads in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from .._core.concurrency.portal import get_portal
from .._core.concurrency.window import window
from .._core.errors import AiofluxError, ChecksumMismatch, NotFound, ShardFormatError
from .._core.integrity.crc import encode_crc32c
from .._core.records.types import ObjectInfo
from .._core.records.urls import WEB_SCHEMES, StoreURL, format_url
from .._core.storage.protocol import ObjectStore
from .._engines.shards import (
    FORMATS,
    INDEX_SUFFIX,
    ShardFormat,
    ShardIndex,
    compression_of,
    decode_index,
    encode_index,
    expand_braces,
    format_by_name,
    is_sidecar,
    plain_suffix,
    sidecar_matches,
    stream_index,
)
from .._engines.shards._decode import LINE_DECODES, decoded_lines
from .._engines.shards._manifest import (
    MANIFEST_NAME,
    Entry,
    entry_of,
    is_manifest,
    manifest_folder,
    update_manifest,
)
from .._engines.shards._parquet_footers import FOOTERS_NAME, FooterEntry, update_footers
from .._engines.shards._parquet_read import read_footer, verify_file
from ._common import add_client_arguments, human, list_named, portal_store, url_arg
from ._registry import UsageError, action_parsers, command
from ._text import one_line, shell_quoted

__all__: list[str] = []

T = TypeVar("T")

# Lines shards whose lines verify decodes as JSON by default.
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
# Shards streamed at once by index and verify: each reader keeps its own
# ranged reads ahead, so a few shards keep the connections busy while
# small shards' first-byte latency overlaps.
_SHARDS_AT_ONCE = 4
# Sidecars read at once by ls (small objects: latency-bound).
_SIDECARS_AT_ONCE = 32
# Compressed bytes of a Parquet row group verify reads at once (past it, a
# column at a time).
_PARQUET_BUDGET = 64 * 1024 * 1024


def _configure(parser: argparse.ArgumentParser) -> None:
    for action, p in action_parsers(parser, (
            ("ls", "each shard's samples (from its index), size and index state; a total"),
            ("index", "stream each shard without a matching index once; write <shard>.idx"),
            ("verify", "stream every shard: its crc32c, its format, and its index if any"))):
        p.add_argument("url", type=url_arg,
                       help="a folder of shards, a brace pattern (gs://b/train-{000..099}.tar, "
                            "http(s)://host/train-{000..099}.tar: a web server has no folders) "
                            "or one shard")
        p.add_argument("--format", choices=sorted(FORMATS),
                       help="the shards' format (default: by name: .tar, else .jsonl/.txt... "
                            "as lines)")
        if action == "ls":
            p.add_argument("--json", action="store_true", help="one JSON document")
        if action == "index":
            p.add_argument("--force", action="store_true",
                           help="index shards whose sidecar already matches too")
        if action == "verify":
            p.add_argument("--decode", choices=[*LINE_DECODES, "none"],
                           help="decode each line of lines shards as ShardDataset's decode= "
                                "does (default: json for .jsonl/.json/.ndjson, else none)")
        add_client_arguments(p)


def _format(info: ObjectInfo, forced: str | None) -> ShardFormat:
    found = forced or format_by_name(info.name)
    if found is None:
        raise UsageError(f"cannot tell the format of {info.url} from its name: pass --format")
    return FORMATS[found]


async def _find(store: ObjectStore, url: StoreURL) -> AsyncIterator[ObjectInfo]:
    """The shards ``url`` names, in order, as the listing (or the stats of a
    brace pattern's names, a few at once) brings them."""
    if "{" in url.name:
        names = expand_braces(url.name)
        async for _, info in window(names, lambda n: store.stat(url.bucket, n),
                                    limit=_SIDECARS_AT_ONCE):
            yield info
        return
    found = False
    async for obj in list_named(store, url):
        if not is_sidecar(obj.name) and not is_manifest(obj.name):
            found = True
            yield obj
    if not found:
        raise NotFound(f"shards {url}: no shards there", operation="list", bucket=url.bucket,
                       name=url.name)


class _Sidecar:
    """A shard's ``.idx`` sidecar as found: ``state`` is ``ok`` (it matches the
    shard), ``none``, ``stale`` (of another object) or ``damaged``; ``index``
    only where it was asked to be kept."""

    def __init__(self, state: str, samples: int | None = None, error: str = "",
                 index: ShardIndex | None = None, data_size: int | None = None,
                 footer: bytes | None = None) -> None:
        self.state, self.samples, self.error, self.index = state, samples, error, index
        self.data_size, self.footer = data_size, footer


async def _sidecar(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat, *,
                   keep: bool = False) -> _Sidecar:
    where = info.url + INDEX_SUFFIX
    try:
        data = await store.read(info.bucket, info.name + INDEX_SUFFIX)
    except NotFound:
        return _Sidecar("none")
    try:
        index = decode_index(data, where)
    except ShardFormatError as exc:
        return _Sidecar("damaged", error=str(exc))
    if index.format != fmt.name or not await sidecar_matches(store, info, index):
        return _Sidecar("stale", error=f"the index {where} is of a {index.format} shard, "
                                       f"{_identity(index.size, index.crc32c, index.version)}: "
                                       f"not this one, "
                                       f"{_identity(info.size, info.crc32c, info.generation)} "
                                       "(aioflux shards index writes it anew)")
    return _Sidecar("ok", len(index), index=index if keep else None,
                    data_size=index.data_size)


async def _footer(store: ObjectStore, info: ObjectInfo) -> _Sidecar:
    """A Parquet file's index, its footer (read by range): ``footer`` with
    its rows, or ``damaged``."""
    try:
        footer = await read_footer(store, info)
        return _Sidecar("footer", sum(footer.rows), data_size=info.size, footer=footer.raw)
    except ShardFormatError as exc:
        return _Sidecar("damaged", error=str(exc))


def _identity(size: int, crc: int | None, version: int | None) -> str:
    return (f"{size} bytes, crc32c {'none' if crc is None else encode_crc32c(crc)}, "
            f"version {version or 'none'}")


_Found = tuple[ObjectInfo, ShardFormat, _Sidecar]


async def _shards_and_sidecars(args: argparse.Namespace,
                               store: ObjectStore) -> AsyncIterator[_Found]:
    """The shards URL names, each with its format and what its sidecar says,
    in order, as the listing brings them: what waits is a page and the
    sidecar reads in flight, however many shards there are (a list of all
    of them held ~1 KB a shard: 1 GB for a million, and nothing was printed
    before the last sidecar was read). The sidecars' columns are not kept."""
    async def side(info: ObjectInfo) -> tuple[ShardFormat, _Sidecar]:
        fmt = _format(info, args.format)
        if fmt.name == "parquet":
            return fmt, await _footer(store, info)
        return fmt, await _sidecar(store, info, fmt)

    async for info, (fmt, found) in window(_find(store, args.url), side,
                                           limit=_SIDECARS_AT_ONCE):
        yield info, fmt, found


async def _each(found: AsyncIterator[_Found],
                job: Callable[[_Found], T]) -> AsyncIterator[tuple[_Found, T | AiofluxError]]:
    """``(item, job(item) or the AiofluxError it raised)``, in order, a few
    at once: ``job`` blocks (it streams a shard), so each runs in a thread.
    Cancelled (Ctrl-C), the shards not started are dropped; those under way
    finish in their threads."""
    async def guarded(item: _Found) -> T | AiofluxError:
        try:
            return await asyncio.to_thread(job, item)
        except AiofluxError as exc:
            return exc

    async for item, result in window(found, guarded, limit=_SHARDS_AT_ONCE):
        yield item, result


def _ls(args: argparse.Namespace, store: ObjectStore) -> int:
    async def run() -> None:
        shards = indexed = size = samples = 0
        async for info, fmt, side in _shards_and_sidecars(args, store):
            row = {"url": info.url, "size": info.size, "format": fmt.name,
                   "index": side.state, "samples": side.samples}
            if args.json:
                # One document, written a row at a time (what emit_json
                # prints, keys sorted: "shards" before "total").
                print('{"shards": [' if not shards else ", ", json.dumps(row, sort_keys=True),
                      sep="", end="")
            else:
                count = "-" if side.samples is None else side.samples
                print(f"{count:>10}  {info.size:>12}  {side.state:<7}  {shell_quoted(info.url)}")
            shards += 1
            size += info.size
            if side.samples is not None:
                indexed += 1
                samples += side.samples
        total = {"shards": shards, "bytes": size, "indexed": indexed, "samples": samples}
        if args.json:
            print('{"shards": [' if not shards else "]", end="")
            print(f', "total": {json.dumps(total, sort_keys=True)}}}')
            return
        unknown = shards - indexed
        print(f"{samples:>10}  {size:>12}  total    {shards} shards ({human(size)})"
              + (f"; {unknown} without a matching index: samples unknown "
                 f"({_count_hint(args.url)})" if unknown else ""))

    get_portal().call(run())
    return 0


def _count_hint(url: StoreURL) -> str:
    """How to learn the samples of shards without an index: write their
    indexes, or where the store takes no writes (a web server), count them
    by reading."""
    if url.scheme in WEB_SCHEMES:
        return "a web server takes no index beside its shards: aioflux shards verify counts " \
               "them by reading"
    return "aioflux shards index"


def _index(args: argparse.Namespace, store: ObjectStore) -> int:
    if args.url.scheme in WEB_SCHEMES:
        # Refused before a shard is streamed: each sidecar's write would fail.
        raise UsageError(f"{args.url}: a web server takes no writes, so its shards cannot be "
                         "indexed in place: aioflux shards verify counts their samples by "
                         "reading them, and ShardDataset indexes them into its local cache "
                         "(index_dir)")
    kept = done = failed = 0
    entries: list[tuple[str, Entry]] = []  # (bucket, entry named in full)
    footers: list[tuple[str, FooterEntry]] = []  # (bucket, Parquet footer named in full)

    def build(item: _Found) -> int:
        info, fmt, side = item
        if fmt.name == "parquet":  # the footer is the index: no sidecar
            if side.state != "footer":
                raise ShardFormatError(side.error)
            assert side.samples is not None and side.footer is not None
            footers.append((info.bucket, FooterEntry(info.name, info.size, info.crc32c,
                                                     info.generation or None, side.footer)))
            entries.append((info.bucket, Entry(
                name=info.name, size=info.size, crc32c=info.crc32c,
                version=info.generation or None, format=fmt.name, compression=None,
                samples=side.samples, data_size=info.size)))
            return side.samples
        index = stream_index(store, info, fmt)
        get_portal().call(store.write(info.bucket, info.name + INDEX_SUFFIX,
                                      encode_index(index)))
        entries.append((info.bucket, entry_of(info, "", index)))
        return len(index)

    async def todo() -> AsyncIterator[_Found]:
        nonlocal kept
        async for item in _shards_and_sidecars(args, store):
            info, fmt, side = item
            if args.force or side.state != "ok":
                yield item
            else:
                kept += 1
                assert side.samples is not None and side.data_size is not None
                entries.append((info.bucket, Entry(
                    name=info.name, size=info.size, crc32c=info.crc32c,
                    version=info.generation or None, format=fmt.name,
                    compression=compression_of(info.name), samples=side.samples,
                    data_size=side.data_size)))

    async def run() -> None:
        nonlocal done, failed
        async for (info, _, _), result in _each(todo(), build):
            if isinstance(result, AiofluxError):
                failed += 1
                print(f"aioflux shards index: {one_line(str(result))}", file=sys.stderr)
            else:
                done += 1
                print(f"{result:>10}  indexed  {shell_quoted(info.url)}")

    get_portal().call(run())
    print(f"indexed {done} shards, {kept} already indexed"
          + (f", {failed} failed" if failed else ""))
    if entries:
        _write_manifest(store, args.url.scheme, entries, footers)
    return 1 if failed else 0


def _write_manifest(store: ObjectStore, scheme: str, entries: list[tuple[str, Entry]],
                    footers: list[tuple[str, FooterEntry]]) -> None:
    """Add the indexed shards to the manifest of their folder (one folder
    per bucket: a pattern names shards of one bucket), and the Parquet
    files' footers to the footers object beside it (first: a reader that
    finds the manifest's entries finds their footers too)."""
    bucket = entries[0][0]
    mine = [e for b, e in entries if b == bucket]
    folder = manifest_folder(e.name for e in mine)
    pq = [f for b, f in footers if b == bucket]
    if pq:
        get_portal().call(update_footers(
            store, bucket, folder, format_url(scheme, bucket, folder + FOOTERS_NAME),
            [dataclasses.replace(f, name=f.name[len(folder):]) for f in pq]))
    url = format_url(scheme, bucket, folder + MANIFEST_NAME)
    get_portal().call(update_manifest(
        store, bucket, folder, url,
        [dataclasses.replace(e, name=e.name[len(folder):]) for e in mine]))


def _compare(info: ObjectInfo, fresh: ShardIndex, side: _Sidecar) -> None:
    """Raise if the sidecar (kept) says other than the shard's data does."""
    if side.state == "damaged":
        raise ShardFormatError(side.error)
    if side.state == "stale":
        raise ShardFormatError(f"verify {info.url}: {side.error}")
    index = side.index
    if side.state != "ok" or index is None:
        return
    where = f"verify {info.url}: its index {info.url}{INDEX_SUFFIX}"
    for k in range(min(len(index), len(fresh))):
        if (index.offsets[k], index.lengths[k]) != (fresh.offsets[k], fresh.lengths[k]):
            raise ShardFormatError(
                f"{where} puts sample {k} at byte {index.offsets[k]} ({index.lengths[k]} bytes); "
                f"the shard holds it at byte {fresh.offsets[k]} ({fresh.lengths[k]} bytes)")
        if index.crcs[k] != fresh.crcs[k]:
            raise ChecksumMismatch(
                f"{where}: sample {k} at byte {fresh.offsets[k]} does not match (crc32c "
                f"{encode_crc32c(fresh.crcs[k])} != {encode_crc32c(index.crcs[k])})",
                operation="verify", bucket=info.bucket, name=info.name)
    if len(index) != len(fresh) or index.data_size != fresh.data_size \
            or index.compression != fresh.compression:
        raise ShardFormatError(
            f"{where} records {len(index)} samples in {index.data_size} bytes of "
            f"{index.compression or 'uncompressed'} data; the shard holds {len(fresh)} in "
            f"{fresh.data_size} bytes of {fresh.compression or 'uncompressed'} data")


class _Decoding:
    """A lines format whose index pass also decodes each line (``kind``), as
    the dataset's ``decode=`` will: a cut or foreign line fails verify,
    naming its byte, rather than an epoch midway."""

    def __init__(self, fmt: ShardFormat, kind: str) -> None:
        self.name, self._fmt, self._kind = fmt.name, fmt, kind

    def index(self, chunks: Iterable[bytes | memoryview], where: str
              ) -> tuple[Any, Any, Any, int]:
        return self._fmt.index(decoded_lines(chunks, self._kind, "verify", where), where)

    def sample(self, region: bytes | memoryview, url: str, offset: int, *,
               checked: bool = False) -> Any:
        return self._fmt.sample(region, url, offset, checked=checked)


def _decoding(info: ObjectInfo, fmt: ShardFormat, choice: str | None) -> ShardFormat:
    """``fmt``, decoding its lines as ``--decode`` says (by default JSON for a
    JSON lines shard's name, the dataset's usual ``decode="json"``)."""
    if choice is None:
        json_lines = fmt.name == "lines" and plain_suffix(info.name) in _JSON_SUFFIXES
        return _Decoding(fmt, "json") if json_lines else fmt
    if choice == "none":
        return fmt
    if fmt.name != "lines":
        raise UsageError(f"--decode {choice} decodes the lines of lines shards; {info.url} is "
                         f"a {fmt.name} shard")
    return _Decoding(fmt, choice)


def _verify(args: argparse.Namespace, store: ObjectStore) -> int:
    shards = bad = samples = 0

    def check(item: _Found) -> int:
        info, fmt, side = item
        if fmt.name == "parquet":
            if side.state == "damaged":
                raise ShardFormatError(side.error)
            return get_portal().call(verify_file(store, info, budget=_PARQUET_BUDGET))
        fresh = stream_index(store, info, _decoding(info, fmt, args.decode))
        _compare(info, fresh, get_portal().call(_sidecar(store, info, fmt, keep=True)))
        return len(fresh)

    async def run() -> None:
        nonlocal shards, bad, samples
        async for (info, _, side), result in _each(_shards_and_sidecars(args, store), check):
            shards += 1
            if isinstance(result, AiofluxError):
                bad += 1
                print(f"BAD  {shell_quoted(info.url)}: {one_line(str(result))}")
            else:
                samples += result
                state = {"ok": "indexed", "footer": "footer"}.get(side.state, "no index")
                print(f"ok   {result:>10}  {state}  {shell_quoted(info.url)}")

    get_portal().call(run())
    print(f"verified {shards} shards, {samples} samples in the good ones: "
          + (f"{bad} bad" if bad else "all good"))
    return 1 if bad else 0


_ACTIONS = {"ls": _ls, "index": _index, "verify": _verify}


@command("shards", _configure)
def _run(args: argparse.Namespace) -> int:
    with portal_store(args, args.url) as store:
        return _ACTIONS[args.action](args, store)
