"""One rule for an endpoint, wherever it is named.

``STORAGE_EMULATOR_HOST`` and the CLI's ``--endpoint`` take ``host:port``
(the form emulators print) for ``http://host:port``; ``Client(endpoint=
"127.0.0.1:9023")`` was refused. Now ``endpoint=`` of every client, store
and dataset takes the same forms and refuses the same ones
(``aioflux._core.checks.arguments.endpoint_url``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from aioflux import AsyncClient, Client, InvalidURL, S3Store
from aioflux.cli._common import endpoint_arg
from aioflux.testing import Emulator
from aioflux.torch import DatasetSettings, ObjectMapDataset

ACCEPTED = {
    "127.0.0.1:9023": "http://127.0.0.1:9023",
    "localhost:9023": "http://localhost:9023",
    "[::1]:9023": "http://[::1]:9023",
    "storage.example": "http://storage.example",
    "localhost": "http://localhost",
    "emulator:4443/": "http://emulator:4443",
    "http://127.0.0.1:9023/": "http://127.0.0.1:9023",
    "https://storage.example:4443": "https://storage.example:4443",
}
REFUSED = ["notaurl", "host:abc", "127.0.0.1:99999", "ftp://storage.example",
           "127.0.0.1:9023?key=x", "user:pw@127.0.0.1:9023", "[::1:9023", ""]


def _gcs(value: str) -> str:
    return AsyncClient(endpoint=value).endpoint


def _sync(value: str) -> str:
    with Client(endpoint=value) as client:
        return client.aio.endpoint


def _env(value: str) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", value)
        return AsyncClient().endpoint


def _s3(value: str) -> str:
    return S3Store(endpoint=value, region="us-east-1").endpoint


def _dataset(value: str) -> str:
    endpoint = ObjectMapDataset([], settings=DatasetSettings(endpoint=value))._source.endpoint
    assert endpoint is not None
    return endpoint


def _cli(value: str) -> str:
    # What the CLI does with --endpoint: its argparse type, then the client.
    try:
        endpoint = endpoint_arg(value)
    except argparse.ArgumentTypeError as exc:
        raise InvalidURL(str(exc)) from exc
    return _gcs(endpoint)


WAYS: dict[str, Callable[[str], str]] = {
    "AsyncClient": _gcs, "Client": _sync, "STORAGE_EMULATOR_HOST": _env, "S3Store": _s3,
    "ObjectMapDataset": _dataset, "--endpoint": _cli,
}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("value", sorted(ACCEPTED))
def test_every_way_of_naming_an_endpoint_takes_the_same_forms(way: str, value: str) -> None:
    assert WAYS[way](value) == ACCEPTED[value]


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("value", REFUSED)
def test_every_way_of_naming_an_endpoint_refuses_the_same_forms(way: str, value: str) -> None:
    if value == "" and way == "STORAGE_EMULATOR_HOST":
        pytest.skip("empty means unset there (the default endpoint)")
    with pytest.raises(InvalidURL) as info:
        WAYS[way](value)
    assert "pw" not in str(info.value)


def test_host_and_port_reach_the_emulator(emulator: Emulator, bucket: str) -> None:
    gcs = urlsplit(emulator.endpoint).netloc
    with Client(endpoint=gcs) as client:
        client.write(bucket, "forms/a", b"by host:port")
        assert client.read(bucket, "forms/a") == b"by host:port"
    ds = ObjectMapDataset.from_prefix(f"gs://{bucket}/forms/",
                                      settings=DatasetSettings(endpoint=gcs), transform=bytes)
    assert [ds[0]] == [b"by host:port"]


async def test_host_and_port_reach_the_emulators_s3_face(emulator: Emulator,
                                                         bucket: str) -> None:
    emulator.store.put(bucket, "forms/s3", b"over s3")
    async with S3Store(endpoint=urlsplit(emulator.s3_endpoint).netloc, region="us-east-1",
                       addressing="path") as store:
        assert await store.read(bucket, "forms/s3") == b"over s3"
