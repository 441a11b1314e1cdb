"""torch.distributed.checkpoint on gs:// and file:// with a 2-process gloo group,
and the file-system interface on both backends."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

from aioflux import InvalidArgument, NotFound
from aioflux._core.concurrency.portal import call
from aioflux._core.storage.protocol import ObjectStore
from aioflux.local import LocalStore
from aioflux.local._store import TEMP_MARK
from aioflux.torch.dcp import DcpReader, DcpWriter, GcsFileSystem
from tests.torch._dcp_worker import run
from tests.torch._forkserver import forkserver
from tests.torch.conftest import Where


def _store(where: Where) -> ObjectStore:
    return LocalStore() if where.client is None else where.client.aio


@pytest.mark.timeout(180)
def test_two_rank_sharded_save_async_save_load(where: Where, tmp_path: Path) -> None:
    root = where.url("dcp")
    endpoint = where.emulator.endpoint if where.emulator is not None else ""
    forkserver()  # the ranks start from it: torch imported once, not once a rank
    mp.start_processes(run, args=(2, str(tmp_path / "rendezvous"), endpoint, root), nprocs=2,
                       join=True, start_method="forkserver")
    names = where.names()
    for sub in ("plain", "zstd"):
        assert f"dcp/{sub}/.metadata" in names
        assert f"dcp/{sub}/.metadata.tmp" not in names
        assert len([n for n in names if n.startswith(f"dcp/{sub}/") and n.endswith(".distcp")]) == 2
    assert not [n for n in names if TEMP_MARK in n]
    store = _store(where)

    def size(sub: str) -> int:
        async def total() -> int:
            return sum([o.size async for o in store.list_objects(where.bucket,
                                                                  f"{where.base}dcp/{sub}/")])
        return int(call(total()))

    plain, packed = size("plain"), size("zstd")
    assert 0 < packed < plain * 1.05  # random floats barely compress; the stream still decodes
    assert call(store.list_multipart_uploads(where.bucket, where.base)) == []


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_single_process_save_load_and_the_file_system(where: Where) -> None:
    # Without a process group DCP saves and loads in-process.
    state = {"w": torch.randn(300, 40), "b": torch.arange(17), "step": 3}
    dcp.save(state, storage_writer=DcpWriter(where.url("one"), client=where.client))
    target = {"w": torch.zeros(300, 40), "b": torch.zeros(17, dtype=torch.long), "step": 0}
    dcp.load(target, storage_reader=DcpReader(where.url("one"), client=where.client))
    assert torch.equal(target["w"], state["w"]) and torch.equal(target["b"], state["b"])
    assert target["step"] == 3
    names = where.names("one")
    assert ".metadata" in [n.rsplit("/", 1)[1] for n in names]
    assert not [n for n in names if n.endswith(".tmp") or TEMP_MARK in n]

    fs = GcsFileSystem(where.client)
    assert fs.init_path(where.url("one/")) == where.url("one")
    listed = fs.ls(where.url("one"))
    assert sorted(listed) == [where.url(n) for n in names]
    meta = where.url("one/.metadata")
    assert fs.exists(meta)
    fs.rename(meta, where.url("one/moved"))
    assert not fs.exists(meta) and fs.exists(where.url("one/moved"))
    with fs.create_stream(where.url("one/moved"), "rb") as f:
        assert len(f.read()) > 0
    fs.rm_file(where.url("one/moved"))
    fs.rm_file(where.url("one/moved"))  # missing is fine
    assert not fs.exists(where.url("one/moved"))
    with pytest.raises(NotFound, match=re.escape(where.url("one/moved"))):
        with fs.create_stream(where.url("one/moved"), "rb"):
            pass
    with pytest.raises(InvalidArgument, match="not in the same bucket"):
        fs.rename(where.url("one/x"), "gs://other-bucket/x" if where.scheme == "file"
                  else "file:///tmp/x")
    assert GcsFileSystem.validate_checkpoint_id(where.url("one"))
    assert not GcsFileSystem.validate_checkpoint_id("s3x://b/c")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_interrupted_resave_leaves_no_checkpoint_rather_than_a_mix(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    # The next epoch saves the same shapes into the same checkpoint_id and
    # dies after its first data file: the old metadata must not vouch for
    # one new and one old file (offsets line up, so that loads silently).
    root = where.url("again")
    old = {"a": torch.zeros(1000), "b": torch.zeros(1000)}
    dcp.save(old, storage_writer=DcpWriter(root, client=where.client, thread_count=2))
    real = GcsFileSystem.create_stream

    def dies_at_the_second_file(self: GcsFileSystem, path: str, mode: str) -> object:
        if "w" in mode and str(path).endswith("__0_1.distcp"):
            raise ConnectionError("preempted")
        return real(self, path, mode)

    monkeypatch.setattr(GcsFileSystem, "create_stream", dies_at_the_second_file)
    new = {"a": torch.ones(1000), "b": torch.ones(1000)}
    # DCP's CheckpointException: the error itself where the caller's thread
    # met it, else (another writer thread's) the items it left unwritten.
    with pytest.raises(BaseException, match=r"preempted|1 of 2 items were not written"):
        dcp.save(new, storage_writer=DcpWriter(root, client=where.client, thread_count=2))
    monkeypatch.setattr(GcsFileSystem, "create_stream", real)
    assert "again/__0_0.distcp" in where.names()  # the new first file did land
    assert "again/.metadata" not in where.names()
    with pytest.raises(BaseException, match="metadata"):  # no checkpoint: nothing loads
        dcp.load({"a": torch.empty(1000), "b": torch.empty(1000)},
                 storage_reader=DcpReader(root, client=where.client))
    # A save that completes makes it a checkpoint again.
    dcp.save(new, storage_writer=DcpWriter(root, client=where.client, thread_count=2))
    got = {"a": torch.empty(1000), "b": torch.empty(1000)}
    dcp.load(got, storage_reader=DcpReader(root, client=where.client))
    assert torch.equal(got["a"], new["a"]) and torch.equal(got["b"], new["b"])


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_data_file_failing_in_a_writer_thread_fails_the_save(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    # DCP writes a rank's files from thread_count threads; an exception in
    # any but the caller's thread ended that thread unseen: the save
    # returned normally and published metadata without its items.
    from aioflux.torch.checkpoint import _dcp_crc, _dcp_file

    # The object writer, and a file's own (see _dcp_file.py).
    for writer in (_dcp_crc.RecordingWriter, _dcp_file.RecordingFileWriter):

        def fails_off_the_main_thread(self: Any, data: Any, real: Any = writer.write) -> Any:
            if threading.current_thread() is not threading.main_thread():
                raise ConnectionError("preempted in a writer thread")
            return real(self, data)

        monkeypatch.setattr(writer, "write", fails_off_the_main_thread)
    root = where.url("threads")
    state = {"a": torch.ones(1000), "b": torch.ones(1000)}
    with pytest.raises(BaseException, match=r"1 of 2 items were not written \(a data file "
                                            r"failed in one of DCP's writer threads: preempted"):
        dcp.save(state, storage_writer=DcpWriter(root, client=where.client,
                                                        thread_count=2))
    assert not [n for n in where.names() if n.endswith("metadata")]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_a_full_load_is_held_to_each_data_file_s_crc32c(tmp_path: Path) -> None:
    # Ranged reads carry no checksum: bytes a store serves wrong inside a
    # data file (here flipped in place, the file's size, time and recorded
    # crc32c kept) loaded silently. The ranges of a full load tile each
    # file, and their crc32c must combine into the file's.
    root = str(tmp_path / "ck")
    state = {"w": torch.randn(200, 50), "b": torch.arange(300), "step": 7}
    dcp.save(state, storage_writer=DcpWriter(root))
    target = {"w": torch.zeros(200, 50), "b": torch.zeros(300, dtype=torch.long), "step": 0}
    dcp.load(target, storage_reader=DcpReader(root))
    assert torch.equal(target["w"], state["w"]) and target["step"] == 7
    (data,) = [p for p in Path(root).iterdir() if p.suffix == ".distcp"]
    if call(LocalStore().stat(*_bucket_name(data))).crc32c is None:
        pytest.skip("no user xattrs here: files carry no crc32c to check against")
    before = os.stat(data)
    with open(data, "r+b") as f:
        f.seek(before.st_size // 2)
        byte = f.read(1)
        f.seek(before.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    # The item's own crc32c (.metadata.crc32c) catches it first...
    with pytest.raises(BaseException, match="the item was saved with"):  # DCP may wrap it
        dcp.load({"w": torch.zeros(200, 50), "b": torch.zeros(300, dtype=torch.long),
                  "step": 0}, storage_reader=DcpReader(root))
    # ... and a checkpoint without it (torch's writer, an older aioflux) is
    # held to the whole file's.
    (Path(root) / ".metadata.crc32c").unlink()
    with pytest.raises(BaseException, match="ranges read have crc32c"):
        dcp.load({"w": torch.zeros(200, 50), "b": torch.zeros(300, dtype=torch.long),
                  "step": 0}, storage_reader=DcpReader(root))


def _bucket_name(path: Path) -> tuple[str, str]:
    parts = str(path).lstrip("/").split("/", 1)
    return parts[0], parts[1]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (7, 1), (8, 2), (16, 4), (64, 4)])
def test_a_writer_writes_a_file_a_thread_per_four_cores(
        cores: int, threads: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import aioflux.torch.dcp as module

    monkeypatch.setattr(module, "cpus", lambda: cores)
    writer = DcpWriter(tmp_path.as_uri())
    assert writer.thread_count == threads
    assert DcpWriter(tmp_path.as_uri(), thread_count=3).thread_count == 3  # as asked
    state = {f"t{i}": torch.full((1000,), float(i)) for i in range(8)}
    dcp.save(state, storage_writer=writer)
    assert len(list(tmp_path.glob("*.distcp"))) == threads  # a file a thread
    loaded = {k: torch.zeros_like(v) for k, v in state.items()}
    dcp.load(loaded, storage_reader=DcpReader(tmp_path.as_uri()))
    assert all(torch.equal(loaded[k], state[k]) for k in state)
