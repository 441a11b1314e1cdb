"""What ``list_files`` / ``load_files`` (sync and async) take as their URLs.

``list_files`` takes one URL or several; ``load_files`` an iterable of
URLs. Anything else is refused at the call as a typed error naming what it
got: ``list_files(5)`` was a bare ``TypeError``, a ``bytes`` path was
"got int" (its items), and ``load_files("gs://b/o")``, one URL, was read as
the URLs ``g``, ``s``, ``:``... ("'/' names the filesystem root" for a path).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aioflux
from aioflux import InvalidArgument, InvalidURL
from aioflux._api.iterables import alist_files, aload_files

NOT_URLS: dict[str, tuple[object, str]] = {
    "int": (5, "got int"),
    "None": (None, "got NoneType"),
    "bytes path": (b"/tmp/x/", "got bytes"),
}


@pytest.mark.parametrize("label", sorted(NOT_URLS))
def test_list_files_refuses_what_is_no_url(label: str) -> None:
    value, message = NOT_URLS[label]
    with pytest.raises(InvalidURL, match=message):
        aioflux.list_files(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("label", sorted(NOT_URLS))
async def test_alist_files_refuses_what_is_no_url(label: str) -> None:
    value, message = NOT_URLS[label]
    with pytest.raises(InvalidURL, match=message):
        async for _ in alist_files(value):  # type: ignore[arg-type]
            pass


def _one_url(tmp_path: Path) -> list[tuple[object, str]]:
    url = f"{tmp_path}/a.bin"
    return [(url, "got the one URL"), (f"file://{url}", "got the one URL"),
            (Path(url), "got the one URL"), (url.encode(), "got the one URL"),
            (None, "got NoneType"), (5, "got int")]


def test_load_files_refuses_one_url_or_no_iterable(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    calls: list[Callable[[Any], object]] = [aioflux.load_files,
                                            lambda urls: aioflux.load_files(urls, ordered=False)]
    for call in calls:
        for urls, message in _one_url(tmp_path):
            with pytest.raises(InvalidArgument, match=f"load_files: urls .*{message}"):
                call(urls)
    # What it takes, a list of that one URL, reads it.
    assert list(aioflux.load_files([f"{tmp_path}/a.bin"])) == [(f"{tmp_path}/a.bin", b"a")]


async def test_aload_files_refuses_one_url_or_no_iterable(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    for urls, message in _one_url(tmp_path):
        with pytest.raises(InvalidArgument, match=f"aload_files: urls .*{message}"):
            async for _ in aload_files(urls):  # type: ignore[arg-type]
                pass
    got = [pair async for pair in aload_files([f"{tmp_path}/a.bin"])]
    assert got == [(f"{tmp_path}/a.bin", b"a")]


@pytest.mark.parametrize("kind", ["list", "generator"])
def test_load_files_in_order_reads_on_behind_a_late_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    # The first file's read is held until the 39 after it were read (4 at a
    # time); then all 40 come out in order. In input order, the 3 after it
    # filled the window and nothing more started (a hang here). A list is
    # iterated on the loop, a generator in this thread.
    import asyncio
    import threading

    from aioflux.local._store import LocalStore

    files = [tmp_path / f"f{i:02d}" for i in range(40)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * 1000)
    others, read_after_first, waited = threading.Event(), [0], []
    real = LocalStore.read

    async def held(self: LocalStore, bucket: str, name: str, **kwargs: Any) -> bytes:
        if name.endswith("f00"):
            waited.append(await asyncio.to_thread(others.wait, 30))
        data: bytes = await real(self, bucket, name, **kwargs)
        if not name.endswith("f00"):
            read_after_first[0] += 1
            if read_after_first[0] == 39:
                others.set()
        return data

    monkeypatch.setattr(LocalStore, "read", held)
    urls = [f"file://{f}" for f in files]
    got = list(aioflux.load_files(urls if kind == "list" else iter(urls), concurrency=4))
    assert waited == [True]  # the 39 were read while the first was held
    assert got == [(f"file://{f}", bytes([i]) * 1000) for i, f in enumerate(files)]
