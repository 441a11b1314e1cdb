"""The Azure store against Azurite: what the conformance suite does not
cover. Credentials (an account key signing SAS tokens, a SAS as given, a
wrong key), what no message may carry, the URL forms, the URL API with the
default store from the environment, blocks of two writers of one name, and
pickling.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import gzip
import os
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest

import aioflux
from aioflux import (
    ClientConfig,
    Conflict,
    InvalidArgument,
    InvalidURL,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    WriterOptions,
    list_files,
    load_files,
)
from aioflux._api import stores
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._core.records.urls import parse_url
from aioflux._engines.async_writer import AsyncObjectWriter
from aioflux.azure import AzureStore
from tests.conftest import FAST_RETRY, unique_bucket
from tests.servers.azurite import KEY, Azurite

CONFIG = ClientConfig(max_concurrency=16, retry=FAST_RETRY)


@pytest.fixture
async def az(azurite: Azurite) -> AsyncIterator[tuple[AzureStore, str]]:
    async with AzureStore(CONFIG, connection_string=azurite.connection_string) as store:
        container = unique_bucket("az")
        await store.create_bucket(container)
        yield store, container


def _account_sas(azurite: Azurite, **permissions: bool) -> str:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return str(generate_account_sas(
        azurite.account, azurite.key,
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(**permissions),
        expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)))


async def test_a_sas_given_as_is_reads_and_writes(azurite: Azurite,
                                                  az: tuple[AzureStore, str]) -> None:
    _, container = az
    sas = _account_sas(azurite, read=True, write=True, list=True, create=True, add=True)
    async with AzureStore(CONFIG, endpoint=azurite.endpoint, sas_token="?" + sas) as store:
        await store.write(container, "x", b"payload")
        assert await store.read(container, "x") == b"payload"
        assert [o.name async for o in store.list_objects(container)] == ["x"]
        # This SAS may not delete: refused, typed, and the signature is not
        # in the message.
        with pytest.raises(PermissionDenied) as refused:
            await store.delete(container, "x")
        sig = next(p for p in sas.split("&") if p.startswith("sig="))[4:]
        assert sig not in str(refused.value) and "az://" in str(refused.value)


async def test_a_wrong_key_is_permission_denied_and_never_shown(
        azurite: Azurite, az: tuple[AzureStore, str]) -> None:
    _, container = az
    wrong = KEY[:-8] + "AAAAAAA="
    async with AzureStore(CONFIG, endpoint=azurite.endpoint, account=azurite.account,
                          account_key=wrong) as store:
        with pytest.raises(PermissionDenied) as refused:
            await store.read(container, "x")
        assert refused.value.attempts == 1  # not retried
        message = str(refused.value)
        assert wrong not in message and "sig=" not in message.replace("sig=<redacted>", "")
        assert f"az://{container}/x" in message
    async with AzureStore(CONFIG, endpoint=azurite.endpoint, account=azurite.account,
                          account_key="not base64!") as store:
        with pytest.raises(PermissionDenied, match="not base64") as bad:
            await store.read(container, "x")
        assert "not base64!" not in str(bad.value)


async def test_the_account_key_signs_sas_tokens_once_an_hour(
        azurite: Azurite, az: tuple[AzureStore, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import azure.storage.blob as blob

    signed: list[str] = []
    sign = blob.generate_account_sas

    def counted(*args: object, **kwargs: object) -> str:
        token = str(sign(*args, **kwargs))  # type: ignore[arg-type]
        signed.append(token)
        return token

    monkeypatch.setattr(blob, "generate_account_sas", counted)
    async with AzureStore(CONFIG, endpoint=azurite.endpoint, account=azurite.account,
                          account_key=azurite.key) as store:
        _, container = az
        for i in range(5):
            await store.write(container, f"k{i}", b"v")
        assert len([o async for o in store.list_objects(container)]) == 5
    assert len(signed) == 1 and "sig=" in signed[0]


async def test_messages_never_carry_the_key(azurite: Azurite,
                                            az: tuple[AzureStore, str]) -> None:
    store, container = az
    with pytest.raises(NotFound) as missing:
        await store.read(container, "nope")
    assert azurite.key not in str(missing.value) and "sig=" not in str(missing.value)
    assert repr(store._auth) == f"KeySas({azurite.account!r}, <redacted>)"
    with pytest.raises(InvalidArgument) as bad:
        AzureStore(connection_string=f"AccountName=a;AccountKey={azurite.key};Bogus=1")
    assert azurite.key not in str(bad.value) and "Bogus" in str(bad.value)


async def test_blocks_of_two_writers_of_one_name_stay_apart(az: tuple[AzureStore, str]) -> None:
    store, container = az
    one, two = os.urandom(3000), os.urandom(3000)
    first = store.start_upload(container, "same", content_type="a/b", part_size=1000)
    second = store.start_upload(container, "same", content_type="a/b", part_size=1000)
    for number in (1, 2):
        await first.put(number, memoryview(one)[(number - 1) * 1000:number * 1000])
        await second.put(number, memoryview(two)[(number - 1) * 1000:number * 1000])
    assert not await store.exists(container, "same")  # nothing visible before the commit
    info = await second.finish(3, memoryview(two)[2000:], _running(two))
    assert (info.size, info.crc32c) == (3000, crc32c(two))
    assert await store.read(container, "same") == two
    await first.abort()
    assert await store.read(container, "same") == two  # the abort touched nothing


async def test_a_writer_committing_over_anothers_blocks_is_a_named_conflict(
        az: tuple[AzureStore, str]) -> None:
    store, container = az
    one, two = os.urandom(3000), os.urandom(3000)
    first = store.start_upload(container, "same", part_size=1000)
    for number in (1, 2):
        await first.put(number, memoryview(one)[(number - 1) * 1000:number * 1000])
    second = store.start_upload(container, "same", part_size=1000)
    await second.put(1, memoryview(two)[:1000])
    await second.finish(2, memoryview(two)[1000:], _running(two))  # drops the first's blocks
    with pytest.raises(Conflict, match="another write of this blob replaced the upload's "
                                       "blocks") as conflict:
        await first.finish(3, memoryview(one)[2000:], _running(one))
    assert (conflict.value.bucket, conflict.value.name) == (container, "same")
    assert f"az://{container}/same" in str(conflict.value)
    assert await store.read(container, "same") == two  # nothing of the first published


async def test_another_tools_uncommitted_blocks_are_a_named_conflict(
        azurite: Azurite, az: tuple[AzureStore, str]) -> None:
    from azure.storage.blob import BlobServiceClient

    store, container = az
    blob = BlobServiceClient.from_connection_string(
        azurite.connection_string).get_blob_client(container, "x")
    # The SDK's block ids are 48 characters, aioflux's 32: Azure refuses ids
    # of two lengths among a blob's uncommitted blocks.
    blob.stage_block(base64.b64encode(b"x" * 36).decode(), b"zzz")
    upload = store.start_upload(container, "x", part_size=1000)
    with pytest.raises(Conflict, match="uncommitted blocks of another writer or tool") as got:
        await upload.put(1, memoryview(b"a" * 1000))
    assert got.value.name == "x" and "week" in str(got.value)
    assert not await store.exists(container, "x")


async def test_writer_stats_count_every_block(az: tuple[AzureStore, str]) -> None:
    store, container = az
    writer = AsyncObjectWriter(store, container, "big",
                               options=WriterOptions(part_size=1000, max_in_flight=2))
    await writer.write(b"x" * 2500)
    await writer.close()
    assert (writer.stats.mode, writer.stats.parts) == ("multipart", 3)  # the tail too


def _running(data: bytes) -> Crc32c:
    check = Crc32c()
    check.update(data)
    return check


async def test_metadata_another_tool_named_in_capitals_lists_as_it_stats(
        az: tuple[AzureStore, str], azurite: Azurite) -> None:
    # A listing kept the names' case, a stat lower-cases them (HTTP headers).
    from azure.storage.blob import BlobServiceClient

    store, container = az
    sdk = BlobServiceClient.from_connection_string(azurite.connection_string)
    await asyncio.to_thread(sdk.get_blob_client(container, "sdk").upload_blob, b"x",
                            metadata={"MyKey": "v"})
    listed = [o async for o in store.list_objects(container)]
    assert [o.metadata for o in listed] == [(await store.stat(container, "sdk")).metadata] == \
        [{"mykey": "v"}]


async def test_metadata_names_azure_cannot_keep_are_refused(az: tuple[AzureStore, str]) -> None:
    store, container = az
    for key in ("Upper", "has-dash", "1digit", "aioflux_crc32c"):
        with pytest.raises(InvalidArgument, match="identifiers"):
            await store.write(container, "m", b"x", metadata={key: "v"})
    assert not await store.exists(container, "m")


@pytest.mark.parametrize("kwargs", [{"if_generation_match": "1"}, {"content_type": "a\nb"},
                                    {"content_type": 5}, {"part_size": "8"}])
async def test_an_upload_refuses_arguments_of_the_wrong_kind_at_once(
        az: tuple[AzureStore, str], kwargs: dict[str, Any]) -> None:
    # As write() does, and GCS's and S3's start_upload: not a TypeError or
    # ValueError at the commit, once every block was sent.
    store, container = az
    with pytest.raises(InvalidArgument, match=f"start_upload: {next(iter(kwargs))}"):
        store.start_upload(container, "u", **kwargs)


def test_adlfs_url_forms() -> None:
    assert parse_url("abfs://data/a/b") == parse_url("az://data/a/b")
    assert parse_url("abfss://data/a").scheme == "az"
    long = parse_url("abfss://data@myacct.dfs.core.windows.net/x/y")
    assert (long.bucket, long.name, long.scheme, long.account) == ("data", "x/y", "az",
                                                                    "myacct")
    for bad in ("az://Data/x", "az://a--b/x", "az://ab/x", "abfs://data@/x", "az:/data/x"):
        with pytest.raises(InvalidURL):
            parse_url(bad)


def test_an_url_of_another_account_is_refused(azurite: Azurite,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setattr(stores, "_defaults", {})
    with pytest.raises(InvalidArgument, match="'otheracct'"):
        list(list_files("abfss://data@otheracct.dfs.core.windows.net/x"))
    store, url = stores.store_for_url(
        f"abfs://data@{azurite.account}.dfs.core.windows.net/x")
    assert (url.bucket, url.name, store.features.scheme) == ("data", "x", "az")


def test_the_fsspec_face_and_the_datasets_refuse_another_account_too(
        azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    # They parsed the URL themselves and dropped its account: a container of
    # the same name in the configured account was read, and written.
    import fsspec

    from aioflux.torch import ObjectIterableDataset, ObjectMapDataset, ShardDataset

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setattr(stores, "_defaults", {})
    container = unique_bucket("acct")
    call(AzureStore().create_bucket(container))
    mine = f"abfs://{container}@{azurite.account}.dfs.core.windows.net"
    other = f"abfs://{container}@otheracct.dfs.core.windows.net"
    fs = fsspec.filesystem("aioflux-az", skip_instance_cache=True)
    fs.pipe_file(f"{mine}/x.bin", b"the configured account's")
    assert fs.cat_file(f"{mine}/x.bin") == b"the configured account's"
    for refused in (lambda: fs.cat_file(f"{other}/x.bin"),
                    lambda: fs.pipe_file(f"{other}/y.bin", b"meant for otheracct"),
                    lambda: ObjectMapDataset.from_prefix(f"{other}/"),
                    lambda: ObjectMapDataset.from_objects([f"{other}/x.bin"]),
                    lambda: list(ObjectIterableDataset.from_prefix(f"{other}/")),
                    lambda: ShardDataset([f"{other}/x.tar"])):
        with pytest.raises(InvalidArgument, match="names the storage account 'otheracct'"):
            refused()
    assert not fs.exists(f"{mine}/y.bin")


def test_url_api_with_the_default_store(azurite: Azurite,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setattr(stores, "_defaults", {})
    seeder = AzureStore(CONFIG)
    container = unique_bucket("url")
    call(seeder.create_bucket(container))
    try:
        data = {f"d/{i:03d}": os.urandom(100 + i) for i in range(12)}
        for name, body in data.items():
            call(seeder.write(container, name, body))
        root = f"az://{container}"
        urls = list(list_files(f"{root}/d/"))
        assert urls == [f"{root}/{name}" for name in sorted(data)]
        assert dict(load_files(urls, concurrency=4)) == {f"{root}/{n}": b
                                                         for n, b in data.items()}
        big = os.urandom(3 * 1024 * 1024 + 17)
        with aioflux.open(f"{root}/big.bin", "wb",
                          writer=WriterOptions(part_size=1024 * 1024)) as f:
            for at in range(0, len(big), 500_000):
                f.write(big[at:at + 500_000])
        with aioflux.open(f"abfs://{container}/big.bin", "rb") as f:
            f.seek(len(big) - 100)
            assert f.read() == big[-100:]
            f.seek(0)
            assert f.read() == big
        with pytest.raises(RuntimeError, match="stop"):
            with aioflux.open(f"{root}/never.bin", "wb") as f:
                f.write(big)
                raise RuntimeError("stop")
        assert not call(seeder.exists(container, "never.bin"))
    finally:
        call(seeder.aclose())
        built = stores._defaults.get("az")
        if built is not None:
            call(built[1].aclose())


async def test_a_pickled_store_rebuilds_from_its_settings(az: tuple[AzureStore, str]) -> None:
    store, container = az
    await store.write(container, "p", b"pickled")
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert (copy.account, copy.endpoint) == (store.account, store.endpoint)
        assert await copy.read(container, "p") == b"pickled"
    finally:
        await copy.aclose()


async def test_a_copy_pending_at_first_is_awaited(az: tuple[AzureStore, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Azurite copies at once; a service that answers "pending" is asked again.
    store, container = az
    data = os.urandom(5000)
    await store.write(container, "src", data)
    looks = 0
    head = AzureStore.head
    request = store.transport.request

    async def pending_once(self: AzureStore, c: str, n: str) -> tuple[object, dict[str, str]]:
        nonlocal looks
        info, headers = await head(self, c, n)
        looks += 1
        if n == "dst" and looks == 2:
            headers = {**headers, "x-ms-copy-status": "pending"}
        return info, headers

    async def answered_pending(op: object, method: str, url: str, handler: Any,
                               **kwargs: Any) -> Any:
        if "x-ms-copy-source" not in kwargs.get("headers", {}):
            return await request(op, method, url, handler, **kwargs)  # type: ignore[arg-type]

        async def as_pending(resp: Any) -> tuple[str, str, str]:
            _, etag, copy_id = await handler(resp)
            return "pending", etag, copy_id

        return await request(op, method, url, as_pending, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(AzureStore, "head", pending_once)
    monkeypatch.setattr(store.transport, "request", answered_pending)
    info = await store.copy(container, "src", container, "dst")
    assert (info.size, info.crc32c) == (len(data), crc32c(data))
    assert info.generation == (await store.stat(container, "dst")).generation
    assert looks >= 3  # the source's HEAD, one pending look, one done
    assert await store.read(container, "dst") == data
    await asyncio.sleep(0)


async def test_a_copy_into_a_missing_container_names_it(az: tuple[AzureStore, str]) -> None:
    store, container = az
    await store.write(container, "src", b"payload")
    missing = unique_bucket("gone")
    with pytest.raises(NotFound) as failed:
        await store.copy(container, "src", missing, "dst")
    assert (failed.value.bucket, failed.value.name) == (missing, "dst")
    message = str(failed.value)
    assert f"copy az://{missing}/dst" in message and f"az://{container}/src" in message


async def test_deleting_a_replaced_generation_missing_ok_is_quiet(
        az: tuple[AzureStore, str]) -> None:
    # As on GCS and MemoryStore: that generation is already gone.
    store, container = az
    old = await store.write(container, "x", b"one")
    new = await store.write(container, "x", b"two")
    await store.delete(container, "x", generation=old.generation, missing_ok=True)
    assert (await store.stat(container, "x")).generation == new.generation  # untouched
    with pytest.raises(NotFound, match="no longer generation"):
        await store.delete(container, "x", generation=old.generation)
    await store.delete(container, "x", generation=new.generation, missing_ok=True)
    assert not await store.exists(container, "x")
    await store.delete(container, "x", generation=new.generation, missing_ok=True)


async def test_a_generation_and_another_precondition_delete_nothing(
        az: tuple[AzureStore, str]) -> None:
    # As on GCS and MemoryStore: the generation first, then the precondition.
    store, container = az
    old = await store.write(container, "x", b"one")
    new = await store.write(container, "x", b"two")
    with pytest.raises(NotFound, match="no longer generation"):
        await store.delete(container, "x", generation=old.generation,
                           if_generation_match=new.generation)
    await store.delete(container, "x", generation=old.generation,
                       if_generation_match=new.generation, missing_ok=True)
    with pytest.raises(PreconditionFailed, match="exists already"):
        await store.delete(container, "x", generation=new.generation, if_generation_match=0)
    assert await store.read(container, "x") == b"two"  # untouched
    await store.delete(container, "x", generation=new.generation,
                       if_generation_match=new.generation)
    with pytest.raises(NotFound, match="no such blob"):
        await store.delete(container, "x", generation=old.generation,
                           if_generation_match=new.generation)


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("commit", ["put blob", "block list"])
async def test_a_gzip_coded_blob_reads_as_its_stored_bytes(
        azurite: Azurite, az: tuple[AzureStore, str], lean: bool, commit: str) -> None:
    from azure.storage.blob import BlobBlock, BlobServiceClient, ContentSettings

    _, container = az
    stored = gzip.compress(b"hello world " * 1000)
    coded = ContentSettings(content_encoding="gzip")
    blob = BlobServiceClient.from_connection_string(
        azurite.connection_string).get_blob_client(container, "g")
    if commit == "put blob":  # Content-MD5 kept: decoded, the bytes failed it
        blob.upload_blob(stored, content_settings=coded)
    else:  # a block list keeps no MD5 (Azure's): decoded, other bytes came back
        blob.stage_block("QUFB", stored)
        blob.commit_block_list([BlobBlock("QUFB")])
        blob.set_http_headers(coded)
    config = ClientConfig(max_concurrency=16, retry=FAST_RETRY, lean_reads=lean)
    async with AzureStore(config, connection_string=azurite.connection_string) as store:
        info = await store.stat(container, "g")
        assert info.size == len(stored) and (info.md5 is None) == (commit == "block list")
        assert await store.read(container, "g") == stored
        assert await store.read(container, "g", start=5, end=50) == stored[5:50]
        assert (await store.fetch(container, "g", size=info.size)).data == stored
        assert store.stats.lean_fallbacks == 0


async def test_an_upload_deleted_before_its_check_is_the_writes_not_found(
        az: tuple[AzureStore, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store, container = az
    data = os.urandom(2500)
    upload = store.start_upload(container, "up", part_size=1000)
    for number in (1, 2):
        await upload.put(number, memoryview(data)[(number - 1) * 1000:number * 1000])
    stat = store.stat

    async def deleted_first(bucket: str, name: str) -> Any:
        monkeypatch.setattr(store, "stat", stat)
        await store.delete(bucket, name)  # another client deletes it as it lands
        return await stat(bucket, name)

    monkeypatch.setattr(store, "stat", deleted_first)
    with pytest.raises(NotFound, match=rf"^write az://{container}/up") as gone:
        await upload.finish(3, memoryview(data)[2000:], _running(data))
    assert gone.value.operation == "write"


async def test_a_head_without_a_body_keeps_azures_error_code(
        az: tuple[AzureStore, str]) -> None:
    # A HEAD's error has no body to carry <Error><Code>: Azure names it in
    # x-ms-error-code, which told a missing blob from a missing container.
    store, container = az
    with pytest.raises(NotFound) as blob:
        await store.stat(container, "no-such-blob")
    assert blob.value.reason == "BlobNotFound"
    with pytest.raises(NotFound) as gone:
        await store.stat(unique_bucket("az-missing"), "x")
    assert gone.value.reason == "ContainerNotFound"
