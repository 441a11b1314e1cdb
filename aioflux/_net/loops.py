"""The per-event-loop state of a :class:`~aioflux._net.transport.Transport`
(its aiohttp session, semaphores and lean pool), closed with the loop that
owns it or when its transport is dropped, and forgotten in a forked child,
where the parent's loops never run.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import aiohttp

from .http import MediaPool

__all__ = ["LoopState", "close_with_loop"]


@dataclass
class LoopState:
    loop: asyncio.AbstractEventLoop
    pid: int
    session: aiohttp.ClientSession
    semaphore: asyncio.Semaphore
    media: MediaPool | None
    #: object reads admitted at once (see :meth:`Transport.admit_read`)
    reads: asyncio.Semaphore
    ends_with_loop: AsyncGenerator[None, None] | None = None
    #: its connections are closed: an attempt must not start on it
    closed: bool = False


async def _open_until_loop_ends(state: LoopState) -> AsyncGenerator[None, None]:
    """Closes ``state``'s connections when it is closed: by ``aclose()``,
    or by asyncio when the loop's run ends (``asyncio.run`` and
    ``asyncio.Runner`` close every async generator still open on their
    loop), so a client used across several ``asyncio.run`` calls leaves no
    session open on a loop that is gone; and on its own loop when dropped
    while that loop still runs (asyncio's finalizer hook)."""
    try:
        yield
    finally:
        _OPEN_SESSIONS.pop(id(state.session), None)
        if state.pid == os.getpid():  # a forked child's copy is the parent's
            state.closed = True
            if state.media is not None:
                state.media.abort()
            if _abort_bodies_in_flight(state.session):
                await asyncio.sleep(0)  # their readers learn it before close() below
            await state.session.close()
        else:
            # Its sockets are the parent's: never closed here, and kept from
            # the collector, whose aiohttp finalizers logged "Unclosed client
            # session" and "Unclosed connector" in every forked worker.
            _PARENTS_SESSIONS.append(state.session)


def _abort_bodies_in_flight(session: aiohttp.ClientSession) -> bool:
    """Drop the sockets of aiohttp's requests in flight; True if there were any.

    ``session.close()`` closes them too, but first detaches each from its
    response: a body still arriving is then never told, and its reader
    waits forever (its read timeout went with the connection). Aborted
    here, the reader fails as on a dropped connection, which the attempt
    maps to a typed error.
    """
    connector: Any = getattr(session, "connector", None)
    aborted = False
    for protocol in list(getattr(connector, "_acquired", ())):
        sock = getattr(protocol, "transport", None)
        if sock is not None:
            sock.abort()
            aborted = True
    return aborted


# Every such generator, so that a forked child can end its copies at once:
# the parent's loops do not run there, and asyncio's finalizer of a copy
# collected later would call into a copy of the parent's loop.
_ENDING_WITH_LOOPS: weakref.WeakSet[AsyncGenerator[None, None]] = weakref.WeakSet()
# In a forked child: the parent's sessions, held until the child exits.
_PARENTS_SESSIONS: list[aiohttp.ClientSession] = []
# Every session a generator above will close, held until it does. A
# transport dropped unclosed leaves its state and generator as a reference
# cycle, which the collector would finalize in one pass: the session before
# the generator's close could run on the loop, and aiohttp's "Unclosed
# client session" warning in whatever code runs then. Held here, only the
# generator is collected, and asyncio's hook closes it, the session with it,
# on its loop.
_OPEN_SESSIONS: dict[int, tuple[aiohttp.ClientSession, asyncio.AbstractEventLoop]] = {}


def close_with_loop(state: LoopState) -> None:
    _forget_sessions_of_closed_loops()
    if isinstance(state.session, aiohttp.ClientSession):  # not a mock's
        _OPEN_SESSIONS[id(state.session)] = (state.session, state.loop)
    gen = _open_until_loop_ends(state)
    try:  # run it to its yield: the running loop now tracks it
        gen.asend(None).send(None)
    except StopIteration:
        pass
    state.ends_with_loop = gen
    _ENDING_WITH_LOOPS.add(gen)


def _forget_sessions_of_closed_loops() -> None:
    """Let go of the sessions whose loops were closed without ending their
    generators (``loop.close()`` with no ``shutdown_asyncgens()``): nothing
    can close them now, and held they would pile up; the collector's
    warning about them is then true."""
    for key, (_, loop) in list(_OPEN_SESSIONS.items()):
        if loop.is_closed():
            del _OPEN_SESSIONS[key]


def _end_inherited_in_child() -> None:
    for gen in list(_ENDING_WITH_LOOPS):
        try:  # its finally returns at once here (another pid): no await
            gen.aclose().send(None)
        except (StopIteration, RuntimeError):
            pass
    _ENDING_WITH_LOOPS.clear()


os.register_at_fork(after_in_child=_end_inherited_in_child)
