"""The sync portal: blocking calls, futures, fork and spawn."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import threading

import pytest

from aioflux import BridgeError
from aioflux._core.portal import Portal, call, get_portal, submit


async def _where() -> tuple[int, int]:
    await asyncio.sleep(0)
    return os.getpid(), threading.get_ident()


def test_call_runs_on_loop_thread() -> None:
    pid, ident = call(_where())
    assert pid == os.getpid()
    assert ident != threading.get_ident()
    assert ident == get_portal()._thread.ident


def test_submit_returns_future_with_original_exception() -> None:
    async def boom() -> None:
        raise KeyError("original")

    future = submit(boom())
    with pytest.raises(KeyError, match="original"):
        future.result(timeout=5)


def test_calling_from_loop_thread_raises_instead_of_deadlocking() -> None:
    async def nested() -> None:
        call(_where())

    with pytest.raises(BridgeError, match="own event loop thread"):
        call(nested())


def test_shutdown_cancels_pending_and_refuses_new_work() -> None:
    portal = Portal()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    future = portal.submit(forever())
    started.wait(5)
    portal.shutdown()
    assert future.cancelled()
    with pytest.raises(BridgeError, match="shut down"):
        portal.submit(_where())


def _child_call(queue: mp.Queue) -> None:  # type: ignore[type-arg]
    pid, _ = call(_where())
    queue.put(pid)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_portal_works_in_child_processes(method: str) -> None:
    call(_where())  # make sure the parent has a running portal first
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_call, args=(queue,))
    proc.start()
    child_pid = queue.get(timeout=60)
    proc.join(60)
    assert proc.exitcode == 0
    assert child_pid == proc.pid != os.getpid()


def test_unclosed_clients_are_closed_quietly_at_exit() -> None:
    import subprocess
    import sys

    script = (
        "from aioflux import Client\n"
        "from aioflux.testing import running_emulator\n"
        "with running_emulator() as emu:\n"
        "    emu.create_bucket('quiet')\n"
        "    client = Client(endpoint=emu.endpoint)\n"
        "    client.write('quiet', 'o', b'x')\n"
        "    keep = client  # never closed: the portal closes it at exit\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "Unclosed" not in out.stderr


def test_iterate_yields_in_order_and_propagates_errors() -> None:
    from aioflux._core.portal import iterate

    async def numbers(n: int, fail_at: int | None = None):  # type: ignore[no-untyped-def]
        for i in range(n):
            if i == fail_at:
                raise KeyError("boom")
            await asyncio.sleep(0)
            yield i

    assert list(iterate(numbers(200), batch=16)) == list(range(200))
    got = []
    with pytest.raises(KeyError, match="boom"):
        for item in iterate(numbers(50, fail_at=30), batch=8):
            got.append(item)
    assert got == list(range(30))


def test_iterate_early_exit_closes_the_async_generator() -> None:
    from aioflux._core.portal import iterate

    closed = threading.Event()

    async def endless():  # type: ignore[no-untyped-def]
        try:
            i = 0
            while True:
                await asyncio.sleep(0)
                yield i
                i += 1
        finally:
            closed.set()

    for item in iterate(endless(), batch=4):
        if item == 10:
            break
    assert closed.wait(5)


def test_an_iterator_collected_on_the_loop_thread_closes_without_blocking() -> None:
    # The garbage collector may finalize an abandoned sync iterator on any
    # thread, the portal's own included, which cannot wait on itself.
    from aioflux._core.portal import get_portal, iterate

    closed = threading.Event()

    async def endless():  # type: ignore[no-untyped-def]
        try:
            while True:
                await asyncio.sleep(0)
                yield 1
        finally:
            closed.set()

    it = iterate(endless(), batch=4)
    assert next(it) == 1

    async def close_here() -> None:
        it.close()  # as a collection on this thread would

    get_portal().call(close_here())
    assert closed.wait(5)
