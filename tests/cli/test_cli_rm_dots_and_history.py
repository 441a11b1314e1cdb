"""Review of the CLI: rm of '.' and '..', and a failed save's multi-line
error in ``ckpt history``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aioflux import Client
from aioflux.torch import CheckpointManager


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("operand", ["d/..", "d/../", ".", "./", "d/.", "d/sub/.."])
def test_rm_refuses_dot_and_dot_dot(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                    monkeypatch: pytest.MonkeyPatch, operand: str) -> None:
    # A path is made absolute before it is a URL: "rm -r d/.." named the
    # current directory and deleted every file in it, "keep" included, where
    # POSIX and GNU rm refuse '.' and '..' and delete nothing.
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("keep", "d/x", "d/sub/y"):
        (tmp_path / name).write_bytes(b"data")
    monkeypatch.chdir(tmp_path)
    code, out, err = run("rm", "-r", operand)
    assert (code, out) == (2, ""), err
    assert "refuses to remove '.' or '..'" in err and len(err.splitlines()) == 1
    assert _files(tmp_path) == ["d/sub/y", "d/x", "keep"]
    # Nothing else was named: the other operands of the command are not deleted either.
    assert run("rm", "-r", "d/x", operand)[0] == 2
    assert (tmp_path / "d" / "x").exists()
    # A name that only starts with dots is a name.
    (tmp_path / "...").write_bytes(b"dots")
    assert run("rm", "...")[:2] == (0, "removed 1 object(s)\n")


@pytest.mark.parametrize("operand", ["d/..", "d/../", "d/.", "d/sub/.."])
def test_rm_refuses_dot_and_dot_dot_in_a_file_url(run, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  operand: str) -> None:
    # A file:// URL's ".." is resolved as a path's (it was an InvalidURL):
    # "rm -r file:///.../d/.." would then name the directory above d.
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("keep", "d/x", "d/sub/y"):
        (tmp_path / name).write_bytes(b"data")
    for url in (f"file://{tmp_path}/{operand}", f"file://localhost{tmp_path}/{operand}"):
        code, out, err = run("rm", "-r", url)
        assert (code, out) == (2, ""), err
        assert "refuses to remove '.' or '..'" in err and len(err.splitlines()) == 1
    assert _files(tmp_path) == ["d/sub/y", "d/x", "keep"]


class _Unpicklable:
    def __reduce__(self) -> tuple[object, ...]:
        raise RuntimeError("first line of the failure\nsecond line of the failure")


def test_ckpt_history_shows_a_multi_line_error_on_its_row(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str) -> None:
    # The ERROR cell is the failed save's exception text; printed raw, its
    # line break split the record over two lines of the table.
    url = f"gs://{bucket}/runs/m"
    with CheckpointManager(url, client=sync_client) as manager:
        manager.save({"w": torch.arange(4.0)}, step=1)
        with pytest.raises(RuntimeError):
            manager.save({"bad": _Unpicklable()}, step=2)
    code, out, err = run("ckpt", "history", url)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3, out  # the header and one row per save
    assert lines[2].split()[:2] == ["2", "FAILED"]
    assert lines[2].endswith("RuntimeError: first line of the failure\\nsecond line of the "
                             "failure")
    # --json keeps the text as it is.
    code, out, _ = run("ckpt", "history", "--json", url)
    assert code == 0 and "first line of the failure\\nsecond line" in out
