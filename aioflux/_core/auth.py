"""How a request is authenticated: the ``Auth`` protocol every backend uses.

Auth sees the request it authenticates (method, URL, query, headers and,
on demand, the payload's SHA-256), so a bearer token and a signing scheme
such as S3's SigV4 plug into the same place. The transport calls it once per
attempt, and only for URLs on the endpoint's origin. An auth whose
credentials can be renewed (:class:`RenewableAuth`) is told when the server
rejects them (HTTP 401), and the request is sent once more.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["AnonymousAuth", "Auth", "AuthRequest", "RenewableAuth", "SharedCall",
           "StaticTokenAuth"]

Payload = bytes | bytearray | memoryview
T = TypeVar("T")


@dataclass(frozen=True)
class AuthRequest:
    """The request an :class:`Auth` is asked to authenticate.

    Attributes:
        method: HTTP method (``GET``, ``PUT``...).
        url: absolute URL, without the ``params`` below.
        params: query parameters sent beside ``url``.
        headers: the request's own headers (before authentication).
        payload: the body, or None for none.
    """

    method: str
    url: str
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    payload: Payload | None = field(default=None, repr=False)

    def payload_sha256(self) -> str:
        """Hex SHA-256 of the body: computed only when a signer asks (a
        bearer token never does, so large uploads pay nothing for it)."""
        return hashlib.sha256(self.payload if self.payload is not None else b"").hexdigest()


@runtime_checkable
class Auth(Protocol):
    """Supplies the headers that authenticate one request."""

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Headers to add to ``request`` (empty for anonymous)."""
        ...


@runtime_checkable
class RenewableAuth(Auth, Protocol):
    """An :class:`Auth` whose credentials can be renewed (a token revoked,
    or expired early by clock skew, is answered 401 while the local clock
    still trusts it)."""

    def invalidate(self, sent: Mapping[str, str]) -> bool:
        """The server answered 401 to a request sent with the headers
        ``sent``: renew them before the next request.

        Args:
            sent: the headers the rejected request carried.

        Returns:
            True if a request sent again would carry other credentials.
        """
        ...


class AnonymousAuth:
    """No credentials: for emulators, public buckets and local files."""

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return no headers."""
        return {}

    def __repr__(self) -> str:
        return "AnonymousAuth()"


class StaticTokenAuth:
    """A fixed bearer token (tests, short jobs with a token from elsewhere)."""

    def __init__(self, token: str) -> None:
        self._header = {"Authorization": f"Bearer {token}"}

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        """Return the Authorization header."""
        return dict(self._header)

    def __repr__(self) -> str:
        return "StaticTokenAuth(<redacted>)"


@dataclass
class _Flight(Generic[T]):
    pid: int
    future: concurrent.futures.Future[T] = field(default_factory=concurrent.futures.Future)
    failed_at: float | None = None


class SharedCall(Generic[T]):
    """A blocking call (a credential lookup, a token refresh: HTTP to a
    metadata server, a token endpoint, STS, or a credential_process) run
    once for every request that awaits it meanwhile, its failure included.

    It runs in a thread of its own, not the loop's executor: the waiters
    hold no executor thread (which the loop's DNS lookups and the
    application's ``to_thread`` need), and a call shared by the loops of
    several threads delays no loop's shutdown. A waiter that gives up
    (cancelled, timed out) leaves the call to the others.

    Args:
        call: the blocking call.
        name: the thread's name.
        hold: a failure stays the answer this many seconds after it, for
            the requests that were queued behind the client's semaphore
            while it ran; then the next request calls again.
    """

    def __init__(self, call: Callable[[], T], *, name: str, hold: float = 0.0) -> None:
        self._call = call
        self._name = name
        self._hold = hold
        # Waiters may be on several loops' threads; per process, as the
        # refresh thread may have held the parent's at a fork.
        self._locked_in = os.getpid()
        self._lock_of_process = threading.Lock()
        self._flight: _Flight[T] | None = None

    @property
    def _lock(self) -> threading.Lock:
        if self._locked_in != os.getpid():
            self._locked_in, self._lock_of_process = os.getpid(), threading.Lock()
        return self._lock_of_process

    def _current(self, flight: _Flight[T]) -> bool:
        # After fork, the thread that would end it does not exist here.
        if flight.pid != os.getpid():
            return False
        return flight.failed_at is None or time.monotonic() - flight.failed_at < self._hold

    def _run(self, flight: _Flight[T]) -> None:
        try:
            result = self._call()
        except BaseException as exc:  # every waiter must get an answer
            with self._lock:
                flight.failed_at = time.monotonic()
            flight.future.set_exception(exc)
        else:
            with self._lock:
                if self._flight is flight:
                    self._flight = None
            flight.future.set_result(result)

    async def __call__(self) -> T:
        """The result of the call in flight, or of a new one.

        Raises:
            Exception: what the call raised.
        """
        with self._lock:
            flight = self._flight
            if flight is None or not self._current(flight):
                flight = self._flight = _Flight(os.getpid())
                # Running: a waiter's cancellation cannot cancel it.
                flight.future.set_running_or_notify_cancel()
                threading.Thread(target=self._run, args=(flight,), daemon=True,
                                 name=self._name).start()
        return await asyncio.wrap_future(flight.future)
