"""Bad arguments fail at once with a typed error naming the argument.

Every client here points at a closed port with retries off: had a call sent
a request, it would raise TransportError, not the InvalidArgument /
InvalidURL asserted, so each case also shows that nothing was sent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import aioflux
from aioflux import (
    AsyncClient,
    Client,
    ClientConfig,
    InvalidArgument,
    InvalidURL,
    RetryPolicy,
    Timeouts,
    WriterOptions,
)

CLOSED = "http://127.0.0.1:9"
NO_RETRY = ClientConfig(retry=RetryPolicy.none())
B = "bkt"

# (label, call on a client, error class, text the message must contain)
CLIENT_CASES: list[tuple[str, Callable[[Any], Any], type[Exception], str]] = [
    ("lone surrogate name", lambda c: c.read(B, "\ud800"), InvalidURL, "name"),
    ("start str", lambda c: c.read(B, "o", start="1"), InvalidArgument, "start"),
    ("start None", lambda c: c.read(B, "o", start=None), InvalidArgument, "start"),
    ("start float", lambda c: c.read(B, "o", start=1.5), InvalidArgument, "start"),
    ("start True", lambda c: c.read(B, "o", start=True), InvalidArgument, "start"),
    ("start negative", lambda c: c.read(B, "o", start=-1), InvalidArgument, "start"),
    ("end before start", lambda c: c.read(B, "o", start=5, end=2), InvalidArgument, "range"),
    ("end str", lambda c: c.read(B, "o", end="9"), InvalidArgument, "end"),
    ("into bytes", lambda c: c.read(B, "o", into=bytes(10)), InvalidArgument, "into"),
    ("into list", lambda c: c.read(B, "o", into=[0] * 10), InvalidArgument, "into"),
    ("generation str", lambda c: c.read(B, "o", generation="1"), InvalidArgument, "generation"),
    ("bucket int", lambda c: c.stat(123, "o"), InvalidURL, "bucket"),
    ("bucket uppercase", lambda c: c.exists("Bad Bucket", "o"), InvalidURL, "bucket"),
    ("name None", lambda c: c.stat(B, None), InvalidURL, "name"),
    ("write str data", lambda c: c.write(B, "o", "text"), InvalidArgument, "data"),
    ("write metadata", lambda c: c.write(B, "o", b"x", metadata={"a": 1}), InvalidArgument,
     "metadata"),
    ("write precondition str", lambda c: c.write(B, "o", b"x", if_generation_match="0"),
     InvalidArgument, "if_generation_match"),
    ("write resumable str", lambda c: c.write(B, "o", b"x", resumable="yes"), InvalidArgument,
     "resumable"),
    ("write content_type", lambda c: c.write(B, "o", b"x", content_type=None), InvalidArgument,
     "content_type"),
    # A header value (served back as Content-Type; an XML upload sends it).
    ("write content_type CRLF", lambda c: c.write(B, "o", b"x", content_type="a/b\r\nX: y"),
     InvalidArgument, "content_type"),
    ("compose content_type NUL", lambda c: c.compose(B, "d", ["a"], content_type="a\x00"),
     InvalidArgument, "content_type"),
    ("compose sources str", lambda c: c.compose(B, "d", "abc"), InvalidArgument, "sources"),
    ("compose empty source", lambda c: c.compose(B, "d", ["ok", ""]), InvalidURL, "sources"),
    ("compose destination", lambda c: c.compose(B, "", ["a"]), InvalidURL, "destination"),
    ("delete missing_ok str", lambda c: c.delete(B, "o", missing_ok="no"), InvalidArgument,
     "missing_ok"),
    ("delete generation 0", lambda c: c.delete(B, "o", generation=0), InvalidArgument,
     "generation"),
    ("copy dest_name", lambda c: c.copy(B, "o", B, "\ud800"), InvalidURL, "dest_name"),
    ("copy dest_bucket", lambda c: c.copy(B, "o", "X", "o"), InvalidURL, "dest_bucket"),
    ("create_bucket", lambda c: c.create_bucket("B"), InvalidURL, "bucket"),
    ("list page_size str", lambda c: c.list(B, page_size="10"), InvalidArgument, "page_size"),
    ("list prefix None", lambda c: c.list(B, None), InvalidArgument, "prefix"),
    ("list_objects bucket", lambda c: c.list_objects("no such"), InvalidURL, "bucket"),
    ("stream concurrency 0", lambda c: c.stream(B, concurrency=0), InvalidArgument,
     "concurrency"),
    ("stream options dict", lambda c: c.stream(B, options={}), InvalidArgument, "options"),
    ("stream bad url", lambda c: c.stream("gs://Bad/p"), InvalidURL, "bucket"),
]


async def _drive(result: Any) -> None:
    if inspect.isawaitable(result):
        await result
    elif hasattr(result, "__anext__"):
        await anext(result)


@pytest.mark.parametrize(("label", "call", "error", "named"), CLIENT_CASES,
                         ids=[c[0] for c in CLIENT_CASES])
async def test_async_client_rejects(label: str, call: Callable[[Any], Any],
                                    error: type[Exception], named: str) -> None:
    async with AsyncClient(NO_RETRY, endpoint=CLOSED) as client:
        with pytest.raises(error, match=named) as caught:
            await _drive(call(client))
        assert type(caught.value) is error
        assert client.transport.stats.requests == 0


@pytest.mark.parametrize(("label", "call", "error", "named"), CLIENT_CASES,
                         ids=[c[0] for c in CLIENT_CASES])
def test_sync_client_rejects_at_once(label: str, call: Callable[[Any], Any],
                                     error: type[Exception], named: str) -> None:
    with Client(NO_RETRY, endpoint=CLOSED) as client:
        # Raised by the call itself, not when an iterator is first consumed.
        with pytest.raises(error, match=named) as caught:
            call(client)
        assert type(caught.value) is error
        assert client.transport.stats.requests == 0


@pytest.mark.parametrize("call", [
    lambda c: c.read(B, "my/o", start=-1), lambda c: c.read(B, "my/o", end=-1),
    lambda c: c.read(B, "my/o", into=b"xx"), lambda c: c.read(B, "my/o", generation=0),
    lambda c: c.write(B, "my/o", b"x", if_generation_match="1"),
    lambda c: c.delete(B, "my/o", generation=0)])
def test_an_argument_refused_names_the_object(call: Callable[[Any], Any]) -> None:
    # "read: start must be >= 0": which object, of the many a loader reads?
    with Client(NO_RETRY, endpoint=CLOSED) as client:
        with pytest.raises(InvalidArgument, match=r"gs://bkt/my/o: "):
            call(client)


def _manager(**kwargs: Any) -> Any:
    from aioflux.torch import CheckpointManager

    return CheckpointManager(f"gs://{B}/run", client=Client(NO_RETRY, endpoint=CLOSED),
                             **kwargs)


def _save(method: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    def run() -> Any:
        manager = _manager()
        try:
            return getattr(manager, method)(*args, **kwargs)
        finally:
            manager.close()
    return run


def _torch(name: str) -> Any:
    import aioflux.torch

    return getattr(aioflux.torch, name)


def _settings(**fields: Any) -> Any:
    return _torch("DatasetSettings")(**fields)


def _map_with(**fields: Any) -> Callable[[], Any]:
    """An empty ObjectMapDataset built with these settings."""
    return lambda: _torch("ObjectMapDataset")([], settings=_settings(**fields))


STATE = {"w": 1}
# (label, call, error class, text the message must contain)
CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("AsyncClient config str", lambda: AsyncClient(config="x"), InvalidArgument, "config"),
    ("AsyncClient credentials int", lambda: AsyncClient(credentials=123), InvalidArgument,
     "credentials"),
    ("AsyncClient endpoint", lambda: AsyncClient(endpoint="notaurl"), InvalidURL, "endpoint"),
    ("AsyncClient endpoint int", lambda: AsyncClient(endpoint=5), InvalidURL, "endpoint"),
    ("AsyncClient project", lambda: AsyncClient(project=None), InvalidArgument, "project"),
    ("Client config str", lambda: Client(config="x"), InvalidArgument, "config"),
    ("Client credentials int", lambda: Client(credentials=123), InvalidArgument, "credentials"),
    ("Client endpoint", lambda: Client(endpoint="ftp://host"), InvalidURL, "endpoint"),
    ("ClientConfig timeouts int", lambda: ClientConfig(timeouts=5), InvalidArgument,
     "timeouts"),
    ("ClientConfig retry str", lambda: ClientConfig(retry="x"), InvalidArgument, "retry"),
    ("ClientConfig max_concurrency bool", lambda: ClientConfig(max_concurrency=True),
     InvalidArgument, "max_concurrency"),
    ("ClientConfig lean_reads str", lambda: ClientConfig(lean_reads="no"), InvalidArgument,
     "lean_reads"),
    ("RetryPolicy max_attempts str", lambda: RetryPolicy(max_attempts="3"), InvalidArgument,
     "max_attempts"),
    ("Timeouts connect str", lambda: Timeouts(connect="1"), InvalidArgument, "connect"),
    ("manager keep_last str", lambda: _manager(keep_last="3"), InvalidArgument, "keep_last"),
    ("manager keep_last bool", lambda: _manager(keep_last=True), InvalidArgument, "keep_last"),
    ("manager keep_last 0", lambda: _manager(keep_last=0), InvalidArgument, "keep_last"),
    ("manager when_busy", lambda: _manager(when_busy="later"), InvalidArgument, "when_busy"),
    ("manager compression", lambda: _manager(compression="gzip"), InvalidArgument,
     "compression"),
    ("manager memory_budget", lambda: _manager(memory_budget="1GB"), InvalidArgument,
     "memory_budget"),
    ("manager client", lambda: _torch("CheckpointManager")(f"gs://{B}/run", client="x"),
     InvalidArgument, "client"),
    ("save step True", _save("save", STATE, True), InvalidArgument, "step"),
    ("save step str", _save("save", STATE, "1"), InvalidArgument, "step"),
    ("save step negative", _save("save", STATE, -1), InvalidArgument, "step"),
    ("save state list", _save("save", [1, 2], 1), InvalidArgument, "state"),
    ("save overwrite str", _save("save", STATE, 1, overwrite="yes"), InvalidArgument,
     "overwrite"),
    ("save_async step float", _save("save_async", STATE, 1.5), InvalidArgument, "step"),
    ("load step str", _save("load", "3"), InvalidArgument, "step"),
    ("ObjectMapDataset URLs", lambda: _torch("ObjectMapDataset")([f"gs://{B}/o"]),
     InvalidArgument, "objects"),
    ("ObjectMapDataset str", lambda: _torch("ObjectMapDataset")(f"gs://{B}/o"),
     InvalidArgument, "objects"),
    ("ObjectMapDataset transform", lambda: _torch("ObjectMapDataset")([], transform=5),
     InvalidArgument, "transform"),
    ("ObjectMapDataset config", _map_with(config="x"), InvalidArgument, "config"),
    ("ObjectMapDataset credentials", _map_with(credentials=123), InvalidArgument,
     "credentials"),
    ("ObjectMapDataset endpoint", _map_with(endpoint="nope"), InvalidURL, "endpoint"),
    ("ObjectMapDataset download_retry", _map_with(download_retry=3), InvalidArgument,
     "download_retry"),
    ("from_prefix list_concurrency",
     lambda: _torch("ObjectMapDataset").from_prefix(f"gs://{B}/p", list_concurrency=0,
                                                    settings=_settings(endpoint=CLOSED)),
     InvalidArgument, "list_concurrency"),
    ("from_prefix url",
     lambda: _torch("ObjectMapDataset").from_prefix("ftp://b/p",
                                                    settings=_settings(endpoint=CLOSED)),
     InvalidURL, "scheme"),
    ("from_objects surrogate",
     lambda: _torch("ObjectMapDataset").from_objects([f"gs://{B}/\ud800"],
                                                     settings=_settings(endpoint=CLOSED)),
     InvalidURL, "name"),
    ("from_objects int",
     lambda: _torch("ObjectMapDataset").from_objects([5], settings=_settings(endpoint=CLOSED)),
     InvalidArgument, "objects"),
    ("ObjectIterableDataset prefetch", lambda: _torch("ObjectIterableDataset")([], prefetch=0),
     InvalidArgument, "prefetch"),
    ("ObjectIterableDataset shuffle",
     lambda: _torch("ObjectIterableDataset")([], order=_torch("Order")(shuffle="yes")),
     InvalidArgument, "order.shuffle"),
    ("ObjectIterableDataset rank",
     lambda: _torch("ObjectIterableDataset")([], order=_torch("Order")(rank="0")),
     InvalidArgument, "order.rank"),
    ("ObjectIterableDataset rank range",
     lambda: _torch("ObjectIterableDataset")([], order=_torch("Order")(rank=2, world_size=2)),
     InvalidArgument, "rank"),
    ("open mode", lambda: aioflux.open(f"gs://{B}/o", "a"), InvalidArgument, "mode"),
    ("open binary encoding", lambda: aioflux.open(f"gs://{B}/o", "wb", encoding="utf-8"),
     InvalidArgument, "encoding"),
    ("open unknown encoding", lambda: aioflux.open(f"gs://{B}/o", "r", encoding="nope"),
     InvalidArgument, "encoding"),
    ("open compression", lambda: aioflux.open(f"gs://{B}/o", compression="gz"),
     InvalidArgument, "compression"),
    ("open part_size", lambda: aioflux.open(f"gs://{B}/o", "wb",
                                            writer=WriterOptions(part_size="1")),
     InvalidArgument, "part_size"),
    ("open client", lambda: aioflux.open(f"gs://{B}/o", client="x"), InvalidArgument,
     "client"),
    ("open content_type LF", lambda: aioflux.open(f"gs://{B}/o", "wb", content_type="a\nb"),
     InvalidArgument, "content_type"),
    ("open metadata", lambda: aioflux.open(f"gs://{B}/o", "wb", metadata=["k"]),
     InvalidArgument, "metadata"),
    ("open url", lambda: aioflux.open("ftp://host/x"), InvalidURL, "scheme"),
    ("open surrogate", lambda: aioflux.open(f"gs://{B}/\ud800"), InvalidURL, "name"),
    ("list_files concurrency", lambda: aioflux.list_files(f"gs://{B}/p", concurrency=0),
     InvalidArgument, "concurrency"),
    ("list_files url", lambda: aioflux.list_files("gs://B/p"), InvalidURL, "bucket"),
    ("load_files ordered", lambda: aioflux.load_files([], ordered="yes"), InvalidArgument,
     "ordered"),
    ("Checkpoint part_size", lambda: _torch("Checkpoint")(writer=WriterOptions(part_size=0)),
     InvalidArgument,
     "part_size"),
]


@pytest.mark.parametrize(("label", "call", "error", "named"), CASES,
                         ids=[c[0] for c in CASES])
def test_rejected_at_once(label: str, call: Callable[[], Any], error: type[Exception],
                          named: str) -> None:
    with pytest.raises(error, match=named) as caught:
        result = call()
        if isinstance(result, Iterator):
            next(result)  # only if the call itself did not raise: a failure below
    assert isinstance(caught.value, error)
    assert isinstance(caught.value, aioflux.AiofluxError)


def test_errors_never_echo_a_credential_value() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "SECRET-TOKEN"

    with pytest.raises(InvalidArgument) as caught:
        AsyncClient(credentials=Opaque())
    assert "SECRET" not in str(caught.value)


async def test_async_listing_and_stream_reject_at_the_call_not_at_iteration() -> None:
    async with AsyncClient(NO_RETRY, endpoint=CLOSED) as client:
        with pytest.raises(InvalidURL, match="bucket"):
            client.list("Bad Bucket")
        with pytest.raises(InvalidArgument, match="page_size"):
            client.list(B, page_size=0)
        with pytest.raises(InvalidArgument, match="start_offset"):
            client.list_objects(B, start_offset=3)
        with pytest.raises(InvalidArgument, match="list_concurrency"):
            client.stream(B, list_concurrency="4")


def test_a_strided_buffer_is_an_invalid_argument_naming_it(emulator: Any,
                                                           tmp_path: Any) -> None:
    # memoryview's "casts are restricted to C-contiguous views" escaped as a
    # TypeError naming neither the operation nor the argument.
    strided = memoryview(b"abcdef")[::2]
    emulator.create_bucket("strided")
    with aioflux.Client(endpoint=emulator.endpoint) as client:
        with pytest.raises(InvalidArgument, match="write gs://strided/o: data must be contiguous"):
            client.write("strided", "o", strided)
        with pytest.raises(InvalidArgument, match="must be contiguous"):
            client.read("strided", "o", into=memoryview(bytearray(6))[::2])
        for url in ("gs://strided/p", f"file://{tmp_path}/p"):
            with pytest.raises(InvalidArgument, match="data must be contiguous"), \
                    aioflux.open(url, "wb", client=client) as f:
                f.write(strided)
