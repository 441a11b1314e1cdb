"""``aioflux.open(url, mode)``: file objects over objects of any store.

``"wb"`` returns an ``ObjectWriter`` (``aioflux/_engines/writer.py``: streaming
upload, published only on a clean close), ``"rb"`` an ``ObjectReader``
(``aioflux/_engines/reader.py``: parallel ranged read-ahead, seekable).
With ``compression="zstd"`` the stream is (de)compressed with
multithreaded zstandard on the way (the read side is then not seekable);
``compression="auto"`` reads an object that starts with a zstd frame as zstd.
The text modes ``"r"`` and ``"w"`` wrap that binary file in an
``io.TextIOWrapper``, as Python's ``open`` does, except that the
encoding defaults to UTF-8, never the locale's: an object is read on other
machines than the one that wrote it. A text write keeps the binary one's
all-or-nothing rule (``TextWriter``).
The URL's scheme picks the store (``gs://``, ``s3://``, ``az://``,
``file://`` or a path).
"""

from __future__ import annotations

import codecs
import io
import os
from typing import IO, Any, Literal, cast, overload

from .._core.checks.arguments import check_instance, check_metadata, check_str
from .._core.errors import InvalidArgument
from .._core.settings.options import ReaderOptions, WriterOptions
from .._core.storage.protocol import ObjectStore
from .._engines.compression import require_zstd, starts_zstd
from .._engines.reader import ObjectReader
from .._engines.writer import ObjectWriter, PublishOnExit
from .stores import AnyStore, store_for_url
from .sync_store import SyncStore

__all__ = ["DEFAULT_ENCODING", "TextWriter", "open"]

#: Encoding of the text modes when ``encoding`` is None (never the locale's).
DEFAULT_ENCODING = "utf-8"

_TEXT_READ_MODES = ("r", "rt", "tr")
_TEXT_WRITE_MODES = ("w", "wt", "tw")
_TEXT_MODES = _TEXT_READ_MODES + _TEXT_WRITE_MODES
_WRITE_MODES = ("wb", "w+b", "bw", *_TEXT_WRITE_MODES)
_READ_MODES = ("rb", "br", *_TEXT_READ_MODES)
_NEWLINES = ("", "\n", "\r", "\r\n")

_TextMode = Literal["r", "rt", "tr", "w", "wt", "tw"]
_BinaryMode = Literal["rb", "br", "wb", "w+b", "bw"]


# codecs' names of the encodings whose BOM TextIOWrapper leaves out on a
# stream that is not seekable (its C fast path; utf-8-sig goes through the
# codec's own encoder, which writes its BOM anyway).
_BOM_ONLY_WHEN_SEEKABLE = frozenset({"utf-16", "utf-32"})


class TextWriter(PublishOnExit, io.TextIOWrapper):
    """Text file over a writer that publishes on ``close()`` (ObjectWriter,
    ZstdWriter), with the writer's rules: io.TextIOWrapper's own
    ``__exit__`` and finalizer call ``close()``, which would publish what
    was written before an exception in the ``with`` body, or by a file
    dropped unclosed; here both abort instead.

    Args:
        raw: the binary writer (ObjectWriter, ZstdWriter, or fsspec's
            compressing file over one): a binary file object.
        encoding: text encoding.
        errors: encoding error handler (None: ``"strict"``).
        newline: Python's ``newline`` of a written file.
    """

    mode = "w"  # as Python's text file's (``aioflux.open`` sets the spelling given)

    def __init__(self, raw: PublishOnExit, *, encoding: str, errors: str | None,
                 newline: str | None) -> None:
        self._done = False
        self._track()
        self._raw = raw
        # Characters written, for the warning of a writer dropped unclosed
        # (the text not yet encoded is not in the raw writer's count).
        self._chars = 0
        binary = cast(IO[bytes], raw)  # every writer it is given is a binary file too
        super().__init__(binary, encoding=encoding, errors=errors, newline=newline)
        # self.encoding, not the argument: "locale" is no codec's name
        # (codecs.lookup refused it), the locale's encoding TextIOWrapper found is.
        if codecs.lookup(self.encoding).name in _BOM_ONLY_WHEN_SEEKABLE:
            # CPython's TextIOWrapper writes these encodings' BOM only to a
            # seekable stream (tell() says it is at the start), and a writer
            # is not one: without it the object reads back as neither
            # utf-16 nor utf-32. Python's open() writes it; so do we. The
            # text that follows is in native byte order, as the BOM says.
            binary.write(codecs.encode("", self.encoding))

    def write(self, s: str) -> int:
        """Write text (encoded as it is flushed to the binary writer).

        Args:
            s: the text.

        Returns:
            The number of characters written.
        """
        count = super().write(s)
        self._chars += count
        return count

    def _unpublished(self) -> tuple[str, int, str]:
        return self._raw._unpublished()[0], self._chars, "character"

    def _inner(self) -> PublishOnExit:
        return self._raw

    def close(self) -> None:
        """Flush the text and publish the object (see ``ObjectWriter.close``)."""
        self._done = True
        super().close()

    def abort(self) -> None:
        """Discard everything written, buffered text too; nothing is published."""
        self._done = True
        self._raw.abort()


@overload
def open(
    url: str | os.PathLike[str],
    mode: _TextMode,
    *,
    client: AnyStore | None = None,
    writer: WriterOptions | None = None,
    reader: ReaderOptions | None = None,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
    metadata: dict[str, str] | None = None,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
) -> IO[str]: ...


@overload
def open(
    url: str | os.PathLike[str],
    mode: _BinaryMode = "rb",
    *,
    client: AnyStore | None = None,
    writer: WriterOptions | None = None,
    reader: ReaderOptions | None = None,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
    metadata: dict[str, str] | None = None,
    encoding: None = None,
    errors: None = None,
    newline: None = None,
) -> IO[bytes]: ...


@overload
def open(  # a mode only known at run time
    url: str | os.PathLike[str],
    mode: str,
    *,
    client: AnyStore | None = None,
    writer: WriterOptions | None = None,
    reader: ReaderOptions | None = None,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
    metadata: dict[str, str] | None = None,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
) -> IO[Any]: ...


def open(
    url: str | os.PathLike[str],
    mode: str = "rb",
    *,
    client: AnyStore | None = None,
    writer: WriterOptions | None = None,
    reader: ReaderOptions | None = None,
    compression: str | None = None,
    content_type: str = "application/octet-stream",
    metadata: dict[str, str] | None = None,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
) -> IO[Any]:
    """Open an object as a binary or a text file.

    Args:
        url: ``gs://bucket/name``, ``s3://bucket/key``,
            ``az://container/blob``, ``file:///path`` or a path (``str`` or
            ``os.PathLike``; relative to the working directory). A path or
            ``file://`` URL is made absolute and its ``.`` and ``..``
            segments resolved by name, as ``os.path.abspath`` does.
        mode: ``"rb"`` or ``"wb"`` (binary); ``"r"`` or ``"w"`` (text, also
            spelled ``"rt"`` / ``"wt"``).
        client: the store that serves the URL's scheme (an ``AsyncClient``,
            ``S3Store``, ``AzureStore``..., or a blocking ``SyncStore``); default: a
            process-wide store per scheme, configured from the environment.
            Files need none: a ``file://`` URL or path is served whatever
            client is given.
        writer: part size and parts in flight of a written file.
        reader: block size and read-ahead of a read file.
        compression: ``None``, ``"zstd"`` (needs ``aioflux-storage[zstd]``)
            or, to read, ``"auto"``: zstd if the object starts with a zstd
            frame's magic number, as it is otherwise. ``None`` reads the
            stored bytes as they are, a zstd object's compressed ones (as
            ``cp`` copies them); ``torch.load`` fails on those, so load
            checkpoints with ``aioflux.torch.Checkpoint().load(url)``, which
            finds the compression itself (a zstd read is not seekable).
        content_type: Content-Type of a written object.
        metadata: custom metadata of a written object (GCS and S3; files
            have none).
        encoding: text modes only: the encoding, UTF-8 by default whatever
            the locale (objects are shared across machines; pass
            ``"locale"`` for Python's default). A written object is not
            seekable, so, as on a pipe, Python's ``"utf-16"`` and
            ``"utf-32"`` write no BOM: name the byte order (``"utf-16-le"``).
        errors: text modes only: the (de|en)coding error handler, as for
            Python's ``open`` (``"strict"`` by default, ``"replace"``, ...).
        newline: text modes only: line-ending translation, as for Python's
            ``open``.

    Returns:
        A file object; use it as a context manager. For a write mode an
        exception in the ``with`` body aborts the upload and publishes
        nothing; closing publishes. Unlike Python's ``open``, a written file
        that is never closed publishes nothing either: collected unclosed
        (``del f``, or the script ends), it discards what was written and
        emits an ``UnclosedWriterWarning`` (a ``UserWarning``, shown by
        Python's default filters) naming the URL, the bytes lost and the
        line that opened it. A text mode returns an ``io.TextIOWrapper``
        whose ``close()`` closes the object.

    Raises:
        InvalidURL: not an object URL, or a write to a name ending in ``/``
            (a folder's; on GCS and S3 it would make a placeholder object).
        InvalidArgument: unsupported mode or compression, ``metadata`` for
            a read or for a file, ``encoding`` / ``errors`` / ``newline``
            with a binary mode, an unknown encoding or error handler, zstd
            without the zstandard package, or a ``client`` that serves
            another scheme than a ``gs://``, ``s3://`` or ``az://`` URL's.
        NotFound: a read of a missing object.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    op = f"open {url}"
    check_instance(op, "client", client, (ObjectStore, SyncStore), optional=True)
    check_str(op, "mode", mode, choices=_WRITE_MODES + _READ_MODES)
    writing = mode in _WRITE_MODES
    store, (bucket, name) = store_for_url(url, client, require_object=True, writing=writing)
    check_str(op, "compression", compression, optional=True,
              choices=("zstd",) if writing else ("zstd", "auto"))
    check_instance(op, "writer", writer, WriterOptions, optional=True)
    check_instance(op, "reader", reader, ReaderOptions, optional=True)
    check_str(op, "content_type", content_type)  # the writer checks what a header takes
    check_metadata(op, "metadata", metadata)
    _check_text_args(op, mode, encoding, errors, newline)
    text = mode in _TEXT_MODES
    encoding = encoding or DEFAULT_ENCODING
    if compression == "zstd":
        require_zstd(op)
    raw: Any
    if writing:
        raw = ObjectWriter(store, bucket, name, options=writer, content_type=content_type,
                           metadata=metadata)
        if compression == "zstd":
            from .._engines.zstd import compress_writer

            raw = compress_writer(raw)
        if text:
            return _spelled(TextWriter(raw, encoding=encoding, errors=errors, newline=newline),
                            mode)
        return raw  # type: ignore[no-any-return]
    # A read mode (checked above).
    if metadata is not None:
        raise InvalidArgument(f"{op}: metadata is for writing (mode 'wb' or 'w'); "
                              "stat() reads it")
    raw = ObjectReader(store, bucket, name, options=reader)
    if compression == "auto":
        try:
            compression = "zstd" if starts_zstd(raw) else None
            if compression:
                require_zstd(f"{op} (zstd-compressed)")
        except BaseException:
            raw.close()
            raise
    if compression == "zstd":
        from .._engines.zstd import decompress_reader

        raw = decompress_reader(raw)
    if text:
        return _spelled(io.TextIOWrapper(raw, encoding=encoding, errors=errors,
                                         newline=newline), mode)
    return raw  # type: ignore[no-any-return]


def _spelled(file: io.TextIOWrapper, mode: str) -> io.TextIOWrapper:
    """``file`` with its ``mode`` as given, as Python's ``open`` sets it on
    a text file (its binary file's is ``"rb"`` or ``"wb"``)."""
    file.mode = mode  # type: ignore[misc]  # read-only in typeshed's IO; open() sets it too
    return file


def _check_text_args(op: str, mode: str, encoding: object, errors: object,
                     newline: object) -> None:
    """Python's ``open`` checks of the text arguments, as InvalidArgument;
    an encoding is looked up now, not at the first read or write."""
    check_str(op, "encoding", encoding, optional=True)
    check_str(op, "errors", errors, optional=True)
    check_str(op, "newline", newline, optional=True, choices=_NEWLINES)
    if mode not in _TEXT_MODES:
        for arg, value in (("encoding", encoding), ("errors", errors), ("newline", newline)):
            if value is not None:
                raise InvalidArgument(f"{op}: binary mode {mode!r} takes no {arg} argument "
                                      "(text modes are 'r' and 'w')")
        return
    if isinstance(encoding, str) and encoding != "locale":  # "locale": as Python's open
        try:
            info = codecs.lookup(encoding)
        except (LookupError, ValueError):
            raise InvalidArgument(f"{op}: unknown encoding {encoding!r}") from None
        # TextIOWrapper refuses bytes-to-bytes codecs ("hex", "zlib") by this flag.
        if not getattr(info, "_is_text_encoding", True):
            raise InvalidArgument(f"{op}: {encoding!r} is not a text encoding")
    if isinstance(errors, str):
        try:
            codecs.lookup_error(errors)
        except LookupError:
            raise InvalidArgument(f"{op}: unknown errors handler {errors!r}") from None
