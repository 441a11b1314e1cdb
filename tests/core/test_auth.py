"""Auth: ADC refresh off the loop, cached until near expiry; emulator anonymity."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from aioflux import AsyncClient, InvalidURL
from aioflux._core.auth import AnonymousAuth, AuthRequest, StaticTokenAuth
from aioflux.gcs._auth import GoogleAuth, resolve_auth

REQUEST = AuthRequest("GET", "https://storage.googleapis.com/storage/v1/b/b/o/x")


class FakeCredentials:
    def __init__(self, lifetime: dt.timedelta) -> None:
        self.lifetime = lifetime
        self.token: str | None = None
        self.expiry: dt.datetime | None = None
        self.refresh_threads: list[int] = []

    @property
    def valid(self) -> bool:
        return self.token is not None

    def refresh(self, _request: Any) -> None:
        self.refresh_threads.append(threading.get_ident())
        self.token = f"tok{len(self.refresh_threads)}"
        self.expiry = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) + self.lifetime


async def test_refreshes_off_loop_and_caches() -> None:
    creds = FakeCredentials(dt.timedelta(hours=1))
    auth = GoogleAuth(creds)
    assert await auth.headers(REQUEST) == {"Authorization": "Bearer tok1"}
    assert await auth.headers(REQUEST) == {"Authorization": "Bearer tok1"}
    assert len(creds.refresh_threads) == 1
    assert creds.refresh_threads[0] != threading.get_ident()


async def test_refreshes_when_near_expiry() -> None:
    creds = FakeCredentials(dt.timedelta(minutes=2))  # inside the 5-minute margin
    auth = GoogleAuth(creds)
    await auth.headers(REQUEST)
    assert await auth.headers(REQUEST) == {"Authorization": "Bearer tok2"}


def test_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(resolve_auth(None, use_emulator=True), AnonymousAuth)
    assert isinstance(resolve_auth("anonymous", use_emulator=False), AnonymousAuth)
    assert isinstance(resolve_auth("tok", use_emulator=False), StaticTokenAuth)
    assert isinstance(resolve_auth(None, use_emulator=False), GoogleAuth)
    assert isinstance(resolve_auth(FakeCredentials(dt.timedelta(1)), use_emulator=False),
                      GoogleAuth)
    assert "tok" not in repr(StaticTokenAuth("tok-secret"))


def test_emulator_host_env_selects_endpoint_and_anonymous(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9999")
    client = AsyncClient()
    assert client.endpoint == "http://127.0.0.1:9999"
    assert isinstance(client.transport.auth, AnonymousAuth)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    real = AsyncClient()
    assert real.endpoint == "https://storage.googleapis.com"
    assert isinstance(real.transport.auth, GoogleAuth)


@pytest.mark.parametrize("endpoint", [
    "https://storage.googleapis.com/",
    "https://storage.googleapis.com:443",
    "https://Storage.googleapis.com",
    "https://storage.us-east1.rep.googleapis.com",
    "https://storage.mtls.googleapis.com",
    "https://storage-psc1.p.googleapis.com",
    "https://gcs-proxy.internal.example",
])
def test_every_https_endpoint_gets_adc(endpoint: str) -> None:
    # Old: any spelling but DEFAULT_ENDPOINT's went anonymous (a 401/403 later).
    assert isinstance(AsyncClient(endpoint=endpoint).transport.auth, GoogleAuth)


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1:4443",
    "http://gcs-emulator:4443",
    "https://127.0.0.1:4443",
    "https://localhost:4443",
    "https://[::1]:4443",
])
def test_emulator_endpoints_get_no_credentials(endpoint: str) -> None:
    assert isinstance(AsyncClient(endpoint=endpoint).transport.auth, AnonymousAuth)
    # Unless given: then they are sent, as the caller asked.
    assert isinstance(AsyncClient(endpoint=endpoint, credentials="t").transport.auth,
                      StaticTokenAuth)


def test_storage_emulator_host_gets_no_credentials_even_over_https(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "https://emulator.example:4443")
    assert isinstance(AsyncClient().transport.auth, AnonymousAuth)


@pytest.mark.parametrize("endpoint", ["http://user:hunter2@127.0.0.1:1",
                                      "https://user:hunter2@storage.googleapis.com"])
def test_an_endpoint_with_a_password_is_refused(endpoint: str) -> None:
    # Old: accepted, then aiohttp's bare ValueError at every request.
    with pytest.raises(InvalidURL, match="user:password") as info:
        AsyncClient(endpoint=endpoint, credentials="t")
    assert "hunter2" not in str(info.value)
