"""A missing object is said the same way on every store, naming it:
``No such object: bucket/name`` (GCS's words). S3 said "HTTP 404: NOT
FOUND" to a HEAD (moto; "Not Found" from our emulator's S3 face) and "The
specified key does not exist." to a GET; Azure added a request id and a time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aioflux import AsyncClient, ClientConfig, LocalStore, NotFound, ObjectStore, S3Store
from aioflux._core.records.urls import parse_url
from aioflux.azure import AzureStore
from tests.conftest import FAST_RETRY, unique_bucket

CONFIG = ClientConfig(max_concurrency=4, retry=FAST_RETRY)
STORES = ["gs", "s3-moto", "s3-emulator", "az", "file"]


@pytest.fixture(params=STORES)
async def place(request: pytest.FixtureRequest,
                tmp_path: Path) -> AsyncIterator[tuple[str, ObjectStore, str, str]]:
    """(kind, store, bucket, the prefix names live under)."""
    kind = request.param
    store: Any
    if kind == "file":
        url = parse_url(f"{tmp_path}/")
        async with LocalStore(CONFIG) as store:
            yield kind, store, url.bucket, url.name
        return
    if kind == "az":
        azurite = request.getfixturevalue("azurite")
        store = AzureStore(CONFIG, connection_string=azurite.connection_string)
    elif kind == "gs":
        store = AsyncClient(CONFIG, endpoint=request.getfixturevalue("emulator").endpoint)
    else:
        server = request.getfixturevalue("moto_s3" if kind == "s3-moto" else "emulator")
        store = S3Store(CONFIG, endpoint=server.endpoint if kind == "s3-moto"
                        else server.s3_endpoint)
    async with store:
        bucket = unique_bucket("missing")
        await store.create_bucket(bucket)
        yield kind, store, bucket, ""


CALLS: dict[str, Callable[[ObjectStore, str, str], Awaitable[object]]] = {
    "stat": lambda s, b, n: s.stat(b, n),  # a HEAD on S3 and Azure: no body
    "read": lambda s, b, n: s.read(b, n),
    "read a range": lambda s, b, n: s.read(b, n, start=1, end=3),
    "delete": lambda s, b, n: s.delete(b, n),
    "copy": lambda s, b, n: s.copy(b, n, b, n + ".copy"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_missing_object_is_named_the_same_way_on_every_store(
        place: tuple[str, ObjectStore, str, str], call: str) -> None:
    kind, store, bucket, prefix = place
    name = prefix + "no/such.txt"
    with pytest.raises(NotFound) as failed:
        await CALLS[call](store, bucket, name)
    message = str(failed.value)
    assert (failed.value.bucket, failed.value.name) == (bucket, name)
    if kind == "file":
        # The OS's words, after the whole path.
        assert f"file:///{bucket}/{name} failed: No such file or directory" in message, message
        return
    assert "failed: HTTP 404" in message, message
    assert f"No such object: {bucket}/{name}" in message, message
    for noise in ("NOT FOUND", "Not Found", "does not exist", "RequestId"):
        assert noise not in message, message


@pytest.mark.parametrize("call", ["read", "stat"])
async def test_a_missing_bucket_is_named(place: tuple[str, ObjectStore, str, str],
                                         call: str) -> None:
    kind, store, _, _ = place
    bucket = unique_bucket("nobucket")  # on the filesystem: no such first directory
    with pytest.raises(NotFound) as failed:
        await CALLS[call](store, bucket, "x.txt")
    message = str(failed.value)
    if kind == "file":
        assert f"file:///{bucket}/x.txt failed: No such file or directory" in message, message
    elif kind == "gs":
        assert "bucket does not exist" in message, message  # GCS's own words
    elif call == "stat" and kind != "az":
        # S3 answers a HEAD with a bare 404, bucket or object alike.
        assert (f"No such object: {bucket}/x.txt (or no bucket {bucket}: the answer does not "
                "say which)") in message, message
    else:
        what = "container" if kind == "az" else "bucket"
        assert message.endswith(f"No such {what}: {bucket}"), message


async def test_a_copy_into_a_missing_bucket_names_the_destination(
        place: tuple[str, ObjectStore, str, str]) -> None:
    # The source is there: the copy's error is about where it was going.
    kind, store, bucket, prefix = place
    await store.write(bucket, prefix + "src", b"x")
    dest = unique_bucket("nobucket")
    with pytest.raises(NotFound) as failed:
        await store.copy(bucket, prefix + "src", dest, "dst")
    assert (failed.value.operation, failed.value.bucket, failed.value.name) == \
        ("copy", dest, "dst")
    root = f"file:///{dest}" if kind == "file" else f"{kind[:2]}://{dest}"
    assert str(failed.value).startswith(f"copy {root}/dst failed: "), str(failed.value)
