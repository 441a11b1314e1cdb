"""Which threads read a long read of a file (``local/_reader.py``): one,
front to back, on a local disk's filesystem, where two streams in one file
break the kernel's sequential read-ahead; several side by side on a memory
filesystem, where the copy is the work.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore, _inline, _reader
from aioflux.local._reader import FileReader

MiB = 1 << 20


def _threads_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: bool) -> set[int]:
    path = tmp_path / "big"
    body = os.urandom(24 * MiB + 99)
    bucket, name = str(path).lstrip("/").split("/", 1)
    call(LocalStore().write(bucket, name, body))
    monkeypatch.setattr(_reader, "on_disk", lambda st: disk)
    real = _reader._read_span
    threads: set[int] = set()

    def read_span(*args: Any) -> tuple[int, int]:
        threads.add(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(_reader, "_read_span", read_span)
    with FileReader(bucket, name) as reader:
        buf = bytearray(len(body))
        assert reader.readinto(buf) == len(body)
        reader.verify()
    assert buf == body
    return threads


def test_a_long_read_on_a_disk_is_read_by_the_calling_thread_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _threads_reading(tmp_path, monkeypatch, disk=True) == {threading.get_ident()}


def test_a_long_read_in_memory_is_spread_over_the_spare_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans, _ = _reader._spare_threads()
    threads = _threads_reading(tmp_path, monkeypatch, disk=False)
    assert threading.get_ident() in threads
    assert len(threads) == min(spans, 24 // 4)  # a span per thread, spans of 4 MiB at least


def test_the_filesystems_counted_as_a_local_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = {1: "ext4", 2: "xfs", 3: "tmpfs", 4: "nfs4", 5: "fuse.lustre"}
    monkeypatch.setattr(_inline, "_mounted", lambda: kinds)
    monkeypatch.setattr(_inline, "_disk_devices", {})
    st = os.stat(".")
    found = {dev: _inline.on_disk(os.stat_result((*st[:2], dev, *st[3:]))) for dev in kinds}
    assert found == {1: True, 2: True, 3: False, 4: False, 5: False}
    assert _inline.on_disk(os.stat_result((*st[:2], 6, *st[3:]))) is False  # not mounted
