"""``HfStore`` against the fake Hub: listing by tree pages in name order,
stat, ranged reads through the CDN redirect, one commit per store, the
token kept from the CDN, 429s waited out, refusals that say to set
HF_TOKEN, offline mode and writes refused; its blocking face."""

from __future__ import annotations

import asyncio
import os
import pickle
import time
from pathlib import Path

import pytest

import aioflux
from aioflux import (
    ClientConfig,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RetryPolicy,
    SyncStore,
)
from aioflux._core.integrity.crc import crc32c
from aioflux._core.rate.state import PACING_SWITCH_DEBT
from aioflux.hf import HfStore
from aioflux.testing import FakeHub
from tests.backends.hf.conftest import TOKEN
from tests.backends.test_sync_store_conformance import _async_names, _sync_names

BUCKET = "datasets/org/ds"
FAST = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=0.0))


def _files() -> dict[str, bytes]:
    files = {f"data/train-{n:02d}.bin": os.urandom(100 + 37 * n) for n in range(7)}
    files.update({"README.md": b"# ds\n", "data.txt": b"small", "data/sub/deep.txt": b"d",
                  "data/sub/x/y.bin": os.urandom(300), "data-2/a.txt": b"a", "z.txt": b"z"})
    return files


@pytest.fixture
def files(hub: FakeHub) -> dict[str, bytes]:
    content = _files()
    hub.create_repo("org/ds")
    hub.push("org/ds", content)
    return content


def _store(hub: FakeHub, token: str = "", config: ClientConfig = FAST) -> HfStore:
    return HfStore(config, endpoint=hub.endpoint, token=token)


async def _names(store: HfStore, prefix: str = "", **kwargs: object
                 ) -> tuple[list[str], list[str], int]:
    names: list[str] = []
    prefixes: list[str] = []
    pages = 0
    async for page in store.list(BUCKET, prefix, **kwargs):  # type: ignore[arg-type]
        pages += 1
        names += [o.name for o in page.objects]
        prefixes += page.prefixes
    return names, prefixes, pages


async def test_listing_follows_the_tree_pages_in_name_order(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    async with _store(hub) as store:
        names, prefixes, pages = await _names(store, page_size=4)
        assert names == sorted(files) and not prefixes
        assert pages == -(-len(files) // 4)
        tree = [r.path for r in hub.sent("hub") if "/tree/" in r.path]
        # data/ holds 7 files and 1 folder: 3 pages of 3 entries.
        assert sum("/data?" in p for p in tree) == 3
        assert sum("cursor=" in p for p in tree) >= 3
        # One resolution of the revision for the store's whole life.
        assert sum("/revision/" in r.path for r in hub.sent("hub")) == 1

        names, prefixes, _ = await _names(store, "data/", delimiter="/")
        assert names == sorted(n for n in files if n.startswith("data/train"))
        assert prefixes == ["data/sub/"]
        names, prefixes, _ = await _names(store, "", delimiter="/")
        assert names == ["README.md", "data.txt", "z.txt"]
        assert prefixes == ["data-2/", "data/"]
        names, _, _ = await _names(store, "data/train-0")
        assert names == sorted(n for n in files if n.startswith("data/train-0"))
        names, _, _ = await _names(store, "data/", start_offset="data/train-03",
                                   end_offset="data/train-05")
        assert names == ["data/train-03.bin", "data/train-04.bin"]
        names, _, _ = await _names(store, "nothing/")
        assert names == []


async def test_stat_and_listing_agree_and_reads_are_checked(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    async with _store(hub) as store:
        listed = {}
        async for page in store.list(BUCKET, "data/"):
            listed.update({o.name: o for o in page.objects})
        for name in ("data/train-03.bin", "data/sub/deep.txt"):  # LFS, and not
            info = await store.stat(BUCKET, name)
            assert info.size == len(files[name]) == listed[name].size
            assert info.generation == listed[name].generation != 0
            assert await store.read(BUCKET, name) == files[name]
        data = files["data/train-06.bin"]
        name = "data/train-06.bin"
        assert await store.read(BUCKET, name, start=10, end=90) == data[10:90]
        assert await store.read(BUCKET, name, start=200) == data[200:]
        buf = bytearray(50)
        assert await store.read(BUCKET, name, start=5, end=55, into=buf) == 50
        assert bytes(buf) == data[5:55]
        fetched = await store.fetch(BUCKET, name, size=len(data), crc=crc32c(data))
        assert fetched.data == data
        with pytest.raises(NotFound):
            await store.stat(BUCKET, "data/missing.bin")
        with pytest.raises(NotFound):
            await store.read(BUCKET, "data/missing.bin")
    ranges = [r.headers.get("Range") for r in hub.sent("cdn")]
    assert "bytes=10-89" in ranges and "bytes=200-" in ranges


async def test_a_push_mid_job_changes_nothing_the_job_reads(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    name = "data/train-02.bin"
    async with _store(hub) as store:
        before = await store.stat(BUCKET, name)
        commit = await store.commit(BUCKET)
        new = hub.push("org/ds", {name: b"N" * 500, "data/added.bin": b"new" * 50})
        assert new != commit and await store.commit(BUCKET) == commit
        assert await store.read(BUCKET, name) == files[name]
        assert await store.read(BUCKET, name, generation=before.generation) == files[name]
        names, _, _ = await _names(store, "data/")
        assert "data/added.bin" not in names
        # A worker's copy reads the commit the job resolved.
        worker = pickle.loads(pickle.dumps(store))
        assert await worker.commit(BUCKET) == commit
        assert await worker.read(BUCKET, name, start=1, end=4) == files[name][1:4]
        await worker.aclose()
    async with _store(hub) as later:
        assert await later.commit(BUCKET) == new
        assert await later.read(BUCKET, name) == b"N" * 500
        # The version an earlier job listed is gone at the new commit.
        with pytest.raises(NotFound, match="no longer generation"):
            await later.read(BUCKET, name, generation=before.generation)
    # Given as a commit sha, the old version stays readable.
    async with _store(hub) as pinned:
        assert await pinned.read(f"{BUCKET}@{commit}", name) == files[name]


async def test_reads_that_start_together_resolve_the_revision_once(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    names = sorted(n for n in files if n.startswith("data/train"))
    async with _store(hub) as store:
        got = await asyncio.gather(*(store.read(BUCKET, n) for n in names * 3))
    assert got == [files[n] for n in names * 3]
    assert sum("/revision/" in r.path for r in hub.sent("hub")) == 1


async def test_the_token_goes_to_the_hub_never_to_the_cdn(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    async with _store(hub, TOKEN) as store:
        for name in ("data/train-01.bin", "data/train-05.bin"):
            assert await store.read(BUCKET, name, start=3) == files[name][3:]
            assert await store.read(BUCKET, name) == files[name]
        await store.stat(BUCKET, "data/train-04.bin")
        await _names(store)
    cdn = hub.sent("cdn")
    assert cdn and all("Authorization" not in r.headers for r in cdn)
    hub_requests = hub.sent("hub")
    assert hub_requests
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in hub_requests)


async def test_a_files_later_reads_go_to_its_cdn_link_until_the_link_expires(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    name = "data/train-06.bin"
    data = files[name]

    def resolves() -> int:
        return sum("/resolve/" in r.path for r in hub.sent("hub"))

    async with _store(hub, TOKEN) as store:
        await store.commit(BUCKET)
        # Over the lean client, its redirect followed there: no request wasted.
        assert await store.read(BUCKET, name, start=1) == data[1:]
        assert resolves() == 1 and store.stats.lean_reads == 1
        for start in (2, 3, 4):  # straight to the CDN
            assert await store.read(BUCKET, name, start=start) == data[start:]
        assert resolves() == 1 and store.stats.lean_reads == 4
        hub.expire_links()  # 403 from the CDN: the Hub is asked for a new link
        assert await store.read(BUCKET, name, start=5) == data[5:]
        assert await store.read(BUCKET, name, start=6) == data[6:]
        assert resolves() == 2
    cdn = hub.sent("cdn")
    assert len(cdn) == 7 and all("Authorization" not in r.headers for r in cdn)


async def test_a_429_is_waited_out_as_retry_after_says(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    config = ClientConfig(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, max_delay=5.0))
    name = "data/train-00.bin"
    async with _store(hub, config=config) as store:
        await store.commit(BUCKET)
        hub.throttle(1, retry_after=1)
        started = time.monotonic()
        assert await store.read(BUCKET, name) == files[name]
        assert time.monotonic() - started >= 1.0  # the wait asked for, at least
        hub.throttle(2, retry_after=0, origin="cdn")
        assert await store.read(BUCKET, name, start=7) == files[name][7:]
        assert store.stats.throttled == 3
        # The 429s reach the node-shared rate controller: a run of them past
        # its count makes it pace the repo's reads.
        hub.throttle(PACING_SWITCH_DEBT, retry_after=0, origin="cdn")
        assert await store.read(BUCKET, name, start=9) == files[name][9:]
        gates = store._wire()._gates
        assert gates is not None
        gate = gates[(BUCKET, False)]
        assert gate.shared.memory[gate.shared.at]  # its pacing flag
    statuses = [r.path for r in hub.sent("cdn")]
    assert len(statuses) >= 3


async def test_the_rate_gate_is_the_accounts_across_its_repos(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    hub.create_repo("org/other")
    hub.push("org/other", {"w.bin": b"w" * 300})
    other = "datasets/org/other"
    config = ClientConfig(retry=RetryPolicy(max_attempts=PACING_SWITCH_DEBT + 2, initial_delay=0.0,
                                            max_delay=0.1))
    async with _store(hub, TOKEN, config) as store, _store(hub, "", config) as anonymous:
        assert await store.read(other, "w.bin") == b"w" * 300
        # The Hub throttles the account: a run of 429s on one repo's reads
        # paces the account's gate, which the other repo's reads go through.
        hub.throttle(PACING_SWITCH_DEBT, retry_after=0, origin="cdn")
        name = "data/train-00.bin"
        assert await store.read(BUCKET, name) == files[name]
        gates = store._wire()._gates
        assert gates is not None and gates[(BUCKET, False)] is gates[(other, False)]
        assert gates[(other, False)].shared.memory[gates[(other, False)].shared.at]
        assert TOKEN not in gates[(other, False)].label  # a digest names the account
        # Without a token the gate is another one (the Hub counts an address).
        assert await anonymous.read(other, "w.bin") == b"w" * 300
        free = anonymous._wire()._gates
        assert free is not None and free[(other, False)].shared is not \
            gates[(other, False)].shared


async def test_gated_and_private_repos_say_to_set_hf_token(hub: FakeHub) -> None:
    hub.create_repo("org/gated", gated=True)
    hub.push("org/gated", {"w.bin": b"g" * 100}, repo_type="dataset")
    hub.create_repo("org/private", repo_type="model", private=True)
    hub.push("org/private", {"m.safetensors": b"p" * 10}, repo_type="model")
    async with _store(hub) as anonymous:
        with pytest.raises(PermissionDenied, match="set HF_TOKEN") as denied:
            await anonymous.read("datasets/org/gated", "w.bin")
        assert denied.value.status == 401 and "no token was sent" in str(denied.value)
        assert "hf://datasets/org/gated/w.bin" in str(denied.value)
        with pytest.raises(PermissionDenied, match="set HF_TOKEN"):
            await anonymous.stat("datasets/org/gated", "w.bin")
        with pytest.raises(PermissionDenied, match="set HF_TOKEN"):
            await _names_of(anonymous, "models/org/private")
    async with _store(hub, "hf_wrong") as wrong:
        with pytest.raises(PermissionDenied, match="token sent was refused"):
            await wrong.read("datasets/org/gated", "w.bin")
    async with _store(hub, TOKEN) as allowed:
        assert await allowed.read("datasets/org/gated", "w.bin") == b"g" * 100
    hub.grant("org/gated", ("hf_someone_else",))
    async with _store(hub, TOKEN) as not_granted:
        with pytest.raises(PermissionDenied, match="has no access") as refused:
            await not_granted.read("datasets/org/gated", "w.bin", start=1)
        assert refused.value.status == 403
    hub.grant("org/gated", (TOKEN,))
    async with _store(hub, TOKEN) as allowed:
        assert await _names_of(allowed, "models/org/private") == ["m.safetensors"]
        assert await allowed.read("models/org/private", "m.safetensors") == b"p" * 10


async def _names_of(store: HfStore, bucket: str) -> list[str]:
    return [o.name async for o in store.list_objects(bucket)]


async def test_the_token_comes_from_hf_token(hub: FakeHub, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    hub.create_repo("org/gated", gated=True)
    hub.push("org/gated", {"w.bin": b"g" * 100})
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint + "/")
    async with HfStore(FAST) as store:
        assert store.endpoint == hub.endpoint
        assert await store.read("datasets/org/gated", "w.bin", start=90) == b"g" * 10


async def test_the_token_comes_from_huggingface_hub_where_installed(
        hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    hub.create_repo("org/gated", gated=True)
    hub.push("org/gated", {"w.bin": b"g" * 100})
    # What `hf auth login` saved, as huggingface_hub finds it.
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: TOKEN)
    async with HfStore(FAST, endpoint=hub.endpoint) as store:
        assert await store.read("datasets/org/gated", "w.bin", end=2) == b"gg"


async def test_offline_sends_nothing(hub: FakeHub, files: dict[str, bytes],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    async with _store(hub) as store:
        for call in (store.read(BUCKET, "z.txt"), store.stat(BUCKET, "z.txt"),
                     _names(store)):
            with pytest.raises(InvalidRequest, match="HF_HUB_OFFLINE"):
                await call
    assert hub.requests == []


async def test_offline_reads_what_huggingface_hubs_cache_holds(
        hub: FakeHub, files: dict[str, bytes], hub_environment: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.backends.hf.test_hub_clients import _run

    cached = ["z.txt", "data/train-01.bin", "data/sub/deep.txt"]  # train-01: an LFS file
    _run(hub, hub_environment, f"""
        import json
        from huggingface_hub import hf_hub_download
        for name in {cached!r}:
            hf_hub_download("org/ds", name, repo_type="dataset")
        print(json.dumps("ok"))
    """)
    async with _store(hub) as online:
        versions = {name: (await online.stat(BUCKET, name)).generation for name in cached}
    sent = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    async with _store(hub) as store:
        assert await store.commit(BUCKET) == hub.commit("org/ds")  # its ref in the cache
        for name in cached:
            info = await store.stat(BUCKET, name)
            assert (info.size, info.generation) == (len(files[name]), versions[name])
            assert await store.read(BUCKET, name) == files[name]
        name = "data/train-01.bin"
        assert await store.read(BUCKET, name, start=5, end=50) == files[name][5:50]
        assert (await _names(store))[0] == sorted(cached)  # only what is cached
        assert (await _names(store, "data/", delimiter="/"))[:2] == (
            ["data/train-01.bin"], ["data/sub/"])
        with pytest.raises(NotFound, match="HF_HUB_OFFLINE"):
            await store.read(BUCKET, "data/train-02.bin")
        with pytest.raises(InvalidRequest, match="HF_HUB_OFFLINE"):
            await store.commit("datasets/org/ds@other")
    assert len(hub.requests) == sent  # nothing asked of the Hub


async def test_writes_are_refused_before_any_request(hub: FakeHub) -> None:
    async with _store(hub) as store:
        with pytest.raises(InvalidRequest, match="read-only"):
            await store.write(BUCKET, "x.bin", b"x")
        with pytest.raises(InvalidRequest, match="read-only"):
            await store.delete(BUCKET, "x.bin")
        with pytest.raises(InvalidRequest, match="read-only"):
            await store.copy(BUCKET, "a", BUCKET, "b")
    assert hub.requests == []


async def test_revisions_and_models(hub: FakeHub) -> None:
    hub.create_repo("org/ds")
    hub.push("org/ds", {"train.jsonl": b"{}\n"})
    converted = hub.push("org/ds", {"default/train/0000.parquet": b"P" * 100,
                                    "train.jsonl": None}, branch="refs/convert/parquet")
    hub.create_repo("org/model", repo_type="model")
    hub.push("org/model", {"model.safetensors": b"w" * 200, "config.json": b"{}"},
             repo_type="model")
    async with _store(hub) as store:
        bucket = "datasets/org/ds@refs%2Fconvert%2Fparquet"
        assert await store.commit(bucket) == converted
        assert await _names_of(store, bucket) == ["default/train/0000.parquet"]
        assert await store.read(bucket, "default/train/0000.parquet", end=3) == b"PPP"
        assert await store.read("models/org/model", "model.safetensors", start=190) == b"w" * 10
        assert await _names_of(store, "models/org/model") == ["config.json",
                                                               "model.safetensors"]
        with pytest.raises(NotFound):
            await store.commit("datasets/org/ds@no-such-branch")
        with pytest.raises(PermissionDenied, match="does not exist too"):
            await store.commit("datasets/org/none")  # the Hub cannot say which, to no token
    async with _store(hub, TOKEN) as store:
        with pytest.raises(NotFound):
            await store.commit("datasets/org/none")
    resolves = [r.path for r in hub.sent("hub") if "/resolve/" in r.path]
    assert any(p.startswith("/org/model/resolve/") for p in resolves)


async def test_a_tree_page_linked_on_another_origin_gets_no_token() -> None:
    from aiohttp import web

    from tests.servers.web_server import Served, Server

    seen: list[str | None] = []

    async def elsewhere(request: web.Request, _served: Served) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization"))
        return web.json_response([{"type": "file", "path": "b.txt", "size": 1, "oid": "b"}])

    async with Server(elsewhere) as (other, _):
        async def hub(request: web.Request, _served: Served) -> web.StreamResponse:
            if "/revision/" in request.path:
                return web.json_response({"sha": "a" * 40})
            return web.json_response([{"type": "file", "path": "a.txt", "size": 1, "oid": "a"}],
                                     headers={"Link": f'<{other}/page2>; rel="next"'})

        async with Server(hub) as (endpoint, _), \
                HfStore(FAST, endpoint=endpoint, token=TOKEN) as store:
            assert await _names_of(store, BUCKET) == ["a.txt", "b.txt"]
    assert seen == [None]


def test_the_hubs_blocking_face_has_its_methods_and_reads(
        hub: FakeHub, files: dict[str, bytes]) -> None:
    assert aioflux.HfStore is HfStore  # exported at the root as the other stores are
    name = "data/train-03.bin"
    with SyncStore(_store(hub)) as store:
        assert _sync_names(store) == _async_names(HfStore)
        assert store.stat(BUCKET, name).size == len(files[name])
        assert store.read(BUCKET, name, start=5, end=50) == files[name][5:50]
        assert store.read(BUCKET, name) == files[name]
        assert [o.name for o in store.list_objects(BUCKET, "data/sub/")] == [
            "data/sub/deep.txt", "data/sub/x/y.bin"]
        with pytest.raises(NotFound):
            store.read(BUCKET, "none.bin")
        with pytest.raises(InvalidRequest, match="read-only"):
            store.write(BUCKET, name, b"x")
