"""``rm``, ``cat`` and ``stat`` of a folder named without ``/``: the folder
is named as one, as GNU rm says "Is a directory", on a store and on files.
The store's 404 ("No such object") and the local store's "not a file" hid
that the name was right and only ``-r`` was missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aioflux import Client


@pytest.fixture(params=["gs", "path", "file"])
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(URL of a folder holding 'x', URL of the object 'top' beside it)``
    on the emulator, as a local path and as a file:// URL."""
    if request.param == "gs":
        sync_client: Client = request.getfixturevalue("sync_client")
        bucket: str = request.getfixturevalue("bucket")
        sync_client.write(bucket, "folder/x", b"x")
        sync_client.write(bucket, "top", b"t")
        return f"gs://{bucket}/folder", f"gs://{bucket}/top"
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "x").write_bytes(b"x")
    (tmp_path / "top").write_bytes(b"t")
    base = str(tmp_path) if request.param == "path" else f"file://{tmp_path}"
    return f"{base}/folder", f"{base}/top"


def _shown(url: str) -> str:
    return url if "://" in url else f"file://{url}"


def _still_there(url: str, run) -> bool:  # type: ignore[no-untyped-def]
    return run("cat", f"{url}/x")[:2] == (0, "x")


def test_rm_of_a_folder_without_r_says_so_and_deletes_the_rest(  # type: ignore[no-untyped-def]
        run, folder: tuple[str, str]) -> None:
    url, top = folder
    code, out, err = run("rm", top, url)
    assert code == 1
    assert err == (f"aioflux rm: rm {_shown(url)}: it is a folder, not an object: use rm -r to "
                   "delete it and everything under it\n")
    assert out == "removed 1 object(s)\n"  # the object beside it, as GNU rm goes on
    assert run("stat", top)[0] == 1
    assert _still_there(url, run)


@pytest.mark.parametrize("command", ["cat", "stat"])
def test_cat_and_stat_of_a_folder_say_so(  # type: ignore[no-untyped-def]
        run, folder: tuple[str, str], command: str) -> None:
    url, _ = folder
    code, out, err = run(command, url)
    assert (code, out) == (1, "")
    assert err == (f"aioflux {command}: {command} {_shown(url)}: it is a folder, not an object: "
                   f"{command} takes one object (aioflux ls {_shown(url)}/ lists the folder)\n")


def test_an_empty_local_directory_is_a_folder_too(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty").mkdir()
    code, _, err = run("rm", str(tmp_path / "empty"))
    assert code == 1 and "it is a folder, not an object: use rm -r" in err
    assert (tmp_path / "empty").is_dir()


@pytest.mark.parametrize("command", ["rm", "cat", "stat"])
def test_a_missing_name_is_still_missing(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str, command: str) -> None:
    # Nothing under "gone/" either (a prefix "gone" alone is no folder: "gone2").
    sync_client.write(bucket, "gone2", b"g")
    code, _, err = run(command, f"gs://{bucket}/gone")
    assert code == 1 and "No such object" in err and "folder" not in err
