"""``cp -r`` and ``rm -r`` act on a listing's pages as they come, with a
bounded plan, and still check before any copy what they checked before.

They held every object of the listing before the first copy or delete: a
dataset of millions of objects took GBs, and nothing started until the last
page. Here the emulator records, in the order its requests arrive, each
listing page it serves and each object it writes or deletes; a listing page
asked for while copies or deletes of earlier pages are still to come would
mean the plan grows with the listing. Bounds are counts, never times.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux.testing import Emulator
from aioflux.testing._errors import ApiError

_PAGES = 3  # the listing's last page comes after the first two
# The emulator's listing pages are cut to _PAGE items (GCS's are 1000) where
# the client asks for more: the same three pages of 2,500 copies were ~30 s
# of a suite worker's CPU. S3's DeleteObjects takes up to 1000 names, so its
# rm -r keeps GCS's page size.
_PAGE = 100
_OBJECTS = 250
_S3_OBJECTS = 2500


class _Events:
    """What the emulator did, in order: ``("page", prefix)``, ``("put", name)``,
    ``("delete", name)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def add(self, kind: str, name: str) -> None:
        with self._lock:
            self.seen.append((kind, name))

    def before_page(self, number: int, listed: str, kind: str, prefix: str) -> int:
        """How many ``kind`` events of names under ``prefix`` came before
        the page ``number`` (1 is the first) of the listing of ``listed``."""
        pages = 0
        count = 0
        for what, name in self.seen:
            if what == "page" and name == listed:
                pages += 1
                if pages == number:
                    return count
            elif what == kind and name.startswith(prefix):
                count += 1
        raise AssertionError(f"fewer than {number} pages of {listed!r}: {self.seen[:5]}...")


def _record(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, events: _Events) -> None:
    store = emulator.store

    def wrap(method: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def recorded(bucket: str, *args: Any, **kwargs: Any) -> Any:
            if kind == "page":
                events.add("page", kwargs.get("prefix", ""))
                return method(bucket, *args, **kwargs)
            result = method(bucket, *args, **kwargs)  # recorded once it is done
            events.add(kind, args[0])
            return result

        return recorded

    monkeypatch.setattr(store, "list_page", wrap(store.list_page, "page"))
    monkeypatch.setattr(store, "put", wrap(store.put, "put"))
    monkeypatch.setattr(store, "delete", wrap(store.delete, "delete"))


def _small_pages(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing pages of at most _PAGE items, however many the client asks for."""
    list_page = emulator.store.list_page

    def cut(bucket: str, *args: Any, max_results: int = 1000, **kwargs: Any) -> Any:
        return list_page(bucket, *args, max_results=min(max_results, _PAGE), **kwargs)

    monkeypatch.setattr(emulator.store, "list_page", cut)


def _fill(emulator: Emulator, bucket: str, folder: str, count: int = _OBJECTS) -> None:
    for i in range(count):
        emulator.store.put(bucket, f"{folder}o{i:04d}", b"x")


def test_cp_r_copies_each_page_before_the_next_is_listed(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(emulator, bucket, "src/")
    _small_pages(emulator, monkeypatch)
    events = _Events()
    _record(emulator, monkeypatch, events)
    code, out, err = run("cp", "-r", "-j", "8", f"gs://{bucket}/src", f"gs://{bucket}/dst")
    assert (code, out, err) == (0, f"copied {_OBJECTS} file(s), {_OBJECTS} bytes\n", "")
    assert list(emulator.store.bucket(bucket).names) == sorted(
        [f"src/o{i:04d}" for i in range(_OBJECTS)] + [f"dst/o{i:04d}" for i in range(_OBJECTS)])
    # The listing is read only as copies make room: when the last page is
    # asked for, every copy of the pages before it but the 8 in flight is
    # done (it was none: the whole listing came first).
    done = events.before_page(_PAGES, "src/", "put", "dst/")
    assert done >= (_PAGES - 1) * _PAGE - 8, done
    assert events.before_page(2, "src/", "put", "dst/") >= _PAGE - 8


@pytest.mark.parametrize("face", ["gcs", "s3"])
def test_rm_r_deletes_each_page_before_the_next_is_listed(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
        face: str) -> None:
    count, page = (_OBJECTS, _PAGE) if face == "gcs" else (_S3_OBJECTS, 1000)
    _fill(emulator, bucket, "r/", count)
    if face == "gcs":
        _small_pages(emulator, monkeypatch)
    emulator.store.put(bucket, "r2/kept", b"k")
    events = _Events()
    _record(emulator, monkeypatch, events)
    argv = (["rm", "-r", f"gs://{bucket}/r"] if face == "gcs" else
            ["rm", "-r", f"s3://{bucket}/r", "--s3-endpoint", emulator.s3_endpoint])
    assert run(*argv) == (0, f"removed {count} object(s)\n", "")
    assert list(emulator.store.bucket(bucket).names) == ["r2/kept"]
    # GCS: 32 deletes in flight; S3: one DeleteObjects request of the last
    # 1000 names at a time, while the next page is listed.
    behind = 32 if face == "gcs" else 1000
    done = events.before_page(_PAGES, "r/", "delete", "r/")
    assert done >= (_PAGES - 1) * page - behind, done


# Copied as the listing comes, a folder copied into an empty folder of
# itself would meet its own copies further on in the listing (src/a0000 to
# src/c/a0000, which sorts after src/a2499) and copy them again, and
# again: the listing leaves the destination folder out.
@pytest.mark.parametrize("into", ["c", "c/"])
def test_cp_r_into_an_empty_folder_of_itself_copies_each_object_once(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, into: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _small_pages(emulator, monkeypatch)
    names = [f"src/a{i:04d}" for i in range(_OBJECTS)] + ["src/d/z"]
    for name in names:
        emulator.store.put(bucket, name, name.encode())
    code, out, err = run("cp", "-r", f"gs://{bucket}/src", f"gs://{bucket}/src/{into}")
    total = sum(len(n) for n in names)
    assert (code, out, err) == (0, f"copied {len(names)} file(s), {total} bytes\n", "")
    copies = {n: bytes(emulator.store.get(bucket, n).data)
              for n in emulator.store.bucket(bucket).names if n.startswith("src/c/")}
    assert copies == {"src/c/" + n[4:]: n.encode() for n in names}


# A folder made in a console ("Create folder") is a placeholder object
# "src/c/": the folder is empty, and cp -r into it copied (it was refused as
# a folder copied into itself once cp -r copied as it listed).
@pytest.mark.parametrize("face", ["gcs", "s3"])
def test_cp_r_into_a_placeholder_folder_of_itself_copies(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, face: str) -> None:
    for name in ("src/a", "src/b", "src/c/"):
        emulator.store.put(bucket, name, name.encode())
    argv = (["cp", "-r", f"gs://{bucket}/src", f"gs://{bucket}/src/c"] if face == "gcs" else
            ["cp", "-r", f"s3://{bucket}/src", f"s3://{bucket}/src/c",
             "--s3-endpoint", emulator.s3_endpoint])
    assert run(*argv) == (0, "copied 2 file(s), 10 bytes\n", "")
    assert list(emulator.store.bucket(bucket).names) == [
        "src/a", "src/b", "src/c/", "src/c/a", "src/c/b"]
    assert bytes(emulator.store.get(bucket, "src/c/a").data) == b"src/a"


# gs:// and s3:// reach one bucket here (as GCS's S3 endpoint does): two
# stores, so nothing is refused, but the destination folder, empty when the
# copy starts, is left out of the listing, which came to the copies and
# copied them again (into src/c/c/..., until a name grew past 1024 bytes).
def test_cp_r_between_two_faces_of_one_bucket_copies_each_object_once(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _small_pages(emulator, monkeypatch)
    # Long names: without the fix the copies of copies end after a few rounds.
    names = [f"src/{i:04d}" + "n" * 1000 for i in range(_PAGE + 10)]
    for name in names:
        emulator.store.put(bucket, name, b"o")
    code, out, err = run("cp", "-r", f"gs://{bucket}/src", f"s3://{bucket}/src/c",
                         "--s3-endpoint", emulator.s3_endpoint)
    assert (code, out, err) == (0, f"copied {len(names)} file(s), {len(names)} bytes\n", "")
    assert list(emulator.store.bucket(bucket).names) == sorted(
        names + ["src/c/" + name[4:] for name in names])


def test_cp_r_into_an_empty_directory_of_itself_copies_each_file_once(  # type: ignore[no-untyped-def]
        run, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(30):
        (src / f"a{i:02d}").write_bytes(b"A")
    (src / "d" / "z").write_bytes(b"Z")
    assert run("cp", "-r", str(src), str(src / "c"))[:2] == (0, "copied 31 file(s), 31 bytes\n")
    assert sorted(p.relative_to(src / "c").as_posix() for p in (src / "c").rglob("*")
                  if p.is_file()) == sorted([f"a{i:02d}" for i in range(30)] + ["d/z"])


# Through a symbolic link the two paths do not say that one directory is
# inside the other: the copies landed in src/c/, which the listing, walking
# the tree as its pages are taken, came to after the first page's copies
# were made, and copied again into src/c/c/. More than a page of files,
# so that the listing reaches c/ only after copies were made there.
@pytest.mark.parametrize(("src", "dst"), [("src", "link/c"), ("link", "src/c"),
                                          ("link", "link/c")])
def test_cp_r_into_its_own_directory_through_a_link_copies_each_file_once(  # type: ignore[no-untyped-def]
        run, tmp_path: Path, src: str, dst: str) -> None:
    real = tmp_path / "src"
    (real / "c").mkdir(parents=True)
    names = [f"a{i:04d}" for i in range(1100)]
    for name in names:
        (real / name).write_bytes(b"A")
    (tmp_path / "link").symlink_to(real)
    code, out, _ = run("cp", "-r", str(tmp_path / src), str(tmp_path / dst))
    assert (code, out) == (0, f"copied {len(names)} file(s), {len(names)} bytes\n")
    assert sorted(p.relative_to(real / "c").as_posix() for p in (real / "c").rglob("*")) \
        == names
    # And where the copies would land on sources, it is refused before any copy.
    (real / "c" / "c").mkdir()
    (real / "c" / "c" / "x").write_bytes(b"X")
    code, out, err = run("cp", "-r", str(tmp_path / src), str(tmp_path / dst))
    assert (code, out) == (1, ""), err
    assert "(a folder copied into itself)" in err and "nothing was copied" in err, err
    assert sum(1 for p in real.rglob("*") if p.is_file()) == 2 * len(names) + 1


# Whether a copy lands on a source is decided from the URLs and one
# object, before any copy: where the copies would land inside the source,
# any object there is refused (it was allowed unless it was another
# object's destination, which only the whole listing could tell).
@pytest.mark.parametrize(("objects", "src", "dst", "line"), [
    # Into a folder of itself that holds an object of its own.
    (["t/x", "t/b/y"], "t", "t/b",
     "cp gs://{b}/t/b/y: its destination gs://{b}/t/b/b/y is inside the folder copied (a "
     "folder copied into itself), where cp would list it and copy it again; nothing was copied"),
    # Onto a folder holding it: t/b/b/z would land on t/b/z, in the source.
    (["t/b/b/z", "t/b/q"], "t/b", "t",
     "cp gs://{b}/t/b/b/z: its destination gs://{b}/t/b/z is inside the folder copied (a "
     "folder copied into itself), where cp would list it and copy it again; nothing was copied"),
    (["t/b/b/z", "t/b/z"], "t/b", "t",
     "cp gs://{b}/t/b/b/z: its destination gs://{b}/t/b/z is also a source of this copy (a "
     "folder copied into itself), and could be overwritten before it is read; nothing was "
     "copied"),
])
def test_cp_r_of_a_folder_into_itself_is_refused_from_the_urls(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
        objects: list[str], src: str, dst: str, line: str) -> None:
    for name in objects:
        emulator.store.put(bucket, name, b"o")
    events = _Events()
    _record(emulator, monkeypatch, events)
    code, out, err = run("cp", "-r", f"gs://{bucket}/{src}", f"gs://{bucket}/{dst}")
    assert (code, out, err) == (1, "", f"aioflux cp: {line.format(b=bucket)}\n")
    assert list(emulator.store.bucket(bucket).names) == sorted(objects)
    # Decided without listing the source folder.
    assert ("page", f"{src}/") not in events.seen


def test_cp_r_refuses_a_special_destination_alone(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path) -> None:
    # Met as the listing comes, a destination that is a link (or a FIFO) is
    # refused for that object alone: nothing written through it, the rest
    # copied, exit 1 (it refused everything, which needed the whole listing).
    for name in ("d/a", "d/b", "d/c"):
        emulator.store.put(bucket, name, name.encode())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = tmp_path / "target"
    target.write_bytes(b"kept")
    (out_dir / "b").symlink_to(target)
    os.mkfifo(out_dir / "c")
    code, out, err = run("cp", "-r", f"gs://{bucket}/d", str(out_dir))
    assert (code, out) == (1, "copied 1 file(s), 3 bytes\n")
    lines = err.splitlines()
    assert len(lines) == 2 and "symbolic link" in lines[0] and "not a regular file" in lines[1]
    assert all(line.startswith(f"aioflux cp: cp gs://{bucket}/d/") and
               line.endswith("; not copied") for line in lines), err
    assert (out_dir / "a").read_bytes() == b"d/a"
    assert (out_dir / "b").is_symlink() and target.read_bytes() == b"kept"
    assert (out_dir / "c").is_fifo()


def test_rm_r_of_several_urls_fails_before_any_delete_if_one_matches_nothing(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str) -> None:
    # Deleting as it lists, rm learns of a URL matching nothing only when
    # it comes to it: every URL after the first is matched before any delete.
    _fill(emulator, bucket, "r/", 5)
    for missing in ("nothing", "r/o0001x"):
        code, out, err = run("rm", "-r", f"gs://{bucket}/r", f"gs://{bucket}/{missing}")
        assert (code, out) == (1, "")
        assert err.startswith(f"aioflux rm: rm gs://{bucket}/{missing}: nothing matches"), err
    assert len(emulator.store.bucket(bucket).names) == 5
    # A URL inside another's folder is matched too, then deleted once.
    assert run("rm", "-r", f"gs://{bucket}/r", f"gs://{bucket}/r/o0001") == (
        0, "removed 5 object(s)\n", "")


def _refuse(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, method: str,
            name: str) -> None:
    """The emulator's ``method`` refuses ``name`` (403), as a bucket whose
    policy denies part of a folder does."""
    real = getattr(emulator.store, method)

    def refusing(bucket: str, key: str, *args: Any, **kwargs: Any) -> Any:
        if key == name:
            raise ApiError(403, "forbidden", f"{method} of {key} is not allowed")
        return real(bucket, key, *args, **kwargs)

    monkeypatch.setattr(emulator.store, method, refusing)


def _before_stopping(err: str, what: str) -> int:
    found = re.search(rf"{what} (\d+) (?:object|file)\(s\).* before stopping", err)
    assert found is not None, err
    return int(found.group(1))


def test_rm_r_stopped_partway_says_how_much_it_removed(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deleting as it lists, rm can stop with thousands already gone; it
    # used to print only the error, as if nothing had been removed.
    _fill(emulator, bucket, "r/")
    _small_pages(emulator, monkeypatch)
    _refuse(emulator, monkeypatch, "delete", "r/o0200")
    code, out, err = run("rm", "-r", f"gs://{bucket}/r")
    assert code != 0 and out == "" and "r/o0200" in err
    removed = _OBJECTS - len(list(emulator.store.bucket(bucket).names))
    said = _before_stopping(err, "removed")
    # Deletes cancelled in flight may have landed unseen: at most what went.
    assert _PAGE <= said <= removed, (said, removed)


def test_cp_r_stopped_partway_says_how_much_it_copied(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(emulator, bucket, "src/")
    _small_pages(emulator, monkeypatch)
    _refuse(emulator, monkeypatch, "put", "dst/o0200")
    code, out, err = run("cp", "-r", f"gs://{bucket}/src", f"gs://{bucket}/dst")
    assert code != 0 and out == "" and "dst/o0200" in err
    copied = sum(n.startswith("dst/") for n in emulator.store.bucket(bucket).names)
    said = _before_stopping(err, "copied")
    assert _PAGE <= said <= copied, (said, copied)
