"""``Client`` follows ``GcsStore`` method for method (httpcore's unasync check).

Client is SyncStore's face of GCS, generated from the async methods: every
public one has a blocking twin with the same parameters (names, kinds,
defaults and annotations) and docstring; only the return type differs (a
coroutine or async iterator against a value or iterator).
"""

from __future__ import annotations

import inspect

import pytest

from aioflux import AsyncClient, Client

# aclose's twin is close (the sync name).
ASYNC_ONLY = {"aclose"}
SYNC_ONLY = {"close"}


def _public_methods(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls)
            if not name.startswith("_") and callable(value)}


def test_every_async_method_has_a_sync_twin() -> None:
    missing = _public_methods(AsyncClient) - ASYNC_ONLY - _public_methods(Client)
    assert not missing, f"Client lacks {sorted(missing)}"
    extra = _public_methods(Client) - SYNC_ONLY - _public_methods(AsyncClient)
    assert not extra, f"Client has methods AsyncClient lacks: {sorted(extra)}"


@pytest.mark.parametrize("name", sorted(_public_methods(AsyncClient) - ASYNC_ONLY))
def test_sync_twin_has_the_same_parameters(name: str) -> None:
    aparams = inspect.signature(getattr(AsyncClient, name)).parameters
    sparams = inspect.signature(getattr(Client, name)).parameters
    describe = [(p.name, p.kind, p.default, p.annotation) for p in aparams.values()]
    assert [(p.name, p.kind, p.default, p.annotation) for p in sparams.values()] == describe


def test_constructors_share_their_settings() -> None:
    aparams = inspect.signature(AsyncClient).parameters
    sparams = inspect.signature(Client).parameters
    # ``transport=`` injects a test double into one async client; the sync
    # client must pickle and rebuild itself, so it takes settings only.
    shared = [(p.name, p.kind, p.default, p.annotation) for p in aparams.values()
              if p.name != "transport"]
    assert [(p.name, p.kind, p.default, p.annotation) for p in sparams.values()] == shared


@pytest.mark.parametrize("name", sorted(_public_methods(Client) - SYNC_ONLY))
def test_sync_docstrings_are_real(name: str) -> None:
    doc = inspect.getdoc(getattr(Client, name)) or ""
    assert "See " not in doc.splitlines()[0]
    assert "Args:" in doc or not list(inspect.signature(getattr(Client, name)).parameters)[1:]
    assert "Raises:" in doc


def test_documented_stats_line_works_on_both_clients() -> None:
    # README Troubleshooting: ``client.stats.retries``, ``client.stats.summary()``.
    client = Client(endpoint="http://127.0.0.1:9")
    try:
        assert client.stats.retries == 0 and client.stats.summary() == {}
        assert client.stats is client.aio.stats is client.transport.stats
        assert client.transport is client.aio.transport
    finally:
        client.close()
