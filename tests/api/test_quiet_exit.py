"""A script that ends with aioflux objects left as they were exits quietly:
an unclosed Client, an unfinished blocking iterator, a blocking call still
waiting in a daemon thread. Each script runs in a new interpreter to its
end, its exit hooks and module teardown included, and must print nothing
on stderr (``Exception ignored in ...``, a thread's traceback).

The scripts import torch and ``aioflux``, as training scripts do: that
order of module teardown runs aioflux's finalizers after module globals
(``os``) were set to None.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from aioflux import BridgeError
from aioflux._core.concurrency.portal import Portal
from aioflux._core.records.urls import parse_url
from aioflux.testing import Emulator

# Bounds a wait that a broken test would make forever; never reached.
NEVER = 60.0


def _run_to_exit(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a new interpreter, run to its exit (its hooks included)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def _assert_quiet(out: subprocess.CompletedProcess[str], printed: str) -> None:
    assert out.stdout.strip() == printed
    assert out.stderr == "", out.stderr


def test_an_unclosed_client_exits_quietly(emulator: Emulator, bucket: str) -> None:
    # Its __del__ ran after module teardown: "Exception ignored in:
    # <function Client.__del__> ... 'NoneType' object has no attribute 'getpid'".
    out = _run_to_exit("""
        import sys
        import torch  # noqa: F401
        import aioflux
        client = aioflux.Client(endpoint=sys.argv[1])
        client.write(sys.argv[2], "o", b"x")  # a session open, never closed
        print("ok")
    """, emulator.endpoint, bucket)
    _assert_quiet(out, "ok")


def test_an_unfinished_blocking_iterator_exits_quietly(tmp_path: Path) -> None:
    # Its generator's finally asked os.getpid() after module teardown.
    for i in range(3):
        (tmp_path / f"o{i}").write_bytes(b"x")
    bucket, prefix = parse_url(str(tmp_path) + "/")
    out = _run_to_exit("""
        import sys
        import torch  # noqa: F401
        import aioflux
        from aioflux.local import LocalStore
        store = aioflux.SyncStore(LocalStore())
        it = iter(store.list_objects(sys.argv[1], sys.argv[2]))
        print(next(it).name.rpartition("/")[2])  # left unfinished in a global
    """, bucket, prefix)
    _assert_quiet(out, "o0")


def test_a_call_waiting_in_a_daemon_thread_at_exit_is_left_quietly() -> None:
    # Python stops a daemon thread at exit wherever it is; the portal's
    # exit hook woke this one with a CancelledError, printed as "Exception
    # in thread ...". The hook registered first runs after aioflux's: it
    # holds the exit until the thread has either ended (a traceback
    # printed) or been left waiting.
    out = _run_to_exit("""
        import asyncio, atexit, sys, threading, time

        def frames(thread):
            frame = sys._current_frames().get(thread.ident)
            while frame is not None:
                yield frame.f_code.co_name
                frame = frame.f_back

        def settled():
            while waiting.is_alive() and "_wait_out_exit" not in frames(waiting):
                time.sleep(0.001)

        atexit.register(settled)

        from aioflux._core.concurrency.portal import call

        started = threading.Event()

        async def forever():
            started.set()
            await asyncio.sleep(3600)

        waiting = threading.Thread(target=call, args=(forever(),), daemon=True)
        waiting.start()
        started.wait()
        print("exiting")
    """)
    _assert_quiet(out, "exiting")


@pytest.mark.parametrize("daemon", [False, True])
def test_a_call_cut_short_by_shutdown_raises_bridge_error(daemon: bool) -> None:
    # Not at exit: the waiting thread learns why, typed, as a call made
    # after the shutdown does (it was a bare concurrent.futures.CancelledError).
    portal = Portal()
    started = threading.Event()
    raised: list[BaseException] = []

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    def waiting() -> None:
        try:
            portal.call(forever())
        except BaseException as exc:  # what reached the caller
            raised.append(exc)

    thread = threading.Thread(target=waiting, daemon=daemon)
    thread.start()
    assert started.wait(NEVER)
    portal.shutdown()
    thread.join(NEVER)
    assert not thread.is_alive()
    [error] = raised
    assert isinstance(error, BridgeError) and "shut down" in str(error)
