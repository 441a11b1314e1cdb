"""Which of a :class:`~aioflux._net.transport.Transport`'s per-loop states
serves the running loop: one aiohttp session, request semaphore, read gate
and lean pool per event loop and process, built on a loop's first request,
kept for the few loops used lately, rebuilt in a forked child, and closed
on their own loops (:mod:`aioflux._net.loops` closes each with its loop).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable
from typing import Any

import aiohttp

from .._core.concurrency.portal import close_at_shutdown
from .._core.errors import InvalidArgument, describe
from .._core.settings.config import ClientConfig
from .failures import Op
from .http import MediaPool
from .loops import LoopState, close_with_loop
from .sessions import forbid_redirects, new_session

__all__ = ["LoopSessions"]

# Loops besides the current one whose sessions a transport keeps.
_KEPT_LOOPS = 4


class LoopSessions:
    """The per-loop part of a transport (its base class).

    Args:
        config: client configuration.
        ssl_context: TLS settings of every connection (None: the system's
            trust store).
        proxy: the proxy aiohttp's requests go through, or None.
        session_factory: builds the aiohttp session of a loop (None:
            :func:`aioflux._net.sessions.new_session`).
    """

    def __init__(self, config: ClientConfig, ssl_context: ssl.SSLContext | None,
                 proxy: str | None,
                 session_factory: Callable[[ClientConfig], aiohttp.ClientSession] | None
                 ) -> None:
        self.config = config
        self._ssl_context = ssl_context
        #: The proxy of the environment this endpoint goes through, or None.
        self.proxy = proxy
        self._session_factory = session_factory or self._default_session
        self._state: LoopState | None = None
        # The sessions of the other loops that used this transport lately
        # (an asynchronous fsspec filesystem runs on its caller's loop and
        # its sync files on the portal's): kept, so that going back to a
        # loop reuses its connections instead of opening new ones.
        self._other_states: list[LoopState] = []
        # Who closed this transport for good (``aclose(owner=...)``): its
        # next session would be one nothing closes.
        self._closed_by: str | None = None

    def _current(self, op: Op | None = None) -> LoopState:
        loop = asyncio.get_running_loop()
        state = self._state
        # A session belongs to one loop and one process: after fork or when
        # used from another loop (e.g. a DataLoader worker) build a new one.
        if state is None or state.loop is not loop or state.pid != os.getpid():
            if self._closed_by is not None:
                raise self._closed_error(op)
            kept = self._switch_to(loop)
            if kept is not None:
                return kept
            session = self._session_factory(self.config)
            forbid_redirects(session)
            state = LoopState(
                loop=loop,
                pid=os.getpid(),
                session=session,
                semaphore=asyncio.Semaphore(self.config.max_concurrency),
                media=self._media_pool(),
                reads=asyncio.Semaphore(self.config.max_concurrency),
            )
            self._state = state
            close_with_loop(state)
            close_at_shutdown(loop, self)
        return state

    def _switch_to(self, loop: asyncio.AbstractEventLoop) -> LoopState | None:
        """The state ``loop`` kept from its last use, made current; the one
        it replaces kept in turn (None: ``loop`` has none to go back to)."""
        pid = os.getpid()
        # A loop's run that ended closed its state (see loops.py); a forked
        # child's copies are the parent's.
        others = [o for o in self._other_states if o.pid == pid and not o.closed
                  and not o.loop.is_closed()]
        found = next((o for o in others if o.loop is loop), None)
        if found is not None:
            others.remove(found)
        current = self._state
        if current is not None and current.pid == pid and not current.closed:
            others.append(current)
        # Bounded: the oldest loop's session is closed on its loop.
        while len(others) > _KEPT_LOOPS:
            _close_state(others.pop(0), loop)
        self._other_states = others
        if found is not None:
            self._state = found
        return found

    def admit_read(self, op: Op) -> asyncio.Semaphore:
        """The gate an object read passes before anything of it is built.

        As many reads as the client has permits go on at once; the rest of
        a gathered batch waits here, at its top. Past it, each was built
        (URL, checks, retry state, one coroutine frame per layer) and parked
        at the request semaphore: 5,000 gathered reads ran 0.13 s of that
        while the first answers waited to be read (perf scenario read_small:
        1.10 s to 1.00 s). A read keeps its place through its retries, so a
        store that throttles sees no more reads than permits.

        Args:
            op: the read, for the error if the client is closed.

        Returns:
            The running loop's read gate (an ``asyncio.Semaphore``).
        """
        return self._current(op).reads

    def _closed_error(self, op: Op | None) -> InvalidArgument:
        owner = self._closed_by
        what = describe(op.operation, op.bucket, op.name, op.scheme) if op else "request"
        return InvalidArgument(f"{what}: the {owner} is closed (its aclose() or close() was "
                               f"called, or its with block ended); make a new {owner}")

    @property
    def closed(self) -> bool:
        """True once the owning client or store was closed (``aclose(owner=...)``)."""
        return self._closed_by is not None

    def _media_pool(self) -> MediaPool | None:
        """The lean client of a new loop's media GETs, or None to send them
        through the session (a mock transport has no sockets to give it)."""
        config = self.config
        if not config.lean_reads or self.proxy is not None:
            return None  # proxied bodies go through aiohttp, which speaks CONNECT
        t = config.timeouts
        return MediaPool(user_agent=config.user_agent, connect_timeout=t.connect,
                         read_stall=t.read_stall, idle_timeout=t.idle, total=t.total,
                         connection_limit=config.effective_connection_limit,
                         sockets_elsewhere=self._aiohttp_sockets, ssl_context=self._ssl_context)

    def _aiohttp_sockets(self) -> int:
        """Sockets of this loop's aiohttp connector (the lean pool's budget
        is ``connection_limit`` minus these)."""
        state = self._state
        connector: Any = state.session.connector if state is not None else None
        if connector is None:
            return 0
        # aiohttp has no public count: in use (or connecting) plus idle.
        idle = getattr(connector, "_conns", {})
        return len(getattr(connector, "_acquired", ())) + sum(len(c) for c in idle.values())

    def _default_session(self, config: ClientConfig) -> aiohttp.ClientSession:
        return new_session(config, self._ssl_context, proxy=self.proxy)

    @property
    def idle(self) -> bool:
        """True when this process holds no open session."""
        pid = os.getpid()
        return all(state is None or state.pid != pid or state.closed
                   for state in (self._state, *self._other_states))

    @property
    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session of the running loop (created on first use)."""
        return self._current().session

    async def aclose(self, *, owner: str | None = None) -> None:
        """Close this process's session, on its own loop.

        Args:
            owner: the client or store closing for good (``"client"``,
                ``"S3Store"``): every later request raises InvalidArgument
                naming it instead of opening a session nothing would close.
                None (the portal at shutdown, a dataset between uses)
                closes the connections only; the next request reopens them.
        """
        if owner is not None:
            self._closed_by = owner
        states = [self._state, *self._other_states]
        self._state, self._other_states = None, []
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for state in states:
            if state is None or state.pid != os.getpid():
                continue
            if running is state.loop and state.ends_with_loop is not None:
                await state.ends_with_loop.aclose()
            else:
                _close_state(state, running)


def _close_state(state: LoopState, running: asyncio.AbstractEventLoop | None) -> None:
    """Close ``state``'s session on its own loop, from ``running`` (another
    loop, or none): handed there, as a session closes on its own loop."""
    closing = state.ends_with_loop
    if closing is None or state.loop is running or state.loop.is_closed():
        return
    asyncio.run_coroutine_threadsafe(closing.aclose(), state.loop)
