"""``GcsStore`` (``AsyncClient``) pickles as the arguments that built it,
as every store does: a spawned DataLoader worker or a pickled
``CheckpointManager`` gets a store that opens its own connections. The
pickle carries the credentials given (as a ``Client``'s does), never a
token Application Default Credentials looked up, nor a transport.
"""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import google.auth
import pytest

from aioflux import AsyncClient, ClientConfig, SyncStore
from aioflux._core.auth import AuthRequest, StaticTokenAuth
from aioflux.gcs import GcsStore
from aioflux.gcs._auth import GoogleAuth
from aioflux.testing import Emulator, MockResponse, MockTransport


def _again(store: GcsStore) -> GcsStore:
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, GcsStore)
    return copy


async def test_an_unpickled_store_reads_what_the_original_wrote(
        emulator: Emulator, bucket: str, config: ClientConfig) -> None:
    async with AsyncClient(config, endpoint=emulator.endpoint) as store:
        info = await store.write(bucket, "pickled/o", b"payload")
        async with _again(store) as copy:
            assert copy.transport is not store.transport  # connections of its own
            assert await copy.read(bucket, "pickled/o") == b"payload"
            assert (await copy.stat(bucket, "pickled/o")).generation == info.generation
            await copy.write(bucket, "pickled/back", b"from the copy")
        assert await store.read(bucket, "pickled/back") == b"from the copy"


def test_a_sync_store_of_it_pickles(emulator: Emulator, bucket: str) -> None:
    with SyncStore(GcsStore(endpoint=emulator.endpoint)) as store:
        store.write(bucket, "o", b"x")
        copy = pickle.loads(pickle.dumps(store))
        with copy:
            assert copy.read(bucket, "o") == b"x"


async def test_the_pickle_keeps_the_settings() -> None:
    config = ClientConfig(max_concurrency=7)
    store = GcsStore(config, endpoint="https://storage.example", credentials="anonymous",
                     project="proj", user_project="payer-project")
    copy = _again(store)
    assert copy.config == config
    assert (copy.endpoint, copy.project, copy.user_project) == (
        "https://storage.example", "proj", "payer-project")
    assert copy._json_params == store._json_params


async def test_a_given_token_travels_and_a_transport_does_not() -> None:
    # A bearer token given is what the worker authenticates with, as a
    # pickled Client's; a transport (a test's mock) belongs to its process.
    mock = MockTransport(lambda request: MockResponse(200))
    store = GcsStore(endpoint="https://storage.example", credentials="given-token",
                     transport=mock)
    copy = _again(store)
    assert copy.transport is not mock
    assert isinstance(copy.transport.auth, StaticTokenAuth)
    request = AuthRequest("GET", "https://storage.example/storage/v1/b/b/o/x")
    assert await copy.transport.auth.headers(request) == {"Authorization": "Bearer given-token"}


class _AdcCreds:
    """Application Default Credentials as google-auth finds them."""

    token = "adc-token"
    expiry = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) + dt.timedelta(hours=1)
    valid = True

    def refresh(self, request: Any) -> None:
        raise AssertionError("a valid token is not refreshed")


async def test_a_token_looked_up_stays_out_of_the_pickle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(google.auth, "default",
                        lambda scopes=None, request=None: (_AdcCreds(), "project"))
    store = GcsStore(endpoint="https://storage.example")
    request = AuthRequest("GET", "https://storage.example/storage/v1/b/b/o/x")
    assert await store.transport.auth.headers(request) == {"Authorization": "Bearer adc-token"}
    state = pickle.dumps(store)
    assert b"adc-token" not in state  # the worker looks ADC up itself
    copy = pickle.loads(state)
    assert isinstance(copy.transport.auth, GoogleAuth)
    assert await copy.transport.auth.headers(request) == {"Authorization": "Bearer adc-token"}
