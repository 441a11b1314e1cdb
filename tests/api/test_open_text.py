"""``aioflux.open`` text modes behave as Python's ``open(..., "r"/"w")``:
``str`` in and out, UTF-8 by default whatever the locale, Python's newline
and error-handler rules, and the binary writer's all-or-nothing publishing
kept through the text layer; on the emulator (``gs://``) and on files."""

from __future__ import annotations

import csv
import gc
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

import aioflux
from aioflux import Client, InvalidArgument, NotFound, ReaderOptions, WriterOptions
from aioflux._engines.writer import UnclosedWriterWarning
from aioflux.testing import Emulator

KiB = 1024
MiB = 1024 * KiB
GCS_PART = 5 * MiB  # GCS' smallest part: a text this long is uploading before close

TEXT = "héllo wörld € 😀 ĳ\n第二行\n"


@dataclass
class Where:
    """A place to put objects: the emulator's bucket or a directory."""

    scheme: str
    tmp_path: Path
    client: Client
    bucket: str

    def url(self, name: str) -> str:
        if self.scheme == "gs":
            return f"gs://{self.bucket}/{name}"
        return f"file://{self.tmp_path}/{name}"

    def open(self, name: str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
        client = self.client if self.scheme == "gs" else None
        return aioflux.open(self.url(name), mode, client=client, **kwargs)

    def put(self, name: str, data: bytes) -> None:
        if self.scheme == "gs":
            self.client.write(self.bucket, name, data)
        else:
            (self.tmp_path / name).write_bytes(data)

    def get(self, name: str) -> bytes:
        if self.scheme == "gs":
            return self.client.read(self.bucket, name)
        return (self.tmp_path / name).read_bytes()

    def exists(self, name: str) -> bool:
        if self.scheme == "gs":
            return self.client.exists(self.bucket, name)
        return (self.tmp_path / name).exists()

    def leftovers(self) -> list[str]:
        """Uploads still open (GCS), or every file in the directory."""
        if self.scheme == "gs":
            return [u.name for u in self.client.list_multipart_uploads(self.bucket)]
        return sorted(p.name for p in self.tmp_path.rglob("*"))

    @property
    def part(self) -> int:
        return GCS_PART if self.scheme == "gs" else 64 * KiB


@pytest.fixture(params=["gs", "file"])
def where(request: pytest.FixtureRequest, tmp_path: Path, sync_client: Client,
          bucket: str) -> Iterator[Where]:
    yield Where(request.param, tmp_path, sync_client, bucket)


# -- reading -----------------------------------------------------------------------------


def test_r_reads_str_lines_and_csv(where: Where) -> None:
    where.put("x.csv", "name,city\nzoë,Zürich\n\"a,b\",\"two\nlines\"\n".encode())
    with where.open("x.csv", "r") as f:
        assert isinstance(f, io.TextIOWrapper)
        lines = list(f)
    assert lines == ["name,city\n", "zoë,Zürich\n", "\"a,b\",\"two\n", "lines\"\n"]
    assert all(type(line) is str for line in lines)
    with where.open("x.csv", "r", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["name", "city"], ["zoë", "Zürich"], ["a,b", "two\nlines"]]


@pytest.mark.parametrize("mode", ["r", "rt", "tr"])
def test_every_text_read_spelling_gives_str(where: Where, mode: str) -> None:
    where.put("t", TEXT.encode())
    with where.open("t", mode) as f:
        got = f.read()
    assert type(got) is str and got == TEXT


@pytest.mark.parametrize("mode", ["rb", "br", None])
def test_binary_reads_stay_bytes(where: Where, mode: str | None) -> None:
    where.put("t", TEXT.encode())
    with (where.open("t") if mode is None else where.open("t", mode)) as f:
        assert not isinstance(f, io.TextIOBase)
        got = f.read()
    assert type(got) is bytes and got == TEXT.encode()


def test_close_closes_the_object_reader(where: Where) -> None:
    where.put("t", b"abc\n")
    f = where.open("t", "r")
    assert f.readline() == "abc\n"
    f.close()
    assert f.closed and f.buffer.closed  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        f.read()


def test_text_tell_and_seek_come_back_to_a_line(where: Where) -> None:
    where.put("t", ("é€\n" * 5000 + "end\n").encode())
    with where.open("t", "r", reader=ReaderOptions(block_size=1000, read_ahead=2)) as f:
        for _ in range(3000):
            f.readline()
        mark = f.tell()
        rest = f.read()
        assert rest == "é€\n" * 2000 + "end\n"
        f.seek(mark)
        assert f.read() == rest
        f.seek(0)
        assert f.readline() == "é€\n"


def test_invalid_utf8_strict_raises_and_replace_replaces(where: Where) -> None:
    where.put("bad", b"ok \xff\xfe bad\n")
    with where.open("bad", "r") as f, pytest.raises(UnicodeDecodeError):
        f.read()
    with where.open("bad", "r", errors="replace") as f:
        assert f.read() == "ok \ufffd\ufffd bad\n"
    with where.open("bad", "r", errors="surrogateescape") as f:
        assert f.read().encode("utf-8", "surrogateescape") == b"ok \xff\xfe bad\n"


def test_other_encodings_read_and_write(where: Where) -> None:
    with where.open("l1", "w", encoding="latin-1") as f:
        f.write("café\n")
    assert where.get("l1") == b"caf\xe9\n"
    with where.open("u16", "w", encoding="utf-16-be") as f:
        f.write(TEXT)
    assert where.get("u16") == TEXT.encode("utf-16-be")
    with where.open("u16", "r", encoding="utf-16-be") as f:
        assert f.read() == TEXT
    # A BOM, as a file from elsewhere may start with, is read as one.
    where.put("bom", TEXT.encode("utf-16"))
    with where.open("bom", "r", encoding="utf-16") as f:
        assert f.read() == TEXT
    with where.open("l1", "r", encoding="latin-1") as f:
        assert f.read() == "café\n"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig", "UTF16", "utf-16-le"])
def test_text_written_with_a_bom_encoding_is_what_python_writes(where: Where, tmp_path: Path,
                                                                 encoding: str) -> None:
    # CPython's TextIOWrapper writes the BOM of utf-16 and utf-32 only to a
    # seekable file, and an object writer is not one: the object had no BOM
    # and read back as neither aioflux.open nor Python's open could.
    local = tmp_path / f"python-{encoding}.txt"
    with local.open("w", encoding=encoding) as f:
        f.write(TEXT)
        f.write("more")
    with where.open(f"bom-{encoding}", "w", encoding=encoding) as f:
        f.write(TEXT)
        f.write("more")
    assert where.get(f"bom-{encoding}") == local.read_bytes()
    with where.open(f"bom-{encoding}", "r", encoding=encoding) as f:
        assert f.read() == TEXT + "more"


# -- newlines ----------------------------------------------------------------------------

MIXED = b"a\nb\r\nc\rd"


@pytest.mark.parametrize(("newline", "lines"), [
    (None, ["a\n", "b\n", "c\n", "d"]),  # universal newlines, translated
    ("", ["a\n", "b\r\n", "c\r", "d"]),  # universal newlines, kept
    ("\n", ["a\n", "b\r\n", "c\rd"]),
    ("\r", ["a\nb\r", "\nc\r", "d"]),
    ("\r\n", ["a\nb\r\n", "c\rd"]),
])
def test_newline_on_read_as_python(where: Where, newline: str | None, lines: list[str]) -> None:
    where.put("nl", MIXED)
    with where.open("nl", "r", newline=newline) as f:
        assert f.readlines() == lines
    assert io.TextIOWrapper(io.BytesIO(MIXED), newline=newline).readlines() == lines


@pytest.mark.parametrize(("newline", "stored"), [
    (None, b"a" + os.linesep.encode() + b"b\r" + os.linesep.encode() + b"c\rd"),
    ("", MIXED),
    ("\n", MIXED),
    ("\r\n", b"a\r\nb\r\r\nc\rd"),
    ("\r", b"a\rb\r\rc\rd"),
])
def test_newline_on_write_as_python(where: Where, newline: str | None, stored: bytes) -> None:
    with where.open("nl", "w", newline=newline) as f:
        f.write(MIXED.decode())
    assert where.get("nl") == stored


def test_crlf_split_across_reads_is_one_newline(where: Where) -> None:
    # Lines of every length near io's 8 KiB chunk and the 1000-byte blocks,
    # so some "\r\n" fall across a chunk or block boundary.
    text = "".join("x" * n + "\r\n" for n in range(0, 20_000, 97))
    where.put("crlf", text.encode())
    with where.open("crlf", "r", reader=ReaderOptions(block_size=1000, read_ahead=3)) as f:
        got = f.read()
    assert got == text.replace("\r\n", "\n")


# -- writing -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["w", "wt", "tw"])
def test_non_ascii_text_round_trips_as_utf8(where: Where, mode: str) -> None:
    with where.open("t", mode) as f:
        assert isinstance(f, io.TextIOWrapper) and f.encoding == "utf-8"
        assert f.write(TEXT) == len(TEXT)
    assert where.get("t") == TEXT.encode("utf-8")
    with where.open("t", "r") as f:
        assert f.read() == TEXT


def test_csv_writer_round_trip(where: Where) -> None:
    rows = [["id", "text"], ["1", "zoë, \"quoted\""], ["2", "two\nlines"]]
    with where.open("o.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    assert where.get("o.csv") == (
        'id,text\r\n1,"zoë, ""quoted"""\r\n2,"two\nlines"\r\n').encode()
    with where.open("o.csv", "r", newline="") as f:
        assert list(csv.reader(f)) == rows


def test_close_publishes_and_closes_the_object_writer(where: Where) -> None:
    f = where.open("late", "w")
    f.write("not yet\n")
    assert not where.exists("late")
    f.close()
    assert f.closed and f.buffer.closed  # type: ignore[attr-defined]
    assert where.get("late") == b"not yet\n"
    with pytest.raises(ValueError):
        f.write("more")
    assert where.leftovers() == ([] if where.scheme == "gs" else ["late"])


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("parts", [0, 2])
def test_exception_in_with_body_publishes_nothing(where: Where, compression: str | None,
                                                  parts: int) -> None:
    if compression:
        pytest.importorskip("zstandard")
    payload = "é" * (parts * where.part // 2 + 7)  # 2 bytes a char: ``parts`` parts + a tail
    with pytest.raises(ZeroDivisionError):
        with where.open("broken", "w", compression=compression,
                        writer=WriterOptions(part_size=where.part)) as f:
            f.write(payload)
            f.write("buffered in the text layer only")
            1 / 0  # noqa: B018
    assert f.closed
    assert not where.exists("broken")
    assert where.leftovers() == []


def test_encode_error_in_with_body_publishes_nothing(where: Where) -> None:
    with pytest.raises(UnicodeEncodeError):
        with where.open("ascii", "w", encoding="ascii") as f:
            f.write("plain\n")
            f.write("é")
    assert not where.exists("ascii")
    with where.open("ascii", "w", encoding="ascii", errors="replace") as f:
        f.write("plain é\n")
    assert where.get("ascii") == b"plain ?\n"


def test_abort_discards_the_text(where: Where) -> None:
    f = where.open("aborted", "w", writer=WriterOptions(part_size=where.part))
    f.write("x" * (where.part + 1))
    f.abort()  # type: ignore[attr-defined]
    assert f.closed
    f.close()  # a no-op once aborted: never a publish
    assert not where.exists("aborted")
    assert where.leftovers() == []


def test_abandoned_text_writer_is_aborted_not_published(where: Where) -> None:
    f = where.open("dropped", "w", writer=WriterOptions(part_size=where.part))
    f.write("y" * (where.part + 1))  # a part on its way
    f.write("and some text not yet encoded into the writer")
    count = where.part + 1 + 45
    with pytest.warns(UnclosedWriterWarning, match=f"unclosed writer .*dropped discarded the "
                                                   f"{count:,} characters written"):
        del f
        gc.collect()
    assert not where.exists("dropped")
    assert where.leftovers() == []


def test_default_encoding_is_utf8_not_the_locales(tmp_path: Path) -> None:
    # Under an ASCII locale Python's own open("w") cannot write "é"; ours
    # writes UTF-8 all the same, and reads it back.
    script = (
        "import locale, sys, aioflux\n"
        "assert locale.getpreferredencoding(False).lower() in ('ascii', 'ansi_x3.4-1968'), "
        "locale.getpreferredencoding(False)\n"
        "url = sys.argv[1]\n"
        "with aioflux.open(url, 'w') as f:\n"
        "    f.write('\\u00e9\\u20ac\\U0001f600')\n"  # ASCII: the command line is decoded
        "with aioflux.open(url, 'r') as f:\n"
        "    assert f.read() == '\\u00e9\\u20ac\\U0001f600'\n"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": "ascii"}
    # This checkout's aioflux, whatever the venv has installed.
    env["PYTHONPATH"] = str(Path(aioflux.__file__).parents[1])
    done = subprocess.run([sys.executable, "-c", script, f"file://{tmp_path}/loc.txt"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "loc.txt").read_bytes() == "é€😀".encode()


def test_locale_encoding_writes_and_reads(where: Where) -> None:
    # open()'s docstring offers encoding="locale" for Python's default: a
    # read took it, a write raised a bare LookupError (codecs has no
    # "locale" codec) before a character was written.
    import locale

    text = "plain ascii, the locale's whatever it is\n"
    with where.open("loc.txt", "w", encoding="locale") as f:
        assert f.encoding == locale.getencoding()
        f.write(text)
    assert where.get("loc.txt") == text.encode(locale.getencoding())
    with where.open("loc.txt", "r", encoding="locale") as f:
        assert f.read() == text


# -- zstd --------------------------------------------------------------------------------


def test_zstd_text_both_ways(where: Where) -> None:
    zstandard = pytest.importorskip("zstandard")
    text = "".join(f"ligne {i}: café ☕\n" for i in range(20_000))
    with where.open("t.zst", "w", compression="zstd") as f:
        assert f.write(text) == len(text)
    stored = where.get("t.zst")
    assert len(stored) < len(text.encode()) // 4
    assert zstandard.ZstdDecompressor().decompressobj().decompress(stored) == text.encode()
    with where.open("t.zst", "r", compression="zstd") as f:
        assert f.readline() == "ligne 0: café ☕\n"
        assert f.read() == text[len("ligne 0: café ☕\n"):]
    with where.open("t.zst", "rb", compression="zstd") as f:
        assert f.read() == text.encode()


# -- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rb", "br", "wb", "w+b", "bw"])
@pytest.mark.parametrize(("arg", "value"), [("encoding", "utf-8"), ("errors", "strict"),
                                            ("newline", "")])
def test_binary_modes_refuse_text_arguments(where: Where, emulator: Emulator, mode: str,
                                            arg: str, value: str) -> None:
    where.put("present", b"data")
    before = emulator.stats["requests"]
    with pytest.raises(InvalidArgument, match=re.escape(f"binary mode '{mode}' takes no {arg}")):
        where.open("present" if mode.startswith(("r", "br")) else "new", mode, **{arg: value})
    assert emulator.stats["requests"] == before
    assert not where.exists("new")


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"encoding": "no-such-codec"}, "unknown encoding 'no-such-codec'"),
    ({"encoding": "hex"}, "'hex' is not a text encoding"),
    ({"encoding": ""}, "unknown encoding ''"),
    ({"encoding": 8}, "encoding must be a str"),
    ({"errors": "no-such-handler"}, "unknown errors handler"),
    ({"errors": b"strict"}, "errors must be a str"),
    ({"newline": "\n\r"}, "newline must be one of"),
    ({"newline": 0}, "newline must be a str"),
])
@pytest.mark.parametrize("mode", ["r", "w"])
def test_bad_text_arguments_are_refused_before_any_request(
        where: Where, emulator: Emulator, mode: str, kwargs: dict[str, Any], named: str) -> None:
    before = emulator.stats["requests"]
    # A read of a missing object: the argument is checked before the stat
    # that would raise NotFound.
    with pytest.raises(InvalidArgument, match=named):
        where.open("missing", mode, **kwargs)
    assert emulator.stats["requests"] == before
    assert not where.exists("missing")
    assert where.leftovers() == []
    with pytest.raises(NotFound):
        where.open("missing", "r", encoding="utf-8")


@pytest.mark.parametrize("mode", ["a", "at", "r+", "w+", "x", "rw", "rbt", "U", "", "R"])
def test_other_modes_are_refused(where: Where, mode: str) -> None:
    with pytest.raises(InvalidArgument, match="mode must be one of"):
        where.open("t", mode)
