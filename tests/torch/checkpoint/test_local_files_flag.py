"""Checkpoint and DCP loads and saves open an object's file directly where
its store declares its objects this machine's files
(``features.local_files``), and go through the object reader and writer
wherever it does not: the store's word decides, not its class."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from aioflux._engines.reader import ObjectReader
from aioflux._engines.writer import ObjectWriter
from aioflux.local import LocalStore
from aioflux.local._file_writer import FileWriter
from aioflux.local._reader import FileReader
from aioflux.local._store import FEATURES
from aioflux.testing import MemoryStore
from aioflux.torch import Checkpoint
from aioflux.torch.dcp import GcsFileSystem

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


class FilesServedAsObjects(LocalStore):
    """Files, but read and written only through the store's calls (as a
    store wrapping another's might)."""

    features = dataclasses.replace(FEATURES, local_files=False)


def _state() -> dict[str, torch.Tensor]:
    return {"w": torch.arange(1000, dtype=torch.float32), "b": torch.ones(7)}


@pytest.mark.parametrize(("store", "writer", "reader"), [
    (LocalStore(), FileWriter, FileReader),
    (FilesServedAsObjects(), ObjectWriter, ObjectReader),
])
def test_a_checkpoint_opens_the_file_only_where_the_store_says_so(
        tmp_path: Path, store: LocalStore, writer: type, reader: type) -> None:
    assert LocalStore.features.local_files and not MemoryStore.features.local_files
    cp = Checkpoint(store)
    url = f"file://{tmp_path}/model.pt"
    with cp.writer(url) as out:
        assert type(out) is writer
        torch.save(_state(), out)
    with cp._load_reader(url, None) as got:
        assert type(got) is reader
    loaded = cp.load(url)
    assert all(torch.equal(loaded[k], v) for k, v in _state().items())


@pytest.mark.parametrize(("store", "direct"), [
    (LocalStore(), True), (FilesServedAsObjects(), False)])
def test_dcp_streams_open_the_file_only_where_the_store_says_so(
        tmp_path: Path, store: LocalStore, direct: bool) -> None:
    fs = GcsFileSystem(store)
    path = f"{tmp_path}/__0_0.distcp"
    with fs.create_stream(path, "wb") as out:
        assert isinstance(out, FileWriter) is direct
        out.write(b"tensor bytes " * 100)
    with fs.create_stream(path, "rb") as got:
        assert isinstance(got, FileReader) is direct
        assert isinstance(got, ObjectReader) is not direct
        assert got.read() == b"tensor bytes " * 100
