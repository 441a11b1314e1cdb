"""CheckpointManager and Checkpoint against the emulator."""

from __future__ import annotations

import concurrent.futures
import errno
import pickle
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from aioflux import (
    AsyncClient,
    ChecksumMismatch,
    Client,
    InvalidArgument,
    NotFound,
    ReaderOptions,
    ServerError,
    StorageError,
    WriterOptions,
)
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.local import _writes as local_writes
from aioflux.torch import Checkpoint, CheckpointManager
from tests.torch.conftest import Where

MiB = 1024 * 1024
PART = 5 * MiB


def _state(step: int, numel: int = 300_000) -> dict[str, object]:
    g = torch.Generator().manual_seed(step)
    return {"model": {"w": torch.randn(numel, generator=g), "b": torch.arange(10) + step},
            "step": step, "opt": [torch.ones(3) * step, {"lr": 0.1}]}


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return a == b


def test_save_load_list_latest_and_retention(where: Where) -> None:
    with CheckpointManager(where.url("run1"), keep_last=2, client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        assert mgr.root == where.url("run1/")
        assert mgr.latest() is None
        with pytest.raises(NotFound):
            mgr.load()
        for step in (10, 20, 30, 40):
            info = mgr.save(_state(step), step)
            assert info.step == step and info.size > 0
        assert [c.step for c in mgr.list()] == [30, 40]
        latest = mgr.latest()
        assert latest is not None and latest.step == 40
        assert _equal(mgr.load(), _state(40))
        assert _equal(mgr.load(step=30), _state(30))
        with pytest.raises(NotFound):
            mgr.load(step=10)
        assert [c.url for c in mgr.list()] == [where.url("run1/step-000000000030/"),
                                               where.url("run1/step-000000000040/")]
    # Nothing of the deleted steps is left, not even a temporary file or directory.
    assert where.names() == ["run1/history.jsonl",
                             "run1/step-000000000030/manifest.json",
                             "run1/step-000000000030/state.pt",
                             "run1/step-000000000040/manifest.json",
                             "run1/step-000000000040/state.pt"]
    hist = mgr.history()
    assert [r.step for r in hist] == [10, 20, 30, 40] and all(r.ok for r in hist)
    assert all(r.bytes > 1_000_000 and r.total_seconds > 0 and r.mb_per_s > 0 for r in hist)


def test_save_async_snapshots_before_returning(where: Where) -> None:
    mgr = CheckpointManager(where.url("run"), client=where.client,
                            writer=WriterOptions(part_size=PART))
    state = _state(1, numel=2_000_000)
    expected = _state(1, numel=2_000_000)
    future = mgr.save_async(state, 1)
    assert isinstance(future, concurrent.futures.Future)
    state["model"]["w"].zero_()  # type: ignore[index]
    state["opt"][0].add_(5)  # type: ignore[index]
    info = future.result(timeout=60)
    assert info.step == 1
    assert _equal(mgr.load(1), expected)
    (record,) = mgr.history()
    assert record.ok and record.blocking_seconds <= record.total_seconds
    mgr.close()


def test_incomplete_checkpoints_are_invisible(where: Where) -> None:
    mgr = CheckpointManager(where.url("r"), client=where.client,
                            writer=WriterOptions(part_size=PART))
    mgr.save(_state(1), 1)
    mgr.save(_state(2), 2)
    # Step 3: objects but no manifest (killed before the manifest).
    where.put("r/step-000000000003/state.pt", b"partial")
    # Step 2: its state object replaced after the manifest -> mismatch.
    where.put("r/step-000000000002/state.pt", b"corrupt")
    assert [c.step for c in mgr.list()] == [1]
    latest = mgr.latest()
    assert latest is not None and latest.step == 1
    assert _equal(mgr.load(), _state(1))
    mgr.save(_state(4), 4)  # retention pass removes leftovers below the newest
    assert not [n for n in where.names() if "step-000000000003" in n]
    mgr.close()


class _FailingWrites(AsyncClient):
    fail = True

    async def write(self, bucket, name, data, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail and name.endswith("manifest.json"):
            raise ServerError("injected manifest failure", operation="write")
        return await super().write(bucket, name, data, **kwargs)


class _FailingLocalWrites(LocalStore):
    fail = True

    async def write(self, bucket, name, data, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail and name.endswith("manifest.json"):
            raise ServerError("injected manifest failure", operation="write")
        return await super().write(bucket, name, data, **kwargs)


def _failing(where: Where) -> _FailingWrites | _FailingLocalWrites:
    if where.emulator is None:
        return _FailingLocalWrites()
    return _FailingWrites(endpoint=where.emulator.endpoint)


def test_failed_async_save_reraises_original_and_next_save(where: Where) -> None:
    client = _failing(where)
    mgr = CheckpointManager(where.url("f"), client=client, writer=WriterOptions(part_size=PART))
    future = mgr.save_async(_state(1), 1)
    with pytest.raises(ServerError, match="injected"):
        future.result(timeout=60)
    mgr.save_async(_state(2), 2)  # the first failure was observed: no raise here
    with pytest.raises(ServerError, match="injected"):
        mgr.wait()  # the second one was not
    client.fail = False
    mgr.save(_state(4), 4)  # the failure was raised once; later saves work
    assert mgr.latest().step == 4  # type: ignore[union-attr]
    hist = mgr.history()
    assert [(r.step, r.ok) for r in hist] == [(1, False), (2, False), (4, True)]
    assert "injected" in (hist[0].error or "")
    mgr.close()
    call(client.aclose())


def test_unobserved_failure_raised_by_next_save(where: Where) -> None:
    client = _failing(where)
    mgr = CheckpointManager(where.url("u"), client=client, writer=WriterOptions(part_size=PART))
    future = mgr.save_async(_state(1), 1)
    concurrent.futures.wait([future])
    client.fail = False
    with pytest.raises(ServerError, match="injected"):
        mgr.save(_state(2), 2)
    mgr.save(_state(2), 2)
    mgr.close()
    call(client.aclose())


class _Unpicklable:
    """Fails the background save it is in, naming ``tag``."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __deepcopy__(self, memo: object) -> _Unpicklable:
        return self  # the snapshot keeps it; torch.save fails on it in the background

    def __reduce__(self) -> str:
        raise RuntimeError(f"cannot pickle {self.tag}")


def _two_failed_saves(mgr: CheckpointManager) -> None:
    futures = [mgr.save_async({"x": _Unpicklable(f"step{step}")}, step) for step in (1, 2)]
    concurrent.futures.wait(futures)


def test_every_unobserved_failure_is_raised_by_a_later_save(tmp_path: Path) -> None:
    # Two saves in flight failed: the next save raised the first and the
    # second was never raised nor logged.
    with CheckpointManager(tmp_path / "run", max_pending=2) as mgr:
        _two_failed_saves(mgr)
        raised = set()
        for _ in range(2):
            with pytest.raises(RuntimeError, match="cannot pickle step") as error:
                mgr.save(_state(3), 3)
            raised.add(str(error.value))
        assert raised == {"cannot pickle step1", "cannot pickle step2"}
        assert mgr.save(_state(3), 3).step == 3  # each was raised once


def test_close_raises_one_unobserved_failure_and_logs_the_others(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mgr = CheckpointManager(tmp_path / "run", max_pending=2)
    _two_failed_saves(mgr)
    with pytest.raises(RuntimeError, match="cannot pickle step") as error:
        mgr.close()
    other = "step2" if str(error.value).endswith("step1") else "step1"
    logged = [r.getMessage() for r in caplog.records if r.name == "aioflux.checkpoint"]
    assert [m for m in logged if "background save failed" in m] == [
        f"CheckpointManager({mgr.root}): a background save failed and close() raised "
        f"another one: RuntimeError: cannot pickle {other}"]
    assert mgr._failed == []  # the exit hook has nothing left to log


def test_memory_budget_and_when_busy(sync_client: Client, bucket: str) -> None:
    state = _state(1, numel=1_000_000)  # ~4 MB of tensors
    mgr = CheckpointManager(f"gs://{bucket}/m", client=sync_client,
                            writer=WriterOptions(part_size=PART),
                            memory_budget=1_000_000)
    with pytest.raises(InvalidArgument, match="memory_budget"):
        mgr.save_async(state, 1)
    mgr.close()

    gate = threading.Event()

    class Slow(AsyncClient):
        async def write(self, *a, **k):  # type: ignore[no-untyped-def]
            import asyncio

            while not gate.is_set():
                await asyncio.sleep(0.01)
            return await super().write(*a, **k)

    client = Slow(endpoint=sync_client.aio.endpoint)
    busy = CheckpointManager(f"gs://{bucket}/b", client=client,
                             writer=WriterOptions(part_size=PART),
                             when_busy="raise")
    first = busy.save_async(state, 1)
    with pytest.raises(InvalidArgument, match="in flight"):
        busy.save_async(state, 2)
    gate.set()
    assert first.result(timeout=60).step == 1
    assert busy.save_async(state, 2).result(timeout=60).step == 2
    busy.close()
    call(client.aclose())


def test_zstd_manager_round_trip(where: Where) -> None:
    state = {"w": torch.zeros(1_000_000), "r": torch.randn(1000)}
    mgr = CheckpointManager(where.url("z"), client=where.client, compression="zstd",
                            writer=WriterOptions(part_size=PART))
    info = mgr.save(state, 7)
    assert "state.pt.zst" in info.objects and info.size < 1_000_000
    loaded = mgr.load()
    assert _equal(loaded, state)
    (rec,) = mgr.history()
    assert rec.bytes > 4_000_000 and rec.stored_bytes == info.size
    mgr.close()


def test_checkpoint_writer_reader(where: Where) -> None:
    ckpt = Checkpoint(where.client, writer=WriterOptions(part_size=PART),
                      reader=ReaderOptions(block_size=MiB))
    state = _state(5, numel=2_000_000)
    with ckpt.writer(where.url("c.pt")) as w:
        torch.save(state, w)
    with ckpt.reader(where.url("c.pt")) as r:
        assert _equal(torch.load(r), state)
    info = ckpt.save(state, where.url("c2.pt"), compression="zstd")
    assert info.url == where.url("c2.pt")
    assert _equal(ckpt.load(info.url, compression="zstd"), state)
    with pytest.raises(NotFound, match=re.escape(where.url("missing.pt"))):
        ckpt.load(where.url("missing.pt"))


def test_a_failed_torch_save_publishes_nothing(where: Where) -> None:
    # torch.save raises half-way (a lambda does not pickle) after parts of
    # the archive were written: no object, no temporary file, no checkpoint.
    state = {"w": torch.zeros(4 * MiB), "f": lambda: 0}
    with CheckpointManager(where.url("bad"), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
            mgr.save(state, 1)
        assert mgr.latest() is None and mgr.list() == []
        with pytest.raises(NotFound, match=re.escape(f"load {where.url('bad/')}")):
            mgr.load()
        (record,) = mgr.history()
        assert not record.ok
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
        Checkpoint(where.client).save(state, where.url("x.pt"))
    assert where.names() == ["bad/history.jsonl"]


def test_a_plain_path_root_is_the_filesystem(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with CheckpointManager("runs/exp", keep_last=1) as mgr:
        assert mgr.root == f"file://{tmp_path}/runs/exp/"
        mgr.save(_state(1, numel=1000), 1)
        mgr.save_async(_state(2, numel=1000), 2).result(timeout=60)
        assert [c.step for c in mgr.list()] == [2]
        assert _equal(mgr.load(), _state(2, numel=1000))
    assert sorted(p.name for p in (tmp_path / "runs/exp").iterdir()) == [
        "history.jsonl", "step-000000000002"]
    assert CheckpointManager(f"file://{tmp_path}/runs/exp").latest().step == 2  # type: ignore[union-attr]


def test_a_failed_upload_raises_its_storage_error_not_torchs(
        where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    # When a part fails for good inside torch.save, torch's zip writer still
    # writes its end record on the way out and that raises a RuntimeError
    # ("unexpected pos ..."): the storage error must be what the caller sees.
    async def refuse(self: AsyncClient, bucket: str, name: str, *args: object,
                     **kwargs: object) -> object:
        raise ServerError(f"upload_part gs://{bucket}/{name} failed: HTTP 503 (injected)",
                          operation="upload_part", bucket=bucket, name=name, status=503)

    write_all = local_writes._pwrite_all

    def disk_full(fd: int, data: memoryview, offset: int) -> None:
        # The state's writes find the disk full; the small claim and
        # history line still fit.
        if len(data) < 16 * 1024:
            return write_all(fd, data, offset)
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    if where.scheme == "gs":
        monkeypatch.setattr(AsyncClient, "upload_part", refuse)
        expected: type[StorageError] = ServerError
    else:
        monkeypatch.setattr(local_writes, "_pwrite_all", disk_full)
        expected = StorageError
    state = {"w": torch.zeros(4 * MiB)}  # 16 MiB: parts go up while torch.save runs
    mgr = CheckpointManager(where.url("run"), client=where.client,
                            writer=WriterOptions(part_size=PART))
    with pytest.raises(expected, match="injected") as caught:
        mgr.save(state, 1)
    assert where.url("run/step-000000000001/state.pt") in str(caught.value)
    with pytest.raises(expected, match="injected"):
        Checkpoint(client=where.client, writer=WriterOptions(part_size=PART)).save(
            state, where.url("x.pt"))
    assert mgr.latest() is None
    # Nothing published, no claim kept, and on files no temporary file left.
    assert where.names() == ["run/history.jsonl"]


def _flipped_inside(data: bytes, marker: bytes) -> list[bytes]:
    """``data`` with one byte flipped at each of a few places inside ``marker``'s run."""
    at = data.index(marker * 64)
    return [data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
            for i in range(at + 3, at + 64 * len(marker), 97)]


def test_load_checks_the_bytes_torch_load_skipped(emulator: Any, tmp_path: Path) -> None:
    # torch.load reads a zip's central directory first and may never read
    # its block from the start: with small blocks the front-to-back crc32c
    # never reached the end, and a flipped byte in a tensor loaded in silence.
    import google_crc32c

    emulator.create_bucket("ckpt-skip")
    state = {"w": torch.full((6000,), 1.5), "b": torch.arange(100)}
    with Client(endpoint=emulator.endpoint) as client:
        ckpt = Checkpoint(client, reader=ReaderOptions(block_size=1000, read_ahead=4))
        ckpt.save(state, "gs://ckpt-skip/good.pt")
        good = client.read("ckpt-skip", "good.pt")
        loaded = ckpt.load("gs://ckpt-skip/good.pt")
        assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])
        marker = torch.tensor([1.5]).numpy().tobytes()
        for n, bad in enumerate(_flipped_inside(good, marker)):
            emulator.store.put("ckpt-skip", f"bad{n}.pt", bad,
                               crc32c=google_crc32c.value(good))
            with pytest.raises(ChecksumMismatch, match=f"bad{n}.pt"):
                ckpt.load(f"gs://ckpt-skip/bad{n}.pt")
