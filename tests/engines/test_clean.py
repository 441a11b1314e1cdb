"""`aioflux clean` and clean_bucket: leftover composites and open uploads."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import aioflux
from aioflux import AsyncClient, Client, WriterOptions
from aioflux._core.records.types import MultipartUploadInfo
from aioflux._engines.clean import DEFAULT_OLDER_THAN, clean_bucket
from aioflux._engines.compose import COMPOSED_PREFIX, composite_name
from aioflux.cli import main
from aioflux.testing import Emulator
from tests.conftest import unique_bucket


def _composite(pid: int, n: int) -> str:
    """A name of the shape the planner gives a composite (see composite_name)."""
    return f"{COMPOSED_PREFIX}{pid}-{n:032x}"


async def _names(client: AsyncClient, bucket: str, prefix: str) -> list[str]:
    return [o.name async for o in client.list_objects(bucket, prefix)]


async def test_clean_deletes_composites_and_aborts_uploads(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    for i in range(3):
        emulator.store.put(bucket, _composite(123, i), b"x")
    emulator.store.put(bucket, "keep/me", b"y")
    upload = await client.initiate_multipart(bucket, "ckpt/model.pt")
    other = await client.initiate_multipart(bucket, "elsewhere/x")

    dry = await clean_bucket(client, bucket, dry_run=True, older_than=0)
    assert len(dry.composites) == 3 and {u.upload_id for u in dry.uploads} == {upload, other}
    assert len(await _names(client, bucket, COMPOSED_PREFIX)) == 3

    recent = await clean_bucket(client, bucket)  # the default keeps anything under a day old
    assert recent.older_than == DEFAULT_OLDER_THAN == 24 * 3600
    assert recent.composites == [] and recent.uploads == []
    assert len(recent.skipped) == 5 and all(0 <= (s.age or -1) < 60 for s in recent.skipped)
    assert len(await _names(client, bucket, COMPOSED_PREFIX)) == 3

    report = await clean_bucket(client, bucket, "ckpt/", older_than=0)
    assert report.ok and len(report.composites) == 3
    assert [u.upload_id for u in report.uploads] == [upload]
    assert await _names(client, bucket, COMPOSED_PREFIX) == []
    assert await _names(client, bucket, "keep/") == ["keep/me"]
    assert [u.upload_id for u in await client.list_multipart_uploads(bucket)] == [other]


async def test_what_clean_failed_to_delete_is_an_error_not_a_deletion(
        client: AsyncClient, emulator: Emulator, bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The report listed every candidate as deleted before deleting: a
    # failed delete was both "deleted gs://..." and an error, and counted.
    from aioflux import PermissionDenied

    for i in range(2):
        emulator.store.put(bucket, _composite(9, i), b"x")
    upload = await client.initiate_multipart(bucket, "ckpt/model.pt")
    delete, abort = client.delete, client.abort_multipart

    async def refused_delete(b: str, name: str, **kwargs: object) -> None:
        if name == _composite(9, 1):
            raise PermissionDenied(f"delete gs://{b}/{name} failed: HTTP 403",
                                   operation="delete", bucket=b, name=name)
        await delete(b, name, **kwargs)  # type: ignore[arg-type]

    async def refused_abort(b: str, name: str, upload_id: str) -> None:
        raise PermissionDenied(f"abort multipart upload gs://{b}/{name} failed: HTTP 403",
                               operation="abort multipart upload", bucket=b, name=name)

    monkeypatch.setattr(client, "delete", refused_delete)
    monkeypatch.setattr(client, "abort_multipart", refused_abort)
    report = await clean_bucket(client, bucket, older_than=0)
    assert report.composites == [f"gs://{bucket}/{_composite(9, 0)}"]
    assert report.uploads == [] and not report.ok and len(report.errors) == 2
    monkeypatch.setattr(client, "abort_multipart", abort)
    await client.abort_multipart(bucket, "ckpt/model.pt", upload)


async def test_clean_by_default_aborts_only_uploads_older_than_a_day(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    old = await client.initiate_multipart(bucket, "ckpt/abandoned.pt")
    young = await client.initiate_multipart(bucket, "ckpt/live.pt")
    emulator.store.uploads[old].initiated = "2020-01-01T00:00:00.000Z"
    report = await clean_bucket(client, bucket)
    assert [u.upload_id for u in report.uploads] == [old]
    assert [s.what for s in report.skipped] == [f"upload {young} of gs://{bucket}/ckpt/live.pt"]
    assert [u.upload_id for u in await client.list_multipart_uploads(bucket)] == [young]


def test_cli_clean(emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    made = _composite(9, 10)
    emulator.store.put(bucket, made, b"x")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
    assert main(["clean", f"gs://{bucket}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert re.fullmatch(rf"skipped gs://{bucket}/{made}: [01]s old, younger "
                        r"than --older-than 1d \(may belong to a running process\)", out[0])
    assert out[1] == "0 composed objects, 0 multipart uploads, 1 skipped, 0 errors"
    assert main(["clean", f"gs://{bucket}", "--dry-run", "--older-than", "0"]) == 0
    assert f"would delete gs://{bucket}/{made}" in capsys.readouterr().out
    assert main(["clean", f"gs://{bucket}", "--older-than", "0"]) == 0
    assert capsys.readouterr().out == (
        f"deleted gs://{bucket}/{made}\n"
        "1 composed objects, 0 multipart uploads, 0 skipped, 0 errors\n")
    assert emulator.store.bucket(bucket).names == []


def test_cli_clean_older_than_takes_units(emulator: Emulator, bucket: str,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The old composite is made two hours old (its generation, GCS's time of
    # creation, two hours back), the young one now: with --older-than 1h
    # each is an hour from the line, whatever a loaded machine's delays.
    two_hours_back = time.time_ns() // 1000 - 7200 * 10**6
    with monkeypatch.context() as m:
        m.setattr(emulator.store, "next_generation", lambda: two_hours_back)
        emulator.store.put(bucket, _composite(1, 0), b"x")
    emulator.store.put(bucket, _composite(1, 1), b"x")
    assert main(["clean", f"gs://{bucket}", "--older-than", "1h",
                 "--endpoint", emulator.endpoint]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"deleted gs://{bucket}/{_composite(1, 0)}"
    assert re.fullmatch(rf"skipped gs://{bucket}/{_composite(1, 1)}: [0-9]+s old, younger "
                        r"than --older-than 1h \(may belong to a running process\)", out[1])
    assert out[2] == "1 composed objects, 0 multipart uploads, 1 skipped, 0 errors"
    assert emulator.store.bucket(bucket).names == [_composite(1, 1)]


def _open_uploads(client: Client, bucket: str) -> list[MultipartUploadInfo]:
    # The writer sends parts in the background: wait until its upload exists.
    deadline = time.monotonic() + 20
    while not (uploads := client.list_multipart_uploads(bucket)):
        assert time.monotonic() < deadline, "the writer never started its upload"
        time.sleep(0.02)
    return uploads


def test_clean_leaves_a_live_writer_alone_and_it_completes(
        emulator: Emulator, bucket: str, sync_client: Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    part = 5 * 1024 * 1024
    data = os.urandom(2 * part + 123)
    url = f"gs://{bucket}/ckpt/live.pt"
    with aioflux.open(url, "wb", client=sync_client,
                      writer=WriterOptions(part_size=part)) as writer:
        writer.write(data[:part + 10])  # one part sent: the multipart upload is open
        (live,) = _open_uploads(sync_client, bucket)
        assert main(["clean", f"gs://{bucket}", "--endpoint", emulator.endpoint]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"skipped upload {live.upload_id} of {url}: ")
        assert out[0].endswith("younger than --older-than 1d (may belong to a running process)")
        assert out[1] == "0 composed objects, 0 multipart uploads, 1 skipped, 0 errors"
        writer.write(data[part + 10:])
    assert sync_client.read(bucket, "ckpt/live.pt") == data
    assert sync_client.list_multipart_uploads(bucket) == []


def test_clean_older_than_0_aborts_even_a_live_writer(
        emulator: Emulator, bucket: str, sync_client: Client,
        capsys: pytest.CaptureFixture[str]) -> None:
    part = 5 * 1024 * 1024
    url = f"gs://{bucket}/ckpt/live.pt"
    writer = aioflux.open(url, "wb", client=sync_client, writer=WriterOptions(part_size=part))
    writer.write(os.urandom(part + 10))
    (live,) = _open_uploads(sync_client, bucket)
    assert main(["clean", f"gs://{bucket}", "--older-than", "0",
                 "--endpoint", emulator.endpoint]) == 0
    assert capsys.readouterr().out == (
        f"aborted upload {live.upload_id} of {url}\n"
        "0 composed objects, 1 multipart uploads, 0 skipped, 0 errors\n")
    assert sync_client.list_multipart_uploads(bucket) == []
    with pytest.raises(aioflux.StorageError):  # NoSuchUpload: the writer learns it was aborted
        writer.close()
    assert emulator.store.bucket(bucket).names == []


def test_clean_on_fake_gcs_skips_uploads_and_says_so(
        fake_gcs: object, capsys: pytest.CaptureFixture[str]) -> None:
    endpoint = fake_gcs.endpoint  # type: ignore[attr-defined]
    name = unique_bucket("clean")
    with Client(endpoint=endpoint) as client:
        client.create_bucket(name)
        client.write(name, _composite(1, 0), b"x")
    assert main(["clean", f"gs://{name}", "--older-than", "0", "--endpoint", endpoint]) == 0
    assert capsys.readouterr().out == (
        f"deleted gs://{name}/{_composite(1, 0)}\n"
        f"skipped multipart uploads: list multipart uploads gs://{name}: the server has no XML "
        "multipart upload listing (it answered <ListBucketResult>)\n"
        "1 composed objects, 0 multipart uploads, 0 skipped, 0 errors\n")


_CHILD = textwrap.dedent("""
    import asyncio, sys
    from aioflux import AsyncClient
    from aioflux._engines.download import Downloader, DownloadOptions
    from aioflux._engines.listing import list_objects_parallel

    class Stuck(AsyncClient):
        async def fetch(self, bucket, name, **kw):
            if name.startswith("aioflux-composed/"):
                print("composed", flush=True)
                await asyncio.sleep(3600)  # killed while holding the composite
            return await super().fetch(bucket, name, **kw)

    async def run(endpoint, bucket):
        client = Stuck(endpoint=endpoint)
        objs = await list_objects_parallel(client, bucket, "d/")
        options = DownloadOptions(compose_threshold=1 << 20, min_sources=2)
        await Downloader(client, options).download_many(objs)

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
    report = await clean_bucket(client, bucket, older_than=0)
    assert report.composites == [f"gs://{bucket}/{left[0]}"]
    assert await _names(client, bucket, COMPOSED_PREFIX) == []


def test_cli_clean_on_the_filesystem_removes_old_temporary_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioflux.local import LocalStore

    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.pt").write_bytes(b"published")
    bucket, name = str(tmp_path).lstrip("/").split("/", 1)

    async def killed_writer(target: str) -> None:
        # A writer that wrote a part and never finished (its process was
        # killed): the store's temporary file stays.
        upload = LocalStore().start_upload(bucket, f"{name}/run/{target}", part_size=4)
        await upload.put(1, memoryview(b"part"))

    asyncio.run(killed_writer("old.pt"))
    asyncio.run(killed_writer("live.pt"))
    (old,) = run.glob(".old.pt.aioflux-tmp-*")
    (live,) = run.glob(".live.pt.aioflux-tmp-*")
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    url = f"file://{run}"
    assert main(["clean", str(run), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"would abort upload {old.name} of {url}/old.pt"
    assert re.fullmatch(rf"skipped upload {re.escape(live.name)} of {re.escape(url)}/live\.pt: "
                        r"[01]s old, younger than --older-than 1d \(may belong to a running "
                        r"process\)", out[1])
    assert out[2] == "0 composed objects, 1 multipart uploads (dry run), 1 skipped, 0 errors"
    assert old.exists()
    assert main(["clean", f"{url}/"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"aborted upload {old.name} of {url}/old.pt"
    assert sorted(p.name for p in run.iterdir()) == [live.name, "keep.pt"]
    assert main(["clean", str(run), "--older-than", "0"]) == 0
    assert sorted(p.name for p in run.iterdir()) == ["keep.pt"]
    assert (run / "keep.pt").read_bytes() == b"published"


@pytest.mark.parametrize("scheme", ["gs", "s3"])
async def test_cli_clean_of_a_run_spares_the_uploads_of_a_run_sharing_its_prefix(
        client: AsyncClient, emulator: Emulator, bucket: str, scheme: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The emulator's S3 face serves the same buckets: an XML multipart upload
    # started through the GCS client is an S3 multipart upload too.
    mine = await client.initiate_multipart(bucket, "run1/step-1/state.pt")
    other = await client.initiate_multipart(bucket, "run10/step-1/state.pt")
    argv = ["clean", f"{scheme}://{bucket}/run1", "--older-than", "0",
            "--endpoint", emulator.endpoint, "--s3-endpoint", emulator.s3_endpoint]
    assert await asyncio.to_thread(main, argv) == 0
    assert capsys.readouterr().out == (
        f"aborted upload {mine} of {scheme}://{bucket}/run1/step-1/state.pt\n"
        "0 composed objects, 1 multipart uploads, 0 skipped, 0 errors\n")
    assert [u.upload_id for u in await client.list_multipart_uploads(bucket)] == [other]


def test_cli_clean_of_a_local_run_spares_the_temporaries_of_a_run_sharing_its_prefix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for run, writer in (("run1", "a" * 12), ("run10", "b" * 12), ("run1.bak", "c" * 12)):
        (tmp_path / run).mkdir()
        (tmp_path / run / f".state.pt.aioflux-tmp-{writer}").write_bytes(b"part")
    assert main(["clean", str(tmp_path / "run1"), "--older-than", "0"]) == 0
    assert capsys.readouterr().out == (
        f"aborted upload .state.pt.aioflux-tmp-{'a' * 12} of file://{tmp_path}/run1/state.pt\n"
        "0 composed objects, 1 multipart uploads, 0 skipped, 0 errors\n")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.aioflux-tmp-*")) \
        == [f"run1.bak/.state.pt.aioflux-tmp-{'c' * 12}", f"run10/.state.pt.aioflux-tmp-{'b' * 12}"]


async def test_clean_deletes_only_composites_never_a_users_object_under_the_prefix(
        client: AsyncClient, emulator: Emulator, bucket: str) -> None:
    # Every object under the composed prefix was a candidate: a user's
    # object kept there (or under a composed_prefix such as "tmp/") was
    # deleted as a leftover once it was a day old.
    made = composite_name()  # what the download planner names a composite
    users = [f"{COMPOSED_PREFIX}notes.txt", f"{COMPOSED_PREFIX}123-abc",
             f"{made}/x", f"{made}0", f"{COMPOSED_PREFIX}sub/{made[len(COMPOSED_PREFIX):]}"]
    for name in [made, *users]:
        emulator.store.put(bucket, name, b"x")
    report = await clean_bucket(client, bucket, older_than=0)
    assert report.ok and report.composites == [f"gs://{bucket}/{made}"]
    assert report.skipped == []
    assert await _names(client, bucket, COMPOSED_PREFIX) == sorted(users)
    # A composed prefix of the caller's choosing: the same rule.
    emulator.store.put(bucket, "tmp/keep.bin", b"y")
    theirs = composite_name("tmp/")
    emulator.store.put(bucket, theirs, b"z")
    report = await clean_bucket(client, bucket, older_than=0, composed_prefix="tmp/")
    assert report.composites == [f"gs://{bucket}/{theirs}"]
    assert await _names(client, bucket, "tmp/") == ["tmp/keep.bin"]
