"""``ShardWriter``: samples packed into numbered shards on any store, each with its index.

Each shard streams into ``aioflux.open(url, "wb")`` as its samples come
and is published whole when it is finished, or not at all; its index
(built from the bytes written, :mod:`aioflux._engines.shards._writer`)
then goes beside it as ``<shard>.idx``, which :class:`ShardDataset` reads
instead of streaming the shard, and when the writer closes, every shard's
sample count goes into the folder's manifest (``_aioflux_manifest.jsonl``,
:mod:`aioflux._engines.shards._manifest`), from which a dataset counts
every shard with one GET. No torch is used here: the class sits beside
the dataset that reads what it writes.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import TYPE_CHECKING, Any

from ..._api.open import open as open_url
from ..._api.stores import new_store
from ..._core.checks.arguments import (
    Credentials,
    check_bool,
    check_credentials,
    check_endpoint,
    check_instance,
    check_int,
    check_str,
)
from ..._core.concurrency.portal import get_portal
from ..._core.errors import AiofluxError, InvalidArgument
from ..._core.records.urls import StoreURL, format_url, parse_url
from ..._core.settings.config import ClientConfig
from ..._core.settings.options import WriterOptions
from ..._core.storage.protocol import ObjectStore
from ..._engines.shards import (
    DEFAULT_MAX_COUNT,
    DEFAULT_MAX_SIZE,
    INDEX_SUFFIX,
    ShardPacker,
    check_compression,
    compressing,
    compression_of,
    encode_index,
    encode_sample,
    format_of,
    shard_namer,
)
from ..._engines.shards._manifest import (
    MANIFEST_NAME,
    Entry,
    entry_of,
    manifest_folder,
    update_manifest,
)
from ..._engines.shards._names import format_by_name
from ..._engines.shards._parquet_footers import FOOTERS_NAME, FooterEntry, update_footers
from ..._engines.shards._parquet_write import DEFAULT_ROW_GROUP_BYTES, ParquetPacker
from ..._engines.writer import ObjectWriter

if TYPE_CHECKING:
    from typing import Self

    from ..._engines.shards._writer import Sink

__all__ = ["ShardWriter"]

_CONTENT_TYPES = {"tar": "application/x-tar", "gzip": "application/gzip",
                  "zstd": "application/zstd", "lines": "text/plain; charset=utf-8",
                  "parquet": "application/vnd.apache.parquet"}


@dataclasses.dataclass
class _Shard:
    """The shard being written."""

    url: str
    parsed: StoreURL
    raw: ObjectWriter
    sink: Sink
    packer: ShardPacker | ParquetPacker


class ShardWriter:
    """Write samples into shards ``url_pattern % n`` (WebDataset tar or lines) with their indexes.

    ``format="tar"``: a sample is a dict with a str ``"__key__"`` and
    fields; each field becomes the member ``<key>.<field>`` (bytes as they
    are, str as UTF-8, int and float as text, dict and list as JSON; fields
    named ``__...`` are not written), as webdataset's ``ShardWriter`` writes
    them. ``format="lines"``: a sample is one line (a dict or list as JSON,
    a str as UTF-8, bytes as they are, without a newline); ``compression``
    (``"gzip"``, ``"zstd"``, else taken from the pattern's ``.gz`` / ``.zst``
    suffix) compresses each shard whole. ``format="parquet"``: a sample is
    a row, a dict of column to value; rows go into row groups of about
    ``row_group_bytes`` (Arrow bytes), every page with its CRC, the schema
    the first rows' (or ``schema``) for every shard; a shard is published
    with its manifest entry and its footer in the folder's footers object
    (``_aioflux_parquet_footers.bin``: its footer is its index, no sidecar).

    A shard ends when the next sample would take it past ``max_count``
    samples or its data past ``max_size`` bytes (a tar's end blocks
    included; a sample larger than that gets a shard of its own). Each
    shard streams to the store as samples come (memory: the sample being
    written and the upload's parts, ``writer.part_size * (max_in_flight +
    1)``, whatever the shard's size) and is published only when it is
    finished: an exception in the ``with`` body, or :meth:`abort`,
    publishes nothing of the shard being written, while the shards
    finished before stay. With ``index=True`` each published shard gets its
    ``<shard>.idx`` sidecar, which :class:`ShardDataset` reads instead of
    streaming the shard, and :meth:`close` (or :meth:`abort`, for the
    shards finished before) adds the shards to the manifest of their
    folder, ``_aioflux_manifest.jsonl`` (entries of other shards there
    stay; writers racing on it each add theirs), from which a dataset
    counts every shard with one GET.

    Attributes:
        shards: URLs of the shards published, in order.

    Args:
        url_pattern: the shard URLs with one integer field:
            ``"gs://b/train-%06d.tar"`` or ``"s3://b/text-{:05d}.jsonl.gz"``.
        format: ``"tar"``, ``"lines"`` or ``"parquet"``.
        max_size: most data bytes of a shard (before compression; Parquet:
            a shard ends at the row group that takes it past this).
        max_count: most samples of a shard.
        compression: ``None``, ``"gzip"`` or ``"zstd"`` (lines only; it
            must agree with the pattern's suffix, which readers go by).
        config: ClientConfig of the store.
        endpoint: API root (``gs``, ``s3``).
        credentials: as for :class:`~aioflux.AsyncClient`.
        start_shard: the first shard's number.
        index: write each shard's ``<shard>.idx`` sidecar and the manifest.
        writer: part size and parts in flight of each shard's upload.
        row_group_bytes: (Parquet) Arrow bytes of the rows of a row group.
        schema: (Parquet) the rows' ``pyarrow.Schema`` (None: the first rows').

    Raises:
        InvalidArgument: a setting of the wrong type or value.
        InvalidURL: the pattern makes no object URL.
    """

    def __init__(self, url_pattern: str | os.PathLike[str], *, format: str = "tar",
                 max_size: int = DEFAULT_MAX_SIZE, max_count: int = DEFAULT_MAX_COUNT,
                 compression: str | None = None, config: ClientConfig | None = None,
                 endpoint: str | None = None, credentials: Credentials = None,
                 start_shard: int = 0, index: bool = True,
                 writer: WriterOptions | None = None,
                 row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES, schema: Any = None) -> None:
        op = "ShardWriter"
        if isinstance(url_pattern, os.PathLike):
            url_pattern = os.fspath(url_pattern)
        check_str(op, "url_pattern", url_pattern)
        self.format = format_of(op, format).name
        check_int(op, "max_size", max_size, minimum=1)
        check_int(op, "max_count", max_count, minimum=1)
        check_str(op, "compression", compression, optional=True, choices=("gzip", "zstd"))
        check_instance(op, "config", config, ClientConfig, optional=True)
        check_endpoint(op, endpoint)
        check_credentials(op, credentials)
        check_int(op, "start_shard", start_shard)
        check_bool(op, "index", index)
        check_instance(op, "writer", writer, WriterOptions, optional=True)
        check_int(op, "row_group_bytes", row_group_bytes, minimum=1)
        if self.format != "parquet" and schema is not None:
            raise InvalidArgument(f"{op}: schema is for format 'parquet'")
        self._row_group_bytes, self._schema = row_group_bytes, schema
        self._name = shard_namer(op, url_pattern)
        first = parse_url(self._name(start_shard), require_object=True)
        named = compression_of(first.name)
        if compression is None:
            compression = named
        if compression != named:
            raise InvalidArgument(f"{op}: compression {compression!r} but the shards are "
                                  f"named {first.name!r}, which readers read as "
                                  f"{named or 'not compressed'}")
        if compression not in (None, "gzip", "zstd"):
            # Read, not written: left to the writer, such a name got the
            # samples uncompressed under a suffix every reader decompresses.
            raise InvalidArgument(f"{op}: the shards are named {first.name!r}, which "
                                  f"readers read as {compression}; the writer writes gzip "
                                  "(.gz) or zstd (.zst)")
        if self.format == "parquet" and (compression is not None or
                                         not first.name.endswith(".parquet")):
            raise InvalidArgument(f"{op}: Parquet shards are named *.parquet and compressed "
                                  f"inside (their pages), got {first.name!r}")
        implied = format_by_name(first.name)
        if implied is not None and implied != self.format:
            # Readers go by the name (from_prefix, `aioflux shards`): tar
            # bytes under a .jsonl name read back as one sample of garbage.
            raise InvalidArgument(f"{op}: format {self.format!r} but the shards are named "
                                  f"{first.name!r}, which readers read as {implied!r}")
        if compression is not None and self.format != "lines":
            raise InvalidArgument(f"{op}: compression is for format 'lines'; tar shards are "
                                  "written uncompressed (samples are read by ranged reads)")
        check_compression(op, compression)
        self.compression = compression
        self.max_size, self.max_count = max_size, max_count
        self._scheme = first.scheme
        self._settings: dict[str, Any] = {"config": config, "endpoint": endpoint,
                                          "credentials": credentials}
        self._index = index
        self._writer = writer
        self._next = start_shard
        self._store: ObjectStore | None = None
        self._shard: _Shard | None = None
        self._published = 0
        self._closed = False
        self.shards: list[str] = []
        # Each published shard's manifest entry, named in full (the folder is
        # cut off when the manifest is written: it is the shards' common one).
        self._entries: list[Entry] = []
        # Each published Parquet shard's footer, likewise (the footers object).
        self._footers: list[FooterEntry] = []

    @property
    def count(self) -> int:
        """Samples written: those of the published shards and of the one being written."""
        return self._published + (self._shard.packer.count if self._shard else 0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write(self, sample: Any) -> None:
        """Add one sample (to a new shard when the current one is full).

        Args:
            sample: ``tar``: ``{"__key__": str, field: bytes | str | int |
                float | dict | list}``; ``lines``: a dict, list, str or bytes.

        Raises:
            InvalidArgument: the writer is closed, or ``sample`` is not one
                of the format (nothing written): a missing ``__key__``, a
                key that would not read back (a ``'.'`` in its last part),
                the previous sample's key, a line holding a newline.
            StorageError: writing or publishing a shard failed (the shard
                being written is aborted, and so is the writer).
        """
        if self._closed:
            raise InvalidArgument(f"ShardWriter: write after close ({len(self.shards)} "
                                  "shards written)")
        if self.format == "parquet":
            self._write_row(sample)
            return
        shard = self._shard
        where = shard.url if shard is not None else self._name(self._next)
        encoded = encode_sample(self.format, sample, f"write {where} (sample {self.count})")
        packer = shard.packer if shard is not None else None
        assert packer is None or isinstance(packer, ShardPacker)
        if packer is not None and (packer.count >= self.max_count
                                   or packer.size_with(encoded) > self.max_size):
            self._finish()
            shard = packer = None
        if shard is None or packer is None:
            shard = self._start()
            packer = shard.packer
            assert isinstance(packer, ShardPacker)
        else:
            packer.check(encoded)  # refused before a byte is written: the shard goes on
        try:
            packer.add(encoded)
        except BaseException:
            self.abort()
            raise

    def _write_row(self, row: Any) -> None:
        shard = self._shard
        if shard is not None and (shard.packer.count >= self.max_count
                                  or shard.packer.size >= self.max_size):
            self._finish()
            shard = None
        if shard is None:
            shard = self._start()
        try:
            shard.packer.add(row)
        except BaseException:
            self.abort()
            raise

    def _start(self) -> _Shard:
        url = self._name(self._next)
        parsed = parse_url(url, require_object=True)
        if parsed.scheme != self._scheme:
            raise InvalidArgument(f"ShardWriter: the shard {url} is not on {self._scheme}://")
        if self._store is None:
            self._store = new_store(self._scheme, self._settings["config"],
                                    endpoint=self._settings["endpoint"],
                                    credentials=self._settings["credentials"])
        content_type = _CONTENT_TYPES[self.compression or self.format]
        raw: ObjectWriter = open_url(url, "wb", client=self._store,  # type: ignore[assignment]
                                     writer=self._writer, content_type=content_type)
        sink = compressing(raw, self.compression)
        packer: ShardPacker | ParquetPacker
        if self.format == "parquet":
            packer = ParquetPacker(url, sink.write, row_group_bytes=self._row_group_bytes,
                                   schema=self._schema)
        else:
            packer = ShardPacker(self.format, url, sink.write)
        self._shard = _Shard(url, parsed, raw, sink, packer)
        self._next += 1
        return self._shard

    def _finish(self) -> None:
        """Publish the shard being written, then its sidecar."""
        shard, self._shard = self._shard, None
        if shard is None:
            return
        try:
            shard.packer.finish()
            shard.sink.close()
        except BaseException:
            shard.sink.abort()
            self.abort()
            raise
        info = shard.raw.info
        assert info is not None  # a successful close sets it
        self.shards.append(info.url)
        self._published += shard.packer.count
        if isinstance(shard.packer, ParquetPacker):
            self._schema = shard.packer.schema  # every shard of the writer has it
            if self._index:  # the footer is the index: no sidecar
                self._entries.append(Entry(
                    name=info.name, size=info.size, crc32c=info.crc32c,
                    version=info.generation or None, format="parquet", compression=None,
                    samples=shard.packer.count, data_size=info.size))
                if shard.packer.footer is not None:
                    self._footers.append(FooterEntry(info.name, info.size, info.crc32c,
                                                     info.generation or None,
                                                     shard.packer.footer))
            return
        if self._index:
            assert self._store is not None
            assert isinstance(shard.packer, ShardPacker)
            index = shard.packer.index(info, self.compression)
            get_portal().call(self._store.write(shard.parsed.bucket,
                                                shard.parsed.name + INDEX_SUFFIX,
                                                encode_index(index)))
            self._entries.append(entry_of(info, "", index))

    def _write_manifest(self) -> None:
        """Add the published shards to their folder's manifest."""
        entries, self._entries = self._entries, []
        footers, self._footers = self._footers, []
        if not entries:
            return
        assert self._store is not None
        bucket = parse_url(self.shards[0], require_object=True).bucket
        folder = manifest_folder(e.name for e in entries)
        if footers:
            # Before the manifest: a reader that finds the manifest's entries
            # then finds their footers too.
            get_portal().call(update_footers(
                self._store, bucket, folder, format_url(self._scheme, bucket,
                                                        folder + FOOTERS_NAME),
                [dataclasses.replace(e, name=e.name[len(folder):]) for e in footers]))
        url = format_url(self._scheme, bucket, folder + MANIFEST_NAME)
        get_portal().call(update_manifest(
            self._store, bucket, folder, url,
            [dataclasses.replace(e, name=e.name[len(folder):]) for e in entries]))

    def close(self) -> None:
        """Publish the shard being written (and its sidecar); no-op once closed.

        Raises:
            StorageError: publishing failed (that shard is not published).
        """
        if self._closed:
            return
        try:
            self._finish()
            self._write_manifest()
        finally:
            self._close_store()

    def abort(self) -> None:
        """Publish nothing of the shard being written; finished shards stay."""
        shard, self._shard = self._shard, None
        try:
            if shard is not None:
                shard.sink.abort()
            if self._store is not None:
                try:
                    self._write_manifest()
                except AiofluxError as exc:
                    # The abort's cause is what the caller sees; the shards
                    # are published and have their sidecars either way.
                    warnings.warn(f"ShardWriter: the manifest of {len(self.shards)} shards "
                                  f"was not written: {exc}", RuntimeWarning, stacklevel=2)
        finally:
            self._close_store()

    def _close_store(self) -> None:
        self._closed = True
        store, self._store = self._store, None
        if store is not None:
            get_portal().call(store.aclose())
