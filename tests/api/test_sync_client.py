"""The blocking Client twin, including after fork and across pickling, and
how its calls end when a signal interrupts them."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import FrameType

import pytest

from aioflux import Client, NotFound
from aioflux._core.integrity.crc import crc32c
from aioflux.gcs._xml import MIN_PART_SIZE
from aioflux.testing import EmulatorProfile, running_emulator


def test_sync_operations(sync_client: Client, bucket: str) -> None:
    data = os.urandom(10_000)
    info = sync_client.write(bucket, "a/1", data)
    assert sync_client.stat(bucket, "a/1").crc32c == info.crc32c == crc32c(data)
    assert sync_client.read(bucket, "a/1") == data
    assert sync_client.read(bucket, "a/1", start=5, end=10) == data[5:10]
    sync_client.write(bucket, "a/2", b"two")
    assert [o.name for o in sync_client.list_objects(bucket, "a/")] == ["a/1", "a/2"]
    assert [p.prefixes for p in sync_client.list(bucket, delimiter="/")] == [["a/"]]
    composite = sync_client.compose(bucket, "c", ["a/1", "a/2"])
    assert composite.size == len(data) + 3
    sync_client.delete(bucket, "c")
    with pytest.raises(NotFound):
        sync_client.stat(bucket, "c")


def test_sync_multipart(sync_client: Client, bucket: str) -> None:
    upload_id = sync_client.initiate_multipart(bucket, "m")
    parts = [sync_client.upload_part(bucket, "m", upload_id, 1, b"a" * MIN_PART_SIZE),
             sync_client.upload_part(bucket, "m", upload_id, 2, b"b")]
    assert len(sync_client.list_parts(bucket, "m", upload_id)) == 2
    assert len(sync_client.list_multipart_uploads(bucket)) == 1
    sync_client.complete_multipart(bucket, "m", upload_id, parts)
    assert sync_client.stat(bucket, "m").size == MIN_PART_SIZE + 1
    other = sync_client.initiate_multipart(bucket, "n")
    sync_client.abort_multipart(bucket, "n", other)
    assert sync_client.list_multipart_uploads(bucket) == []


def _read_in_child(client: Client, bucket: str, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    queue.put(crc32c(client.read(bucket, "shared")))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_client_used_in_child_process(sync_client: Client, bucket: str, method: str) -> None:
    data = os.urandom(50_000)
    sync_client.write(bucket, "shared", data)  # the parent's session is live before fork
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    proc = ctx.Process(target=_read_in_child, args=(sync_client, bucket, queue))
    proc.start()
    assert queue.get(timeout=60) == crc32c(data)
    proc.join(60)
    assert proc.exitcode == 0
    assert sync_client.read(bucket, "shared") == data  # parent still fine


def test_client_pickles_by_settings(sync_client: Client, bucket: str) -> None:
    sync_client.write(bucket, "p", b"pickled")
    clone = pickle.loads(pickle.dumps(sync_client))
    assert clone.read(bucket, "p") == b"pickled"


class _TimedOut(Exception):
    """What a timeout's signal handler raises (as with ``signal.alarm``)."""


def test_a_write_a_signal_handler_interrupts_is_never_published() -> None:
    # 4 MiB at 4 MB/s: the one-shot upload is still sending when the handler
    # raises (SIGUSR1 stands in for SIGALRM, which pytest-timeout uses).
    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _TimedOut()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        with running_emulator(profile=EmulatorProfile(bandwidth=4e6)) as emu, \
                Client(endpoint=emu.endpoint) as client:
            bucket = emu.create_bucket("timeouts")
            timer.start()
            with pytest.raises(_TimedOut):
                client.write(bucket, "obj", os.urandom(4 << 20), resumable=False)
            timer.join()
            assert not client.exists(bucket, "obj")
            time.sleep(1.5)  # past the time the upload would have taken
            assert not client.exists(bucket, "obj")
            client.write(bucket, "after", b"ok")  # the client still works
            assert client.read(bucket, "after") == b"ok"
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def test_ctrl_c_during_list_files_raises_keyboard_interrupt() -> None:
    # Every listing page takes 1.5 s, so SIGINT lands while the iterator
    # waits for one: the caller must see KeyboardInterrupt, not the listing
    # generator torn down under it.
    with running_emulator() as emu, Client(endpoint=emu.endpoint) as client:
        bucket = emu.create_bucket("listing")
        for i in range(50):
            client.write(bucket, f"d{i % 7}/o{i:04d}", b"x")
        emu.profile = EmulatorProfile(ttfb=1.5)
        script = textwrap.dedent(f"""
            import aioflux
            client = aioflux.Client(endpoint={emu.endpoint!r})
            try:
                # Inside the try: a SIGINT soon after READY, even before the
                # listing waits (a loaded machine), is the caller's to catch.
                print("READY", flush=True)
                for url in aioflux.list_files("gs://{bucket}/", client=client):
                    pass
                print("FINISHED", flush=True)
            except KeyboardInterrupt:
                print("INTERRUPTED", flush=True)
            client.close()
        """)
        # SIGINT as from a terminal, whatever the runner inherited (a CI job
        # started in the background ignores it).
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                 signal.SIG_DFL))
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "READY\n"
            time.sleep(0.6)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert (proc.returncode, out) == (0, "INTERRUPTED\n"), err
    assert "Error" not in err and "never retrieved" not in err, err
