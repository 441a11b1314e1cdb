"""The http(s) store's transport: the client's permits, retries and error
mapping, with each attempt handed its loop's connections, aiohttp's session
and the lean client's pool (:mod:`aioflux._net.http`) both, so a read can
take the lean path and fall back to aiohttp within one attempt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._core.auth import AuthRequest
from .failures import Op
from .loops import LoopState
from .transport import Transport

__all__ = ["WebTransport"]

T = TypeVar("T")


class WebTransport(Transport):
    """A :class:`~aioflux._net.transport.Transport` whose calls see the loop's state."""

    async def run_on(self, op: Op, method: str, url: str,
                     call: Callable[[LoopState], Awaitable[T]]) -> T:
        """Run ``call`` under the client's permit and retries, one attempt a call.

        Args:
            op: operation, bucket and object, for errors.
            method: the HTTP method the call sends.
            url: the URL it requests.
            call: one attempt, given the loop's connections (``session``,
                ``media``: the lean pool, None where lean reads are off).

        Returns:
            The call's result.

        Raises:
            StorageError: the most specific subclass for the failure.
        """
        request = AuthRequest(method, url)

        async def send(state: LoopState, _auth: dict[str, str]) -> T:
            return await call(state)

        return await self.retrying(lambda: self._attempt(op, request, send))
