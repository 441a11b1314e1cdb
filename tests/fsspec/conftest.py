"""One aioflux fsspec filesystem per backend: our emulator, fake-gcs-server,
moto (S3), Azurite (az) and the local filesystem (``backend``, for fsspec's own tests);
an empty folder for the tools that use fsspec (``site``); fsspec's registry
restored after ``aioflux.fsspec.register`` (``fsspec_state``)."""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client, ClientConfig
from aioflux._core.concurrency.portal import call
from aioflux.azure import AzureStore
from aioflux.fsspec import AiofluxFileSystem
from aioflux.fsspec._paths import split
from aioflux.s3 import S3Store
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY, unique_bucket

CONFIG = ClientConfig(max_concurrency=16, retry=FAST_RETRY)
BACKENDS = ["emulator", "fakegcs", "moto", "azurite", "localfs"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[AiofluxFileSystem,
                                                                               str]]:
    """``(fs, root)``: a filesystem and an empty folder on it."""
    kind = request.param
    if kind == "localfs":
        fs = AiofluxFileSystem("file", config=CONFIG, skip_instance_cache=True)
        yield fs, str(tmp_path)
        call(fs.store.aclose())
        return
    bucket = unique_bucket("fs")
    if kind == "azurite":
        azurite = request.getfixturevalue("azurite")
        # The Azure way: the store (and a spawned worker's) finds it in the environment.
        request.getfixturevalue("monkeypatch").setenv("AZURE_STORAGE_CONNECTION_STRING",
                                                      azurite.connection_string)
        store_az = AzureStore(CONFIG)
        call(store_az.create_bucket(bucket))
        call(store_az.aclose())
        fs = AiofluxFileSystem("az", config=CONFIG, skip_instance_cache=True)
    elif kind == "moto":
        moto = request.getfixturevalue("moto_s3")
        store = S3Store(CONFIG, endpoint=moto.endpoint)
        call(store.create_bucket(bucket))
        call(store.aclose())
        fs = AiofluxFileSystem("s3", config=CONFIG, endpoint=moto.endpoint,
                               skip_instance_cache=True)
    else:
        server: Any = request.getfixturevalue("emulator" if kind == "emulator" else "fake_gcs")
        with Client(CONFIG, endpoint=server.endpoint) as client:
            client.create_bucket(bucket)
        fs = AiofluxFileSystem("gs", config=CONFIG, endpoint=server.endpoint,
                               skip_instance_cache=True)
    yield fs, f"{bucket}/root-{uuid.uuid4().hex[:8]}"
    call(fs.store.aclose())


@dataclass
class Site:
    """An empty folder on one backend, for tools that reach it through fsspec.

    Attributes:
        scheme: ``gs`` (our emulator), ``s3`` (moto) or ``file``.
        fs: a filesystem with the server's endpoint.
        root: the folder's fsspec path (``bucket/root-...``, ``/tmp/.../root``).
        options: the storage options an ``aioflux-<scheme>://`` URL needs.
        env: what points a store built from the environment (a registered
            ``gs://`` or ``s3://``) at the server.
        emulator: the emulator, on gs.
    """

    scheme: str
    fs: AiofluxFileSystem
    root: str
    options: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    emulator: Emulator | None = None

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def url(self, name: str = "", protocol: str | None = None) -> str:
        """``aioflux-<scheme>://root/name`` (or ``protocol://``)."""
        return f"{protocol or 'aioflux-' + self.scheme}://{self.root}/{name}".rstrip("/")

    def names(self) -> list[str]:
        """Every object under the folder, relative, listed by the store itself."""
        bucket, name = split(self.scheme, self.root)
        store = self.fs.store

        async def listed() -> list[str]:
            return [o.name async for o in store.list_objects(bucket, name + "/")]

        return sorted(n[len(name) + 1:] for n in call(listed()))


SITES = ["gs", "s3", "file"]


@pytest.fixture(params=SITES)
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    """An empty folder on our emulator, moto and the local filesystem in turn."""
    kind = request.param
    if kind == "file":
        fs = AiofluxFileSystem("file", config=CONFIG, skip_instance_cache=True)
        yield Site("file", fs, str(tmp_path / "root"), {})
        call(fs.store.aclose())
        return
    bucket = unique_bucket("use")
    emulator: Emulator | None = None
    if kind == "s3":
        endpoint = request.getfixturevalue("moto_s3").endpoint
        store = S3Store(CONFIG, endpoint=endpoint)
        call(store.create_bucket(bucket))
        call(store.aclose())
        env = {"AWS_ENDPOINT_URL_S3": endpoint}
    else:
        emulator = request.getfixturevalue("emulator")
        endpoint = emulator.endpoint
        emulator.create_bucket(bucket)
        env = {"STORAGE_EMULATOR_HOST": endpoint}
    fs = AiofluxFileSystem(kind, config=CONFIG, endpoint=endpoint, skip_instance_cache=True)
    yield Site(kind, fs, f"{bucket}/root-{uuid.uuid4().hex[:8]}", {"endpoint": endpoint}, env,
               emulator)
    call(fs.store.aclose())


@pytest.fixture
def fsspec_state() -> Iterator[None]:
    """fsspec's registry as it was, after a test that calls ``aioflux.fsspec.register``.

    The filesystems fsspec built and cached for URLs during the test (the
    ``aioflux-*`` ones and the registered ones) close their connections and
    leave its instance cache.
    """
    registry = importlib.import_module("fsspec.registry")
    saved = dict(registry._registry)
    known = dict(registry.known_implementations)
    try:
        yield
    finally:
        for cls in {AiofluxFileSystem, *saved.values(), *registry._registry.values()}:
            if isinstance(cls, type) and issubclass(cls, AiofluxFileSystem):
                for fs in list(cls._cache.values()):
                    if fs._held[0][0] == os.getpid():
                        call(fs._held[0][1].aclose())
                cls.clear_instance_cache()
        registry._registry.clear()
        registry._registry.update(saved)
        registry.known_implementations.clear()
        registry.known_implementations.update(known)
