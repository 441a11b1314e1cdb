"""Names holding control characters (a line break in a file name or an S3
key, a tab) in what the CLI prints: one line per row of a listing, one
line per failure, and a quoted name that a shell reads back exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from aioflux import Client
from aioflux.cli._text import one_line, shell_quoted


@pytest.fixture
def named(tmp_path: Path) -> Path:
    folder = tmp_path / "names"
    folder.mkdir()
    for name in ("new\nline.txt", "plain.txt", "sp ace.txt", "tab\there.txt"):
        (folder / name).write_bytes(b"x")
    return folder


def test_ls_prints_one_line_per_file_whatever_its_name_holds(run, named: Path) -> None:  # type: ignore[no-untyped-def]
    # Printed raw, "new\nline.txt" was two lines, ".../new" and "line.txt":
    # a script reading ls a line at a time took them for two files.
    code, out, err = run("ls", str(named))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"'file://{named}/new'$'\\n''line.txt'",
                                f"file://{named}/plain.txt",
                                f"file://{named}/sp ace.txt",
                                f"'file://{named}/tab'$'\\t''here.txt'"]
    code, out, _ = run("ls", "-l", str(named))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert lines[0].endswith(f"  'file://{named}/new'$'\\n''line.txt'")
    # --json has every name as it is.
    code, out, _ = run("ls", "--json", str(named))
    assert [row["url"] for row in json.loads(out)] == [
        f"file://{named}/{name}"
        for name in ("new\nline.txt", "plain.txt", "sp ace.txt", "tab\there.txt")]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_quoted_name_reads_back_in_bash_as_the_name() -> None:
    for text in ("file:///d/new\nline", "s3://b/it's\x01x\x85", "x\ty\r", "a\x7f"):
        quoted = shell_quoted(text)
        assert "\n" not in quoted
        done = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True,
                              check=True, timeout=30)
        assert done.stdout == text.encode()
    assert shell_quoted("gs://b/sp ace/\u00fc") == "gs://b/sp ace/\u00fc"  # nothing to quote
    assert one_line("cp s3://b/a\nb: failed\r") == "cp s3://b/a\\nb: failed\\r"


def test_a_file_cp_r_refuses_is_one_line_on_stderr(run, named: Path, bucket: str,  # type: ignore[no-untyped-def]
                                                   sync_client: Client) -> None:
    # GCS names hold no line break: that file is refused alone, in one line
    # (the refusal named its URL raw, and went on on a second line).
    code, out, err = run("cp", "-r", str(named), f"gs://{bucket}/up")
    assert (code, out) == (1, "copied 3 file(s), 3 bytes\n")
    assert err.count("\n") == 1
    assert err.startswith(f"aioflux cp: destination of file://{named}/new\\nline.txt: ")
    assert err.endswith("; not copied\n")
    assert sorted(o.name for o in sync_client.list_objects(bucket, "up/")) == [
        "up/plain.txt", "up/sp ace.txt", "up/tab\there.txt"]

