"""GCS token refreshes: shared by the requests that wait for them (failures
included), bounded by the client's timeouts, cancellable, and repeated once
when the server answers 401 to a token the local clock still trusts.

The token endpoint that hangs is a local socket on 127.0.0.1; everything
else is in-process (``MockTransport``, fake credentials).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import google.auth
import google.auth.exceptions
import google.oauth2.credentials
import pytest

from aioflux import AsyncClient, Client, ClientConfig, PermissionDenied, RetryPolicy, Timeouts
from aioflux._core import auth as core_auth
from aioflux._core.auth import AuthRequest, StaticTokenAuth
from aioflux._core.errors import TransportError
from aioflux.gcs import _auth
from aioflux.gcs._auth import GoogleAuth
from aioflux.testing import MockRequest, MockResponse, MockTransport

ENDPOINT = "https://storage.example"
REQUEST = AuthRequest("GET", f"{ENDPOINT}/storage/v1/b/b/o/x")
CONFIG = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002))
# What the tests below wait for is an event; this only bounds how long a
# wait may take before the event counts as never coming (a hang), far
# beyond what any step takes on a loaded machine.
HANG = 30.0


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class Creds:
    """google-auth-like credentials whose refresh is scripted.

    ``held``: a refresh blocks until the test sets ``released`` (a token
    endpoint that answers when the test says so, not after some time); at
    most twice :data:`HANG`, so a test that fails never leaves it blocked.
    ``entered`` is set once a refresh is under way.
    """

    def __init__(self, *, token: str | None = None, delay: float = 0.0,
                 fail: bool = False, held: bool = False) -> None:
        self.token = token
        self.expiry: dt.datetime | None = _utcnow() + dt.timedelta(hours=1) if token else None
        self.delay = delay
        self.fail = fail
        self.refreshes = 0
        self.entered = threading.Event()
        self.released = threading.Event()
        if not held:
            self.released.set()

    @property
    def valid(self) -> bool:
        return self.token is not None

    def refresh(self, _request: Any) -> None:
        self.refreshes += 1
        self.entered.set()
        self.released.wait(2 * HANG)
        time.sleep(self.delay)
        if self.fail:
            raise google.auth.exceptions.RefreshError("token endpoint unavailable")
        self.token = f"fresh{self.refreshes}"
        self.expiry = _utcnow() + dt.timedelta(hours=1)


async def _until(check: Callable[[], bool]) -> None:
    """Let the loop run until ``check()`` holds (:data:`HANG` at most)."""
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), HANG)


# -- one refresh per burst -------------------------------------------------------------


async def test_concurrent_requests_share_one_failed_refresh() -> None:
    creds = Creds(fail=True, held=True)
    auth = GoogleAuth(creds)
    waiters = asyncio.gather(*(auth.headers(REQUEST) for _ in range(8)),
                             return_exceptions=True)
    try:
        await _until(creds.entered.is_set)
        # Every waiter has taken its first step, so asked for a token while
        # the refresh was still under way: it fails only once released.
        await asyncio.sleep(0)
        assert creds.refreshes == 1 and not waiters.done()
    finally:
        creds.released.set()
    results = await asyncio.wait_for(waiters, HANG)
    assert all(isinstance(r, PermissionDenied) for r in results), results
    assert "RefreshError" in str(results[0]) and "token endpoint unavailable" in str(results[0])
    # Old: each of the 8 waiters ran the refresh again, one after another.
    assert creds.refreshes == 1


async def test_a_failed_adc_lookup_is_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def default(scopes: Any = None, request: Any = None) -> Any:
        calls.append(request)
        time.sleep(0.3)  # metadata probes timing out
        raise google.auth.exceptions.DefaultCredentialsError("no credentials here")

    monkeypatch.setattr(google.auth, "default", default)
    auth = GoogleAuth()
    results = await asyncio.wait_for(asyncio.gather(
        *(auth.headers(REQUEST) for _ in range(6)), return_exceptions=True), 10)
    assert all(isinstance(r, PermissionDenied) for r in results)
    assert "credentials='anonymous'" in str(results[0])  # what to do on an emulator
    assert len(calls) == 1
    assert calls[0] is not None  # a bounded transport, not google-auth's 120 s default


async def test_a_failure_is_retried_by_the_next_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    # The hold is timed on a clock the test moves: whether a request comes
    # within it follows from the test, not from how fast it ran.
    now = [1000.0]
    monkeypatch.setattr(core_auth, "time", SimpleNamespace(monotonic=lambda: now[0]))
    creds = Creds(fail=True)
    auth = GoogleAuth(creds)
    for _ in range(2):
        with pytest.raises(PermissionDenied):
            await auth.headers(REQUEST)
    now[0] += _auth.FAILURE_HOLD / 2
    with pytest.raises(PermissionDenied):
        await auth.headers(REQUEST)
    assert creds.refreshes == 1  # the second and third came within the hold
    now[0] += _auth.FAILURE_HOLD  # past it
    creds.fail = False
    assert await auth.headers(REQUEST) == {"Authorization": "Bearer fresh2"}


async def test_waiters_hold_no_executor_threads() -> None:
    creds = Creds(held=True)
    auth = GoogleAuth(creds)
    waiting = asyncio.gather(*(auth.headers(REQUEST) for _ in range(40)))
    try:
        await _until(creds.entered.is_set)  # the refresh is under way
        # The application's own work runs while the refresh still holds.
        # Old: 40 waiters parked on a lock in the loop's default executor,
        # so this waited for the refresh, which ends only when released.
        await asyncio.wait_for(asyncio.to_thread(lambda: None), HANG)
        assert not waiting.done()
    finally:
        creds.released.set()
    assert set(map(str, await asyncio.wait_for(waiting, HANG))) == {
        str({"Authorization": "Bearer fresh1"})}
    assert creds.refreshes == 1


def test_a_cancelled_waiter_neither_waits_nor_holds_the_loop_at_exit() -> None:
    creds = Creds(held=True)
    auth = GoogleAuth(creds)

    async def main() -> None:
        waiter = asyncio.ensure_future(auth.headers(REQUEST))
        await _until(creds.entered.is_set)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    # Ends the refresh if nothing else does: a loop whose exit waited for it
    # would hang until then.
    guard = threading.Timer(HANG, creds.released.set)
    guard.start()
    try:
        asyncio.run(main())
        # Old: the waiter's cancellation, then asyncio.run's shutdown, waited
        # for the refresh's executor thread: both returned only once released.
        assert not creds.released.is_set() and creds.token is None
    finally:
        guard.cancel()

    async def again() -> dict[str, str]:
        waiter = asyncio.ensure_future(auth.headers(REQUEST))
        await asyncio.sleep(0)  # asked while the refresh still holds
        creds.released.set()
        return await asyncio.wait_for(waiter, HANG)

    # The refresh went on for the next waiter (a new loop): still one.
    assert asyncio.run(again()) == {"Authorization": "Bearer fresh1"}
    assert creds.refreshes == 1


async def test_timeouts_total_bounds_the_wait() -> None:
    # The refresh holds until the test is over: only Timeouts.total ends the wait.
    creds = Creds(held=True)
    auth = GoogleAuth(creds, timeouts=Timeouts(total=0.2))
    try:
        with pytest.raises(TransportError, match=r"Timeouts\.total"):
            await asyncio.wait_for(auth.headers(REQUEST), HANG)
        assert not creds.released.is_set()
    finally:
        creds.released.set()


# -- the token endpoint's timeouts ----------------------------------------------------------


@pytest.fixture
def silent_token_endpoint() -> Iterator[str]:
    """A token endpoint that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/token"
    server.close()
    for conn in held:  # ends a refresh still waiting (the old 120 s)
        conn.close()


async def test_a_refresh_uses_the_clients_connect_and_read_timeouts(
        silent_token_endpoint: str) -> None:
    creds = google.oauth2.credentials.Credentials(
        token=None, refresh_token="refresh", client_id="id", client_secret="secret",
        token_uri=silent_token_endpoint)
    config = CONFIG.replace(timeouts=Timeouts(connect=1, read_stall=1))
    async with AsyncClient(config, endpoint=ENDPOINT, credentials=creds) as client:
        auth = client.transport.auth
        # Old: google-auth's default read timeout, 120 s, past the hang guard.
        # The refresh's request says which read timeout it had (requests'
        # ReadTimeout names it): the client's read_stall.
        with pytest.raises(PermissionDenied,
                           match=r"authenticate failed: .*\(read timeout=1\)"):
            await asyncio.wait_for(auth.headers(REQUEST), HANG)


# -- a 401 refreshes once --------------------------------------------------------------


def _stat_server(accepted: str | None,
                 config: ClientConfig = CONFIG) -> tuple[MockTransport, list[str | None]]:
    seen: list[str | None] = []

    async def handle(request: MockRequest) -> MockResponse:
        sent = request.headers.get("Authorization")
        seen.append(sent)
        await asyncio.sleep(0.05)  # the requests of a burst are all in flight
        if accepted is None or sent != f"Bearer {accepted}":
            return MockResponse.from_json(
                {"error": {"code": 401, "message": "Invalid Credentials",
                           "errors": [{"reason": "authError"}]}}, 401)
        return MockResponse.from_json({"bucket": "bkt", "name": "o", "size": "1",
                                       "generation": "1"})

    return MockTransport(handle, config=config, endpoint=ENDPOINT), seen


async def test_a_401_refreshes_the_token_and_retries_once() -> None:
    creds = Creds(token="revoked")  # valid by the local clock for an hour
    transport, seen = _stat_server(accepted="fresh1")
    transport.auth = GoogleAuth(creds)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        assert (await client.stat("bkt", "o")).name == "o"
        assert (await client.stat("bkt", "o")).name == "o"
    assert seen == ["Bearer revoked", "Bearer fresh1", "Bearer fresh1"]
    assert creds.refreshes == 1
    assert client.stats.retries == 1


async def test_concurrent_401s_cause_one_refresh() -> None:
    creds = Creds(token="revoked", delay=0.1)
    # All ten in flight at once: no slow start of a bucket new to the node
    # (the request-rate controller's, which would send eight first).
    transport, seen = _stat_server(accepted="fresh1",
                                   config=dataclasses.replace(CONFIG, request_rate="off"))
    transport.auth = GoogleAuth(creds)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        infos = await asyncio.gather(*(client.stat("bkt", "o") for _ in range(10)))
    assert [i.name for i in infos] == ["o"] * 10
    assert creds.refreshes == 1
    assert seen.count("Bearer revoked") == 10 and seen.count("Bearer fresh1") == 10


async def test_a_token_rejected_again_is_not_refreshed_in_a_loop() -> None:
    creds = Creds(token="revoked")
    transport, seen = _stat_server(accepted=None)
    transport.auth = GoogleAuth(creds)
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        with pytest.raises(PermissionDenied) as info:
            await client.stat("bkt", "o")
    assert info.value.status == 401
    assert seen == ["Bearer revoked", "Bearer fresh1"]
    assert creds.refreshes == 1


async def test_a_static_token_is_not_retried() -> None:
    transport, seen = _stat_server(accepted=None)
    transport.auth = StaticTokenAuth("fixed")
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        with pytest.raises(PermissionDenied):
            await client.stat("bkt", "o")
    assert seen == ["Bearer fixed"]


# -- pickling ------------------------------------------------------------------------


async def test_googleauth_pickles_by_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(google.auth, "default",
                        lambda scopes=None, request=None: (Creds(token="adc-token"), "p"))
    auth = GoogleAuth(timeouts=Timeouts(connect=3))
    assert await auth.headers(REQUEST) == {"Authorization": "Bearer adc-token"}
    state = pickle.dumps(auth)
    assert b"adc-token" not in state  # a worker looks ADC up itself
    again = pickle.loads(state)
    assert again._credentials is None and again._timeouts == Timeouts(connect=3)
    assert await again.headers(REQUEST) == {"Authorization": "Bearer adc-token"}
    # Old: TypeError, cannot pickle '_thread.lock' object.
    client = pickle.loads(pickle.dumps(Client(credentials=GoogleAuth(),
                                              endpoint="http://127.0.0.1:1")))
    assert isinstance(client.aio.transport.auth, GoogleAuth)
    client.close()
