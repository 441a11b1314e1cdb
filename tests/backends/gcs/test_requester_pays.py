"""Requester-pays buckets, against servers: our emulator's GCS JSON and XML
faces and its S3 face, with a bucket made requester-pays.

Without a billing setting every operation family (stat, list, read on the
lean path and on aiohttp, write in one request, resumable and XML
multipart / S3 multipart, compose, copy, delete) fails with a
``PermissionDenied`` naming the operation, bucket and object and saying
what to set; with it (GCS ``user_project=``, S3 ``requester_pays=True``, or
their environment variables) they all succeed. A GCS credential's quota
project goes out as ``x-goog-user-project`` unless a user project is given
(google-auth's ``credentials.apply``). moto, which has no requester-pays
buckets, takes the S3 header as any other.

No third-party server can test the refusals: moto 5.2 keeps a bucket's
payer (always ``BucketOwner``) with no request to change it and checks
nothing, and fake-gcs-server and Azurite have no billing at all; so they
are tested against our emulator, and moto only takes the signed header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from google.oauth2 import credentials as user_credentials

from aioflux import AsyncClient, ClientConfig, InvalidArgument, PermissionDenied, StorageError
from aioflux._api.stores import new_store
from aioflux._core.auth import AuthRequest
from aioflux._core.integrity.crc import Crc32c, crc32c
from aioflux._core.storage.protocol import ObjectStore
from aioflux.s3 import S3Store
from aioflux.s3._auth import SigV4
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket
from tests.servers.web_server import Served, Server

MIB = 1024 * 1024
PART = 5 * MIB
DATA = b"requester pays " * 1000
BIG = bytes(range(256)) * (PART // 256) + b"tail" * 1000  # two parts
PAYER = "billed-project"
CONFIG = ClientConfig(max_concurrency=8, retry=FAST_RETRY)
AIOHTTP = CONFIG.replace(lean_reads=False)


@pytest.fixture
def paid(emulator: Emulator) -> str:
    """A requester-pays bucket holding ``seed`` (DATA) and ``other``."""
    name = emulator.create_bucket(unique_bucket("rp"), requester_pays=True)
    emulator.store.put(name, "seed", DATA)
    emulator.store.put(name, "other", b"x" * 10)
    return name


@pytest.fixture
def free(emulator: Emulator) -> str:
    """A plain bucket (copies out of the paid one land here)."""
    return emulator.create_bucket(unique_bucket("free"))


async def _stream_write(store: ObjectStore, bucket: str, name: str, data: bytes) -> Any:
    """A streaming upload of two parts (XML multipart on GCS, multipart on S3)."""
    upload = store.start_upload(bucket, name, part_size=PART)
    view = memoryview(data)
    expected = Crc32c()
    expected.update(view)
    try:
        await upload.put(1, view[:PART])
        return await upload.finish(2, view[PART:], expected), upload.mode
    except BaseException:
        await upload.abort()
        raise


# Each family: (operation named by its error, object named, the call).
Call = Callable[[Any, str, str], Awaitable[Any]]


async def _list(store: Any, bucket: str, _free: str) -> Any:
    return [o.name async for o in store.list_objects(bucket, "")]


GCS_FAMILIES: dict[str, tuple[str, str, Call]] = {
    "stat": ("stat", "seed", lambda c, b, f: c.stat(b, "seed")),
    "list": ("list", "", _list),
    "read": ("read", "seed", lambda c, b, f: c.read(b, "seed")),
    "read-range": ("read", "seed", lambda c, b, f: c.read(b, "seed", start=3, end=20)),
    "write": ("write", "new", lambda c, b, f: c.write(b, "new", DATA, resumable=False)),
    "write-resumable": ("resumable upload", "new",
                        lambda c, b, f: c.write(b, "new", DATA, resumable=True)),
    "write-xml-multipart": ("initiate multipart upload", "big",
                            lambda c, b, f: _stream_write(c, b, "big", BIG)),
    "compose": ("compose", "composite",
                lambda c, b, f: c.compose(b, "composite", ["seed", "other"])),
    "copy": ("copy", "seed", lambda c, b, f: c.copy(b, "seed", f, "copied")),
    "delete": ("delete", "other", lambda c, b, f: c.delete(b, "other")),
}


def _refused(exc: StorageError, scheme: str, bucket: str, name: str, operation: str) -> None:
    assert isinstance(exc, PermissionDenied), repr(exc)
    assert exc.bucket == bucket and exc.name == name
    # A copy's first step is the stat of its source, as an S3 delete's.
    assert exc.operation in (operation, "stat") if operation in ("copy", "delete") else \
        exc.operation == operation
    message = str(exc)
    assert f"{exc.operation} {scheme}://{bucket}" in message
    if name:
        assert f"{scheme}://{bucket}/{name}" in message
    if scheme == "gs":
        assert exc.status == 400 and exc.reason == "UserProjectMissing"
        assert "user_project=" in message and "--user-project" in message
    else:
        assert exc.status == 403
        assert "requester_pays=True" in message and "--requester-pays" in message
    assert "Bearer" not in message and "Authorization" not in message


@pytest.mark.parametrize("config", [CONFIG, AIOHTTP], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("family", list(GCS_FAMILIES))
async def test_gcs_without_a_user_project_every_operation_is_refused_and_named(
        emulator: Emulator, paid: str, free: str, family: str, config: ClientConfig) -> None:
    operation, name, call = GCS_FAMILIES[family]
    async with AsyncClient(config, endpoint=emulator.endpoint) as client:
        with pytest.raises(StorageError) as caught:
            await call(client, paid, free)
    _refused(caught.value, "gs", paid, name, operation)
    # Refused means untouched: nothing written, nothing deleted.
    assert sorted(emulator.store.bucket(paid).objects) == ["other", "seed"]
    assert not emulator.store.bucket(free).objects
    assert not [u for u in emulator.store.uploads.values() if u.bucket == paid]


@pytest.mark.parametrize("config", [CONFIG, AIOHTTP], ids=["lean", "aiohttp"])
async def test_gcs_with_a_user_project_every_operation_succeeds(
        emulator: Emulator, paid: str, free: str, config: ClientConfig) -> None:
    async with AsyncClient(config, endpoint=emulator.endpoint, user_project=PAYER) as client:
        assert client.user_project == PAYER
        assert (await client.stat(paid, "seed")).size == len(DATA)
        assert await _list(client, paid, free) == ["other", "seed"]
        assert await client.read(paid, "seed") == DATA
        assert await client.read(paid, "seed", start=3, end=20) == DATA[3:20]
        buffer = bytearray(len(DATA))
        assert await client.read(paid, "seed", into=buffer) == len(DATA)
        assert buffer == DATA
        assert (await client.write(paid, "one", DATA, resumable=False)).crc32c == crc32c(DATA)
        assert (await client.write(paid, "res", DATA, resumable=True)).crc32c == crc32c(DATA)
        info, mode = await _stream_write(client, paid, "big", BIG)
        assert mode == "multipart" and info.size == len(BIG)
        composite = await client.compose(paid, "composite", ["seed", "other"])
        assert composite.size == len(DATA) + 10
        assert (await client.copy(paid, "seed", free, "copied")).size == len(DATA)
        assert (await client.copy(free, "copied", paid, "back")).size == len(DATA)
        await client.delete(paid, "other")
        assert await client.read(paid, "big") == BIG
        assert await client.read(free, "copied") == DATA
    assert sorted(emulator.store.bucket(paid).objects) == [
        "back", "big", "composite", "one", "res", "seed"]


async def test_new_store_takes_the_billing_settings(emulator: Emulator, paid: str) -> None:
    # The store the URL-level API and fsspec build (new_store) bills as told.
    for store in (new_store("gs", CONFIG, endpoint=emulator.endpoint, user_project=PAYER),
                  new_store("s3", CONFIG, endpoint=emulator.s3_endpoint, region="us-east-1",
                            requester_pays=True)):
        try:
            assert (await store.stat(paid, "seed")).size == len(DATA)
        finally:
            await store.aclose()
    with pytest.raises(InvalidArgument, match="user_project is a GCS setting"):
        new_store("s3", CONFIG, user_project=PAYER)
    with pytest.raises(InvalidArgument, match="requester_pays is an S3 setting"):
        new_store("gs", CONFIG, requester_pays=True)


def test_a_user_project_that_is_no_project_id_is_refused() -> None:
    from aioflux import InvalidArgument

    for bad in ("", "has space", "new\nline", 7):
        with pytest.raises(InvalidArgument, match="user_project"):
            AsyncClient(endpoint="http://127.0.0.1:9", user_project=bad)  # type: ignore[arg-type]


# -- the emulator's faces, as a GCS or S3 client sees them ---------------------------


async def test_the_json_and_xml_faces_answer_as_gcs_does(emulator: Emulator, paid: str) -> None:
    base = emulator.endpoint
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/storage/v1/b/{paid}/o/seed") as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
            assert error["errors"][0]["reason"] == "required"
            assert error["message"] == ("Bucket is a requester pays bucket but no user project "
                                        "provided.")
        async with http.get(f"{base}/storage/v1/b/{paid}/o/seed",
                            params={"userProject": PAYER}) as resp:
            assert resp.status == 200
        async with http.get(f"{base}/{paid}/seed") as resp:
            assert resp.status == 400
            assert "<Code>UserProjectMissing</Code>" in await resp.text()
        async with http.get(f"{base}/{paid}/seed",
                            headers={"x-goog-user-project": PAYER}) as resp:
            assert resp.status == 200 and await resp.read() == DATA
        # The bucket resource says so, and a bucket is made or patched requester-pays.
        async with http.get(f"{base}/storage/v1/b/{paid}",
                            params={"userProject": PAYER}) as resp:
            assert (await resp.json())["billing"] == {"requesterPays": True}
        made = unique_bucket("rp-json")
        async with http.post(f"{base}/storage/v1/b", params={"project": "p"},
                             json={"name": made, "billing": {"requesterPays": True}}) as resp:
            assert resp.status == 200
            assert (await resp.json())["billing"] == {"requesterPays": True}
        async with http.get(f"{base}/storage/v1/b/{made}/o") as resp:
            assert resp.status == 400
        async with http.patch(f"{base}/storage/v1/b/{made}", params={"userProject": PAYER},
                              json={"billing": {"requesterPays": False}}) as resp:
            assert resp.status == 200
            assert (await resp.json()).get("billing", {}).get("requesterPays") in (None, False)
        async with http.get(f"{base}/storage/v1/b/{made}/o") as resp:
            assert resp.status == 200


async def test_the_s3_face_denies_without_the_request_payer_header(
        emulator: Emulator, paid: str) -> None:
    base = emulator.s3_endpoint
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/{paid}/seed") as resp:
            assert resp.status == 403
            assert "<Code>AccessDenied</Code>" in await resp.text()
        async with http.get(f"{base}/{paid}/seed",
                            headers={"x-amz-request-payer": "requester"}) as resp:
            assert resp.status == 200 and await resp.read() == DATA
        # PutBucketRequestPayment / GetBucketRequestPayment.
        made = unique_bucket("rp-s3")
        async with http.put(f"{base}/{made}") as resp:
            assert resp.status == 200
        async with http.put(f"{base}/{made}?requestPayment",
                            data=b"<RequestPaymentConfiguration><Payer>Requester</Payer>"
                                 b"</RequestPaymentConfiguration>") as resp:
            assert resp.status == 200
        async with http.get(f"{base}/{made}?requestPayment") as resp:
            assert "<Payer>Requester</Payer>" in await resp.text()
        async with http.get(f"{base}/{made}?list-type=2") as resp:
            assert resp.status == 403
    assert emulator.store.bucket(made).requester_pays


# -- the quota project of google-auth credentials ------------------------------------


@dataclass
class Recorded:
    """Each request's path, query and billing header."""

    seen: list[tuple[str, dict[str, str], str | None]] = field(default_factory=list)


def _recording(recorded: Recorded) -> Callable[[web.Request, Served],
                                               Awaitable[web.StreamResponse]]:
    resource = {"bucket": "bkt", "name": "obj", "size": str(len(DATA)), "generation": "1",
                "crc32c": "", "contentType": "application/octet-stream"}

    async def answer(request: web.Request, served: Served) -> web.StreamResponse:
        recorded.seen.append((request.path, dict(request.query),
                              request.headers.get("x-goog-user-project")))
        if request.query.get("alt") == "media":
            return web.Response(body=DATA)
        if request.method == "POST" and "uploads" in request.query:
            return web.Response(body=b"<InitiateMultipartUploadResult><UploadId>u</UploadId>"
                                     b"</InitiateMultipartUploadResult>")
        return web.json_response(dict(resource, crc32c=_b64(crc32c(DATA))))

    return answer


def _b64(value: int) -> str:
    import base64

    return base64.b64encode(value.to_bytes(4, "big")).decode()


def _quota_credentials(quota: str | None) -> Any:
    # A user's ADC (gcloud auth application-default login) with a quota
    # project; a token that never expires, so no refresh is asked for.
    return user_credentials.Credentials(token="ya29.user", quota_project_id=quota)


async def test_a_credentials_quota_project_goes_out_as_x_goog_user_project() -> None:
    recorded = Recorded()
    async with Server(_recording(recorded)) as (endpoint, _):
        async with AsyncClient(CONFIG, endpoint=endpoint,
                               credentials=_quota_credentials("quota-p")) as client:
            await client.stat("bkt", "obj")
            assert await client.read("bkt", "obj") == DATA
            assert await client.initiate_multipart("bkt", "obj") == "u"
    assert len(recorded.seen) == 3
    assert [header for _, _, header in recorded.seen] == ["quota-p"] * 3
    assert all("userProject" not in query for _, query, _ in recorded.seen)


async def test_an_explicit_user_project_wins_over_the_credentials_quota_project() -> None:
    recorded = Recorded()
    async with Server(_recording(recorded)) as (endpoint, _):
        async with AsyncClient(CONFIG, endpoint=endpoint, user_project=PAYER,
                               credentials=_quota_credentials("quota-p")) as client:
            await client.stat("bkt", "obj")
            assert await client.read("bkt", "obj") == DATA
            assert await client.initiate_multipart("bkt", "obj") == "u"
    (stat_path, stat_query, stat_header), (_, read_query, read_header), \
        (xml_path, xml_query, xml_header) = recorded.seen
    # JSON API requests name it in the query, XML API ones in the header,
    # as google-cloud-storage does; the quota project goes nowhere.
    assert stat_path.startswith("/storage/v1/") and stat_query["userProject"] == PAYER
    assert read_query["userProject"] == PAYER and read_query["alt"] == "media"
    assert stat_header is None and read_header is None
    assert xml_path == "/bkt/obj" and "userProject" not in xml_query and xml_header == PAYER


async def test_credentials_without_a_quota_project_send_no_header() -> None:
    recorded = Recorded()
    async with Server(_recording(recorded)) as (endpoint, _):
        async with AsyncClient(CONFIG, endpoint=endpoint,
                               credentials=_quota_credentials(None)) as client:
            await client.stat("bkt", "obj")
    assert recorded.seen == [("/storage/v1/b/bkt/o/obj", {"prettyPrint": "false"}, None)]


async def test_a_quota_project_pays_for_a_requester_pays_bucket(
        emulator: Emulator, paid: str) -> None:
    # An emulator on loopback takes the credentials given (and ignores the token).
    async with AsyncClient(CONFIG, endpoint=emulator.endpoint,
                           credentials=_quota_credentials(PAYER)) as client:
        assert client.user_project is None
        assert await client.read(paid, "seed") == DATA
        assert await _list(client, paid, "") == ["other", "seed"]
        info, mode = await _stream_write(client, paid, "big", BIG)
        assert mode == "multipart" and info.size == len(BIG)


# -- S3: x-amz-request-payer ------------------------------------------------------------


def _s3(emulator: Emulator, config: ClientConfig = CONFIG, **kwargs: Any) -> S3Store:
    return S3Store(config, endpoint=emulator.s3_endpoint, region="us-east-1", **kwargs)


async def _delete_many(store: Any, bucket: str, _free: str) -> None:
    await store.delete_many(bucket, ["other"])


S3_FAMILIES: dict[str, tuple[str, str, Call]] = {
    "stat": ("stat", "seed", lambda s, b, f: s.stat(b, "seed")),
    "list": ("list", "", _list),
    "read": ("read", "seed", lambda s, b, f: s.read(b, "seed")),
    "read-range": ("read", "seed", lambda s, b, f: s.read(b, "seed", start=3, end=20)),
    "write": ("write", "new", lambda s, b, f: s.write(b, "new", DATA)),
    "write-multipart": ("initiate multipart upload", "big",
                        lambda s, b, f: _stream_write(s, b, "big", BIG)),
    "copy": ("copy", "seed", lambda s, b, f: s.copy(b, "seed", f, "copied")),
    "delete": ("delete", "other", lambda s, b, f: s.delete(b, "other")),
    "delete-many": ("delete many", "other", _delete_many),
}


@pytest.mark.parametrize("config", [CONFIG, AIOHTTP], ids=["lean", "aiohttp"])
@pytest.mark.parametrize("family", list(S3_FAMILIES))
async def test_s3_without_requester_pays_every_operation_is_refused_and_named(
        emulator: Emulator, paid: str, free: str, family: str, config: ClientConfig) -> None:
    operation, name, call = S3_FAMILIES[family]
    async with _s3(emulator, config) as store:
        with pytest.raises(StorageError) as caught:
            await call(store, paid, free)
    _refused(caught.value, "s3", paid, name, operation)
    assert sorted(emulator.store.bucket(paid).objects) == ["other", "seed"]
    assert not emulator.store.bucket(free).objects


@pytest.mark.parametrize("config", [CONFIG, AIOHTTP], ids=["lean", "aiohttp"])
async def test_s3_with_requester_pays_every_operation_succeeds(
        emulator: Emulator, paid: str, free: str, config: ClientConfig) -> None:
    async with _s3(emulator, config, requester_pays=True) as store:
        assert store.requester_pays
        assert (await store.stat(paid, "seed")).size == len(DATA)
        assert await _list(store, paid, free) == ["other", "seed"]
        assert await store.read(paid, "seed") == DATA
        assert await store.read(paid, "seed", start=3, end=20) == DATA[3:20]
        assert (await store.write(paid, "one", DATA)).size == len(DATA)
        info, mode = await _stream_write(store, paid, "big", BIG)
        assert mode == "multipart" and info.size == len(BIG)
        assert (await store.copy(paid, "seed", free, "copied")).size == len(DATA)
        assert (await store.copy(free, "copied", paid, "back")).size == len(DATA)
        await store.delete(paid, "other")
        await store.delete_many(paid, ["one"])
        assert await store.read(paid, "big") == BIG
    assert sorted(emulator.store.bucket(paid).objects) == ["back", "big", "seed"]


class RecordingAuth:
    """Signs nothing; keeps what each request would have had signed."""

    def __init__(self) -> None:
        self.requests: list[AuthRequest] = []

    async def headers(self, request: AuthRequest) -> dict[str, str]:
        self.requests.append(request)
        return {}


async def test_every_s3_request_hands_the_header_to_the_signer(
        emulator: Emulator, paid: str, free: str) -> None:
    auth = RecordingAuth()
    async with _s3(emulator, requester_pays=True, auth=auth) as store:
        await store.stat(paid, "seed")
        await _list(store, paid, free)
        await store.read(paid, "seed")
        await store.write(paid, "one", DATA)
        await _stream_write(store, paid, "big", BIG)
        await store.copy(paid, "seed", free, "copied")
        await store.delete(paid, "one")
    assert len(auth.requests) >= 10
    assert all(r.headers.get("x-amz-request-payer") == "requester" for r in auth.requests)


async def test_sigv4_signs_the_request_payer_header() -> None:
    signer = SigV4(lambda _url: "us-east-1")
    signed = await signer.headers(AuthRequest(
        "GET", "https://s3.us-east-1.amazonaws.com/b/o",
        headers={"x-amz-request-payer": "requester"}))
    signed_headers = signed["Authorization"].split("SignedHeaders=")[1].split(",")[0]
    assert "x-amz-request-payer" in signed_headers.split(";")


async def test_moto_takes_the_request_payer_header(moto_s3: MotoS3) -> None:
    async with S3Store(CONFIG, endpoint=moto_s3.endpoint, requester_pays=True) as store:
        bucket = unique_bucket("rp-moto")
        await store.create_bucket(bucket)
        await store.write(bucket, "a", DATA)
        assert await store.read(bucket, "a") == DATA
        assert [o.name for o in await _collect(store.list_objects(bucket))] == ["a"]
        await store.copy(bucket, "a", bucket, "b")
        await store.delete(bucket, "a")
        assert (await store.stat(bucket, "b")).size == len(DATA)


async def _collect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]



# -- the command line ---------------------------------------------------------------


def test_the_cli_bills_the_user_project_given(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, paid: str) -> None:
    code, out, err = run("cat", f"gs://{paid}/seed")
    assert code == 1 and out == ""
    assert f"gs://{paid}/seed" in err and "--user-project" in err
    assert err.count("\n") == 1  # one line, no traceback
    code, out, _ = run("cat", f"gs://{paid}/seed", "--user-project", PAYER)
    assert code == 0 and out.encode() == DATA
    code, out, _ = run("ls", f"gs://{paid}/", "--user-project", PAYER)
    assert code == 0 and out.split() == [f"gs://{paid}/other", f"gs://{paid}/seed"]
    code, out, _ = run("stat", f"gs://{paid}/seed", "--user-project", PAYER)
    assert code == 0 and str(len(DATA)) in out
    code, _, err = run("ls", f"gs://{paid}/", "--user-project", "not a project")
    assert code == 2 and "--user-project" in err


def test_the_cli_accepts_s3_charges_when_asked(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, paid: str) -> None:
    s3 = ("--s3-endpoint", emulator.s3_endpoint, "--region", "us-east-1")
    code, _, err = run("cat", f"s3://{paid}/seed", *s3)
    assert code == 1 and "--requester-pays" in err and f"s3://{paid}/seed" in err
    code, out, _ = run("cat", f"s3://{paid}/seed", *s3, "--requester-pays")
    assert code == 0 and out.encode() == DATA
    code, out, _ = run("ls", f"s3://{paid}/", *s3, "--requester-pays")
    assert code == 0 and out.split() == [f"s3://{paid}/other", f"s3://{paid}/seed"]


def test_the_settings_travel_with_a_pickle(emulator: Emulator, paid: str) -> None:
    # Spawned DataLoader workers rebuild clients and stores from their pickles.
    import pickle

    from aioflux import Client

    with Client(CONFIG, endpoint=emulator.endpoint, user_project=PAYER) as client:
        with pickle.loads(pickle.dumps(client)) as copy:
            assert copy.aio.user_project == PAYER
            assert copy.read(paid, "seed") == DATA
    store = _s3(emulator, requester_pays=True)
    copied = pickle.loads(pickle.dumps(store))
    assert copied.requester_pays
    from aioflux._core.concurrency.portal import call

    try:
        assert call(copied.read(paid, "seed")) == DATA
    finally:
        call(copied.aclose())
        call(store.aclose())
