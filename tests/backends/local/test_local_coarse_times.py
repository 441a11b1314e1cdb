"""Generations on filesystems that keep file times in whole seconds.

A file's generation is its modification time. Lustre, ext2/ext3 with
128-byte inodes, FAT and some NFS servers keep it in seconds (FAT: two):
two writes of one name within a second got one generation, since the
nanosecond the store added to tell them apart was dropped by the
filesystem. A writer holding the older generation then passed its
``if_generation_match`` and overwrote the newer file (a lost update), and a
read pinned to that generation read other bytes. The store now steps the
new file's time by the filesystem's granularity until it moves.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import ClientConfig, NotFound, PreconditionFailed
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore

SECOND = 10**9


def _store_at(root: Path) -> tuple[LocalStore, str, str]:
    bucket, prefix = parse_url(f"{root}/")
    return LocalStore(ClientConfig(max_concurrency=4)), bucket, prefix


async def _check_two_writes_in_one_second(root: Path) -> None:
    store, bucket, prefix = _store_at(root)
    name = prefix + "model.pt"
    async with store:
        first = await store.write(bucket, name, b"first")
        # The file's time at a whole second, later than the clock: the next
        # write lands in the same second of a coarse filesystem's clock.
        whole = (first.generation // SECOND + 5) * SECOND
        os.utime(root / "model.pt", ns=(whole, whole))
        seen = (await store.stat(bucket, name)).generation
        assert seen == whole
        second = await store.write(bucket, name, b"second", if_generation_match=seen)
        assert second.generation > seen
        assert (await store.stat(bucket, name)).generation == second.generation
        assert (await store.stat(bucket, name)).crc32c is not None  # the record follows
        # Whoever still holds the replaced generation cannot overwrite the new file.
        with pytest.raises(PreconditionFailed):
            await store.write(bucket, name, b"stale", if_generation_match=seen)
        with pytest.raises(NotFound):
            await store.read(bucket, name, generation=seen)
        assert await store.read(bucket, name, generation=second.generation) == b"second"


async def test_a_write_in_the_same_second_gets_a_new_generation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The filesystem's granularity as a utime that keeps whole seconds only
    # (what ext2/ext3, Lustre and FAT do with a time given in nanoseconds).
    real_utime = os.utime

    def seconds_only(path: Any, times: Any = None, *, ns: tuple[int, int] | None = None,
                     **kwargs: Any) -> None:
        if ns is not None:
            ns = (ns[0] // SECOND * SECOND, ns[1] // SECOND * SECOND)
        real_utime(path, times, ns=ns, **kwargs) if ns is not None else \
            real_utime(path, times, **kwargs)

    root = tmp_path / "objects"
    root.mkdir()
    monkeypatch.setattr(os, "utime", seconds_only)
    await _check_two_writes_in_one_second(root)


@contextlib.contextmanager
def _ext2_with_second_times(tmp_path: Path) -> Iterator[Path]:
    """A loop-mounted ext2 with 128-byte inodes (file times in seconds)."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext2") is None:
        pytest.skip("mounting a filesystem image needs root and mkfs.ext2")
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext2", "-q", "-F", "-I", "128", str(image)], check=True,
                   capture_output=True)
    done = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a loop device here: {done.stderr.decode()[:80]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


async def test_a_write_in_the_same_second_on_ext2(tmp_path: Path) -> None:
    with _ext2_with_second_times(tmp_path) as mount:
        root = mount / "objects"
        root.mkdir()
        probe = root / "probe"
        probe.write_bytes(b"")
        os.utime(probe, ns=(SECOND + 1, SECOND + 1))
        assert probe.stat().st_mtime_ns == SECOND  # really whole seconds
        probe.unlink()
        await _check_two_writes_in_one_second(root)
