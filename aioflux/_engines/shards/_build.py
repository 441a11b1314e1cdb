"""Finding a dataset's shards (brace patterns) and the pieces of indexing
them: a shard's sidecar ``<shard>.idx`` (used when it matches the shard:
see :func:`sidecar_matches`) and one streamed pass over the shard, checked
against its crc32c as it goes. Which of them counts a shard, and when, is
:mod:`._counts`'s (the manifest, the local cache, a sidecar, a pass).
"""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Iterator

from ..._core.errors import InvalidArgument, NotFound
from ..._core.records.types import ObjectInfo
from ..._core.settings.options import ReaderOptions
from ..._core.storage.protocol import ObjectStore
from ..reader import ObjectReader
from ._formats import ShardFormat, compression_of, decompressed
from ._index import INDEX_SUFFIX, ShardIndex, decode_index

__all__ = ["INDEX_THREADS", "MAX_BRACE_NAMES", "expand_braces", "is_sidecar", "sidecar_matches",
           "stream_index"]

# Shards indexed at once by streaming, each with a reader holding at most
# 4 blocks of 8 MiB ahead: one shard's parsing overlaps the others' reads,
# in at most 128 MiB. 8 MiB blocks, not 4: each block is a request and a
# buffer made and checked, so a pass over a shard costs ~20% less CPU in
# 8 MiB blocks than in 4 MiB ones.
INDEX_THREADS = 4
_INDEX_READER = ReaderOptions(block_size=8 * 1024 * 1024, read_ahead=4)

# webdataset expands its URL patterns with braceexpand: these are its rules
# (ranges padded when either end is written with a leading zero, a step,
# letters, nesting, a backslash escaping the next character), so a pattern
# names the same shards here as there.
_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_ALPHABET = string.ascii_uppercase + string.ascii_lowercase
_ESCAPED = re.compile(r"\\(.)")
#: The most names one pattern may expand to: a typo (``{000..999999999}``
#: for ``{000..999}``) would build a list of a billion names and take every
#: GiB of the machine before a request went out.
MAX_BRACE_NAMES = 2_000_000


def expand_braces(pattern: str) -> list[str]:
    """Expand brace patterns as webdataset's ``braceexpand`` does.

    ``{000..099}`` (padded when either end starts with ``0``), ``{0..99..10}``,
    ``{a..f}``, ``{a,b}`` lists, nested; ``{x}`` (no range, no comma) stays
    as written; ``\\{`` is a literal brace. A name without braces, or with
    unbalanced ones (braceexpand refuses those), is one name, as written.

    Args:
        pattern: e.g. ``gs://b/train-{000000..000099}.tar``.

    Returns:
        The names, in order.

    Raises:
        InvalidArgument: the pattern names more than :data:`MAX_BRACE_NAMES`
            (counted before any is made).
    """
    if "{" not in pattern or _depths(pattern)[-1] != 0:
        return [pattern]
    count = _count(pattern)
    if count > MAX_BRACE_NAMES:
        raise InvalidArgument(f"{pattern}: the braces name {count:,} shards, more than "
                              f"{MAX_BRACE_NAMES:,} (a range's digits mistyped?)")
    return [_ESCAPED.sub(r"\1", name) for name in _expand(pattern)]


def _depths(text: str) -> list[int]:
    """The brace depth after each character (escaped ones count as none),
    then the final depth; -1 once a ``}`` closes nothing."""
    depth, out, pos = 0, [], 0
    while pos < len(text):
        if text[pos] == "\\":
            out += [depth] * len(text[pos:pos + 2])
            pos += 2
            continue
        if depth >= 0:
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
        out.append(depth)
        pos += 1
    return [*out, depth]


def _expand(pattern: str) -> list[str]:
    """The names of a balanced pattern, escapes kept."""
    parts: list[list[str]] = []
    for piece in _parts(pattern):
        if piece.startswith("{"):
            body = piece[1:-1]
            found = _expression(body)
            parts.append(found if found is not None
                         else ["{" + name + "}" for name in _expand(body)])
        else:
            parts.append([piece])
    return ["".join(names) for names in itertools.product(*parts)]


def _parts(pattern: str) -> list[str]:
    """A balanced pattern's pieces at depth 0: literal text and ``{...}``
    groups (with their braces; only a group starts with one), escapes kept."""
    pieces: list[str] = []
    depth = start = pos = 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            if depth == 0 and pos > start:
                pieces.append(pattern[start:pos])
                start = pos
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                pieces.append(pattern[start:pos + 1])
                start = pos + 1
        pos += 1
    if start < len(pattern):
        pieces.append(pattern[start:])
    return pieces


def _count(pattern: str) -> int:
    """How many names a balanced pattern expands to, none of them made."""
    total = 1
    for piece in _parts(pattern):
        if piece.startswith("{"):
            total *= _count_expression(piece[1:-1])
    return total


def _count_expression(body: str) -> int:
    """How many names a group's body stands for (1 for one kept as written)."""
    found = _INT_RANGE.match(body)
    if found is not None:
        lo, hi, step = found.groups()
        a, b, by = int(lo), int(hi), int(step or 0) or 1
        return len(range(a, b + 1, by) if a < b else range(a, b - 1, -by))
    if _CHAR_RANGE.match(body) is not None:
        return len(_expression(body) or ())
    cuts = _list_cuts(body)
    if not cuts:
        return _count(body)  # kept as written, its inside expanded
    bounds = [-1, *cuts, len(body)]
    return sum(_count(body[a + 1:b]) for a, b in itertools.pairwise(bounds))


def _list_cuts(body: str) -> list[int]:
    """Where a list's body splits: its commas outside nested braces."""
    depths = _depths(body)
    return [i for i, char in enumerate(body)
            if char == "," and depths[i] == 0 and (i == 0 or not _escaped(body, i))]


def _expression(body: str) -> list[str] | None:
    """A range's or a list's names, or None for neither."""
    found = _INT_RANGE.match(body)
    if found is not None:
        lo, hi, step = found.groups()
        padded = any(end.startswith(("0", "-0")) for end in (lo, hi) if end not in ("0", "-0"))
        width = max(len(lo), len(hi)) if padded else 0
        a, b, by = int(lo), int(hi), int(step or 0) or 1
        numbers = range(a, b + 1, by) if a < b else range(a, b - 1, -by)
        return [f"{n:0{width}d}" for n in numbers]
    found = _CHAR_RANGE.match(body)
    if found is not None:
        lo, hi, step = found.groups()
        a, b, by = _ALPHABET.index(lo), _ALPHABET.index(hi), int(step or 0) or 1
        if a < b:
            return list(_ALPHABET[a:b + 1:by])
        return list(_ALPHABET[a:(b or -len(_ALPHABET)) - 1:-by])
    cuts = _list_cuts(body)
    if not cuts:
        return None
    bounds = [-1, *cuts, len(body)]
    return [name for a, b in itertools.pairwise(bounds) for name in _expand(body[a + 1:b])]


def _escaped(text: str, pos: int) -> bool:
    """Whether the character at ``pos`` follows an escaping backslash."""
    backslashes = len(text[:pos]) - len(text[:pos].rstrip("\\"))
    return backslashes % 2 == 1


def is_sidecar(name: str) -> bool:
    """Whether an object name is a shard's index sidecar."""
    return name.endswith(INDEX_SUFFIX)


def _chunks(reader: ObjectReader, size: int) -> Iterator[bytes]:
    while True:
        chunk = reader.read(size)
        if not chunk:
            return
        yield chunk


def stream_index(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat,
                 options: ReaderOptions | None = None) -> ShardIndex:
    """Index one shard by streaming it once (ranged reads ahead, crc32c checked).

    Args:
        store: the shard's store.
        info: the shard (from a listing or stat).
        fmt: its format.
        options: the reader's block size and read-ahead.

    Returns:
        The index.

    Raises:
        ShardFormatError: the shard is not its format (naming the byte).
        ChecksumMismatch: the bytes read are not the object's.
        StorageError: a read failed.
    """
    options = options or _INDEX_READER
    compression = compression_of(info.name)
    # A listing without checksums (S3's): a stat beside the first reads
    # gives the crc32c the stream is checked against.
    with ObjectReader(store, info.bucket, info.name, options=options, info=info,
                      stat_beside=info.crc32c is None) as reader:
        data = decompressed(_chunks(reader, options.block_size), compression, info.url)
        offsets, lengths, crcs, data_size = fmt.index(data, info.url)
        # The format may stop at its end-of-data marker: read the rest, so the
        # object's crc32c (checked on the last block) covers every byte.
        for _ in _chunks(reader, options.block_size):
            pass
        # The version read: the stat beside finds a newer one than listed
        # where the shard was replaced meanwhile, and reads that one.
        read = reader.info
    return ShardIndex(format=fmt.name, compression=compression, size=read.size,
                      crc32c=read.crc32c, version=read.generation or None,
                      data_size=data_size, offsets=offsets, lengths=lengths, crcs=crcs,
                      checked=True)


async def sidecar_matches(store: ObjectStore, info: ObjectInfo, index: ShardIndex) -> bool:
    """Whether a sidecar's ``index`` is of the shard ``info`` names, as it is now.

    Same size, and the same crc32c where the shard's and the index's are
    both known (a copy of the pair keeps it, and changes the version), else
    the version indexed. A listing that leaves the crc32c out (S3's) is
    completed by the shard's metadata where the versions differ: a copy
    that changed the ETag keeps its sidecar.

    Args:
        store: the shard's store.
        info: the shard (from a listing or stat).
        index: its sidecar's index.

    Returns:
        True if the index's boundaries are the shard's.

    Raises:
        StorageError: the stat failed (other than NotFound).
    """
    version = info.generation or None
    if index.matches(info.size, info.crc32c, version):
        return True
    if info.crc32c is not None or index.crc32c is None or index.size != info.size:
        return False
    try:
        now = await store.stat(info.bucket, info.name)
    except NotFound:
        return False
    # Another version than listed is not the one reads would be pinned to.
    return (now.generation or None) == version and now.crc32c is not None and \
        index.matches(now.size, now.crc32c, version)


async def _sidecar(store: ObjectStore, info: ObjectInfo, fmt: ShardFormat) -> ShardIndex | None:
    name = info.name + INDEX_SUFFIX
    try:
        data = await store.read(info.bucket, name)
    except NotFound:
        return None
    index = decode_index(data, f"{info.url}{INDEX_SUFFIX}")
    if index.format != fmt.name or not await sidecar_matches(store, info, index):
        return None  # a stale sidecar: the shard was rewritten without it
    index.version = info.generation or None
    return index
