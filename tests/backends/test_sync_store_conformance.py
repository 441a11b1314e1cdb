"""``SyncStore``: every store's blocking face has its async methods, and they
work, on every backend of the conformance suite (the GCS emulator and
fake-gcs-server, moto and our emulator's S3 face, Azurite, files, memory)
and on a web server's read-only store (nginx)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aioflux
from aioflux import (
    AzureStore,
    ClientConfig,
    GcsStore,
    HttpStore,
    InvalidRequest,
    LocalStore,
    NotFound,
    ObjectStore,
    S3Store,
    SyncStore,
)
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._core.records.urls import format_url, parse_url
from aioflux.testing import MemoryStore
from tests.backends.test_client_conformance import BACKENDS
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.nginx import Nginx, running_nginx

CONFIG = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
Face = tuple[SyncStore[Any], str, str, str]


def _store(request: pytest.FixtureRequest, backend: str) -> ObjectStore:
    if backend == "local":
        return LocalStore(CONFIG)
    if backend == "memory":
        return MemoryStore()
    if backend == "azurite":
        server: Any = request.getfixturevalue("azurite")
        return AzureStore(CONFIG, connection_string=server.connection_string)
    if backend in ("s3", "s3-emulator"):
        server = request.getfixturevalue("moto_s3" if backend == "s3" else "emulator")
        return S3Store(CONFIG, endpoint=server.endpoint if backend == "s3" else server.s3_endpoint)
    server = request.getfixturevalue("emulator" if backend == "emulator" else "fake_gcs")
    return GcsStore(CONFIG, endpoint=server.endpoint)


@pytest.fixture(params=BACKENDS)
def face(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Face]:
    """A store's blocking face, a bucket, the prefix a test writes under, and
    the backend."""
    with SyncStore(_store(request, request.param)) as store:
        if request.param == "local":
            url = parse_url(str(tmp_path / "objects") + "/")
            yield store, url.bucket, url.name, request.param
            return
        bucket = unique_bucket("sync")
        store.create_bucket(bucket)  # type: ignore[attr-defined]
        yield store, bucket, "", request.param


def _async_names(cls: type) -> set[str]:
    return {
        "close" if name == "aclose" else name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    }


def _sync_names(face: SyncStore[Any]) -> set[str]:
    cls = type(face)
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    }


def test_the_face_has_every_method_of_its_store(face: Face) -> None:
    store = face[0]
    assert _sync_names(store) == _async_names(type(store.aio))
    for name in _sync_names(store) - {"close"}:
        sync, sync_doc = getattr(type(store), name), inspect.getdoc(getattr(type(store), name))
        async_method = getattr(type(store.aio), name)
        # One docstring, the async method's, and its parameters.
        assert sync_doc == inspect.getdoc(async_method), name
        assert list(inspect.signature(sync).parameters) == list(
            inspect.signature(async_method).parameters
        ), name


def test_the_face_runs_every_kind_of_method(face: Face) -> None:
    store, bucket, prefix, kind = face
    data = os.urandom(300_001)
    info = store.write(bucket, prefix + "a/x", data, metadata=None)  # a coroutine's result
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert store.stat(bucket, prefix + "a/x").generation == info.generation
    assert store.exists(bucket, prefix + "a/x") and not store.exists(bucket, prefix + "a/none")
    assert store.read(bucket, prefix + "a/x", start=5, end=9) == data[5:9]
    into = bytearray(len(data))
    assert store.read(bucket, prefix + "a/x", into=into) == len(data) and into == data
    with pytest.raises(NotFound):  # a typed error, raised in the caller's thread
        store.stat(bucket, prefix + "a/none")
    # Async iterators are iterators: pages, then objects one by one.
    store.write(bucket, prefix + "a/y/z", b"z")
    pages = list(store.list(bucket, prefix + "a/", delimiter="/"))
    assert [o.name for p in pages for o in p.objects] == [prefix + "a/x"]
    assert [p for page in pages for p in page.prefixes] == [prefix + "a/y/"]
    assert [o.name for o in store.list_objects(bucket, prefix + "a/")] == [
        prefix + "a/x",
        prefix + "a/y/z",
    ]
    if hasattr(store, "stream"):
        assert {i.name: i.data for i in store.stream(bucket, prefix + "a/")} == {
            prefix + "a/x": data,
            prefix + "a/y/z": b"z",
        }
    # An object with async methods of its own comes back with a face too.
    features = store.features
    part = max(features.min_part_size, 5 * 1024 * 1024)
    part += -part % features.part_granularity
    body = os.urandom(part + 10)
    upload = store.start_upload(
        bucket, prefix + "b", content_type="application/x-test", part_size=part
    )
    upload.put(1, memoryview(body)[:part])
    published = upload.finish(2, memoryview(body)[part:], _crc(body))
    assert published.size == len(body) and store.read(bucket, prefix + "b") == body
    dropped = store.start_upload(bucket, prefix + "c", content_type="x", part_size=part)
    dropped.put(1, memoryview(body)[:part])
    dropped.abort()
    assert not store.exists(bucket, prefix + "c")
    copy = store.copy(bucket, prefix + "a/x", bucket, prefix + "d")
    assert copy.size == len(data)
    if features.compose:
        composed = store.compose(bucket, prefix + "e", [prefix + "a/x", prefix + "a/y/z"])
        assert store.read(bucket, prefix + "e") == data + b"z" and composed.size == len(data) + 1
    else:
        with pytest.raises(InvalidRequest):
            store.compose(bucket, prefix + "e", [prefix + "a/x"])
    if kind != "fake-gcs":  # fake-gcs-server has no upload listing
        assert isinstance(store.list_multipart_uploads(bucket, prefix), list)
    store.delete(bucket, prefix + "d")
    store.delete(bucket, prefix + "d", missing_ok=True)
    assert not store.exists(bucket, prefix + "d")


def _crc(data: bytes) -> Crc32c:
    running = Crc32c()
    running.update(data)
    return running


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    with running_nginx(tmp_path_factory.mktemp("sync-http")) as server:
        yield server


def test_a_web_servers_face(nginx: Nginx) -> None:
    data = os.urandom(70_001)
    (nginx.root / "w.bin").write_bytes(data)
    bucket = nginx.endpoint.removeprefix("http://")
    with SyncStore(HttpStore(CONFIG, scheme="http")) as store:
        assert _sync_names(store) == _async_names(HttpStore)
        assert store.stat(bucket, "w.bin").size == len(data)
        assert store.read(bucket, "w.bin", start=1, end=4) == data[1:4]
        assert store.read(bucket, "w.bin") == data
        with pytest.raises(NotFound):
            store.read(bucket, "none.bin")
        with pytest.raises(InvalidRequest):  # read-only: refused before any request
            store.write(bucket, "w.bin", b"x")


def test_the_url_functions_take_any_stores_face(face: Face) -> None:
    # client= is a store or any store's blocking face, not only GCS's Client.
    store, bucket, prefix, kind = face
    if kind == "memory":
        return  # no URL scheme reaches a MemoryStore
    scheme = store.features.scheme
    base = format_url(scheme, bucket, prefix + "urls/")
    store.write(bucket, prefix + "urls/a", b"first")
    with aioflux.open(base + "b", "wb", client=store) as out:
        out.write(b"second")
    with aioflux.open(base + "a", "rb", client=store) as got:
        assert got.read() == b"first"
    listed = sorted(aioflux.list_files(base, client=store))
    assert listed == [base + "a", base + "b"]
    assert dict(aioflux.load_files(listed, client=store)) == {base + "a": b"first",
                                                              base + "b": b"second"}
