"""The emulator's S3 face, driven by botocore (and raw aiohttp where botocore
cannot send what is tested: aws-chunked bodies, bad trailers)."""

from __future__ import annotations

import base64
import hashlib
import io
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import aiohttp
import awscrt.checksums
import botocore.config
import botocore.exceptions
import botocore.session
import google_crc32c
import pytest

from aioflux.testing import Emulator, Faults, running_emulator

MIB = 1024 * 1024


def b64crc32c(data: bytes) -> str:
    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


def b64crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def bkt(emu: Emulator) -> Iterator[str]:
    name = emu.create_bucket(f"s3-{uuid.uuid4().hex[:12]}")
    yield name
    emu.faults = Faults()


def b64crc64nvme(data: bytes) -> str:
    return base64.b64encode(awscrt.checksums.crc64nvme(data).to_bytes(8, "big")).decode()


def b64sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def make_client(endpoint: str, *, attempts: int = 1, validation: str = "when_supported",
                calculation: str = "when_supported") -> Any:
    config = botocore.config.Config(
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": attempts, "mode": "standard"},
        response_checksum_validation=validation,
        request_checksum_calculation=calculation,
    )
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
        aws_secret_access_key="y", config=config)


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    """Clients a test made; closed afterwards (their pooled sockets would leak)."""
    made: list[Any] = []
    yield made
    for client in made:
        client.close()


@pytest.fixture
def s3(emu: Emulator, clients: list[Any]) -> Any:
    client = make_client(emu.s3_endpoint)
    clients.append(client)
    return client


def error_of(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[int, str]:
    resp = exc.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def test_put_get_head_range_and_checksum_mode(emu: Emulator, s3: Any, bkt: str,
                                             clients: list[Any]) -> None:
    data = bytes(range(256)) * 1000
    key = "a dir/obj+1 ü.bin"
    put = s3.put_object(Bucket=bkt, Key=key, Body=data, ContentType="application/x-t",
                        Metadata={"who": "me"}, ChecksumCRC32C=b64crc32c(data))
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert put["ChecksumCRC32C"] == b64crc32c(data)
    got = s3.get_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got["ChecksumCRC32C"] == b64crc32c(data)
    assert got["ContentType"] == "application/x-t" and got["Metadata"] == {"who": "me"}
    assert got["ETag"] == put["ETag"] and got["ContentLength"] == len(data)
    # Without x-amz-checksum-mode (botocore sends it by default), no checksum.
    clients.append(make_client(emu.s3_endpoint, validation="when_required"))
    plain = clients[-1].get_object(Bucket=bkt, Key=key)
    assert "x-amz-checksum-crc32c" not in plain["ResponseMetadata"]["HTTPHeaders"]
    assert plain["Body"].read() == data
    part = s3.get_object(Bucket=bkt, Key=key, Range="bytes=100-199", ChecksumMode="ENABLED")
    assert part["Body"].read() == data[100:200]
    assert part["ContentRange"] == f"bytes 100-199/{len(data)}"
    # A range carries no whole-object checksum (a client would validate it against the range).
    assert "ChecksumCRC32C" not in part
    tail = s3.get_object(Bucket=bkt, Key=key, Range="bytes=-10")
    assert tail["Body"].read() == data[-10:]
    head = s3.head_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(data) and head["ChecksumCRC32C"] == b64crc32c(data)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key=key, Range=f"bytes={len(data)}-")
    assert error_of(exc) == (416, "InvalidRange")


def test_errors_are_s3_error_documents(s3: Any, bkt: str) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="missing/key")
    assert error_of(exc) == (404, "NoSuchKey")
    assert exc.value.response["Error"]["Key"] == "missing/key"
    assert exc.value.response["Error"]["Message"] == "The specified key does not exist."
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_object(Bucket=bkt, Key="missing")
    assert error_of(exc)[0] == 404
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.list_objects_v2(Bucket="no-such-bucket-s3")
    assert error_of(exc) == (404, "NoSuchBucket")
    assert exc.value.response["Error"]["BucketName"] == "no-such-bucket-s3"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object_tagging(Bucket=bkt, Key="k")
    assert error_of(exc) == (501, "NotImplemented")


def test_put_checksum_mismatch_is_bad_digest_and_stores_nothing(s3: Any, bkt: str) -> None:
    """The emulator only: moto 5.2 echoes a sent ``x-amz-checksum-*`` without
    checking it (a TODO in its ``_get_checksum``), and no other S3 server
    runs in the tests."""
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="k", Body=b"data", ChecksumCRC32C=b64crc32c(b"other"))
    assert error_of(exc) == (400, "BadDigest")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="k", Body=b"data", ChecksumCRC32C="not-base64!")
    assert error_of(exc) == (400, "InvalidRequest")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="k", Body=b"data", ChecksumCRC32=b64crc32(b"x"))
    assert error_of(exc) == (400, "BadDigest")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_object(Bucket=bkt, Key="k")
    assert error_of(exc)[0] == 404
    # botocore's default CRC32 header is verified and accepted.
    assert s3.put_object(Bucket=bkt, Key="k", Body=b"data")["ChecksumCRC32"] == b64crc32(b"data")


def test_conditional_put(s3: Any, bkt: str) -> None:
    first = s3.put_object(Bucket=bkt, Key="c", Body=b"1", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="c", Body=b"2", IfNoneMatch="*")
    assert error_of(exc) == (412, "PreconditionFailed")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="c", Body=b"3", IfMatch='"0123"')
    assert error_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bkt, Key="c")["Body"].read() == b"1"
    second = s3.put_object(Bucket=bkt, Key="c", Body=b"4", IfMatch=first["ETag"])
    assert s3.get_object(Bucket=bkt, Key="c")["Body"].read() == b"4"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="absent", Body=b"5", IfMatch=second["ETag"])
    assert error_of(exc) == (404, "NoSuchKey")
    # Reads: If-None-Match with the live ETag is 304, If-Match with another 412.
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="c", IfNoneMatch=second["ETag"])
    assert error_of(exc)[0] == 304
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="c", IfMatch=first["ETag"])
    assert error_of(exc) == (412, "PreconditionFailed")


def test_list_objects_v2_paging_delimiter_start_after(s3: Any, bkt: str) -> None:
    keys = [f"p/{i:03d}" for i in range(25)] + ["p/sub/a", "p/sub/b", "p/x y+z", "q/1"]
    for key in keys:
        s3.put_object(Bucket=bkt, Key=key, Body=key.encode())
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bkt, Prefix="p/", MaxKeys=10, **kw)
        pages += 1
        assert page["KeyCount"] == len(page.get("Contents", []))
        seen += [c["Key"] for c in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == sorted(k for k in keys if k.startswith("p/")) and pages == 3
    page = s3.list_objects_v2(Bucket=bkt, Prefix="p/", Delimiter="/", MaxKeys=1000)
    assert [c["Key"] for c in page["Contents"]] == [f"p/{i:03d}" for i in range(25)] + ["p/x y+z"]
    assert page["CommonPrefixes"] == [{"Prefix": "p/sub/"}]
    assert page["KeyCount"] == 27
    item = page["Contents"][0]
    assert item["Size"] == 5 and item["ETag"] == f'"{hashlib.md5(b"p/000").hexdigest()}"'
    # botocore sends CRC32 by default: S3 lists the algorithm an object was written with.
    assert item["ChecksumAlgorithm"] == ["CRC32"] and item["StorageClass"] == "STANDARD"
    assert item["LastModified"].year >= 2024
    after = s3.list_objects_v2(Bucket=bkt, StartAfter="p/023")
    assert [c["Key"] for c in after["Contents"]] == ["p/024", "p/sub/a", "p/sub/b", "p/x y+z",
                                                     "q/1"]
    # MaxKeys counts prefixes too, and paging resumes after a whole prefix.
    page = s3.list_objects_v2(Bucket=bkt, Delimiter="/", MaxKeys=1)
    assert page["CommonPrefixes"] == [{"Prefix": "p/"}] and page["IsTruncated"]
    page = s3.list_objects_v2(Bucket=bkt, Delimiter="/", MaxKeys=1,
                              ContinuationToken=page["NextContinuationToken"])
    assert page["CommonPrefixes"] == [{"Prefix": "q/"}] and not page["IsTruncated"]
    v1 = s3.list_objects(Bucket=bkt, Prefix="p/", Marker="p/022", MaxKeys=2)
    assert [c["Key"] for c in v1["Contents"]] == ["p/023", "p/024"] and v1["IsTruncated"]


def test_list_objects_v1_marker_skips_a_common_prefix_not_a_key(s3: Any, bkt: str) -> None:
    for key in ["dir/", "dir/a", "dir/b", "dir/sub/c", "dir/sub/d", "dir/z"]:
        s3.put_object(Bucket=bkt, Key=key, Body=b"x")
    # "dir/" is a key of the listing under "dir/": the keys after it follow.
    page = s3.list_objects(Bucket=bkt, Prefix="dir/", Delimiter="/", MaxKeys=1)
    assert [c["Key"] for c in page["Contents"]] == ["dir/"] and page["NextMarker"] == "dir/"
    page = s3.list_objects(Bucket=bkt, Prefix="dir/", Delimiter="/", Marker="dir/")
    assert [c["Key"] for c in page["Contents"]] == ["dir/a", "dir/b", "dir/z"]
    assert page["CommonPrefixes"] == [{"Prefix": "dir/sub/"}]
    # A page that ended on a common prefix resumes after the whole group.
    page = s3.list_objects(Bucket=bkt, Prefix="dir/", Delimiter="/", Marker="dir/b",
                           MaxKeys=1)
    assert page["CommonPrefixes"] == [{"Prefix": "dir/sub/"}]
    page = s3.list_objects(Bucket=bkt, Prefix="dir/", Delimiter="/",
                           Marker=page["NextMarker"])
    assert [c["Key"] for c in page["Contents"]] == ["dir/z"] and "CommonPrefixes" not in page
    paged = s3.get_paginator("list_objects").paginate(
        Bucket=bkt, Prefix="dir/", Delimiter="/", PaginationConfig={"PageSize": 1})
    assert [c["Key"] for p in paged for c in p.get("Contents", [])] == [
        "dir/", "dir/a", "dir/b", "dir/z"]


def multipart_parts(s3: Any, bkt: str, key: str, upload_id: str,
                    bodies: list[bytes]) -> list[dict[str, Any]]:
    parts = []
    for n, body in enumerate(bodies, 1):
        r = s3.upload_part(Bucket=bkt, Key=key, UploadId=upload_id, PartNumber=n,
                           Body=io.BytesIO(body), ChecksumCRC32C=b64crc32c(body))
        assert r["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        assert r["ChecksumCRC32C"] == b64crc32c(body)
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32C": b64crc32c(body)})
    return parts


def test_multipart_upload_list_complete(s3: Any, emu: Emulator, bkt: str) -> None:
    key = "ckpt/model.pt"
    bodies = [bytes([n]) * (5 * MIB) for n in (1, 2)] + [b"tail"]
    up = s3.create_multipart_upload(Bucket=bkt, Key=key, ChecksumAlgorithm="CRC32C",
                                    Metadata={"step": "7"})
    assert up["ChecksumAlgorithm"] == "CRC32C"
    upload_id = up["UploadId"]
    parts = multipart_parts(s3, bkt, key, upload_id, bodies)
    listed = s3.list_parts(Bucket=bkt, Key=key, UploadId=upload_id, MaxParts=2)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2] and listed["IsTruncated"]
    assert listed["Parts"][0]["Size"] == 5 * MIB
    assert listed["Parts"][0]["ChecksumCRC32C"] == b64crc32c(bodies[0])
    rest = s3.list_parts(Bucket=bkt, Key=key, UploadId=upload_id,
                         PartNumberMarker=listed["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in rest["Parts"]] == [3]
    uploads = s3.list_multipart_uploads(Bucket=bkt, Prefix="ckpt/")
    assert [(u["Key"], u["UploadId"]) for u in uploads["Uploads"]] == [(key, upload_id)]
    # A part's checksum that does not match what was stored: InvalidPart.
    bad = [dict(parts[0], ChecksumCRC32C=b64crc32c(b"no")), *parts[1:]]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": bad})
    assert error_of(exc) == (400, "InvalidPart")
    done = s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})
    digests = b"".join(hashlib.md5(b).digest() for b in bodies)
    assert done["ETag"] == f'"{hashlib.md5(digests).hexdigest()}-3"'
    # COMPOSITE (S3's default for CRC32C): the checksum of the parts' checksums, "-N".
    crcs = b"".join(google_crc32c.value(b).to_bytes(4, "big") for b in bodies)
    assert done["ChecksumCRC32C"] == f"{b64crc32c(crcs)}-3"
    assert done["ChecksumType"] == "COMPOSITE"
    whole = b"".join(bodies)
    # The object keeps reporting the composite value (botocore skips validating "-N").
    got = s3.get_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
    assert got["Body"].read() == whole and got["ETag"] == done["ETag"]
    assert got["ChecksumCRC32C"] == done["ChecksumCRC32C"] and got["Metadata"] == {"step": "7"}
    assert got["ChecksumType"] == "COMPOSITE"
    assert s3.head_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")["ChecksumCRC32C"] == \
        done["ChecksumCRC32C"]
    listed_obj = s3.list_objects_v2(Bucket=bkt, Prefix=key)["Contents"][0]
    assert listed_obj["ChecksumType"] == "COMPOSITE" and listed_obj["Size"] == len(whole)
    assert s3.list_multipart_uploads(Bucket=bkt).get("Uploads", []) == []
    assert emu.stats["s3_complete"] >= 2
    # FULL_OBJECT: the whole object's CRC32C, in the answer and on the object.
    full_id = s3.create_multipart_upload(Bucket=bkt, Key="full", ChecksumAlgorithm="CRC32C",
                                         ChecksumType="FULL_OBJECT")["UploadId"]
    full_parts = multipart_parts(s3, bkt, "full", full_id, bodies)
    for part in full_parts:
        del part["ChecksumCRC32C"]
    full = s3.complete_multipart_upload(Bucket=bkt, Key="full", UploadId=full_id,
                                        MultipartUpload={"Parts": full_parts})
    assert full["ChecksumCRC32C"] == b64crc32c(whole) and full["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bkt, Key="full", ChecksumMode="ENABLED")
    assert got["ChecksumCRC32C"] == b64crc32c(whole) and got["Body"].read() == whole
    # Overwritten by a plain PUT (botocore's default CRC32), the key reports the
    # new object's own checksum, of the algorithm it was written with only.
    s3.put_object(Bucket=bkt, Key=key, Body=b"plain")
    got = s3.get_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
    assert got["ChecksumCRC32"] == b64crc32(b"plain") and got["ChecksumType"] == "FULL_OBJECT"
    assert "ChecksumCRC32C" not in got
    assert got["Body"].read() == b"plain"  # and the connection goes back to the pool


def test_multipart_rules_abort_and_conditional_complete(s3: Any, bkt: str) -> None:
    key = "m"
    s3.put_object(Bucket=bkt, Key=key, Body=b"old")
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key=key)["UploadId"]
    parts = multipart_parts(s3, bkt, key, upload_id, [b"small", b"x"])
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})
    assert error_of(exc) == (400, "EntityTooSmall")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts[::-1]})
    assert error_of(exc) == (400, "InvalidPartOrder")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts[1:]}, IfNoneMatch="*")
    assert error_of(exc) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bkt, Key=key)["Body"].read() == b"old"
    s3.abort_multipart_upload(Bucket=bkt, Key=key, UploadId=upload_id)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.list_parts(Bucket=bkt, Key=key, UploadId=upload_id)
    assert error_of(exc) == (404, "NoSuchUpload")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.upload_part(Bucket=bkt, Key=key, UploadId=upload_id, PartNumber=1, Body=b"z")
    assert error_of(exc) == (404, "NoSuchUpload")


def test_delete_copy_and_batch_delete(s3: Any, bkt: str) -> None:
    s3.put_object(Bucket=bkt, Key="src", Body=b"payload", Metadata={"a": "1"})
    copied = s3.copy_object(Bucket=bkt, Key="dst", CopySource={"Bucket": bkt, "Key": "src"})
    assert copied["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"payload").hexdigest()}"'
    dst = s3.get_object(Bucket=bkt, Key="dst")
    assert dst["Body"].read() == b"payload" and dst["Metadata"] == {"a": "1"}
    s3.copy_object(Bucket=bkt, Key="dst2", CopySource=f"{bkt}/src", MetadataDirective="REPLACE",
                   Metadata={"b": "2"})
    assert s3.head_object(Bucket=bkt, Key="dst2")["Metadata"] == {"b": "2"}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.copy_object(Bucket=bkt, Key="dst3", CopySource={"Bucket": bkt, "Key": "gone"})
    assert error_of(exc) == (404, "NoSuchKey")
    assert s3.delete_object(Bucket=bkt, Key="dst")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.delete_object(Bucket=bkt, Key="dst")["ResponseMetadata"]["HTTPStatusCode"] == 204
    for i in range(5):
        s3.put_object(Bucket=bkt, Key=f"batch/{i}", Body=b"b")
    gone = s3.delete_objects(Bucket=bkt, Delete={"Objects": [
        {"Key": f"batch/{i}"} for i in range(4)] + [{"Key": "batch/missing"}]})
    assert sorted(d["Key"] for d in gone["Deleted"]) == [
        *(f"batch/{i}" for i in range(4)), "batch/missing"]
    quiet = s3.delete_objects(Bucket=bkt, Delete={"Objects": [{"Key": "src"}], "Quiet": True})
    assert "Deleted" not in quiet
    left = s3.list_objects_v2(Bucket=bkt)["Contents"]
    assert [c["Key"] for c in left] == ["batch/4", "dst2"]


def test_a_copy_of_a_multipart_object_has_the_md5_of_its_data(s3: Any, bkt: str) -> None:
    bodies = [b"a" * (5 * MIB), b"b" * 100]
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="mp")["UploadId"]
    parts = multipart_parts(s3, bkt, "mp", upload_id, bodies)
    s3.complete_multipart_upload(Bucket=bkt, Key="mp", UploadId=upload_id,
                                 MultipartUpload={"Parts": parts})
    head = s3.head_object(Bucket=bkt, Key="mp")
    assert head["ETag"].endswith('-2"') and head["PartsCount"] == 2
    copied = s3.copy_object(Bucket=bkt, Key="copy", CopySource={"Bucket": bkt, "Key": "mp"})
    md5 = f'"{hashlib.md5(b"".join(bodies)).hexdigest()}"'
    assert copied["CopyObjectResult"]["ETag"] == md5
    head = s3.head_object(Bucket=bkt, Key="copy")
    assert head["ETag"] == md5 and "PartsCount" not in head


def test_buckets(s3: Any, bkt: str) -> None:
    head = s3.head_bucket(Bucket=bkt)
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == "us-east-1"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_bucket(Bucket="no-such-bucket-s3")
    assert error_of(exc)[0] == 404
    name = f"s3-made-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    head = s3.head_bucket(Bucket=name)
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == "eu-west-1"
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] == "eu-west-1"
    s3.put_object(Bucket=name, Key="k", Body=b"")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.delete_bucket(Bucket=name)
    assert error_of(exc) == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def chunked(data: bytes, trailer: str, *, chunk: int = 4000, signed: bool = False) -> bytes:
    sig = ";chunk-signature=" + "0" * 64 if signed else ""
    out = b"".join(f"{len(data[i:i + chunk]):x}{sig}\r\n".encode() + data[i:i + chunk] + b"\r\n"
                   for i in range(0, len(data), chunk))
    return out + f"0{sig}\r\n{trailer}\r\n\r\n".encode()


@pytest.mark.parametrize("signed", [False, True])
async def test_aws_chunked_bodies_are_decoded_and_their_trailer_checked(
        emu: Emulator, s3: Any, bkt: str, signed: bool) -> None:
    data = bytes(range(256)) * 41
    sha = ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" if signed
           else "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    headers = {"Content-Encoding": "aws-chunked", "x-amz-content-sha256": sha,
               "x-amz-decoded-content-length": str(len(data)),
               "x-amz-trailer": "x-amz-checksum-crc32c", "Authorization": "AWS4-HMAC-SHA256 x"}
    async with aiohttp.ClientSession(base_url=emu.s3_endpoint) as http:
        body = chunked(data, f"x-amz-checksum-crc32c:{b64crc32c(data)}", signed=signed)
        async with http.put(f"/{bkt}/chunked", data=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            assert r.headers["x-amz-checksum-crc32c"] == b64crc32c(data)
        bad = chunked(data, f"x-amz-checksum-crc32c:{b64crc32c(b'no')}", signed=signed)
        async with http.put(f"/{bkt}/chunked-bad", data=bad, headers=headers) as r:
            assert r.status == 400 and "<Code>BadDigest</Code>" in await r.text()
        short = chunked(data, "", signed=signed)[:-40]
        async with http.put(f"/{bkt}/chunked-short", data=short, headers=headers) as r:
            assert r.status == 400
        lying = {**headers, "x-amz-decoded-content-length": str(len(data) + 1)}
        async with http.put(f"/{bkt}/chunked-lying", data=body, headers=lying) as r:
            assert r.status == 400 and "<Code>IncompleteBody</Code>" in await r.text()
    assert s3.get_object(Bucket=bkt, Key="chunked")["Body"].read() == data
    keys = [c["Key"] for c in s3.list_objects_v2(Bucket=bkt).get("Contents", [])]
    assert keys == ["chunked"]


def test_faults_reach_s3_requests(emu: Emulator, s3: Any, bkt: str,
                                  clients: list[Any]) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB: long enough to be cut mid-body
    s3.put_object(Bucket=bkt, Key="f", Body=data)
    emu.faults = Faults(p_503=1.0, seed=1)
    before = emu.stats["injected_503"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="f")
    assert error_of(exc) == (503, "SlowDown")
    assert emu.stats["injected_503"] == before + 1
    emu.faults = Faults(p_429=1.0, seed=1)  # S3 has no 429: throttling is 503 SlowDown
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket=bkt, Key="g", Body=b"x")
    assert error_of(exc) == (503, "SlowDown")
    emu.faults = Faults(p_reset=1.0, seed=1)
    resets = emu.stats["resets"]
    resp = s3.get_object(Bucket=bkt, Key="f")
    with pytest.raises(botocore.exceptions.BotoCoreError):
        resp["Body"].read()  # the body stops halfway: botocore sees the short length
    assert emu.stats["resets"] == resets + 1
    # With retries (botocore's standard mode retries SlowDown), faults are survived.
    emu.faults = Faults(p_503=0.5, seed=3)
    retrying = make_client(emu.s3_endpoint, attempts=10)
    clients.append(retrying)
    for _ in range(5):
        assert retrying.get_object(Bucket=bkt, Key="f")["Body"].read() == data


async def test_objects_are_shared_with_the_gcs_apis(emu: Emulator, s3: Any, bkt: str) -> None:
    data = b"written through the GCS JSON API"
    async with aiohttp.ClientSession(base_url=emu.endpoint) as http:
        async with http.post(f"/upload/storage/v1/b/{bkt}/o",
                             params={"uploadType": "media", "name": "from/gcs"}, data=data) as r:
            assert r.status == 200
        got = s3.get_object(Bucket=bkt, Key="from/gcs", ChecksumMode="ENABLED")
        assert got["Body"].read() == data and got["ChecksumCRC32C"] == b64crc32c(data)
        s3.put_object(Bucket=bkt, Key="from/s3", Body=b"written through S3",
                      Metadata={"k": "v"})
        async with http.get(f"/storage/v1/b/{bkt}/o/from%2Fs3", params={"alt": "media"}) as r:
            assert r.status == 200 and await r.read() == b"written through S3"
        async with http.get(f"/storage/v1/b/{bkt}/o/from%2Fs3") as r:
            meta = await r.json()
        assert meta["crc32c"] == b64crc32c(b"written through S3")
        assert meta["metadata"] == {"k": "v"}


def test_s3_face_can_be_turned_off() -> None:
    with running_emulator(s3_port=None) as emu, pytest.raises(RuntimeError, match="s3_port"):
        emu.s3_endpoint  # noqa: B018


def test_upload_part_copy_location_and_date_conditions(s3: Any, bkt: str) -> None:
    src = bytes(range(256)) * (6 * 4096)  # 6 MiB
    s3.put_object(Bucket=bkt, Key="big", Body=src)
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="joined",
                                           ChecksumAlgorithm="CRC32C")["UploadId"]
    first = s3.upload_part_copy(Bucket=bkt, Key="joined", UploadId=upload_id, PartNumber=1,
                                CopySource={"Bucket": bkt, "Key": "big"},
                                CopySourceRange=f"bytes=0-{5 * MIB - 1}")
    second = s3.upload_part_copy(Bucket=bkt, Key="joined", UploadId=upload_id, PartNumber=2,
                                 CopySource={"Bucket": bkt, "Key": "big"},
                                 CopySourceRange="bytes=0-9")
    assert first["CopyPartResult"]["ETag"] == f'"{hashlib.md5(src[:5 * MIB]).hexdigest()}"'
    assert second["CopyPartResult"]["ChecksumCRC32C"] == b64crc32c(src[:10])
    # A COMPOSITE (CRC32C's default type) completion names every part's checksum.
    s3.complete_multipart_upload(Bucket=bkt, Key="joined", UploadId=upload_id, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"],
                   "ChecksumCRC32C": r["CopyPartResult"]["ChecksumCRC32C"]}
                  for n, r in ((1, first), (2, second))]})
    assert s3.get_object(Bucket=bkt, Key="joined")["Body"].read() == src[:5 * MIB] + src[:10]
    assert s3.get_bucket_location(Bucket=bkt)["LocationConstraint"] is None  # us-east-1
    modified = s3.head_object(Bucket=bkt, Key="big")["LastModified"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="big", IfModifiedSince=modified)
    assert error_of(exc)[0] == 304
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bkt, Key="big", IfUnmodifiedSince=modified.replace(year=2000))
    assert error_of(exc) == (412, "PreconditionFailed")
    v1 = s3.list_objects(Bucket=bkt, Delimiter="/", MaxKeys=1)
    assert [c["Key"] for c in v1["Contents"]] == ["big"] and v1["NextMarker"] == "big"


def test_a_range_of_an_empty_object_is_invalid_range(s3: Any, bkt: str) -> None:
    # S3 answers 416 InvalidRange to bytes=0- on an empty object (moto agrees).
    s3.put_object(Bucket=bkt, Key="empty", Body=b"")
    for header in ("bytes=0-", "bytes=0-0"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.get_object(Bucket=bkt, Key="empty", Range=header)
        assert error_of(exc) == (416, "InvalidRange")
    assert s3.get_object(Bucket=bkt, Key="empty", Range="bytes=-5")["Body"].read() == b""
    assert s3.get_object(Bucket=bkt, Key="empty")["Body"].read() == b""


def test_objects_keep_the_checksum_they_were_written_with(emu: Emulator, s3: Any, bkt: str,
                                                         clients: list[Any]) -> None:
    # S3 keeps the checksum of the algorithm a PUT sent, CRC64NVME when it sent
    # none, and reports only that one: a reader asking for CRC32C gets none.
    data = b"checksummed"
    s3.put_object(Bucket=bkt, Key="crc32", Body=data)  # botocore's default: CRC32
    s3.put_object(Bucket=bkt, Key="sha256", Body=data, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=bkt, Key="crc32c", Body=data, ChecksumCRC32C=b64crc32c(data))
    bare = make_client(emu.s3_endpoint, calculation="when_required")
    clients.append(bare)
    put = bare.put_object(Bucket=bkt, Key="none", Body=data)
    assert put["ChecksumCRC64NVME"] == b64crc64nvme(data)
    expected = {"crc32": ("ChecksumCRC32", b64crc32(data)),
                "sha256": ("ChecksumSHA256", b64sha256(data)),
                "crc32c": ("ChecksumCRC32C", b64crc32c(data)),
                "none": ("ChecksumCRC64NVME", b64crc64nvme(data))}
    for key, (field, value) in expected.items():
        head = s3.head_object(Bucket=bkt, Key=key, ChecksumMode="ENABLED")
        got = {k: v for k, v in head.items() if k.startswith("Checksum") and k != "ChecksumType"}
        assert got == {field: value}, key
        assert head["ChecksumType"] == "FULL_OBJECT"
    # Listed through GCS's XML API first (which names no checksum): the S3
    # listing still names each object's own algorithm.
    with urllib.request.urlopen(f"{emu.endpoint}/{bkt}") as resp:
        assert b"<Key>crc32</Key>" in resp.read()
    listed = {c["Key"]: c["ChecksumAlgorithm"] for c in s3.list_objects_v2(Bucket=bkt)["Contents"]}
    assert listed == {"crc32": ["CRC32"], "sha256": ["SHA256"], "crc32c": ["CRC32C"],
                      "none": ["CRC64NVME"]}
    # A copy keeps the source's algorithm, unless it names another.
    copied = s3.copy_object(Bucket=bkt, Key="copy", CopySource={"Bucket": bkt, "Key": "crc32"})
    assert copied["CopyObjectResult"]["ChecksumCRC32"] == b64crc32(data)
    s3.copy_object(Bucket=bkt, Key="copy2", CopySource={"Bucket": bkt, "Key": "crc32"},
                   ChecksumAlgorithm="CRC32C")
    head = s3.head_object(Bucket=bkt, Key="copy2", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32C"] == b64crc32c(data) and "ChecksumCRC32" not in head


async def test_one_checksum_a_request_and_a_well_formed_content_md5(emu: Emulator, s3: Any,
                                                                  bkt: str) -> None:
    data = b"payload"
    async with aiohttp.ClientSession(base_url=emu.s3_endpoint) as http:
        two = {"x-amz-checksum-crc32c": b64crc32c(data), "x-amz-checksum-crc32": b64crc32(data)}
        async with http.put(f"/{bkt}/two", data=data, headers=two) as r:
            assert r.status == 400 and "<Code>InvalidRequest</Code>" in await r.text()
        short_md5 = base64.b64encode(b"0123").decode()
        async with http.put(f"/{bkt}/md5", data=data, headers={"Content-MD5": short_md5}) as r:
            assert r.status == 400 and "<Code>InvalidDigest</Code>" in await r.text()
        # DeleteObjects needs a checksum of its body.
        doc = b"<Delete><Object><Key>x</Key></Object></Delete>"
        async with http.post(f"/{bkt}?delete", data=doc) as r:
            assert r.status == 400 and "<Code>InvalidRequest</Code>" in await r.text()
        md5 = base64.b64encode(hashlib.md5(doc).digest()).decode()
        async with http.post(f"/{bkt}?delete", data=doc, headers={"Content-MD5": md5}) as r:
            assert r.status == 200
        async with http.put(f"/{bkt}/{'k' * 1025}", data=data) as r:
            assert r.status == 400 and "<Code>KeyTooLongError</Code>" in await r.text()
    keys = [c["Key"] for c in s3.list_objects_v2(Bucket=bkt).get("Contents", [])]
    assert keys == []


def test_multipart_checksum_rules(s3: Any, bkt: str) -> None:
    def refused(call: Any, **kw: Any) -> tuple[int, str]:
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call(Bucket=bkt, **kw)
        return error_of(exc)

    # A type needs an algorithm; SHA256 has no FULL_OBJECT form.
    assert refused(s3.create_multipart_upload, Key="m", ChecksumType="FULL_OBJECT") == (
        400, "InvalidRequest")
    assert refused(s3.create_multipart_upload, Key="m", ChecksumAlgorithm="SHA256",
                   ChecksumType="FULL_OBJECT") == (400, "InvalidRequest")
    bodies = [bytes([7]) * (5 * MIB), b"tail"]
    whole = b"".join(bodies)
    # COMPOSITE (CRC32C's default): parts of the upload's algorithm only, and
    # the completion names each part's checksum.
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="m",
                                           ChecksumAlgorithm="CRC32C")["UploadId"]
    assert refused(s3.upload_part, Key="m", UploadId=upload_id, PartNumber=1, Body=b"x",
                   ChecksumAlgorithm="CRC32") == (400, "InvalidRequest")
    parts = multipart_parts(s3, bkt, "m", upload_id, bodies)
    bare = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]
    assert refused(s3.complete_multipart_upload, Key="m", UploadId=upload_id,
                   MultipartUpload={"Parts": bare}) == (400, "InvalidRequest")
    done = s3.complete_multipart_upload(Bucket=bkt, Key="m", UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})
    assert done["ChecksumType"] == "COMPOSITE"
    # FULL_OBJECT: parts 1..N without a gap, and the whole object's checksum
    # sent with the completion must be the object's.
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="f", ChecksumAlgorithm="CRC32C",
                                           ChecksumType="FULL_OBJECT")["UploadId"]
    parts = multipart_parts(s3, bkt, "f", upload_id, [bodies[0], b"gap", bodies[1]])
    gap = [parts[0], dict(parts[2], PartNumber=3)]
    assert refused(s3.complete_multipart_upload, Key="f", UploadId=upload_id,
                   MultipartUpload={"Parts": gap}) == (400, "InvalidPartOrder")
    listed = [parts[0], dict(parts[2], PartNumber=2)]
    s3.upload_part(Bucket=bkt, Key="f", UploadId=upload_id, PartNumber=2,
                   Body=bodies[1], ChecksumCRC32C=b64crc32c(bodies[1]))
    assert refused(s3.complete_multipart_upload, Key="f", UploadId=upload_id,
                   MultipartUpload={"Parts": listed}, ChecksumType="FULL_OBJECT",
                   ChecksumCRC32C=b64crc32c(whole + b"!")) == (400, "BadDigest")
    assert refused(s3.head_object, Key="f")[0] == 404  # nothing published
    done = s3.complete_multipart_upload(Bucket=bkt, Key="f", UploadId=upload_id,
                                        MultipartUpload={"Parts": listed},
                                        ChecksumType="FULL_OBJECT",
                                        ChecksumCRC32C=b64crc32c(whole))
    assert done["ChecksumCRC32C"] == b64crc32c(whole)
    assert s3.get_object(Bucket=bkt, Key="f")["Body"].read() == whole
    # No algorithm: S3's default, a full-object CRC64NVME.
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="d")["UploadId"]
    etag = s3.upload_part(Bucket=bkt, Key="d", UploadId=upload_id, PartNumber=1,
                          Body=b"default")["ETag"]
    s3.complete_multipart_upload(Bucket=bkt, Key="d", UploadId=upload_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    head = s3.head_object(Bucket=bkt, Key="d", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == b64crc64nvme(b"default") and "ChecksumCRC32C" not in head


def test_upload_part_copy_ranges_are_first_last_inside_the_source(s3: Any, bkt: str) -> None:
    s3.put_object(Bucket=bkt, Key="src", Body=b"0123456789")
    upload_id = s3.create_multipart_upload(Bucket=bkt, Key="dst")["UploadId"]
    for bad in ("bytes=0-", "bytes=-5", "bytes=5-10", "bytes=6-5", "0-3"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.upload_part_copy(Bucket=bkt, Key="dst", UploadId=upload_id, PartNumber=1,
                                CopySource={"Bucket": bkt, "Key": "src"}, CopySourceRange=bad)
        assert error_of(exc) == (400, "InvalidArgument"), bad
    part = s3.upload_part_copy(Bucket=bkt, Key="dst", UploadId=upload_id, PartNumber=1,
                               CopySource={"Bucket": bkt, "Key": "src"},
                               CopySourceRange="bytes=2-9")
    s3.complete_multipart_upload(Bucket=bkt, Key="dst", UploadId=upload_id, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bkt, Key="dst")["Body"].read() == b"23456789"


async def test_url_encoded_listings_encode_a_space_as_plus(emu: Emulator, s3: Any,
                                                          bkt: str) -> None:
    # S3's encoding-type=url is form encoding: "a b+c" is "a+b%2Bc", so a client
    # that decodes with unquote (not unquote_plus) reads another key.
    s3.put_object(Bucket=bkt, Key="d ir/a b+c", Body=b"x")
    async with aiohttp.ClientSession(base_url=emu.s3_endpoint) as http:
        params = {"list-type": "2", "encoding-type": "url", "prefix": "d ir/"}
        async with http.get(f"/{bkt}", params=params) as r:
            text = await r.text()
        assert "<Key>d+ir/a+b%2Bc</Key>" in text and "<Prefix>d+ir/</Prefix>" in text
        params = {"list-type": "2", "encoding-type": "url", "delimiter": " "}
        async with http.get(f"/{bkt}", params=params) as r:
            text = await r.text()
        assert "<CommonPrefixes><Prefix>d+</Prefix></CommonPrefixes>" in text
    assert [c["Key"] for c in s3.list_objects_v2(Bucket=bkt)["Contents"]] == ["d ir/a b+c"]
