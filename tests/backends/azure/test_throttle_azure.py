"""Azure's throttle drives the request-rate controller: a scripted Blob
service answers ``503 ServerBusy`` as Azure sends it (the code in the
``x-ms-error-code`` header and in an XML ``<Error>`` body; a HEAD's answer
has the header only), and the store counts it in ``stats.throttled``,
retries it outside ``max_attempts``, and waits a ``Retry-After`` in full.

Azure's scalability targets say a partition past its limit answers 503
(Server Busy) or 500 (Operation Timeout). Only ServerBusy is a throttle
here: ``OperationTimedOut`` is also what any operation the service did not
finish in time gets, and a throttle is retried until ``throttle_deadline``
passes with no request of the client succeeding, so one operation that
always times out would be retried for as long as the others succeed. It
stays a ``ServerError`` (retried, within ``max_attempts``).

Azurite has no request cap: tests/core/rate/test_throttle_servers.py runs
it behind a capping proxy that answers ServerBusy, where the throttles switch
pacing on.
"""

from __future__ import annotations

import time

import pytest

from aioflux import ClientConfig, RateLimited, RetryPolicy, ServerError
from aioflux.azure import AzureStore
from tests.backends.azure.test_azure_bad_servers import OBJ, Answer, Script, blob_answer, http

LEAN = pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
SAS = "sv=2023-11-03&ss=b&srt=sco&sp=rwdl&se=2099-01-01&sig=SECRETSIG%3D"


def server_busy(method: str = "GET", retry_after: str | None = None) -> bytes:
    """Azure's throttle: 503, ``x-ms-error-code: ServerBusy``, and (but to a
    HEAD) the XML error body with the request id and time."""
    body = b"" if method == "HEAD" else (
        b'\xef\xbb\xbf<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
        b"<Message>Operations per second is over the account limit.\n"
        b"RequestId:6f1e4c1a-b01e-0042-6d3a-1f2e3d000000\n"
        b"Time:2026-11-26T01:00:00.0000000Z</Message></Error>")
    headers = {"Content_Type": "application/xml", "x_ms_error_code": "ServerBusy",
               "x_ms_request_id": "6f1e4c1a-b01e-0042-6d3a-1f2e3d000000",
               "x_ms_version": "2023-11-03"}
    if retry_after is not None:
        headers["Retry_After"] = retry_after
    return http("503 Operations per second is over the account limit.", body, **headers)


def _store(base: str, lean: bool = True, **config: object) -> AzureStore:
    settings = {"lean_reads": lean, "retry": RetryPolicy(max_attempts=1, initial_delay=0.001),
                **config}
    return AzureStore(ClientConfig(**settings), endpoint=base, sas_token=SAS)  # type: ignore[arg-type]


def _busy_then(times: int, then: Answer | None = None, retry_after: str | None = None) -> Script:
    """A server answering ServerBusy ``times`` times (the first with
    ``retry_after``), then as ``then`` does (a blob of OBJ by default)."""
    fine = blob_answer()
    arrivals: list[float] = []

    def answer(method: str, target: str, head: bytes) -> Answer:
        arrivals.append(time.monotonic())
        if len(arrivals) <= times:
            return server_busy(method, retry_after if len(arrivals) == 1 else None)
        return then if then is not None else fine(method, target, head)

    script = Script(answer)
    script.arrivals = arrivals  # type: ignore[attr-defined]
    return script


@LEAN
async def test_server_busy_is_a_throttle_and_retry_after_is_waited(lean: bool) -> None:
    server = _busy_then(2, retry_after="1")
    # One attempt allowed: the two throttles do not count against it.
    async with server as base, _store(base, lean) as store:
        assert await store.read("ctr", "o") == OBJ
        assert store.stats.throttled == 2 and store.stats.failures == 0
    arrivals = server.arrivals  # type: ignore[attr-defined]
    assert len(arrivals) == 3
    assert arrivals[1] - arrivals[0] >= 0.99  # Retry-After: 1, waited in full


async def test_a_heads_bodiless_server_busy_is_a_throttle() -> None:
    # A HEAD's answer has no body: the x-ms-error-code header names the code.
    fine = http("200 OK", ETag='"0x8DC0000000000A1"', x_ms_blob_type="BlockBlob",
                Last_Modified="Wed, 25 Nov 2026 10:00:00 GMT")
    server = _busy_then(3, then=fine)
    async with server as base, _store(base) as store:
        info = await store.stat("ctr", "o")
        assert (info.bucket, info.name, info.size) == ("ctr", "o", 0)
        assert store.stats.throttled == 3
    assert len(server.heads("HEAD")) == 4


async def test_a_write_answered_server_busy_is_sent_again() -> None:
    server = _busy_then(2, then=http("201 Created", ETag='"0x2A"',
                                     Last_Modified="Wed, 25 Nov 2026 10:00:00 GMT"))
    async with server as base, _store(base) as store:
        await store.write("ctr", "o", b"0123456789")
        assert store.stats.throttled == 2
    puts = server.heads("PUT")
    assert len(puts) == 3 and server.bodies[-1] == b"0123456789"


async def test_with_the_controller_off_server_busy_is_a_failed_attempt() -> None:
    async with Script(lambda m, t, h: server_busy(m)) as base, \
            _store(base, request_rate="off") as store:
        with pytest.raises(RateLimited) as caught:
            await store.read("ctr", "o")
        assert store.stats.requests == 1 and store.stats.throttled == 1
    assert caught.value.reason == "ServerBusy" and caught.value.status == 503
    message = str(caught.value)
    assert "ctr/o" in message and "ServerBusy" in message, message
    assert "SECRETSIG" not in message


async def test_operation_timed_out_is_a_server_error_not_a_throttle() -> None:
    body = (b'<?xml version="1.0" encoding="utf-8"?><Error><Code>OperationTimedOut</Code>'
            b"<Message>Operation could not be completed within the specified time.</Message>"
            b"</Error>")
    timed_out = http("500 Operation could not be completed within the specified time.", body,
                     x_ms_error_code="OperationTimedOut")
    async with Script(lambda m, t, h: timed_out) as base, _store(base) as store:
        with pytest.raises(ServerError) as caught:
            await store.read("ctr", "o")
        assert store.stats.requests == 1 and store.stats.throttled == 0
    assert not isinstance(caught.value, RateLimited)
    assert caught.value.reason == "OperationTimedOut"
