"""clean_bucket on any ObjectStore: an upload listing that names a key
outside the prefix aborts (and deletes) nothing. The backends refuse such a
listing themselves (tests/engines/test_listing_endless_pages.py); this is
the engine's own guard, for a store that does not."""

from __future__ import annotations

import builtins

import pytest

from aioflux import ProtocolError
from aioflux._core.records.types import MultipartUploadInfo
from aioflux._engines.clean import clean_bucket
from aioflux.testing import MemoryStore


class _IgnoresPrefix(MemoryStore):
    """Lists every open upload, whatever the prefix asked."""

    async def list_multipart_uploads(self, bucket: str,
                                     prefix: str = "") -> builtins.list[MultipartUploadInfo]:
        return await super().list_multipart_uploads(bucket)


async def test_clean_aborts_nothing_when_uploads_outside_the_prefix_are_listed() -> None:
    store = _IgnoresPrefix(buckets=["bkt"])
    mine = await store.initiate_multipart("bkt", "tmp/a")
    live = await store.initiate_multipart("bkt", "prod/model-final.ckpt")
    with pytest.raises(ProtocolError) as info:
        await clean_bucket(store, "bkt", "tmp/", older_than=0)
    # The same check the backends run on their upload listings.
    assert str(info.value).startswith(
        "list multipart uploads memory://bkt/tmp/ failed: the server listed an upload of "
        "'prod/model-final.ckpt', which is not under the prefix"), str(info.value)
    assert (info.value.operation, info.value.bucket, info.value.name) == (
        "list multipart uploads", "bkt", "tmp/")
    assert {u.upload_id for u in await store.list_multipart_uploads("bkt")} == {mine, live}


async def test_clean_aborts_the_uploads_under_the_prefix() -> None:
    store = MemoryStore(buckets=["bkt"])
    mine = await store.initiate_multipart("bkt", "tmp/a")
    live = await store.initiate_multipart("bkt", "prod/model-final.ckpt")
    report = await clean_bucket(store, "bkt", "tmp/", older_than=0)
    assert [u.upload_id for u in report.uploads] == [mine]
    assert [u.upload_id for u in await store.list_multipart_uploads("bkt")] == [live]


async def test_clean_of_a_name_spares_siblings_that_only_share_its_prefix() -> None:
    # The URL rule of rm, ls and du: run1 is the object run1 and the folder
    # run1/, never run10/ (another run, whose save may be streaming now).
    store = MemoryStore(buckets=["bkt"])
    named = [await store.initiate_multipart("bkt", name)
             for name in ("run1", "run1/step-1/state.pt")]
    spared = [await store.initiate_multipart("bkt", name)
              for name in ("run10/step-1/state.pt", "run1.bak", "run1x")]
    report = await clean_bucket(store, "bkt", "run1", older_than=0)
    assert sorted(u.upload_id for u in report.uploads) == sorted(named)
    assert report.skipped == []
    assert sorted(u.upload_id for u in await store.list_multipart_uploads("bkt")) == sorted(
        spared)


async def test_clean_inside_the_composed_prefix_follows_the_same_rule() -> None:
    # Composites have composite_name's shape; what lies under one's name as
    # a folder is not a composite (a user's object), so it stays too.
    store = MemoryStore(buckets=["bkt"])
    one, other = (f"aioflux-composed/1-{c * 32}" for c in "ab")
    for name in (one, other, f"{one}/x"):
        await store.write("bkt", name, b"c")
    report = await clean_bucket(store, "bkt", one, older_than=0)
    assert report.composites == [f"memory://bkt/{one}"]
    assert [o.name async for o in store.list_objects("bkt")] == [f"{one}/x", other]
