"""A local write, copy or delete whose caller is cancelled (Ctrl-C in a
blocking call) publishes nothing, removes nothing, and leaves no temporary
file, wherever in its worker thread the cancellation lands.

The worker thread is held at one of its looks at the cancellation
(``_writes._go_on``) until the cancellation has reached it: the test
cancels exactly there, bound by events, never by time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from aioflux import ClientConfig, SyncStore
from aioflux._core.records.urls import parse_url
from aioflux.local import LocalStore, _writes

KiB = 1024
# Four pieces of a whole write (``_WRITE_PIECE`` is made 64 KiB below).
DATA = bytes(range(256)) * (1024 - 64)
# A bound on a wait that a broken test would make forever; never reached.
NEVER = 60.0


class Space:
    """A LocalStore over ``root`` (object ``n(x)`` is the file ``root/x``)."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.root = root
        self.bucket, self.prefix = parse_url(str(root) + "/")
        self.store = LocalStore(ClientConfig(max_concurrency=4))

    def n(self, name: str) -> str:
        return self.prefix + name

    def files(self) -> list[str]:
        """Every file below ``root``, temporary ones included."""
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if p.is_file())


@pytest.fixture
async def space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Space]:
    monkeypatch.setattr(_writes, "_WRITE_PIECE", 64 * KiB)
    local = Space(tmp_path / "objects")
    async with local.store:
        yield local


class Looks:
    """Counts the worker's looks at its ``stop`` event, and holds it at
    look number ``hold`` until the event is set (the caller cancelled)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: int | None = None) -> None:
        self.count = 0
        self.hold = hold
        self.reached = threading.Event()
        go_on = _writes._go_on

        def look(stop: threading.Event | None) -> None:
            self.count += 1
            if self.count == self.hold:
                assert stop is not None
                self.reached.set()
                assert stop.wait(NEVER), "the cancellation never reached the worker"
            go_on(stop)

        monkeypatch.setattr(_writes, "_go_on", look)

    async def held(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, NEVER), "the look was never reached"


Change = Callable[[], Awaitable[object]]


async def _looks_of(monkeypatch: pytest.MonkeyPatch, change: Change) -> int:
    """How many looks ``change`` (run to its end) makes."""
    counting = Looks(monkeypatch)
    await change()
    assert counting.count >= 3
    return counting.count


async def _cancel_at(monkeypatch: pytest.MonkeyPatch, hold: int, change: Change) -> None:
    """Run ``change`` and cancel it while its worker is held at look ``hold``."""
    looks = Looks(monkeypatch, hold)
    task = asyncio.ensure_future(change())
    await looks.held()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.fixture(params=["first piece", "mid-write", "before the rename"])
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _hold_at(where: str, looks: int) -> int:
    return {"first piece": 1, "mid-write": 3, "before the rename": looks}[where]


async def test_cancelled_write_publishes_nothing(space: Space, monkeypatch: pytest.MonkeyPatch,
                                                 where: str) -> None:
    looks = await _looks_of(monkeypatch, lambda: space.store.write(
        space.bucket, space.n("counted"), DATA))
    await space.store.delete(space.bucket, space.n("counted"))
    await _cancel_at(monkeypatch, _hold_at(where, looks), lambda: space.store.write(
        space.bucket, space.n("d/obj"), DATA))
    assert space.files() == []


async def test_cancelled_overwrite_keeps_the_old_file(space: Space,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    await space.store.write(space.bucket, space.n("obj"), b"old")
    looks = await _looks_of(monkeypatch, lambda: space.store.write(
        space.bucket, space.n("counted"), DATA))
    await space.store.delete(space.bucket, space.n("counted"))
    await _cancel_at(monkeypatch, looks, lambda: space.store.write(
        space.bucket, space.n("obj"), DATA))
    assert space.files() == ["obj"]
    assert await space.store.read(space.bucket, space.n("obj")) == b"old"


async def test_cancelled_copy_publishes_nothing(space: Space, monkeypatch: pytest.MonkeyPatch,
                                                where: str) -> None:
    await space.store.write(space.bucket, space.n("src"), DATA)
    looks = await _looks_of(monkeypatch, lambda: space.store.copy(
        space.bucket, space.n("src"), space.bucket, space.n("counted")))
    await space.store.delete(space.bucket, space.n("counted"))
    hold = _hold_at(where, looks) if where != "mid-write" else 2
    await _cancel_at(monkeypatch, hold, lambda: space.store.copy(
        space.bucket, space.n("src"), space.bucket, space.n("d/copy")))
    assert space.files() == ["src"]


async def test_cancelled_delete_before_its_unlink_keeps_the_file(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    await space.store.write(space.bucket, space.n("d/obj"), b"kept")
    await _cancel_at(monkeypatch, 1, lambda: space.store.delete(space.bucket,
                                                                space.n("d/obj")))
    assert space.files() == ["d/obj"]
    assert await space.store.read(space.bucket, space.n("d/obj")) == b"kept"


@pytest.fixture
def interrupt_signal() -> Iterator[signal.Signals]:
    """SIGUSR1 raising KeyboardInterrupt, as Ctrl-C's SIGINT does."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        yield signal.SIGUSR1
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_interrupted_blocking_write_publishes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        interrupt_signal: signal.Signals) -> None:
    # Ctrl-C in the waiting thread while the worker writes: the blocking
    # call raises KeyboardInterrupt only once the write has given up.
    monkeypatch.setattr(_writes, "_WRITE_PIECE", 64 * KiB)
    root = tmp_path / "objects"
    root.mkdir()
    bucket, prefix = parse_url(str(root) + "/")
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main
    # The interrupt is sent once the main thread waits for the call's
    # outcome, as Ctrl-C lands during a long write.
    waiting = threading.Event()
    result = concurrent.futures.Future.result

    def waited(future: concurrent.futures.Future[object], timeout: float | None = None) -> object:
        if threading.get_ident() == main:
            waiting.set()
        return result(future, timeout)

    monkeypatch.setattr(concurrent.futures.Future, "result", waited)
    go_on = _writes._go_on

    def look(stop: threading.Event | None) -> None:
        if stop is not None and not stop.is_set():
            assert waiting.wait(NEVER)
            signal.pthread_kill(main, interrupt_signal)
            assert stop.wait(NEVER), "the interrupt never reached the worker"
        go_on(stop)

    monkeypatch.setattr(_writes, "_go_on", look)
    with SyncStore(LocalStore()) as store, pytest.raises(KeyboardInterrupt):
        store.write(bucket, prefix + "obj", DATA)
    assert list(root.iterdir()) == []


async def test_cancelled_close_of_a_streaming_write_publishes_nothing(
        space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer's close() (the upload's finish: its tail, the read-back
    # check, the rename) cancelled before the rename: the file was
    # published all the same.
    from aioflux import WriterOptions
    from aioflux._engines.async_writer import AsyncObjectWriter

    async def stream(name: str) -> None:
        writer = AsyncObjectWriter(space.store, space.bucket, space.n(name),
                                   options=WriterOptions(part_size=64 * KiB))
        await writer.write(DATA)
        await writer.close()

    looks = await _looks_of(monkeypatch, lambda: stream("counted"))
    await space.store.delete(space.bucket, space.n("counted"))
    await _cancel_at(monkeypatch, looks, lambda: stream("d/obj"))
    assert space.files() == []
