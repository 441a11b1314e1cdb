"""Every backend's user-facing operations are ``StoreBase``'s, written once.

A backend provides wire calls only (``_stat``, ``_pages``, ``_fetch``...);
the operations, their docstrings and argument checks are the base's. These
tests keep it so: a backend that writes ``read`` or ``exists`` again, or a
new one that forgets a wire call, fails here.
"""

from __future__ import annotations

import inspect
import pydoc
from collections.abc import AsyncIterator
from typing import cast

import pytest

from aioflux import AsyncClient, HttpStore, LocalStore, S3Store
from aioflux._core.errors import InvalidArgument, InvalidRequest, InvalidURL
from aioflux._core.records.types import ListPage, ObjectInfo
from aioflux._core.storage.base import DOCUMENTED, MultipartCalls, StoreBase, _take_docs
from aioflux._core.storage.protocol import (
    Fetched,
    MultipartStore,
    ObjectStore,
    PartUpload,
    StoreFeatures,
)
from aioflux._engines.store_stream import StreamingStore
from aioflux.azure import AzureStore
from aioflux.hf import HfStore
from aioflux.testing import MemoryStore

BACKENDS = [AsyncClient, S3Store, AzureStore, LocalStore, MemoryStore, HttpStore, HfStore]
# Written once in the base, GCS's ``fields`` and the open uploads included.
SHARED = ["stat", "exists", "list", "list_objects", "read", "fetch", "write", "start_upload",
          "delete", "copy", "compose", "list_multipart_uploads", "abort_multipart",
          "list_parts"]
PRIMITIVES = ["initiate_multipart", "upload_part", "complete_multipart"]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("method", SHARED)
def test_the_operations_are_the_bases(backend: type, method: str) -> None:
    assert getattr(backend, method) is getattr(StoreBase, method), \
        f"{backend.__name__}.{method} is written again"


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_features_are_data_and_the_multipart_primitives_written_once(backend: type) -> None:
    # A class attribute (HttpStore's is its instance's: the scheme is).
    assert "features" not in vars(backend) or isinstance(vars(backend)["features"],
                                                         StoreFeatures)
    offers = backend in (AsyncClient, MemoryStore)
    assert issubclass(backend, MultipartStore) is offers
    for method in PRIMITIVES if offers else ():
        assert getattr(backend, method) is getattr(MultipartCalls, method), method


@pytest.mark.parametrize("backend", [AsyncClient, S3Store, AzureStore, LocalStore],
                         ids=lambda b: b.__name__)
def test_object_stores_stream_through_the_engine_mixin(backend: type) -> None:
    assert backend.stream is StreamingStore.stream


class _Half(StoreBase):
    """A backend with its features and a stat, and nothing else."""

    features = StoreFeatures(scheme="gs")

    async def _stat(self, bucket: str, name: str) -> ObjectInfo:
        return ObjectInfo(bucket, name, 0, 1, None)


class _Readable(_Half):
    """Every wire call a read-only store gives, none of them reached here."""

    async def aclose(self) -> None:
        return None

    def _pages(self, bucket: str, prefix: str, delimiter: str | None,
               start_offset: str | None, end_offset: str | None, page_size: int,
               fields: str | None) -> AsyncIterator[ListPage]:
        raise AssertionError("no listing here")

    async def _fetch(self, bucket: str, name: str, start: int, end: int | None,
                     into: memoryview | None, generation: int | None, size: int | None,
                     crc: int | None, want_crc: bool) -> Fetched:
        raise AssertionError("no read here")


class _Whole(_Readable):
    """Every wire call, none of them reached by these tests."""

    async def _write(self, bucket: str, name: str, data: memoryview, content_type: str,
                     if_generation_match: int | None, metadata: dict[str, str] | None,
                     resumable: bool | None) -> ObjectInfo:
        raise AssertionError("no write here")

    def _start_upload(self, bucket: str, name: str, content_type: str, part_size: int,
                      metadata: dict[str, str] | None,
                      if_generation_match: int | None) -> PartUpload:
        self.started = (bucket, name, content_type, part_size, metadata, if_generation_match)
        return cast(PartUpload, None)

    async def _delete(self, bucket: str, name: str, generation: int | None,
                      if_generation_match: int | None, missing_ok: bool) -> None:
        raise AssertionError("no delete here")

    async def _copy(self, bucket: str, name: str, dest_bucket: str,
                    dest_name: str) -> ObjectInfo:
        raise AssertionError("no copy here")


def test_a_backend_missing_a_wire_call_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="abstract"):
        _Half()  # type: ignore[abstract]


async def test_the_base_checks_arguments_before_any_wire_call() -> None:
    store = _Whole()
    assert (await store.stat("bkt", "obj")).name == "obj"
    assert await store.exists("bkt", "obj")
    assert await store.read("bkt", "obj", start=3, end=3) == b""  # empty: no read at all
    with pytest.raises(InvalidURL):
        await store.read("BAD BUCKET", "obj")
    with pytest.raises(InvalidURL):
        store.list("BAD BUCKET")
    with pytest.raises(InvalidURL):
        await store.delete("bkt", "")


def test_start_upload_is_checked_in_the_base() -> None:
    store = _Whole()
    store.start_upload("bkt", "obj")
    # No part size: the store's smallest where it has one, else 8 MiB.
    assert store.started == ("bkt", "obj", "application/octet-stream", 8 << 20, None, None)
    with pytest.raises(InvalidURL):
        store.start_upload("bkt", "")
    for bad in ({"content_type": 3}, {"part_size": 0}, {"part_size": "8"},
                {"metadata": {"k": 1}}, {"if_generation_match": "0"}):
        with pytest.raises(InvalidArgument):
            store.start_upload("bkt", "obj", **bad)  # type: ignore[arg-type]


class _ReadOnly(_Readable):
    """A read-only store: no write wire call at all."""

    features = StoreFeatures(scheme="https", read_only=True)
    _read_only_why = "a test says so"


async def test_a_read_only_store_refuses_every_write_after_checking_it() -> None:
    store = _ReadOnly()
    with pytest.raises(InvalidURL):  # the arguments first, as on every store
        await store.write("host", "", b"x")
    with pytest.raises(InvalidRequest, match=r"https://host/o: https:// URLs are read-only "
                                             r"\(a test says so\)") as info:
        await store.write("host", "o", b"x")
    assert info.value.reason == "unsupported"
    for refused in (lambda: store.start_upload("host", "o"),
                    lambda: store.delete("host", "o"),
                    lambda: store.copy("host", "o", "host", "p")):
        with pytest.raises(InvalidRequest, match="read-only"):
            call = refused()
            if inspect.isawaitable(call):
                await call


async def test_what_a_store_does_not_offer_is_one_typed_refusal() -> None:
    store = _Whole()
    for call in (store.compose("bkt", "dst", ["a"]), store.abort_multipart("bkt", "o", "id"),
                 store.list_parts("bkt", "o", "id")):
        with pytest.raises(InvalidRequest, match="gs://bkt/") as info:
            await call
        assert info.value.reason == "unsupported"
    assert await store.list_multipart_uploads("bkt") == []
    with pytest.raises(InvalidArgument):  # checked before the refusal, as where offered
        await store.abort_multipart("bkt", "o", 7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await store.list_multipart_uploads("bkt", prefix=7)  # type: ignore[arg-type]


def test_every_operation_is_documented_once_by_the_protocol() -> None:
    public = {name for name in vars(StoreBase) if not name.startswith("_")}
    assert public == set(DOCUMENTED)
    for name in DOCUMENTED:
        doc = getattr(StoreBase, name).__doc__
        assert doc and doc.strip(), name
        assert doc == getattr(ObjectStore, name).__doc__, name


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_help_of_a_concrete_store_shows_the_protocols_docstring(backend: type) -> None:
    assert inspect.getdoc(backend.read) == inspect.getdoc(ObjectStore.read)
    text = pydoc.render_doc(backend.read, renderer=pydoc.plaintext)
    assert "Read an object, or the byte range" in text
    assert "replaced while" in text
    for name in DOCUMENTED:  # a backend's own override says more, or shows the protocol's
        assert inspect.getdoc(getattr(backend, name)), f"{backend.__name__}.{name}"


def test_a_docstring_written_twice_or_a_name_missing_fails_at_import() -> None:
    class Protocol:
        def stat(self) -> None:
            """The one docstring."""

    class Twice:
        def stat(self) -> None:
            """A second copy."""

    class Missing:
        pass

    with pytest.raises(TypeError, match="of its own"):
        _take_docs(Twice, Protocol, ["stat"])
    with pytest.raises(TypeError, match=r"Missing\.stat"):
        _take_docs(Missing, Protocol, ["stat"])
