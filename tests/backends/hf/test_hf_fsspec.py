"""The read-only fsspec face of the Hub (``aioflux-hf://``) against the
fake Hub: info, ls, ranges, open and seek; pyarrow and pandas read a
Parquet file through it."""

from __future__ import annotations

import importlib
import io
import re
from pathlib import Path

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import aioflux.fsspec
from aioflux import InvalidRequest
from aioflux.fsspec import AiofluxFileSystem
from aioflux.testing import FakeHub

ROOT = "aioflux-hf://datasets/org/ds"


@pytest.fixture
def table(hub: FakeHub) -> pa.Table:
    rows = pa.table({"id": list(range(300)), "text": [f"row {n}" for n in range(300)]})
    out = io.BytesIO()
    pq.write_table(rows, out, row_group_size=50)
    hub.create_repo("org/ds")
    hub.push("org/ds", {"data/train.parquet": out.getvalue(), "README.md": b"# ds\n"})
    return rows


def test_the_protocol_is_an_entry_point() -> None:
    # What installing aioflux registers with fsspec (a venv installed
    # before the line was added has not: the class is registered below).
    text = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."fsspec.specs"]', 1)[1].split("\n[", 1)[0]
    specs = dict(re.findall(r'(?m)^([\w-]+)\s*=\s*"([^"]+)"', section))  # no tomllib: 3.10
    assert specs["aioflux-hf"] == "aioflux.fsspec:_aioflux_hf"
    module, _, name = specs["aioflux-hf"].partition(":")
    assert getattr(importlib.import_module(module), name).protocol == ("aioflux-hf",)


def test_the_filesystem_reads_and_refuses_writes(hub: FakeHub, table: pa.Table,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    fsspec.register_implementation("aioflux-hf", aioflux.fsspec._aioflux_hf, clobber=True)
    fs = fsspec.filesystem("aioflux-hf", skip_instance_cache=True)
    assert isinstance(fs, AiofluxFileSystem)
    data = hub.repos.get("dataset", "org/ds")
    assert data is not None
    raw = data.commits[hub.commit("org/ds")]["data/train.parquet"].data
    assert fs.info(f"{ROOT}/data/train.parquet")["size"] == len(raw)
    assert sorted(fs.ls(f"{ROOT}/", detail=False)) == ["datasets/org/ds/README.md",
                                                       "datasets/org/ds/data"]
    assert fs.cat_file(f"{ROOT}/data/train.parquet", start=-8) == raw[-8:]
    with fs.open(f"{ROOT}/data/train.parquet", "rb") as f:
        f.seek(4)
        assert f.read(100) == raw[4:104]
    with pytest.raises(InvalidRequest, match="read-only"):
        fs.pipe_file(f"{ROOT}/new.bin", b"x")


def test_pyarrow_and_pandas_read_through_it(hub: FakeHub, table: pa.Table) -> None:
    fs = AiofluxFileSystem("hf", endpoint=hub.endpoint, skip_instance_cache=True)
    path = "datasets/org/ds/data/train.parquet"
    assert pq.read_table(path, filesystem=fs).equals(table)
    with fs.open(path, "rb") as f:
        frame = pd.read_parquet(f, columns=["text"])
    assert frame["text"].tolist() == table.column("text").to_pylist()
    # Ranged reads through the CDN, no token there.
    assert any(r.headers.get("Range") for r in hub.sent("cdn"))
