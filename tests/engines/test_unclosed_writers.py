"""A writer dropped unclosed publishes nothing (all or nothing), but not in
silence: Python's own files publish in that case, so ours say which URL lost
how much, with an UnclosedWriterWarning (a UserWarning: Python's default
filters show it, where they hide the ResourceWarning of an unclosed file),
reported at the line of the caller's code that opened the writer. A writer
with nothing to lose says nothing, and none leaves an upload or a temporary
file behind, even when the script ends with it open."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

import aioflux
from aioflux import AsyncClient, Client, ClientConfig, NotFound, S3Store, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux._engines.writer import UnclosedWriterWarning
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket

KiB = 1024
GCS_PART = 5 * 1024 * KiB


@dataclass
class Place:
    """The emulator's bucket or a directory."""

    scheme: str
    tmp_path: Path
    client: Client
    bucket: str

    def url(self, name: str) -> str:
        if self.scheme == "gs":
            return f"gs://{self.bucket}/{name}"
        return f"file://{self.tmp_path}/{name}"

    def open(self, name: str, mode: str = "wb", **kwargs: Any) -> IO[Any]:
        client = self.client if self.scheme == "gs" else None
        return aioflux.open(self.url(name), mode, client=client,
                            writer=WriterOptions(part_size=self.part), **kwargs)

    def exists(self, name: str) -> bool:
        if self.scheme == "gs":
            return self.client.exists(self.bucket, name)
        return (self.tmp_path / name).exists()

    def leftovers(self) -> list[str]:
        """Objects and uploads still open (GCS), or every file in the directory."""
        if self.scheme == "gs":
            return [o.name for o in self.client.list_objects(self.bucket)] + [
                u.name for u in self.client.list_multipart_uploads(self.bucket)]
        return sorted(p.name for p in self.tmp_path.rglob("*"))

    @property
    def part(self) -> int:
        return GCS_PART if self.scheme == "gs" else 64 * KiB


@pytest.fixture(params=["gs", "file"])
def place(request: pytest.FixtureRequest, tmp_path: Path, sync_client: Client,
          bucket: str) -> Iterator[Place]:
    yield Place(request.param, tmp_path, sync_client, bucket)


def _unclosed_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UnclosedWriterWarning)]


def _dropped(make: Any) -> list[str]:
    """The UnclosedWriterWarnings of a writer ``make()`` returns, dropped at once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()  # the result is dropped here
        gc.collect()
    return _unclosed_warnings(caught)


def _collected() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return _unclosed_warnings(caught)


def test_a_dropped_writer_says_which_url_lost_how_many_bytes(place: Place) -> None:
    f = place.open("x.bin")
    f.write(b"abc")
    with pytest.warns(UnclosedWriterWarning) as caught:
        del f
        gc.collect()
    (message,) = _unclosed_warnings(list(caught))
    assert message.startswith(f"unclosed writer {place.url('x.bin')} discarded the 3 bytes "
                              "written to it: nothing is published"), message
    assert place.leftovers() == []


def test_a_dropped_writer_with_a_part_sent_warns_and_leaves_no_upload(place: Place) -> None:
    f = place.open("big.bin")
    f.write(b"x" * (place.part + 5))  # a part on its way: an upload, or a temporary file
    f.write(memoryview(b"tail"))
    with pytest.warns(UnclosedWriterWarning,
                      match=f"{place.url('big.bin')} discarded the {place.part + 9:,} bytes"):
        del f
        gc.collect()
    assert place.leftovers() == []


async def _s3_names(store: S3Store, bucket: str) -> list[str]:
    return [o.name async for o in store.list_objects(bucket)]


def test_a_dropped_s3_writer_warns_and_aborts_its_multipart_upload(moto_s3: MotoS3) -> None:
    part = 5 * 1024 * KiB
    store = S3Store(ClientConfig(max_concurrency=8, retry=FAST_RETRY), endpoint=moto_s3.endpoint)
    try:
        bucket = unique_bucket("dropped")
        call(store.create_bucket(bucket))
        f = aioflux.open(f"s3://{bucket}/x.bin", "wb", client=store,
                         writer=WriterOptions(part_size=part))
        f.write(b"x" * (part + 1))
        concurrent.futures.wait(f._futures)  # type: ignore[attr-defined]
        assert len(call(store.list_multipart_uploads(bucket))) == 1
        with pytest.warns(UnclosedWriterWarning,
                          match=f"unclosed writer s3://{bucket}/x.bin discarded the {part + 1:,}"):
            del f
            gc.collect()
        assert call(store.list_multipart_uploads(bucket)) == []
        assert call(_s3_names(store, bucket)) == []
    finally:
        call(store.aclose())


def test_text_and_zstd_writers_count_what_the_caller_wrote_once(place: Place) -> None:
    pytest.importorskip("zstandard")

    def text() -> IO[Any]:
        f = place.open("t.txt", "w")
        f.write("héllo")  # 5 characters, 6 bytes, still in the text buffer
        return f

    def packed() -> IO[Any]:
        f = place.open("z.bin", "wb", compression="zstd")
        f.write(b"abcd" * 1000)
        return f

    def packed_text() -> IO[Any]:
        f = place.open("zt.txt", "w", compression="zstd")
        print("ünïcode", file=f)
        return f

    assert _dropped(text) == [f"unclosed writer {place.url('t.txt')} discarded the 5 "
                              "characters written to it: nothing is published (close() "
                              "publishes, as does leaving a with block normally)"]
    (message,) = _dropped(packed)
    assert f"{place.url('z.bin')} discarded the 4,000 bytes" in message
    (message,) = _dropped(packed_text)
    assert f"{place.url('zt.txt')} discarded the 8 characters" in message
    assert place.leftovers() == []


@pytest.mark.parametrize("how", ["unwritten", "closed", "aborted", "with", "raised",
                                 "failed close"])
def test_a_writer_with_nothing_to_lose_says_nothing(place: Place, how: str) -> None:
    if how == "failed close":
        # Its close raised (no such bucket, or directory): the caller heard of it.
        missing = ("gs://no-such-bucket-aioflux/x" if place.scheme == "gs"
                   else "file:///no-such-directory-aioflux/x")
        f = aioflux.open(missing, "wb", client=place.client if place.scheme == "gs" else None)
        f.write(b"abc")
        with pytest.raises(NotFound):
            f.close()
    elif how == "raised":
        with pytest.raises(ZeroDivisionError), place.open("x") as f:
            f.write(b"abc")
            1 / 0  # noqa: B018
    else:
        f = place.open("x")
        if how != "unwritten":
            f.write(b"abc")
        if how == "closed":
            f.close()
        elif how == "aborted":
            f.abort()  # type: ignore[attr-defined]
        elif how == "with":
            with f:
                pass
    del f
    assert _collected() == []
    assert place.exists("x") == (how in ("closed", "with"))


async def test_a_dropped_async_writer_warns_and_one_with_nothing_to_lose_does_not(
        client: AsyncClient, bucket: str) -> None:
    writer = AsyncObjectWriter(client, bucket, "a.bin")
    await writer.write(b"12345")  # buffered: no part went up
    with pytest.warns(UnclosedWriterWarning,
                      match=f"unclosed writer gs://{bucket}/a.bin discarded the 5 bytes"):
        del writer
        gc.collect()
    quiet = AsyncObjectWriter(client, bucket, "b.bin")
    closed = AsyncObjectWriter(client, bucket, "c.bin")
    await closed.write(b"c")
    await closed.close()
    aborted = AsyncObjectWriter(client, bucket, "d.bin")
    await aborted.write(b"d")
    await aborted.abort()
    del quiet, closed, aborted
    assert _collected() == []
    assert [o.name async for o in client.list_objects(bucket)] == ["c.bin"]
    assert await client.list_multipart_uploads(bucket) == []


_SCRIPT = """
import concurrent.futures
import sys
import aioflux
from aioflux import WriterOptions

def payload(size):  # a function: __main__'s globals are then in a cycle
    return "x" * size

url, part, zstd = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "zstd"
if zstd:  # a text writer over a zstd writer over the object writer
    f = aioflux.open(url, "w", writer=WriterOptions(part_size=part), compression="zstd")
    f.write(payload(100_000))
else:
    f = aioflux.open(url, "wb", writer=WriterOptions(part_size=part))
    f.write(payload(part + 3).encode())  # a part and a tail
    concurrent.futures.wait(f._futures)  # the part is stored: in an upload, or a temporary file
"""


def _default_filters_env(emulator: Emulator) -> dict[str, str]:
    """The environment of a user's ``python`` run: Python's default warning
    filters (no PYTHONWARNINGS, no dev mode), the emulator as GCS."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE", "PYTHONTRACEMALLOC")}
    return {**env, "STORAGE_EMULATOR_HOST": emulator.endpoint,
            "PYTHONPATH": str(Path(aioflux.__file__).parents[1])}


def _python(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # No -W: the test is what a user's plain `python` shows.
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_one_liner_that_drops_its_writer_is_told_on_stderr(place: Place,
                                                               emulator: Emulator) -> None:
    # The report: `aioflux.open(url, 'w').write('important')` printed
    # 9, exited 0 and published nothing, its ResourceWarning hidden.
    url = place.url("x.txt")
    done = _python(f"import aioflux; print(aioflux.open({url!r}, 'w').write('important'))",
                   env=_default_filters_env(emulator))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "9\n"
    assert done.stderr.startswith(
        f"<string>:1: UnclosedWriterWarning: unclosed writer {url} discarded the 9 "
        "characters written to it: nothing is published"), done.stderr
    assert not place.exists("x.txt")  # all or nothing: aborted, and said
    assert place.leftovers() == []


def test_the_warning_names_the_line_that_opened_the_writer(tmp_path: Path) -> None:
    # Not aioflux's own frames, and a second loss of the same URL is said too
    # (Python's "default" action shows a message once per line).
    script = tmp_path / "train.py"
    target = tmp_path / "out.bin"
    script.write_text("import aioflux\n"
                      "def save(n):\n"
                      f"    f = aioflux.open({str(target)!r}, 'wb')\n"
                      "    f.write(b'abc')\n"
                      "for n in range(2):\n"
                      "    save(n)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    env["PYTHONPATH"] = str(Path(aioflux.__file__).parents[1])
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    said = (f"{script}:3: UnclosedWriterWarning: unclosed writer file://{target} discarded "
            "the 3 bytes written to it")
    assert done.stderr.count(said) == 2, done.stderr
    assert f"\n  f = aioflux.open({str(target)!r}, 'wb')\n" in done.stderr  # the source line
    assert "tracemalloc" not in done.stderr  # no "Enable tracemalloc..." noise
    assert not target.exists()


def test_a_writer_abandoned_by_an_exception_publishes_nothing(place: Place,
                                                             emulator: Emulator) -> None:
    # Why an unclosed writer is not published as Python's files are: one the
    # caller's exception unwound past holds a part of the data, and its
    # finalizer cannot tell it from one a script forgot to close.
    code = ("import aioflux, sys\n"
            "def produce():\n"
            "    yield b'first half'\n"
            "    raise ValueError('the producer failed')\n"
            "f = aioflux.open(sys.argv[1], 'wb')\n"
            "try:\n"
            "    for chunk in produce():\n"
            "        f.write(chunk)\n"
            "except ValueError:\n"
            "    pass\n"
            "del f\n")
    done = _python(code, place.url("half.bin"), env=_default_filters_env(emulator))
    assert done.returncode == 0, done.stderr
    assert (f"UnclosedWriterWarning: unclosed writer {place.url('half.bin')} discarded the "
            "10 bytes") in done.stderr, done.stderr
    assert not place.exists("half.bin")
    assert place.leftovers() == []


@pytest.mark.parametrize("kind", ["binary", "zstd"])
def test_a_script_that_ends_with_a_writer_open_is_told_and_leaves_nothing(
        place: Place, emulator: Emulator, kind: str) -> None:
    # The script's writer is collected after aioflux's event loop stopped:
    # its abort could not run, and a file's temporary copy stayed behind.
    # The exit hook aborts it first, and says so under the default filters.
    if kind == "zstd":
        pytest.importorskip("zstandard")
    done = _python(_SCRIPT, place.url("end.bin"), str(place.part), kind,
                   env=_default_filters_env(emulator))
    assert done.returncode == 0, done.stderr
    lost = "100,000 characters" if kind == "zstd" else f"{place.part + 3:,} bytes"
    assert (f"UnclosedWriterWarning: unclosed writer {place.url('end.bin')} discarded the "
            f"{lost} written to it") in done.stderr, done.stderr
    assert done.stderr.count("UnclosedWriterWarning: unclosed writer") == 1, done.stderr
    assert place.leftovers() == []
