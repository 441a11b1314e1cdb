"""Datasets and the blocking helpers on ``s3://``, against moto's S3 server.

The checkpoint, DCP, Lightning and SIGKILL tests run on s3 through the
``where`` fixture (see ``conftest.S3_TESTS``); these are the dataset and
IO paths: ``ObjectMapDataset`` / ``ObjectIterableDataset.from_prefix`` with 0 and 2
DataLoader workers, ``list_files`` / ``load_files``, ``stream`` and
``aioflux.open``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch

import aioflux
from aioflux import WriterOptions, list_files, load_files
from aioflux._core.concurrency.portal import call
from aioflux.torch import DatasetSettings, ObjectIterableDataset, ObjectMapDataset
from tests.conftest import MotoS3
from tests.torch._forkserver import forkserver, with_environment
from tests.torch.conftest import Where

AWS_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                   "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED")


def _seed(where: Where, count: int) -> dict[str, bytes]:
    rng = random.Random(count)
    data = {f"d/{i:04d}": os.urandom(rng.randrange(1, 4000)) for i in range(count)}
    data["d/empty"] = b""
    for name, body in data.items():
        where.put(name, body)
    where.put("d/sub/", b"")  # a folder placeholder: not a sample
    where.put("d2/not-in-d", b"sibling")  # never "d2" for the folder "d"
    return data


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, "fork"), (2, "forkserver")])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_from_prefix_datasets_on_s3(s3_where: Where, moto_s3: MotoS3,
                                    monkeypatch: pytest.MonkeyPatch, kind: str,
                                    workers: int, context: str | None) -> None:
    where = s3_where
    data = _seed(where, 40)
    # Explicit endpoint=, as a job would give it: the environment's is gone.
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    ds: ObjectMapDataset | ObjectIterableDataset
    if kind == "map":
        ds = ObjectMapDataset.from_prefix(where.url("d"), transform=bytes,
                                          settings=DatasetSettings(endpoint=moto_s3.endpoint))
        assert len(ds) == len(data)
        assert [where.rel(o.name) for o in ds.objects] == sorted(data)
        assert {o.scheme for o in ds.objects} == {"s3"}
        assert ds[3] == data["d/0003"]
    else:
        ds = ObjectIterableDataset.from_prefix(where.url("d/"), transform=bytes,
                                               settings=DatasetSettings(endpoint=moto_s3.endpoint))
    # A forkserver's worker unpickles the dataset, as a spawned one does, and
    # builds its own S3 store from its settings (the endpoint given here; the
    # server runs without the endpoint variables, tests/torch/_forkserver.py),
    # with the credentials a spawned worker would inherit. It forks from a
    # server that imported torch once: a spawned worker imports it anew (~3 s
    # of CPU each). The workers stay for the second epoch.
    # The transform is a builtin, so unpickling it imports no test module
    # (this one pulls in pytest, the fixtures and the emulator).
    fresh = context == "forkserver"
    loader = torch.utils.data.DataLoader(
        ds, batch_size=7, num_workers=workers, collate_fn=list,
        multiprocessing_context=forkserver() if fresh else context, persistent_workers=fresh,
        worker_init_fn=with_environment(AWS_CREDENTIALS) if fresh else None)
    for _ in range(2):  # two epochs: nothing lost or doubled in either
        got = [sample for batch in loader for sample in batch]
        if kind == "map":
            assert got == [data[name] for name in sorted(data)]
        else:
            assert sorted(got) == sorted(data.values())


def test_list_load_stream_and_open_on_s3(s3_where: Where) -> None:
    where = s3_where
    data = _seed(where, 25)
    # No client: the default S3 store, from AWS_ENDPOINT_URL_S3.
    # A name prefix, as S3 DataPipes' list_files_by_s3 takes.
    assert where.url("d2/not-in-d") in list(list_files(where.url("d")))
    urls = list(list_files(where.url("d/")))
    assert urls == [where.url(name) for name in sorted(data)]
    loaded = dict(load_files(urls, concurrency=8))
    assert loaded == {where.url(name): body for name, body in data.items()}
    assert where.s3 is not None
    store = where.s3

    async def streamed() -> dict[str, bytes]:
        return {item.name: bytes(item.data)
                async for item in store.stream(where.bucket, where.base + "d/", concurrency=8)}

    assert call(streamed()) == {where.base + name: body for name, body in data.items()}

    # A file object: written in 5 MiB parts (a multipart upload), read back.
    big = os.urandom(12 * 1024 * 1024 + 17)
    with aioflux.open(where.url("big.bin"), "wb", client=store,
                      writer=WriterOptions(part_size=5 * 1024 * 1024)) as f:
        for at in range(0, len(big), 1_000_000):
            f.write(big[at:at + 1_000_000])
    with aioflux.open(where.url("big.bin"), "rb") as f:
        assert f.read(10) == big[:10]
        f.seek(len(big) - 100)
        assert f.read() == big[-100:]
        f.seek(0)
        assert f.read() == big
    # An exception inside the with block publishes nothing and leaves no
    # open multipart upload.
    with pytest.raises(RuntimeError, match="stop"):
        with aioflux.open(where.url("never.bin"), "wb", client=store,
                          writer=WriterOptions(part_size=5 * 1024 * 1024)) as f:
            f.write(big)
            raise RuntimeError("stop")
    assert "never.bin" not in where.names()
    assert call(store.list_multipart_uploads(where.bucket, where.base)) == []


def test_retention_deletes_in_batches_on_s3(s3_where: Where,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux.s3._multipart import Multipart
    from aioflux.s3._store import S3Store
    from aioflux.torch import CheckpointManager

    batched: list[list[str]] = []
    single: list[str] = []
    batch, one = Multipart.delete_batch, S3Store._delete_request

    async def counted_batch(self: Multipart, bucket: str, names: Any) -> None:
        batched.append(list(names))
        await batch(self, bucket, names)

    async def counted_one(self: S3Store, bucket: str, name: str, etag: str | None) -> None:
        single.append(name)
        await one(self, bucket, name, etag)

    monkeypatch.setattr(Multipart, "delete_batch", counted_batch)
    monkeypatch.setattr(S3Store, "_delete_request", counted_one)
    with CheckpointManager(s3_where.url("run"), keep_last=1) as mgr:
        for step in (1, 2, 3):
            mgr.save({"step": step, "w": torch.full((1000,), float(step))}, step)
        assert [c.step for c in mgr.list()] == [3]
        assert mgr.load()["step"] == 3
    # Each retention pass: the manifest alone (the checkpoint vanishes at
    # once), then the rest of the directory in one DeleteObjects request.
    # (Each save also drops its claim once its manifest is written.)
    state = [f"{s3_where.base}run/step-{s:012d}/state.pt" for s in (1, 2)]
    claims = [[f"{s3_where.base}run/step-{s:012d}/claim.json"] for s in (1, 2, 3)]
    assert [names for names in batched if names] == [
        claims[0], claims[1], [state[0]], claims[2], [state[1]]]
    assert not [n for n in single if n.endswith("state.pt")]
    assert s3_where.names("run/") == ["run/history.jsonl", "run/step-000000000003/manifest.json",
                                      "run/step-000000000003/state.pt"]


@pytest.mark.timeout(180)
def test_two_rank_dcp_save_load_on_s3(s3_where: Where, tmp_path: Path) -> None:
    # Two ranks (gloo) save sharded, async and zstd checkpoints and load them
    # back (the worker checks every tensor); the ranks' stores come from
    # AWS_ENDPOINT_URL_S3, which the worker sets (a rank of the tests'
    # forkserver has the server's environment, not the test's).
    import torch.multiprocessing as mp

    from aioflux.local._store import TEMP_MARK
    from tests.torch._dcp_worker import run
    from tests.torch._forkserver import forkserver

    forkserver()  # the ranks start from it: torch imported once, not once a rank
    mp.start_processes(run, args=(2, str(tmp_path / "rendezvous"),
                                  os.environ["AWS_ENDPOINT_URL_S3"], s3_where.url("dcp")),
                       nprocs=2, join=True, start_method="forkserver")
    names = s3_where.names()
    for sub in ("plain", "zstd"):
        assert f"dcp/{sub}/.metadata" in names
        assert f"dcp/{sub}/.metadata.tmp" not in names
        assert len([n for n in names
                    if n.startswith(f"dcp/{sub}/") and n.endswith(".distcp")]) == 2
    assert not [n for n in names if TEMP_MARK in n]
    assert call(s3_where.store.list_multipart_uploads(s3_where.bucket, s3_where.base)) == []
