"""A DCP save to files commits once: data files and the items' crc32c are
renamed into place, the metadata last, and the checkpoint's directory is
fsynced once, after the metadata's rename (it makes every name durable).
A re-save removes the old metadata before any new file takes its name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from aioflux.local import _writes
from aioflux.torch.dcp import DcpReader, DcpWriter


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record renames, unlinks (by file name) and directory fsyncs (by path)."""
    events: list[tuple[str, str]] = []
    replace, unlink, sync = os.replace, os.unlink, _writes._fsync_directory

    def renamed(src: str, dst: str) -> None:
        replace(src, dst)
        events.append(("rename", os.path.basename(dst)))

    def unlinked(path: str) -> None:
        unlink(path)
        events.append(("unlink", os.path.basename(path)))

    def synced(directory: str) -> None:
        sync(directory)
        events.append(("sync", directory))

    monkeypatch.setattr(os, "replace", renamed)
    monkeypatch.setattr(os, "unlink", unlinked)
    monkeypatch.setattr(_writes, "_fsync_directory", synced)
    return events


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_file_save_syncs_its_directory_once_after_the_metadata(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "ckpt")
    os.mkdir(root)
    events = _spy(monkeypatch)
    first = {"a": torch.randn(1000), "b": torch.randn(1000), "step": 1}
    dcp.save(first, storage_writer=DcpWriter(root, thread_count=2))
    renamed = [name for kind, name in events if kind == "rename"]
    # No temporary metadata renamed (or copied) over: written once, last.
    assert sorted(renamed) == [".metadata", ".metadata.crc32c", "__0_0.distcp", "__0_1.distcp"]
    assert renamed[-1] == ".metadata"
    syncs = [i for i, (kind, name) in enumerate(events) if kind == "sync" and name == root]
    assert syncs == [len(events) - 1]

    events.clear()
    second = {"a": torch.randn(1000), "b": torch.randn(1000), "step": 2}
    dcp.save(second, storage_writer=DcpWriter(root, thread_count=2))
    order = [(kind, name) for kind, name in events if kind != "sync"]
    assert order.index(("unlink", ".metadata")) < order.index(("rename", "__0_0.distcp"))
    assert order.index(("unlink", ".metadata")) < order.index(("rename", "__0_1.distcp"))
    assert [e for e in events if e[0] == "sync" and e[1] == root] == [events[-1]]
    assert events[-2] == ("rename", ".metadata")

    got = {"a": torch.empty(1000), "b": torch.empty(1000), "step": 0}
    dcp.load(got, storage_reader=DcpReader(root))
    assert torch.equal(got["a"], second["a"]) and torch.equal(got["b"], second["b"])
    assert got["step"] == 2


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_save_failing_in_its_calling_thread_ends_its_other_writer_threads_first(
        tmp_path: Path) -> None:
    # torch's writer raised while its other threads went on writing: they
    # published the failed save's files over a retry's that had succeeded.
    import threading

    from torch.distributed.checkpoint import DefaultSavePlanner

    failed, returned = threading.Event(), threading.Event()

    class FailsInTheCaller(DefaultSavePlanner):
        def resolve_data(self, write_item: object) -> object:  # type: ignore[override]
            if threading.current_thread() is threading.main_thread():
                failed.set()
                raise RuntimeError("the calling thread's file failed")
            failed.wait(60)
            returned.wait(2)  # still writing when a save that did not wait returns
            return super().resolve_data(write_item)  # type: ignore[arg-type]

    def state(base: float) -> dict[str, torch.Tensor]:
        return {f"t{i}": torch.full((1000,), base + i) for i in range(6)}

    writer = DcpWriter(tmp_path / "ck", thread_count=3)
    with pytest.raises(BaseException, match="the calling thread's file failed"):  # DCP's own
        dcp.save(state(0), storage_writer=writer, planner=FailsInTheCaller())
    writing = [t.name for t in threading.enumerate() if "_write_files_from_queue" in t.name]
    returned.set()
    assert writing == []
    dcp.save(state(100), storage_writer=writer)  # the retry
    loaded = state(-1)
    dcp.load(loaded, storage_reader=DcpReader(tmp_path / "ck"))
    assert all(torch.equal(loaded[k], v) for k, v in state(100).items())


def test_a_failed_save_does_not_wait_for_another_save_s_writer_threads() -> None:
    # An async_save writing in its executor while another save fails: the
    # failed one waited for every DCP writer thread started meanwhile.
    import queue
    import threading

    from aioflux.torch.checkpoint._dcp_threads import ended_on_failure

    release = threading.Event()

    def _write_files_from_queue(create: object, files: object) -> None:  # torch's name
        release.wait(60)

    mine: queue.Queue[object] = queue.Queue()
    other = threading.Thread(target=_write_files_from_queue, args=(None, queue.Queue()))
    try:
        with pytest.raises(RuntimeError, match="this save failed"):
            with ended_on_failure(mine):
                other.start()
                raise RuntimeError("this save failed")
        assert other.is_alive()  # not waited for: not this save's
    finally:
        release.set()
        other.join(60)
