"""The CLI on ``az://`` URLs, against Azurite (Microsoft's emulator).

The Azure store takes its account and credentials from the environment
(``AZURE_STORAGE_CONNECTION_STRING``, Azurite's development account); the
``run`` fixture also passes ``--endpoint`` for ``gs://`` (our emulator)
and ``s3run`` ``--s3-endpoint`` (moto), so copies among all four stores
run in single commands.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aioflux import Client, ClientConfig
from aioflux._core.concurrency.portal import call
from aioflux._core.integrity.crc import crc32c
from aioflux.azure import AzureStore
from aioflux.s3 import S3Store
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket
from tests.servers.azurite import Azurite

T = TypeVar("T")


class Container:
    """A fresh Azurite container, with a store driven on the portal loop."""

    def __init__(self, store: AzureStore, name: str) -> None:
        self.store, self.name = store, name

    def do(self, coro: Coroutine[Any, Any, T]) -> T:
        return call(coro)

    def put(self, key: str, body: bytes) -> None:
        self.do(self.store.write(self.name, key, body))

    def get(self, key: str) -> bytes:
        return self.do(self.store.read(self.name, key))

    def keys(self, prefix: str = "") -> list[str]:
        async def collect() -> list[str]:
            return [o.name async for o in self.store.list_objects(self.name, prefix)]

        return self.do(collect())


@pytest.fixture
def az(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[Container]:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    store = AzureStore(ClientConfig(max_concurrency=32, retry=FAST_RETRY))
    name = unique_bucket("cli")
    call(store.create_bucket(name))
    try:
        yield Container(store, name)
    finally:
        call(store.aclose())


@pytest.fixture
def azrun(run, moto_s3: MotoS3):  # type: ignore[no-untyped-def]
    """``run`` with ``--s3-endpoint`` pointing at moto too."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        return run(*argv, "--s3-endpoint", moto_s3.endpoint)  # type: ignore[no-any-return]

    return invoke


def test_ls_stat_cat_du_follow_the_url_rule_on_azure(azrun, az: Container) -> None:  # type: ignore[no-untyped-def]
    c = az.name
    for key, body in (("a", b"A"), ("a/x", b"xx"), ("a/sub/y", b"yyy"), ("a2", b"2222")):
        az.put(key, body)
    code, out, err = azrun("ls", f"az://{c}/a")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"az://{c}/a", f"az://{c}/a/sub/", f"az://{c}/a/x"]
    # adlfs's spelling names the same blobs.
    assert azrun("ls", "-r", f"abfs://{c}/a")[1].splitlines() == [
        f"az://{c}/a", f"az://{c}/a/sub/y", f"az://{c}/a/x"]
    code, out, _ = azrun("stat", f"az://{c}/a/x")
    info = json.loads(out)
    assert (code, info["url"], info["size"], info["crc32c"]) == (0, f"az://{c}/a/x", 2,
                                                                crc32c(b"xx"))
    assert azrun("cat", f"az://{c}/a/sub/y")[:2] == (0, "yyy")
    code, out, _ = azrun("du", "--json", f"az://{c}/a")
    assert (code, json.loads(out)) == (0, {"url": f"az://{c}/a", "objects": 3, "bytes": 6})


def test_missing_azure_blobs_fail_in_one_line(azrun, az: Container) -> None:  # type: ignore[no-untyped-def]
    for argv in (["stat", f"az://{az.name}/nope"], ["rm", f"az://{az.name}/nope"],
                 ["cat", f"az://{az.name}/nope"], ["ls", f"az://{az.name}/nope"]):
        code, out, err = azrun(*argv)
        assert (code, out) == (1, ""), argv
        assert err.startswith(f"aioflux {argv[0]}: ") and "nope" in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "sig=" not in err and az.store.account not in err.split("az://")[0]


def test_cp_among_gs_s3_az_and_files(azrun, az: Container, moto_s3: MotoS3,  # type: ignore[no-untyped-def]
                                     sync_client: Client, bucket: str, tmp_path: Path) -> None:
    # One blob above cp's streaming threshold (ranged reads into a block
    # upload), the others in one read and one write.
    files = {"big": os.urandom(17 * 1024 * 1024 + 5), "small": b"s" * 1000,
             "deep/er/f": b"deep"}
    src = tmp_path / "src"
    for rel, body in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(body)
    s3 = S3Store(ClientConfig(retry=FAST_RETRY), endpoint=moto_s3.endpoint)
    s3_bucket = unique_bucket("cli")
    call(s3.create_bucket(s3_bucket))
    chain = [str(src), f"az://{az.name}/one", f"gs://{bucket}/two", f"az://{az.name}/three",
             f"s3://{s3_bucket}/four", f"az://{az.name}/five", str(tmp_path / "back")]
    try:
        for a, b in itertools.pairwise(chain):
            code, out, err = azrun("cp", "-r", a, b)
            assert (code, err) == (0, ""), (a, b, err)
            assert out == f"copied 3 file(s), {sum(map(len, files.values()))} bytes\n"
        for rel, body in files.items():
            assert az.get(f"one/{rel}") == body
            assert sync_client.read(bucket, f"two/{rel}") == body
            assert az.get(f"three/{rel}") == body
            assert call(s3.read(s3_bucket, f"four/{rel}")) == body
            assert az.get(f"five/{rel}") == body
            assert (tmp_path / "back" / rel).read_bytes() == body
        # Within the account: Copy Blob.
        assert azrun("cp", "-r", f"az://{az.name}/one", f"az://{az.name}/six")[0] == 0
        assert az.get("six/big") == files["big"]
    finally:
        call(s3.aclose())


def test_rm_r_deletes_one_by_one_and_never_a_sibling(azrun, az: Container) -> None:  # type: ignore[no-untyped-def]
    for key in ("a", "a/x", "a/sub/y", "a2"):
        az.put(key, key.encode())
    code, out, err = azrun("rm", "-r", f"az://{az.name}/a")
    assert (code, out, err) == (0, "removed 3 object(s)\n", "")
    assert az.keys() == ["a2"]


def test_ckpt_list_reads_an_azure_root(azrun, az: Container) -> None:  # type: ignore[no-untyped-def]
    code, out, err = azrun("ckpt", "list", f"az://{az.name}/run")
    assert (code, out) == (1, "")
    assert err == f"aioflux ckpt: ckpt list az://{az.name}/run/: no complete checkpoints under it\n"


def test_a_container_name_azure_refuses_is_a_usage_error(azrun) -> None:  # type: ignore[no-untyped-def]
    code, out, err = azrun("ls", "az://Bad_Name")
    assert (code, out) == (2, "")
    assert "invalid Azure container name 'Bad_Name'" in err
