"""``running_emulator`` leaves nothing running on its loop when its block
ends, also the handler of a request whose client went away mid-answer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import socket
import time
import urllib.request
from typing import Any

import botocore.config
import botocore.session
import pytest

from aioflux import Client, InvalidArgument
from aioflux.testing import Faults, MemoryStore, running_emulator
from aioflux.testing._server import new_event_loop

STALLED = b"GET /download/storage/v1/b/stalled/o/x?alt=media HTTP/1.1\r\nHost: t\r\n\r\n"


def test_a_handler_whose_client_left_is_not_left_pending() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    def loop_factory() -> asyncio.AbstractEventLoop:
        loops.append(new_event_loop())
        return loops[-1]

    with running_emulator(loop_factory=loop_factory) as emu:
        emu.create_bucket("stalled")
        emu.store.put("stalled", "x", b"1" * 100_000)
        emu.faults = Faults(p_stall=1.0, stall_seconds=3600)
        runner = emu._runner
        assert runner is not None and runner.server is not None
        with socket.create_connection(("127.0.0.1", emu.port)) as sock:
            sock.sendall(STALLED)
            got = b""
            while len(got) < 50_000:  # the head and about half the body
                chunk = sock.recv(65536)
                assert chunk, got[:200]
                got += chunk
            assert got.startswith(b"HTTP/1.1 200")
            while emu.stats["stalls"] < 1:  # the handler sleeps its stall
                time.sleep(0.01)
        # The server noticed the client left (its handler sleeps on): a
        # stop then leaves that handler alone.
        while any(conn.transport is not None for conn in runner.server.connections):
            time.sleep(0.01)
    (loop,) = loops
    assert loop.is_closed()
    # Cancelled and awaited before the loop closed, not destroyed pending
    # later ("Task was destroyed but it is pending!" at the session's end).
    assert [task for task in asyncio.all_tasks(loop) if not task.done()] == []


def test_a_store_outlives_its_emulator_and_serves_the_next() -> None:
    # store= restarts the emulator (another port, other settings) on the
    # objects an earlier one holds, as Emulator(store=) does.
    with running_emulator(s3_port=None) as first, Client(endpoint=first.endpoint) as client:
        first.create_bucket("kept")
        client.write("kept", "a/x", b"written through the first")
        store = first.store
    with running_emulator(store=store, s3_port=None, xml_multipart=False) as second, \
            Client(endpoint=second.endpoint) as client:
        assert second.store is store and second.port != first.port
        assert client.read("kept", "a/x") == b"written through the first"
        client.write("kept", "a/y", b"and the second")
    assert bytes(store.get("kept", "a/y").data) == b"and the second"


def s3_client(endpoint: str) -> Any:
    config = botocore.config.Config(s3={"addressing_style": "path"})
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
        aws_secret_access_key="y", config=config)


def test_a_store_keeps_what_the_s3_face_knows_across_a_restart() -> None:
    # Checksums, stored headers, open uploads' settings and regions are the
    # store's: a restart on it answers as the first emulator did.
    with running_emulator() as first, contextlib.closing(s3_client(first.s3_endpoint)) as s3:
        s3.create_bucket(Bucket="kept",
                         CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        s3.put_object(Bucket="kept", Key="k", Body=b"hello", ChecksumAlgorithm="SHA256",
                      CacheControl="max-age=60")
        upload = s3.create_multipart_upload(Bucket="kept", Key="mp",
                                            ChecksumAlgorithm="SHA256")["UploadId"]
    with running_emulator(store=first.store) as second, \
            contextlib.closing(s3_client(second.s3_endpoint)) as s3:
        head = s3.head_object(Bucket="kept", Key="k", ChecksumMode="ENABLED")
        sha = base64.b64encode(hashlib.sha256(b"hello").digest()).decode()
        assert head["ChecksumSHA256"] == sha and head["CacheControl"] == "max-age=60"
        listed = s3.list_objects_v2(Bucket="kept")["Contents"]
        assert [o["ChecksumAlgorithm"] for o in listed] == [["SHA256"]]
        assert s3.list_parts(Bucket="kept", Key="mp", UploadId=upload)["ChecksumAlgorithm"] \
            == "SHA256"
        headers = s3.head_bucket(Bucket="kept")["ResponseMetadata"]["HTTPHeaders"]
        assert headers["x-amz-bucket-region"] == "eu-west-1"


def test_the_s3_face_reports_the_region_given() -> None:
    with running_emulator(s3_region="eu-central-1") as emu:
        emu.create_bucket("placed")
        request = urllib.request.Request(f"{emu.s3_endpoint}/placed", method="HEAD")
        with urllib.request.urlopen(request) as answer:
            assert answer.headers["x-amz-bucket-region"] == "eu-central-1"


def test_a_store_the_emulator_cannot_serve_is_named() -> None:
    wrong = MemoryStore()
    with pytest.raises(InvalidArgument, match=r"^Emulator: store must be a Store, got "
                                              r"MemoryStore"):
        with running_emulator(store=wrong):  # type: ignore[arg-type]
            pass
