"""Auth: ADC refresh off the loop, cached until near expiry; emulator anonymity."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from aioflux import AsyncClient
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
