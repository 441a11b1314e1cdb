"""MockTransport refuses a wrong argument by name, as the clients do, where
it failed later with a bare AttributeError or TypeError."""

from __future__ import annotations

from typing import Any

import pytest

from aioflux import AsyncClient, ClientConfig, InvalidArgument, InvalidURL
from aioflux.testing import MockRequest, MockResponse, MockTransport

ENDPOINT = "https://storage.example"


def _answer(request: MockRequest) -> MockResponse:
    return MockResponse.from_json({"error": {"code": 404, "message": "No such object"}}, 404)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"config": 3}, "config must be a ClientConfig, got int 3"),
    ({"config": {"max_concurrency": 2}}, "config must be a ClientConfig, got dict"),
    ({"auth": "token"}, "auth must be a Auth, got str 'token'"),
])
def test_a_wrong_argument_is_named(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument, match=f"^MockTransport: {named}"):
        MockTransport(_answer, **kwargs)


def test_a_handler_that_cannot_be_called_is_named() -> None:
    with pytest.raises(InvalidArgument, match=r"^MockTransport: handler must be a callable, "
                                              r"got MockResponse"):
        MockTransport(MockResponse(200))  # type: ignore[arg-type]


def test_an_endpoint_that_is_no_url_is_named() -> None:
    with pytest.raises(InvalidURL, match="MockTransport"):
        MockTransport(_answer, endpoint=3)  # type: ignore[arg-type]


async def test_the_checked_arguments_still_serve_a_client() -> None:
    transport = MockTransport(_answer, config=ClientConfig(max_concurrency=2),
                              endpoint=ENDPOINT + "/")
    assert transport.endpoint == ENDPOINT
    async with AsyncClient(transport=transport, endpoint=ENDPOINT) as client:
        assert not await client.exists("bkt", "o")
    assert [r.method for r in transport.requests] == ["GET"]
