"""``hf://`` URLs through the URL-level API and the CLI: ``aioflux.open``,
``list_files`` / ``load_files``, ``ObjectMapDataset.from_prefix`` and
``aioflux cat|ls|stat|cp``, against the fake Hub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aioflux
from aioflux.hf import HfStore
from aioflux.testing import FakeHub
from aioflux.torch import DatasetSettings, ShardReads
from tests.backends.hf.conftest import TOKEN
from tests.cli.calls import call

ROOT = "hf://datasets/org/ds"


@pytest.fixture
def files(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    content = {f"data/part-{n}.bin": os.urandom(200 + n) for n in range(4)}
    content["README.md"] = b"# ds\n"
    hub.create_repo("org/ds", gated=True)
    hub.push("org/ds", content)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return content


def test_open_list_and_load(hub: FakeHub, files: dict[str, bytes]) -> None:
    with aioflux.SyncStore(HfStore()) as closing:  # closes the store's connections
        _open_list_and_load(hub, files, closing.aio)


def _open_list_and_load(hub: FakeHub, files: dict[str, bytes], store: HfStore) -> None:
    name = "data/part-2.bin"
    with aioflux.open(f"{ROOT}/{name}", "rb", client=store) as f:
        f.seek(100)
        assert f.read(50) == files[name][100:150]
        f.seek(0)
        assert f.read() == files[name]
    listed = list(aioflux.list_files(f"{ROOT}/data/", client=store))
    assert sorted(listed) == sorted(f"{ROOT}/{n}" for n in files if n.startswith("data/"))
    loaded = dict(aioflux.load_files(listed, client=store))
    assert loaded == {f"{ROOT}/{n}": files[n] for n in files if n.startswith("data/")}
    # HfFileSystem's form of a model: hf://org/name.
    hub.create_repo("org/model", repo_type="model")
    hub.push("org/model", {"config.json": b'{"a": 1}'}, repo_type="model")
    with aioflux.open("hf://org/model/config.json", "rb", client=store) as f:
        assert f.read() == b'{"a": 1}'
    with pytest.raises(aioflux.InvalidRequest, match="read-only"):
        with aioflux.open(f"{ROOT}/new.bin", "wb", client=store) as out:
            out.write(b"x")
    assert all("Authorization" not in r.headers for r in hub.sent("cdn"))


def test_map_dataset_from_prefix(hub: FakeHub, files: dict[str, bytes]) -> None:
    from aioflux.torch import ObjectMapDataset

    dataset = ObjectMapDataset.from_prefix(f"{ROOT}/data/",
                                           settings=DatasetSettings(endpoint=hub.endpoint))
    try:
        got = {dataset.objects[i].name: dataset[i] for i in range(len(dataset))}
    finally:
        dataset.close()
    assert got == {n: files[n] for n in files if n.startswith("data/")}


def test_the_cli(hub: FakeHub, files: dict[str, bytes], tmp_path: Path,
                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = call(capsys, "ls", f"{ROOT}/data/")
    assert (code, err) == (0, "")
    assert out.split() == [f"{ROOT}/data/part-{n}.bin" for n in range(4)]
    code, out, err = call(capsys, "ls", f"{ROOT}/")
    assert out.split() == [f"{ROOT}/README.md", f"{ROOT}/data/"]
    code, out, err = call(capsys, "cat", f"{ROOT}/README.md")
    assert (code, out, err) == (0, "# ds\n", "")
    copy = tmp_path / "part.bin"
    code, out, err = call(capsys, "cp", f"{ROOT}/data/part-3.bin", os.fspath(copy))
    assert (code, err) == (0, "")
    assert copy.read_bytes() == files["data/part-3.bin"]
    code, out, err = call(capsys, "cp", os.fspath(copy), f"{ROOT}/data/new.bin")
    assert code == 1 and "read-only" in err


def test_the_cli_says_to_set_hf_token(hub: FakeHub, files: dict[str, bytes],
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", "/nonexistent/token")
    code, out, err = call(capsys, "cat", f"{ROOT}/data/part-0.bin")
    assert (code, out) == (1, "")
    assert "set HF_TOKEN" in err


def test_shards_over_hf(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    from aioflux.torch import ShardDataset
    from tests.torch._shards_util import make_samples, tar_shard

    shards = {f"shards/train-{n}.tar": make_samples(f"s{n}/", 3 + n) for n in range(3)}
    hub.create_repo("org/sh")
    commit = hub.push("org/sh", {name: tar_shard(samples) for name, samples in shards.items()})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    expected = {key: fields for samples in shards.values() for key, fields in samples}
    # The index of a read-only store's shards goes to the local cache.
    dataset = ShardDataset.from_prefix("hf://datasets/org/sh/shards/",
                                       reads=ShardReads(index_dir=tmp_path / "idx"))
    got = list(dataset)
    assert sorted(s["__key__"] for s in got) == sorted(expected)
    assert all(s["jpg"] == expected[s["__key__"]]["jpg"] for s in got)
    resolves = [r.path for r in hub.sent("hub") if "/resolve/" in r.path]
    assert resolves and all(f"/resolve/{commit}/" in p for p in resolves)
    code, out, err = call(capsys, "shards", "verify", "hf://datasets/org/sh/shards/")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "verified 3 shards, 12 samples in the good ones: all good"
