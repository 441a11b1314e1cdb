"""The blocking Client twin, including after fork and across pickling."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import pytest

from aioflux import Client, NotFound
from aioflux._core.crc import crc32c
from aioflux.gcs._xml import MIN_PART_SIZE


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
