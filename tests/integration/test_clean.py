"""`aioflux clean` and clean_bucket: leftover composites and open uploads."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from aioflux import AsyncClient
from aioflux._clean import clean_bucket
from aioflux._compose import COMPOSED_PREFIX
from aioflux.cli import main
from aioflux.testing import Emulator


async def _names(client: AsyncClient, bucket: str, prefix: str) -> list[str]:
    return [o.name async for o in client.list_objects(bucket, prefix)]


async def test_clean_deletes_composites_and_aborts_uploads(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    for i in range(3):
        emulator.store.put(bucket, f"{COMPOSED_PREFIX}123-{i}", b"x")
    emulator.store.put(bucket, "keep/me", b"y")
    upload = await client.initiate_multipart(bucket, "ckpt/model.pt")
    other = await client.initiate_multipart(bucket, "elsewhere/x")

    dry = await clean_bucket(client, bucket, dry_run=True)
    assert len(dry.composites) == 3 and {u.upload_id for u in dry.uploads} == {upload, other}
    assert len(await _names(client, bucket, COMPOSED_PREFIX)) == 3

    recent = await clean_bucket(client, bucket, older_than=3600)
    assert recent.composites == [] and recent.uploads == []

    report = await clean_bucket(client, bucket, "ckpt/")
    assert report.ok and len(report.composites) == 3
    assert [u.upload_id for u in report.uploads] == [upload]
    assert await _names(client, bucket, COMPOSED_PREFIX) == []
    assert await _names(client, bucket, "keep/") == ["keep/me"]
    assert [u.upload_id for u in await client.list_multipart_uploads(bucket)] == [other]


def test_cli_clean(emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    emulator.store.put(bucket, f"{COMPOSED_PREFIX}9-a", b"x")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
    assert main(["clean", f"gs://{bucket}", "--dry-run"]) == 0
    assert f"would delete gs://{bucket}/{COMPOSED_PREFIX}9-a" in capsys.readouterr().out
    assert main(["clean", f"gs://{bucket}"]) == 0
    out = capsys.readouterr().out
    assert f"deleted gs://{bucket}/{COMPOSED_PREFIX}9-a" in out
    assert "1 composed objects, 0 multipart uploads, 0 errors" in out
    assert emulator.store.bucket(bucket).names == []


_CHILD = textwrap.dedent("""
    import asyncio, sys
    from aioflux import AsyncClient
    from aioflux._download import Downloader, DownloadOptions
    from aioflux._listing import list_objects_parallel

    class Stuck(AsyncClient):
        async def read(self, bucket, name, **kw):
            if name.startswith("aioflux-composed/"):
                print("composed", flush=True)
                await asyncio.sleep(3600)  # killed while holding the composite
            return await super().read(bucket, name, **kw)

    async def run(endpoint, bucket):
        client = Stuck(endpoint=endpoint)
        objs = await list_objects_parallel(client, bucket, "d/")
        await Downloader(client, DownloadOptions(compose_threshold=1 << 20)).download_many(objs)

    asyncio.run(run(sys.argv[1], sys.argv[2]))
""")


async def test_killed_process_leftovers_are_removed_by_clean(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    for i in range(5):
        emulator.store.put(bucket, f"d/{i}", os.urandom(100))
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, emulator.endpoint, bucket],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
        assert line.strip() == b"composed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
    left = await _names(client, bucket, COMPOSED_PREFIX)
    assert len(left) == 1 and left[0].startswith(f"{COMPOSED_PREFIX}{proc.pid}-")
    report = await clean_bucket(client, bucket)
    assert report.composites == [f"gs://{bucket}/{left[0]}"]
    assert await _names(client, bucket, COMPOSED_PREFIX) == []
