"""``SyncStore``'s machinery on the in-memory store: one face class per
store class, the stream's hand-off bounded by bytes, the portal's own
thread refused, and the errors of the async methods as they were."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any

import pytest

from aioflux import (
    BridgeError,
    Client,
    DownloadOptions,
    InvalidArgument,
    LocalStore,
    NotFound,
    SyncStore,
    parse_url,
)
from aioflux._api import sync_store
from aioflux._core.concurrency.portal import get_portal
from aioflux._engines.download import DEFAULT_PREFETCH_BYTES
from aioflux._engines.iterables import stream
from aioflux.testing import MemoryStore


def test_one_face_class_per_store_class() -> None:
    a, b = SyncStore(MemoryStore()), SyncStore(MemoryStore())
    assert type(a) is type(b) and isinstance(a, SyncStore)
    assert type(a).__name__ == "SyncStore[MemoryStore]"
    assert a.aio is not b.aio
    # A store's own methods come with its face (the memory store's XML
    # multipart calls), with their docstrings.
    assert type(a).initiate_multipart.__doc__ == MemoryStore.initiate_multipart.__doc__


@pytest.mark.parametrize(
    ("options", "most"),
    [
        (None, DEFAULT_PREFETCH_BYTES // 4),
        (DownloadOptions(prefetch_bytes=4096), 1024),
    ],
)
def test_a_streams_hand_off_holds_a_quarter_of_its_prefetch_bytes(
    monkeypatch: pytest.MonkeyPatch, options: DownloadOptions | None, most: int
) -> None:
    seen: list[dict[str, Any]] = []
    real = sync_store.iterate

    def iterate(agen: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(agen, **kwargs)

    monkeypatch.setattr(sync_store, "iterate", iterate)
    store = MemoryStore(buckets=["bkt"])
    face = SyncStore(store)
    for i in range(3):
        face.write("bkt", f"p/{i}", bytes(100))
    # The memory store has no stream method of its own: the stream engine
    # over it, through the face's rule for a method named "stream".
    items = sync_store._run(
        "stream", functools.partial(stream, store, "bkt", "p/"), (), {"options": options}
    )
    assert sorted(i.name for i in items) == ["p/0", "p/1", "p/2"]
    (kwargs,) = seen
    assert kwargs["max_bytes"] == most and kwargs["nbytes"] is sync_store._item_bytes


def test_errors_keep_their_type_and_checks_come_at_once() -> None:
    face = SyncStore(MemoryStore(buckets=["bkt"]))
    with pytest.raises(NotFound):
        face.read("bkt", "missing")
    with pytest.raises(InvalidArgument):
        face.list("bkt", page_size=0)  # checked as the call is made, before iterating


def test_on_the_portals_own_thread_a_call_is_refused() -> None:
    face = SyncStore(MemoryStore(buckets=["bkt"]))

    async def from_the_loop() -> None:
        with pytest.raises(BridgeError):
            face.exists("bkt", "x")

    get_portal().call(from_the_loop())


def test_an_upload_comes_back_with_a_blocking_face() -> None:
    face = SyncStore(MemoryStore(buckets=["bkt"]))
    upload = face.start_upload("bkt", "u", content_type="x", part_size=5)
    assert upload.mode == upload.aio.mode  # its other attributes read through
    upload.abort()
    assert not face.exists("bkt", "u")


def test_a_face_pickles_as_its_store_does(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x")
    face = SyncStore(LocalStore())
    again = pickle.loads(pickle.dumps(face))
    assert type(again) is type(face) and again is not face
    url = parse_url(str(tmp_path / "x"))
    assert again.read(url.bucket, url.name) == b"x"
    client = Client(endpoint="http://127.0.0.1:9")
    try:
        revived = pickle.loads(pickle.dumps(client))
        assert type(revived) is Client and revived.aio.endpoint == client.aio.endpoint
        revived.close()
    finally:
        client.close()
