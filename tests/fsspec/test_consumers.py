"""The tools that reach storage through fsspec, end to end on aioflux's
filesystem: pyarrow, pandas, Lightning, torch DCP, zarr, Hugging Face
``datasets`` and DataLoader workers; its async mode; and what it promises
beyond fsspec (checked reads, all-or-nothing writes, coalesced ranges).

Each runs against our emulator (gs), moto (s3) and the local filesystem
(file) through the ``site`` fixture, by ``aioflux-<scheme>://`` URLs with
storage options and, where a tool only takes ``gs://`` or ``s3://``, by
those URLs after ``aioflux.fsspec.register`` (``fsspec_state`` restores
fsspec's registry after the test). A test skips only when its tool is not
installed here; the ``test`` extra installs them all.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import os
import pickle
import random
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import google_crc32c
import pytest
import torch

import aioflux.fsspec
from aioflux import ChecksumMismatch, NotFound, StorageError
from aioflux._api import stores
from aioflux._core.concurrency.portal import call
from aioflux.fsspec import AiofluxFileSystem, _base
from aioflux.fsspec._paths import split
from tests.fsspec._files_dataset import FilesDataset
from tests.fsspec.conftest import CONFIG, Site
from tests.servers.forking import in_fork

OBJECT_SITES = pytest.mark.parametrize("site", ["gs", "s3"], indirect=True)
# Where stored bytes can be made to disagree with the checksum the store
# reports: the emulator's objects and files (bit rot under a kept mtime).
CORRUPTIBLE_SITES = pytest.mark.parametrize("site", ["gs", "file"], indirect=True)
MiB = 1024 * 1024


def _needs(module: str, minversion: str | None = None) -> Any:
    """The module, or a skip when it is not installed here (the test extra installs it)."""
    return pytest.importorskip(module, minversion=minversion,
                               reason=f"{module} is not installed (pip install -e '.[test]')")


def _corrupt(site: Site, name: str, good: bytes) -> None:
    """Store ``name`` so that its bytes differ from the checksum the store reports."""
    bad = good[:-100] + bytes(b ^ 0xFF for b in good[-100:])
    if site.emulator is not None:
        bucket, key = split("gs", site.path(name))
        site.emulator.store.put(bucket, key, bad, crc32c=google_crc32c.value(good))
        return
    path = Path(site.path(name))
    site.fs.pipe_file(str(path), good)
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(bad)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _files_under(folder: str) -> list[str]:
    """Every file in a local folder, temporary ones included."""
    return sorted(str(Path(d, f).relative_to(folder)) for d, _, files in os.walk(folder)
                  for f in files)


# -- 1. pyarrow ---------------------------------------------------------------------------


def test_pyarrow_partitioned_dataset_round_trip(site: Site, fsspec_state: None) -> None:
    pa = _needs("pyarrow")
    pq = _needs("pyarrow.parquet")
    ds = _needs("pyarrow.dataset")
    rng = random.Random(1)
    table = pa.table({"part": [rng.choice("abc") for _ in range(300)], "v": list(range(300)),
                      "x": [rng.random() for _ in range(300)]})
    pq.write_to_dataset(table, site.path("ds"), partition_cols=["part"], filesystem=site.fs)
    names = site.names()
    assert {n.rsplit("/", 1)[0] for n in names} == {"ds/part=a", "ds/part=b", "ds/part=c"}
    assert all(n.endswith(".parquet") for n in names)

    def same(got: Any) -> None:
        got = got.set_column(got.schema.get_field_index("part"), "part",
                             got.column("part").cast(pa.string()))
        assert got.select(["part", "v", "x"]).sort_by("v").equals(table)

    same(pq.read_table(site.path("ds"), filesystem=site.fs))
    # From a URL: fsspec builds the filesystem from the protocol and options.
    fs, path = fsspec.core.url_to_fs(site.url("ds"), **site.options)
    assert isinstance(fs, AiofluxFileSystem) and path == site.root + "/ds"
    same(ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive").to_table())
    only_b = pq.read_table(path, filesystem=fs, filters=[("part", "=", "b")])
    assert only_b.column("v").to_pylist() == \
        [v for v, p in enumerate(table.column("part").to_pylist()) if p == "b"]


# -- 2. pandas ----------------------------------------------------------------------------


def test_pandas_through_aioflux_urls(site: Site, fsspec_state: None) -> None:
    pd = _needs("pandas")
    _needs("pyarrow")
    df = pd.DataFrame({"a": range(50), "b": [f"row {i}" for i in range(50)],
                       "c": [i / 7 for i in range(50)]})
    df.to_parquet(site.url("x.parquet"), storage_options=site.options)
    pd.testing.assert_frame_equal(pd.read_parquet(site.url("x.parquet"),
                                                  storage_options=site.options), df)
    df.to_csv(site.url("x.csv"), index=False, storage_options=site.options)
    pd.testing.assert_frame_equal(pd.read_csv(site.url("x.csv"),
                                              storage_options=site.options), df)
    assert site.names() == ["x.csv", "x.parquet"]
    assert site.fs.cat_file(site.path("x.csv")).decode().splitlines()[:2] == \
        ["a,b,c", "0,row 0,0.0"]


@OBJECT_SITES
def test_pandas_with_registered_gs_and_s3(site: Site, fsspec_state: None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pd = _needs("pandas")
    _needs("pyarrow")
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)  # the registered protocol builds its store from it
    aioflux.fsspec.register([site.scheme])
    assert isinstance(fsspec.filesystem(site.scheme), AiofluxFileSystem)
    df = pd.DataFrame({"k": ["x", "y", "z"], "n": [1, 2, 3]})
    url = site.url("plain.csv", protocol=site.scheme)
    df.to_csv(url, index=False)  # no storage options: the plain URL
    pd.testing.assert_frame_equal(pd.read_csv(url), df)
    # pandas' parquet hands a gs:// or s3:// URL without storage options to
    # pyarrow's own filesystems, not fsspec: {} keeps it on fsspec.
    url = site.url("plain.parquet", protocol=site.scheme)
    df.to_parquet(url, storage_options={})
    pd.testing.assert_frame_equal(pd.read_parquet(url, storage_options={}), df)
    assert site.names() == ["plain.csv", "plain.parquet"]


# -- 3. Lightning -------------------------------------------------------------------------


class _NoGcsfs(importlib.abc.MetaPathFinder):
    """Makes gcsfs and s3fs unimportable, installed or not."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in ("gcsfs", "s3fs"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")


@pytest.fixture
def no_gcsfs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    imports = _needs("lightning_utilities.core.imports")
    monkeypatch.setattr(sys, "meta_path", [_NoGcsfs(), *sys.meta_path])
    for name in [m for m in sys.modules if m.split(".")[0] in ("gcsfs", "s3fs")]:
        monkeypatch.delitem(sys.modules, name)
    imports.module_available.cache_clear()  # Lightning asks it whether gcsfs is there
    yield
    imports.module_available.cache_clear()


def _tiny_module() -> Any:
    pl = _needs("lightning.pytorch")

    class Tiny(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 2)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor],
                          _: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
            g = torch.Generator().manual_seed(0)
            data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g),
                                                  torch.randn(32, 2, generator=g))
            return torch.utils.data.DataLoader(data, batch_size=8)

    return Tiny()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
@OBJECT_SITES
@pytest.mark.parametrize("checkpoint_io", ["aioflux", "lightning"])
def test_lightning_fits_and_resumes_on_a_registered_url(
        site: Site, fsspec_state: None, no_gcsfs: None, monkeypatch: pytest.MonkeyPatch,
        checkpoint_io: str) -> None:
    # Lightning's own TorchCheckpointIO saves in an fsspec transaction.
    pl = _needs("lightning.pytorch")
    from aioflux.torch.lightning import AsyncGcsCheckpointIO

    with pytest.raises(ImportError):
        import gcsfs  # noqa: F401
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)
    # The CheckpointIO's default stores, built from that environment.
    monkeypatch.setattr(stores, "_defaults", {})
    aioflux.fsspec.register([site.scheme])
    root = site.url(protocol=site.scheme)

    def trainer(epochs: int) -> Any:
        return pl.Trainer(default_root_dir=root, max_epochs=epochs,
                          plugins=[AsyncGcsCheckpointIO()] if checkpoint_io == "aioflux"
                          else [], accelerator="cpu", devices=1,
                          logger=False, enable_progress_bar=False, enable_model_summary=False)

    try:
        first = trainer(2)
        first.fit(_tiny_module())
        saved = first.checkpoint_callback.best_model_path
        assert saved == f"{root}/checkpoints/epoch=1-step=8.ckpt"
        assert site.names() == ["checkpoints/epoch=1-step=8.ckpt"]

        resumed = trainer(3)
        resumed.fit(_tiny_module(), ckpt_path=saved)
        assert (resumed.current_epoch, resumed.global_step) == (3, 12)  # epoch 2 only
        # ModelCheckpoint (top 1) removed the first one through the filesystem.
        assert site.names() == ["checkpoints/epoch=2-step=12.ckpt"]
        assert "gcsfs" not in sys.modules and "s3fs" not in sys.modules
    finally:
        for pid, store in stores._defaults.values():
            if pid == os.getpid():
                call(store.aclose())


# -- 4. torch DCP -------------------------------------------------------------------------

_DCP_WARNING = "ignore:torch.distributed is disabled:UserWarning"


def _dcp_round_trip(url: str, **options: Any) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    state = {"w": torch.randn(300, 40), "b": torch.arange(17), "step": 3}
    dcp.save(state, storage_writer=FsspecWriter(url, thread_count=2, **options))
    target = {"w": torch.zeros(300, 40), "b": torch.zeros(17, dtype=torch.long), "step": 0}
    dcp.load(target, storage_reader=FsspecReader(url, **options))
    assert torch.equal(target["w"], state["w"]) and torch.equal(target["b"], state["b"])
    assert target["step"] == 3


@pytest.mark.filterwarnings(_DCP_WARNING)
def test_dcp_fsspec_writer_and_reader(site: Site, fsspec_state: None) -> None:
    _dcp_round_trip(site.url("dcp"), **site.options)
    # The metadata is written as .metadata.tmp, then renamed (copy and delete).
    assert site.names() == ["dcp/.metadata", "dcp/__0_0.distcp", "dcp/__0_1.distcp"]


@pytest.mark.filterwarnings(_DCP_WARNING)
@OBJECT_SITES
def test_dcp_on_a_registered_url(site: Site, fsspec_state: None,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)
    aioflux.fsspec.register([site.scheme])
    _dcp_round_trip(site.url("dcp", protocol=site.scheme))
    assert site.names() == ["dcp/.metadata", "dcp/__0_0.distcp", "dcp/__0_1.distcp"]


# -- 5. zarr ------------------------------------------------------------------------------


def test_zarr_fsspec_store(site: Site, fsspec_state: None) -> None:
    if sys.version_info < (3, 11):  # the test extra brings zarr from 3.11 on
        pytest.skip("zarr 3 needs Python 3.11")
    zarr = _needs("zarr", minversion="3")
    np = _needs("numpy")
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore

    # zarr drives the filesystem's coroutines on its own loop.
    fs = AiofluxFileSystem(site.scheme, config=CONFIG, endpoint=site.options.get("endpoint"),
                           asynchronous=True, skip_instance_cache=True)
    try:
        data = np.arange(100 * 60, dtype="f4").reshape(100, 60)
        array = zarr.create_array(FsspecStore(fs=fs, path=site.path("z")), shape=data.shape,
                                  chunks=(32, 32), dtype="f4")
        array[:] = data
        back = zarr.open_array(FsspecStore(fs=fs, path=site.path("z"), read_only=True),
                               mode="r")
        assert np.array_equal(back[:], data)
        assert np.array_equal(back[3:70, 5:40], data[3:70, 5:40])
        chunks = [n for n in site.names() if n.startswith("z/c/")]
        assert len(chunks) == 4 * 2 and "z/zarr.json" in site.names()
        group = zarr.open_group(FsspecStore(fs=fs, path=site.path("g")), mode="w")
        group.create_array("x", shape=(10,), dtype="i4")[:] = np.arange(10)
        opened = zarr.open_group(FsspecStore(fs=fs, path=site.path("g"), read_only=True),
                                 mode="r")
        assert list(opened.array_keys()) == ["x"]
        # From a URL, as zarr.open("aioflux-gs://...") builds it.
        by_url = FsspecStore.from_url(site.url("z"), storage_options=site.options,
                                      read_only=True)
        assert isinstance(by_url.fs, AiofluxFileSystem)
        assert np.array_equal(zarr.open_array(by_url, mode="r")[:], data)
    finally:
        sync(fs.store.aclose())  # on zarr's loop, where its connections are


# -- 6. Hugging Face datasets -------------------------------------------------------------


@OBJECT_SITES
def test_hugging_face_datasets_load_stream_save_and_reload(
        site: Site, fsspec_state: None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    hf = _needs("datasets")
    for name, value in site.env.items():
        monkeypatch.setenv(name, value)
    aioflux.fsspec.register([site.scheme])
    rows = [{"i": i, "text": f"row {i}"} for i in range(30)]
    for part in range(3):
        lines = "".join(json.dumps(r) + "\n" for r in rows[part * 10:part * 10 + 10])
        site.fs.pipe_file(site.path(f"data/part-{part}.jsonl"), lines.encode())
    # A glob, as a dataset's data_files usually is: expanded through the filesystem.
    files = site.url("data/*.jsonl", protocol=site.scheme)
    loaded = hf.load_dataset("json", data_files=files, split="train",
                             cache_dir=str(tmp_path / "hf-cache"))
    assert sorted(loaded.to_list(), key=lambda r: r["i"]) == rows
    streamed = hf.load_dataset("json", data_files=files, split="train", streaming=True)
    assert sorted(streamed, key=lambda r: r["i"]) == rows
    saved = site.url("saved", protocol=site.scheme)
    loaded.save_to_disk(saved)
    assert site.names()[3:] == ["saved/data-00000-of-00001.arrow", "saved/dataset_info.json",
                                "saved/state.json"]
    assert hf.load_from_disk(saved).to_list() == loaded.to_list()


# -- 7. DataLoader workers and fork -------------------------------------------------------


def _seed(site: Site, count: int) -> dict[str, bytes]:
    rng = random.Random(count)
    data = {site.path(f"f/{i:03d}"): os.urandom(rng.randrange(1, 5000)) for i in range(count)}
    site.fs.pipe(data)
    return data


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, "fork"),
                                                  pytest.param(2, "spawn",
                                                               marks=pytest.mark.slow)])
def test_dataloader_workers_read_every_file_once(site: Site, fsspec_state: None,
                                                 monkeypatch: pytest.MonkeyPatch, workers: int,
                                                 context: str | None) -> None:
    data = _seed(site, 24)
    if site.scheme == "file":
        fs: Any = site.fs
    else:
        # A filesystem fsspec built for a registered protocol, from the
        # environment: a spawned worker unpickles it without registering.
        for name, value in site.env.items():
            monkeypatch.setenv(name, value)
        aioflux.fsspec.register([site.scheme])
        fs = fsspec.filesystem(site.scheme)
        assert type(fs).__name__ == f"AiofluxFileSystem_{site.scheme}"
        fs.cat_file(next(iter(data)))  # used in the parent before the workers start
    loader = torch.utils.data.DataLoader(FilesDataset(fs, sorted(data)), batch_size=None,
                                         num_workers=workers, multiprocessing_context=context)
    seen = list(loader)
    assert sorted(path for path, _, _ in seen) == sorted(data)  # each once
    for path, got, _ in seen:
        assert got == data[path], path
    readers = {pid for _, _, pid in seen}
    if workers:
        assert len(readers) == workers and os.getpid() not in readers
    else:
        assert readers == {os.getpid()}


def test_a_registered_filesystem_pickles_as_its_class(fsspec_state: None) -> None:
    aioflux.fsspec.register(["gs"])
    fs = fsspec.filesystem("gs", endpoint="http://127.0.0.1:9", skip_instance_cache=True)
    back = pickle.loads(pickle.dumps(fs))
    assert type(back) is type(fs) and back.protocol == ("gs", "aioflux-gs")
    assert back.storage_options == fs.storage_options
    assert back.unstrip_protocol("b/k") == "gs://b/k"


def test_a_forked_child_uses_its_own_loop_and_store(site: Site) -> None:
    fs = site.fs
    fs.pipe_file(site.path("parent"), b"from the parent")
    assert fs.cat_file(site.path("parent")) == b"from the parent"
    parent_loop, parent_store = fs.loop, fs.store

    def child() -> None:
        # The parent's loop thread did not survive the fork: waiting on it
        # would hang. The child runs its own.
        assert fs.loop is not parent_loop and fs.store is not parent_store
        assert fs.cat_file(site.path("parent")) == b"from the parent"
        with fs.open(site.path("parent"), "rb") as f:
            assert f.read(4) == b"from"
        fs.pipe_file(site.path("child"), b"from the child")

    in_fork(child)
    in_fork(child)  # a second child, forked from the same parent, too
    assert fs.loop is parent_loop and fs.store is parent_store
    assert fs.cat_file(site.path("child")) == b"from the child"


# -- 8. async mode ------------------------------------------------------------------------


async def test_async_mode_cat_pipe_and_open_async(site: Site) -> None:
    fs = AiofluxFileSystem(site.scheme, config=CONFIG, endpoint=site.options.get("endpoint"),
                           asynchronous=True, skip_instance_cache=True)
    try:
        data = os.urandom(300_000)
        await fs._pipe_file(site.path("a"), data)
        assert await fs._cat_file(site.path("a")) == data
        assert await fs._cat_file(site.path("a"), 1000, 2000) == data[1000:2000]
        assert await fs._cat_file(site.path("a"), -500) == data[-500:]
        assert await fs._cat_ranges([site.path("a")] * 2, [0, 10], [5, 20]) == \
            [data[:5], data[10:20]]
        assert (await fs._info(site.path("a")))["size"] == len(data)

        f = await fs.open_async(site.path("b"), "wb")
        async with f:
            for i in range(0, len(data), 70_000):
                assert await f.write(data[i:i + 70_000]) == len(data[i:i + 70_000])
            assert not await fs._exists(site.path("b"))  # nothing until close
        assert f.tell() == len(data)
        assert await fs._cat_file(site.path("b")) == data

        async with await fs.open_async(site.path("b"), "rb") as r:
            assert r.size == len(data)
            assert await r.read(10) == data[:10]
            assert r.seek(-10, os.SEEK_END) == len(data) - 10
            assert await r.read() == data[-10:]
            assert await r.read() == b""
            r.seek(100)
            assert await r.read(50) == data[100:150] and r.tell() == 150

        with pytest.raises(KeyError):
            async with await fs.open_async(site.path("c"), "wb") as w:
                for _ in range(9):  # past one part (8 MiB): a part is up
                    await w.write(b"c" * MiB)
                raise KeyError("a failure mid-write")
        assert not await fs._exists(site.path("c"))
        assert site.names() == ["a", "b"]
        bucket, name = split(site.scheme, site.root)
        assert await fs.store.list_multipart_uploads(bucket, name) == []

        with pytest.raises(ValueError):
            await fs.open_async(site.path("a"), "r")
        with pytest.raises(ValueError):
            await fs.open_async(site.path("a"), "ab")
        with pytest.raises(NotFound):
            await fs.open_async(site.path("missing"), "rb")
    finally:
        await fs.store.aclose()


async def test_open_async_reads_the_version_it_opened(site: Site) -> None:
    fs = AiofluxFileSystem(site.scheme, config=CONFIG, endpoint=site.options.get("endpoint"),
                           asynchronous=True, skip_instance_cache=True)
    try:
        await fs._pipe_file(site.path("v"), b"A" * 1000)
        r = await fs.open_async(site.path("v"), "rb")
        assert await r.read(10) == b"A" * 10
        if site.scheme == "file":
            await asyncio.sleep(0.01)  # a file's version is its mtime: let the clock move
        await fs._pipe_file(site.path("v"), b"B" * 1000)
        with pytest.raises(StorageError):  # never B's bytes after A's
            await r.read()
        assert await fs._cat_file(site.path("v")) == b"B" * 1000
    finally:
        await fs.store.aclose()


@CORRUPTIBLE_SITES
async def test_open_async_checks_a_front_to_back_read(site: Site) -> None:
    good = os.urandom(200_000)
    _corrupt(site, "bad", good)
    fs = AiofluxFileSystem(site.scheme, config=CONFIG, endpoint=site.options.get("endpoint"),
                           asynchronous=True, skip_instance_cache=True)
    try:
        async with await fs.open_async(site.path("bad"), "rb") as r:
            assert await r.read(100_000) == good[:100_000]  # unchecked so far
            with pytest.raises(ChecksumMismatch, match="bad"):
                await r.read()  # the last bytes complete the check
            # A retry is told again: it was handed the corrupt rest, unchecked.
            for _ in range(2):
                with pytest.raises(ChecksumMismatch, match="bad"):
                    await r.read()
    finally:
        await fs.store.aclose()


# -- 9. integrity -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["wb", "w"])
def test_an_exception_inside_open_for_write_publishes_nothing(site: Site, mode: str) -> None:
    # Past one part (8 MiB), so a part is already uploaded when the block fails.
    chunk = b"x" * MiB if mode == "wb" else "x" * MiB
    with pytest.raises(KeyError):
        with site.fs.open(site.path("o"), mode) as f:
            for _ in range(9):
                f.write(chunk)
            raise KeyError("a failure mid-write")
    assert not site.fs.exists(site.path("o"))
    assert site.names() == []
    bucket, name = split(site.scheme, site.root)
    assert call(site.fs.store.list_multipart_uploads(bucket, name)) == []
    if site.scheme == "file":
        assert not Path(site.root).exists() or _files_under(site.root) == []
    with site.fs.open(site.path("o"), mode) as f:  # and without one, it is published
        f.write(chunk)
    assert site.fs.cat_file(site.path("o")) == b"x" * MiB


@CORRUPTIBLE_SITES
def test_reading_corrupted_stored_bytes_is_a_checksum_mismatch(site: Site) -> None:
    good = os.urandom(300_000)
    _corrupt(site, "bad", good)
    for read in (lambda: site.fs.cat_file(site.path("bad")),
                 lambda: site.fs.cat(site.path("bad")),
                 lambda: site.fs.open(site.path("bad"), "rb").read()):
        with pytest.raises(ChecksumMismatch, match="bad"):
            read()


@CORRUPTIBLE_SITES
def test_get_file_leaves_no_partial_local_file(site: Site, tmp_path: Path) -> None:
    good = os.urandom(9 * MiB)  # two blocks: the first lands before the check fails
    _corrupt(site, "bad", good)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ChecksumMismatch):
        site.fs.get_file(site.path("bad"), str(out / "new"))
    assert _files_under(str(out)) == []
    (out / "old").write_bytes(b"the previous copy")
    with pytest.raises(ChecksumMismatch):
        site.fs.get_file(site.path("bad"), str(out / "old"))
    assert (out / "old").read_bytes() == b"the previous copy"
    with pytest.raises((FileNotFoundError, NotFound)):
        site.fs.get_file(site.path("missing"), str(out / "missing"))
    assert _files_under(str(out)) == ["old"]
    site.fs.pipe_file(site.path("good"), good)
    site.fs.get_file(site.path("good"), str(out / "old"))
    assert (out / "old").read_bytes() == good and _files_under(str(out)) == ["old"]


def test_cat_ranges_coalesces_and_slices_right(site: Site) -> None:
    data = {site.path(f"r{i}"): os.urandom(40_000 + 7_000 * i) for i in range(3)}
    site.fs.pipe(data)
    rng = random.Random(7)
    paths, starts, ends = [], [], []
    for _ in range(80):
        path = rng.choice(sorted(data))
        start = rng.randrange(len(data[path]))
        paths.append(path)
        starts.append(start)
        ends.append(rng.randrange(start, len(data[path]) + 1))
    one = site.path("r1")
    edges = [(0, 10), (10, 20), (20, 20), (15, 25), (0, 10), (100, 90),  # adjacent,
             (len(data[one]) - 5, len(data[one])), (0, len(data[one]))]  # empty, overlap
    for start, end in edges:
        paths.append(site.url("r1") if start % 2 else one)  # either form of the path
        starts.append(start)
        ends.append(end)
    order = list(range(len(paths)))
    rng.shuffle(order)
    paths, starts, ends = ([seq[i] for i in order] for seq in (paths, starts, ends))
    want = [data[site.fs._strip_protocol(p)][s:e]
            for p, s, e in zip(paths, starts, ends, strict=True)]

    def requests() -> int:
        return int(site.fs.store.stats.requests) if site.scheme == "gs" else 0

    for gap in (None, 0, 10**9):
        before = requests()
        kwargs = {} if gap is None else {"max_gap": gap}
        assert site.fs.cat_ranges(paths, starts, ends, **kwargs) == want, gap
        if site.scheme == "gs" and gap != 0:
            assert requests() - before == len(data)  # one GET per object
    got = site.fs.cat_ranges([one, site.path("missing"), one], [0, 0, 5], [5, 5, 10])
    assert got[0] == data[one][:5] and got[2] == data[one][5:10]
    assert isinstance(got[1], (FileNotFoundError, NotFound))


def test_threads_opening_files_at_once_share_one_store(monkeypatch: pytest.MonkeyPatch) -> None:
    # pyarrow's writers open files from several threads at once; a store
    # built by each (all but one never closed) leaked their connections.
    fs = AiofluxFileSystem("file", config=CONFIG, skip_instance_cache=True)
    call(fs.store.aclose())
    fs._held[0] = (-1, fs.store)  # as in a forked child: built again on first use
    built: list[object] = []
    both_inside = threading.Barrier(2, timeout=1)
    real = _base.new_store

    def new_store(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        try:
            both_inside.wait()  # two threads here at once: two stores
        except threading.BrokenBarrierError:
            pass  # alone, as the lock keeps it
        return real(*args, **kwargs)

    monkeypatch.setattr(_base, "new_store", new_store)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(fs.store)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and len(got) == 2 and got[0] is got[1]
    call(fs.store.aclose())
