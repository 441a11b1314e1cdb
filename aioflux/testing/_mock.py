"""``MockTransport``: the client's logic without sockets (httpx's ``MockTransport``
is the model).

A handler answers each request the transport would send::

    def handler(request: MockRequest) -> MockResponse:
        if request.params.get("alt") == "media":
            return MockResponse(200, {"x-goog-hash": "crc32c=AAAAAA=="}, b"")
        return MockResponse.from_json({"name": "a", "size": "0", "generation": "1"})

    client = AsyncClient(transport=MockTransport(handler, endpoint=ENDPOINT),
                         endpoint=ENDPOINT)

Everything above the session runs as in production: authentication (only
for the endpoint's origin), the retry loop and ``Retry-After``, the error
mapping, the JSON and XML handlers, the checked media reads (their GETs take
the path the lean client leaves to aiohttp), the resumable uploads and the
redirect refusal. The seam is the transport's session factory: the mock
session builds a :class:`MockRequest` of each request, the handler returns a
:class:`MockResponse`, and the mock session hands it back shaped as the
part of ``aiohttp.ClientResponse`` the transport and handlers read
(:class:`aioflux._net.transport.HttpResponse`).

A handler may also raise, as a connection would: ``aiohttp.ClientConnectionError``
(a reset), ``asyncio.TimeoutError``... A response whose ``Content-Length``
is longer than its body is a connection cut mid-body: the bytes arrive, then
reading on fails with ``aiohttp.ClientPayloadError``, as it does in aiohttp.
"""

from __future__ import annotations

import http
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl

import aiohttp
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

from aioflux._core.auth import AnonymousAuth, Auth
from aioflux._core.checks.arguments import check_instance, endpoint_url
from aioflux._core.errors import InvalidArgument
from aioflux._core.settings.config import ClientConfig
from aioflux._net.transport import HttpResponse, Transport

__all__ = ["MockRequest", "MockResponse", "MockTransport"]

HeaderItems = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True)
class MockRequest:
    """One request as it would have gone on the wire.

    Attributes:
        method: HTTP method.
        url: ``scheme://host/path`` (percent-encoded as sent), without the query.
        params: the query: parameters in the URL and those passed beside it.
        headers: every header sent (case-insensitive), ``Authorization``
            included when the transport added it.
        body: the request body (empty for none).
    """

    method: str
    url: str
    params: dict[str, str]
    headers: CIMultiDictProxy[str]
    body: bytes = field(repr=False)

    def json(self) -> Any:
        """The body parsed as JSON.

        Returns:
            The parsed document.

        Raises:
            ValueError: the body is not JSON.
        """
        return json.loads(self.body)


@dataclass(frozen=True)
class MockResponse:
    """A handler's answer.

    Args:
        status: HTTP status.
        headers: response headers (a mapping, or pairs for repeated ones).
            ``Content-Length`` defaults to the body's length; a larger one
            makes the body arrive cut short.
        body: the body.
        reason: the reason phrase (default: the status's standard one).
    """

    status: int = 200
    headers: HeaderItems = ()
    body: bytes = b""
    reason: str | None = None

    @classmethod
    def from_json(cls, data: Any, status: int = 200,
                  headers: HeaderItems = ()) -> MockResponse:
        """A JSON answer (``Content-Type: application/json``).

        Args:
            data: what to serialise.
            status: HTTP status.
            headers: further headers.

        Returns:
            The response.
        """
        items = CIMultiDict(_pairs(headers))
        items.setdefault("Content-Type", "application/json; charset=UTF-8")
        return cls(status, list(items.items()), json.dumps(data).encode())


Handler = Callable[[MockRequest], MockResponse | Awaitable[MockResponse]]


class MockTransport(Transport):
    """A :class:`~aioflux._net.transport.Transport` whose requests a handler answers.

    Pass it to a client (``AsyncClient(transport=MockTransport(handler,
    endpoint=E), endpoint=E)``); give both the same endpoint, since
    credentials go only to the transport's endpoint origin.

    Args:
        handler: called with each :class:`MockRequest` (also for every retry),
            returns a :class:`MockResponse` (or an awaitable of one), or
            raises as a failed connection would.
        config: client settings (retries above all; ``RetryPolicy`` with
            tiny delays keeps tests fast).
        auth: authentication (default anonymous).
        endpoint: the API root (default real GCS; no request leaves the process).

    Attributes:
        requests: every request the handler was asked, in order.

    Raises:
        InvalidArgument: ``handler`` is not callable, ``config`` not a
            ``ClientConfig``, ``auth`` not an ``Auth`` (each named, as the
            clients name theirs).
        InvalidURL: ``endpoint`` is no URL (as ``AsyncClient``'s).
    """

    def __init__(self, handler: Handler, *, config: ClientConfig | None = None,
                 auth: Auth | None = None, endpoint: str | None = None) -> None:
        # Checked here: a wrong config failed in the transport's set-up as a
        # bare AttributeError ('int' object has no attribute 'tls_context'),
        # and a handler that is no function at the first request.
        if not callable(handler):
            raise InvalidArgument(f"MockTransport: handler must be a callable, got "
                                  f"{type(handler).__name__} {handler!r:.60}")
        check_instance("MockTransport", "config", config, ClientConfig, optional=True)
        check_instance("MockTransport", "auth", auth, Auth, optional=True)
        endpoint = endpoint_url("MockTransport", endpoint)
        self.handler = handler
        self.requests: list[MockRequest] = []
        super().__init__(config or ClientConfig(), auth or AnonymousAuth(),
                         session_factory=self._new_session, endpoint=endpoint)

    def _new_session(self, config: ClientConfig) -> aiohttp.ClientSession:
        # The part of a session the transport and the backends use (see
        # Transport's ``session_factory``), typed as what they expect.
        return cast(aiohttp.ClientSession, _MockSession(self, config))

    def _media_pool(self) -> None:
        # The lean client opens sockets of its own: media GETs go through
        # the session, the path the lean client leaves to aiohttp.
        return None

    def __repr__(self) -> str:
        return f"MockTransport({self.endpoint!r}, {len(self.requests)} requests)"


class _MockSession:
    """What the transport uses of ``aiohttp.ClientSession``, answered by a handler."""

    def __init__(self, transport: MockTransport, config: ClientConfig) -> None:
        self._transport = transport
        self._headers = {"User-Agent": config.user_agent}
        # Transport appends its redirect-refusing hook here, as to aiohttp's.
        self._trace_configs: list[aiohttp.TraceConfig] = []
        self.connector = None
        self.closed = False

    def request(self, method: str, url: str, *, params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None, data: object = None,
                allow_redirects: bool = True, ssl: object = None,
                timeout: object = None) -> _Exchange:
        return _Exchange(self._send(method, url, params, headers, data, allow_redirects))

    def get(self, url: str, **kwargs: Any) -> _Exchange:
        return self.request("GET", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> _Exchange:
        return self.request("PUT", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> _Exchange:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> _Exchange:
        return self.request("DELETE", url, **kwargs)

    async def close(self) -> None:
        self.closed = True

    async def _send(self, method: str, url: str, params: Mapping[str, str] | None,
                    headers: Mapping[str, str] | None, data: object,
                    allow_redirects: bool) -> HttpResponse:
        if self.closed:
            raise RuntimeError("MockTransport: the session is closed")
        base, _, query = url.partition("?")
        merged = dict(parse_qsl(query, keep_blank_values=True))
        merged.update(params or {})
        sent = CIMultiDict(self._headers)
        sent.update(headers or {})
        request = MockRequest(method, base, merged, CIMultiDictProxy(sent), await _bytes(data))
        self._transport.requests.append(request)
        answer = self._transport.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        response = _Answer(request, answer)
        if allow_redirects and 300 <= response.status < 400 and "Location" in response.headers:
            # aiohttp calls these before it follows; the transport's refuses.
            for trace in self._trace_configs:
                await trace.on_request_redirect.send(
                    cast(aiohttp.ClientSession, self), trace.trace_config_ctx(),
                    aiohttp.TraceRequestRedirectParams(
                        method, yarl.URL(url), sent, cast(aiohttp.ClientResponse, response)))
            raise RuntimeError("MockTransport does not follow redirects, and no hook "
                               "refused this one")
        return response


class _Exchange:
    """``async with session.request(...) as resp`` (aiohttp's request context)."""

    def __init__(self, sending: Awaitable[HttpResponse]) -> None:
        self._sending = sending

    async def __aenter__(self) -> HttpResponse:
        return await self._sending

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Body:
    """The body stream: the bytes, then the cut if it was announced longer."""

    def __init__(self, data: bytes, declared: int | None) -> None:
        self._data = data if declared is None else data[:declared]
        self._cut = declared is not None and declared > len(data)
        self._pos = 0

    def _fail(self) -> aiohttp.ClientPayloadError:
        # aiohttp's words when the connection closes before Content-Length.
        return aiohttp.ClientPayloadError("Response payload is not completed")

    async def read(self, n: int = -1) -> bytes:
        if self._pos >= len(self._data) and self._cut and n != 0:
            raise self._fail()
        stop = len(self._data) if n < 0 else min(len(self._data), self._pos + n)
        chunk = self._data[self._pos:stop]
        self._pos = stop
        if n < 0 and self._cut:
            raise self._fail()  # read() to the end loses what arrived, as aiohttp's
        return chunk

    async def iter_any(self) -> AsyncIterator[bytes]:
        if self._pos < len(self._data):
            chunk, self._pos = self._data[self._pos:], len(self._data)
            yield chunk
        if self._cut:
            raise self._fail()


class _Answer:
    """A :class:`MockResponse` shaped as the transport's :class:`HttpResponse`
    (plus what ``aiohttp.ClientResponseError`` is built from)."""

    def __init__(self, request: MockRequest, response: MockResponse) -> None:
        if not isinstance(response, MockResponse):
            raise TypeError(f"MockTransport handler must return a MockResponse, got "
                            f"{type(response).__name__}")
        headers = CIMultiDict(_pairs(response.headers))
        headers.setdefault("Content-Length", str(len(response.body)))
        self._status = response.status
        self._reason = response.reason if response.reason is not None else _phrase(
            response.status)
        self._headers = CIMultiDictProxy(headers)
        length = headers.get("Content-Length", "")
        self._length = int(length) if length.isdigit() else None
        self._content = _Body(response.body, self._length)
        self.request_info = aiohttp.RequestInfo(yarl.URL(request.url), request.method,
                                                request.headers)
        self.history: tuple[aiohttp.ClientResponse, ...] = ()

    @property
    def status(self) -> int:
        return self._status

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._headers

    @property
    def content_length(self) -> int | None:
        return self._length

    @property
    def content(self) -> _Body:
        return self._content

    async def read(self) -> bytes:
        return await self._content.read()

    def release(self) -> None:
        return None


class _Collect:
    """A stream writer that keeps what a payload writes."""

    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        self.data += chunk


async def _bytes(data: object) -> bytes:
    if data is None:
        return b""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, aiohttp.Payload):
        # As aiohttp sends it: the payload writes itself (in slices, for
        # the transport's large bodies) to the connection's writer.
        sink = _Collect()
        await data.write_with_length(cast(Any, sink), data.size)
        return bytes(sink.data)
    raise TypeError(f"MockTransport cannot send a body of type {type(data).__name__}")


def _pairs(headers: HeaderItems) -> list[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""
