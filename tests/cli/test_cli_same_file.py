"""``cp`` of a local file (or directory) onto itself under another path: a
hard link, or a symbolic link to its directory. Refused as GNU cp refuses
it; copied, each file was replaced by a new file of its own bytes (a hard
link broken) and cp reported the copies."""

from __future__ import annotations

import os
from pathlib import Path


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.bin").write_bytes(b"A")
    (data / "sub" / "b.bin").write_bytes(b"B")
    link = tmp_path / "link"
    link.symlink_to(data)
    return data, link


def _inodes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_ino for p in folder.rglob("*.bin")}


def test_cp_onto_a_hard_link_of_itself_is_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, _ = _tree(tmp_path)
    os.link(data / "a.bin", data / "hard.bin")
    code, out, err = run("cp", str(data / "a.bin"), str(data / "hard.bin"))
    assert (code, out) == (1, "")
    assert err == (f"aioflux cp: cp file://{data}/a.bin: the destination {data}/hard.bin is "
                   "the same file; nothing was copied\n")
    assert (data / "a.bin").stat().st_nlink == 2  # still one file under two names
    assert (data / "hard.bin").read_bytes() == b"A"


def test_cp_onto_itself_through_a_linked_directory_is_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, link = _tree(tmp_path)
    before = _inodes(data)
    for dst in (str(link / "a.bin"), str(link), f"{link}/"):
        code, out, err = run("cp", str(data / "a.bin"), dst)
        assert (code, out) == (1, "")
        assert err == (f"aioflux cp: cp file://{data}/a.bin: the destination {link}/a.bin is "
                       "the same file; nothing was copied\n")
    assert _inodes(data) == before


def test_cp_r_of_a_directory_onto_itself_through_a_link_is_refused(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, link = _tree(tmp_path)
    before = _inodes(data)
    for src, dst in ((str(data), str(link)), (f"{data}/", f"{link}/"), (str(link), str(data))):
        code, out, err = run("cp", "-r", src, dst)
        assert (code, out) == (1, "")
        assert err.startswith(f"aioflux cp: cp file://{src}: the destination file://{dst} is "
                              f"the same directory ({data}); nothing was copied")
    assert _inodes(data) == before
    assert sorted(_inodes(data)) == ["a.bin", "sub/b.bin"]  # nothing new beside them
