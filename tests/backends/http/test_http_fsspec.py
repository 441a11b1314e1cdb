"""The read-only fsspec face of http(s) URLs (``aioflux-http://``,
``aioflux-https://``, or ``http://`` once registered) over nginx."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from aioflux import ClientConfig, RetryPolicy
from aioflux._core.errors import InvalidRequest
from aioflux.fsspec import AiofluxFileSystem
from tests.servers.nginx import Nginx, running_nginx

DATA = os.urandom(200_000)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("http-fsspec")
    (root / "d").mkdir()
    (root / "d" / "x.bin").write_bytes(DATA)
    with running_nginx(root) as running:
        yield running


def test_read_only_filesystem(server: Nginx) -> None:
    fs = fsspec.filesystem("aioflux-http", config=ClientConfig(
        retry=RetryPolicy(max_attempts=2, initial_delay=0.0, max_delay=0.0)))
    assert isinstance(fs, AiofluxFileSystem)
    path = f"aioflux-http://{server.bucket}/d/x.bin"
    assert fs.info(path)["size"] == len(DATA)
    assert fs.cat_file(path, start=10, end=5000) == DATA[10:5000]
    with fs.open(path, "rb") as f:
        f.seek(100_000)
        assert f.read(10) == DATA[100_000:100_010]
    assert fs.cat_ranges([path, path], [0, 7], [3, 9]) == [DATA[0:3], DATA[7:9]]
    with pytest.raises(InvalidRequest, match="read-only"):
        fs.pipe_file(f"aioflux-http://{server.bucket}/d/new.bin", b"x")
    with pytest.raises(InvalidRequest, match="brace pattern"):
        fs.ls(f"aioflux-http://{server.bucket}/d/")
    # A missing file is none, as fsspec promises (pandas and pyarrow probe
    # with exists): not a listing refused while looking for a folder.
    missing = f"aioflux-http://{server.bucket}/d/nope.bin"
    assert fs.exists(path) and not fs.exists(missing)
    with pytest.raises(FileNotFoundError):
        fs.info(missing)


def test_fsspec_open_and_get(server: Nginx, tmp_path: Path) -> None:
    fs = fsspec.filesystem("aioflux-http")
    with fsspec.open(f"aioflux-http://{server.bucket}/d/x.bin", "rb") as f:
        assert f.read() == DATA
    fs.get(f"aioflux-http://{server.bucket}/d/x.bin", os.fspath(tmp_path / "x.bin"))
    assert (tmp_path / "x.bin").read_bytes() == DATA
