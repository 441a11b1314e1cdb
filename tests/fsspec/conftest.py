"""One aioflux fsspec filesystem per backend: our emulator, fake-gcs-server,
moto (S3) and the local filesystem."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client, ClientConfig
from aioflux._core.portal import call
from aioflux.fsspec import AiofluxFileSystem
from aioflux.s3 import S3Store
from tests.conftest import FAST_RETRY, unique_bucket

CONFIG = ClientConfig(max_concurrency=16, retry=FAST_RETRY)
BACKENDS = ["emulator", "fakegcs", "moto", "localfs"]


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
    if kind == "moto":
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
