"""Every ``LocalStore`` method keeps to the bucket's directory.

A name is a path below the bucket's directory, so ``..``, ``.``, empty
segments (``a//b``) and absolute names would reach files outside it or
spell one file two ways. Each method that takes a name or a prefix refuses
them alike (``aioflux/local/_paths.py``), before any filesystem call, and
nothing outside is read, listed or changed. ``fetch`` once read
``../x/secret.txt`` while ``read`` refused it, and ``list_objects`` listed
``../x/``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from aioflux import ClientConfig, InvalidURL
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore
from aioflux.local._files import TEMP_MARK

SECRET = b"outside the bucket"


@dataclass
class Space:
    """``root`` is the folder of names starting with ``prefix``; ``outside``
    a folder beside it holding ``secret.txt``."""

    store: LocalStore
    bucket: str
    prefix: str
    root: Path
    outside: Path

    def n(self, name: str) -> str:
        return self.prefix + name

    def escape(self, rel: str) -> str:
        """A name that climbs out of the bucket's directory to ``outside/rel``."""
        return "../" + str(self.outside / rel).lstrip("/")

    def files(self) -> dict[str, bytes]:
        base = self.root.parent
        return {str(p.relative_to(base)): p.read_bytes()
                for p in sorted(base.rglob("*")) if p.is_file()}


@pytest.fixture
async def space(tmp_path: Path) -> AsyncIterator[Space]:
    root, outside = tmp_path / "objects", tmp_path / "x"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "kept").write_bytes(b"inside")
    (root / "sub" / "kept").write_bytes(b"inside too")
    (outside / "secret.txt").write_bytes(SECRET)
    bucket, prefix = parse_url(str(root) + "/")
    local = Space(LocalStore(ClientConfig(max_concurrency=4)), bucket, prefix, root, outside)
    async with local.store:
        yield local


# Each: the name from the space. ``..`` and absolute ones reach (or would
# reach) files outside; ``.`` and ``//`` respell names inside.
BAD_NAMES: dict[str, Callable[[Space], str]] = {
    "dotdot": lambda s: s.n("../x/secret.txt"),
    "dotdot past the bucket": lambda s: s.escape("secret.txt"),
    "dotdot alone": lambda s: s.n(".."),
    "dot": lambda s: s.n("./kept"),
    "dot alone": lambda s: s.n("."),
    "double slash": lambda s: s.n("sub//kept"),
    "trailing double slash": lambda s: s.n("kept//"),
    "absolute": lambda s: "/" + s.n("kept"),
    "absolute system file": lambda s: "/etc/passwd",
}


async def _start_upload(store: LocalStore, bucket: str, name: str) -> object:
    return store.start_upload(bucket, name)


async def _abort(store: LocalStore, bucket: str, name: str) -> None:
    base = name.rstrip("/").rpartition("/")[2]
    await store.abort_multipart(bucket, name, f".{base}{TEMP_MARK}0123456789ab")


NAME_METHODS: dict[str, Callable[[Space, str], Awaitable[object]]] = {
    "stat": lambda s, name: s.store.stat(s.bucket, name),
    "exists": lambda s, name: s.store.exists(s.bucket, name),
    "read": lambda s, name: s.store.read(s.bucket, name),
    "read range": lambda s, name: s.store.read(s.bucket, name, start=1, end=3),
    "fetch": lambda s, name: s.store.fetch(s.bucket, name),
    "fetch into": lambda s, name: s.store.fetch(s.bucket, name, into=memoryview(bytearray(64))),
    "write": lambda s, name: s.store.write(s.bucket, name, b"new"),
    "write create-only": lambda s, name: s.store.write(s.bucket, name, b"new",
                                                       if_generation_match=0),
    "start_upload": lambda s, name: _start_upload(s.store, s.bucket, name),
    "delete": lambda s, name: s.store.delete(s.bucket, name),
    "delete missing_ok": lambda s, name: s.store.delete(s.bucket, name, missing_ok=True),
    "copy source": lambda s, name: s.store.copy(s.bucket, name, s.bucket, s.n("copied")),
    "copy destination": lambda s, name: s.store.copy(s.bucket, s.n("kept"), s.bucket, name),
    "abort_multipart": lambda s, name: _abort(s.store, s.bucket, name),
}


@pytest.mark.parametrize("bad", sorted(BAD_NAMES))
@pytest.mark.parametrize("method", sorted(NAME_METHODS))
async def test_every_method_refuses_names_that_leave_or_respell_the_path(
        space: Space, method: str, bad: str) -> None:
    before = space.files()
    name = BAD_NAMES[bad](space)
    with pytest.raises(InvalidURL, match="plain relative path") as info:
        await NAME_METHODS[method](space, name)
    assert SECRET.decode() not in str(info.value)
    assert space.files() == before  # nothing read into place, written or removed
    assert space.store.stats.requests == 0  # refused before any filesystem call


BAD_PREFIXES: dict[str, Callable[[Space], str]] = {
    "dotdot": lambda s: s.n("../x/"),
    "dotdot past the bucket": lambda s: s.escape(""),
    "dotdot then a name start": lambda s: s.n("../x/sec"),
    "dot": lambda s: s.n("./"),
    "double slash": lambda s: s.n("sub//"),
    "absolute": lambda s: "/" + s.n(""),
    "absolute system folder": lambda s: "/etc/",
    "root": lambda s: "//",
}


async def _listed(pages: AsyncIterator[object]) -> list[object]:
    return [page async for page in pages]


async def _streamed(store: LocalStore, bucket: str, prefix: str) -> list[object]:
    return [item async for item in store.stream(bucket, prefix)]


PREFIX_METHODS: dict[str, Callable[[Space, str], Awaitable[object]]] = {
    "list": lambda s, prefix: _listed(s.store.list(s.bucket, prefix)),
    "list with delimiter": lambda s, prefix: _listed(s.store.list(s.bucket, prefix,
                                                                  delimiter="/")),
    "list_objects": lambda s, prefix: _listed(s.store.list_objects(s.bucket, prefix)),
    "list_multipart_uploads": lambda s, prefix: s.store.list_multipart_uploads(s.bucket, prefix),
    "stream": lambda s, prefix: _streamed(s.store, s.bucket, prefix),
}


@pytest.mark.parametrize("bad", sorted(BAD_PREFIXES))
@pytest.mark.parametrize("method", sorted(PREFIX_METHODS))
async def test_every_listing_refuses_prefixes_that_leave_or_respell_the_path(
        space: Space, method: str, bad: str) -> None:
    with pytest.raises(InvalidURL, match="plain relative path"):
        await PREFIX_METHODS[method](space, BAD_PREFIXES[bad](space))
    assert space.store.stats.requests == 0


async def test_a_prefix_ending_in_dots_matches_names_inside_only(space: Space) -> None:
    # Its last segment is a name's beginning, not a directory: "..notes"
    # and ".hidden" are names, and nothing beside the folder is listed.
    (space.root / "..notes").write_bytes(b"n")
    (space.root / ".hidden").write_bytes(b"h")
    names = [o.name async for o in space.store.list_objects(space.bucket, space.n(".."))]
    assert names == [space.n("..notes")]
    names = [o.name async for o in space.store.list_objects(space.bucket, space.n("."))]
    assert names == [space.n("..notes"), space.n(".hidden")]


@pytest.mark.parametrize("offset", ["../", "/etc", "a//b", "./", ""])
async def test_offsets_are_bounds_on_names_never_paths(space: Space, offset: str) -> None:
    # Offsets are only compared with names (the parallel listers cut ranges
    # at midpoints such as "a//" that are no names): any string bounds the
    # listing of the bucket's own files and reaches nothing outside.
    inside = [space.n("kept"), space.n("sub/kept")]
    for start, end in ((space.prefix + offset, None), (None, space.prefix + offset),
                       (offset, None)):
        names = [o.name async for o in space.store.list_objects(
            space.bucket, space.prefix, start_offset=start, end_offset=end)]
        assert names == [n for n in inside
                         if (start is None or n >= start) and (end is None or n < end)]


async def test_a_url_spelling_a_refused_name_is_a_path_resolved_as_a_plain_one(
        space: Space) -> None:
    # A URL is a path, the store's name an object's: the file URL resolves
    # ".", ".." and "//" by name as the same plain path does (it was refused
    # where the path worked), and what it gives the store is a plain name.
    for bad in BAD_NAMES.values():
        path = f"/{space.bucket}/{bad(space)}"
        parsed = parse_url("file://" + path)
        assert parsed == parse_url(path)
        assert str(parsed) == "file://" + os.path.abspath(path) + ("/" if path.endswith("/")
                                                                  else "")
        await space.store.exists(parsed.bucket, parsed.name)  # no InvalidURL: a plain name
