"""The backends the torch tests run on: our emulator (gs), the local
filesystem (file), moto's S3 server (s3, a third-party S3) and Azurite
(az, Microsoft's Azure Storage emulator).

On s3 the tests hand aioflux no client: ``AWS_ENDPOINT_URL_S3`` points the
default S3 store at moto, as it would point a real job at MinIO or R2, so
DataLoader and DCP workers (fork, spawn, forkserver) build the same store
from the environment. Only :data:`S3_TESTS` run on s3, so the torch suite
stays well under its time budget on two cores. On az,
``AZURE_STORAGE_CONNECTION_STRING`` (Azurite's development account) does
the same, and only :data:`AZ_TESTS` run there.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client, ClientConfig
from aioflux._api import stores
from aioflux._core.concurrency.portal import call
from aioflux._core.records.urls import parse_url
from aioflux._core.storage.protocol import ObjectStore
from aioflux.azure import AzureStore
from aioflux.local import LocalStore
from aioflux.s3 import S3Store
from aioflux.testing import Emulator
from aioflux.torch import DatasetSettings
from tests.conftest import FAST_RETRY, MotoS3, unique_bucket
from tests.servers.azurite import Azurite

# The tests of the other backends that also run on s3 (by function name):
# CheckpointManager save/latest/load with its manifest-last rule and
# retention, DCP and Lightning save/load, and the SIGKILL-mid-save test.
# Datasets and file objects on s3 are in test_s3_torch.py.
S3_TESTS = frozenset({
    "test_save_load_list_latest_and_retention",
    "test_incomplete_checkpoints_are_invisible",
    "test_checkpoint_writer_reader",
    "test_zstd_manager_round_trip",
    "test_saving_an_existing_step_is_a_conflict_unless_overwrite",
    "test_retention_is_by_step_not_by_save_order",
    "test_a_failed_overwrite_keeps_the_checkpoint_it_would_replace",
    "test_resume_pattern_from_a_fresh_manager",
    "test_single_process_save_load_and_the_file_system",
    "test_fit_save_resume_remove",
    "test_sigkill_during_saves",
    "test_a_second_writer_of_the_same_step_never_undoes_a_published_checkpoint",
    "test_a_resave_after_a_killed_save_leaves_no_leftovers",
    "test_a_root_keeps_its_leading_slashes",
    "test_a_partial_load_of_a_damaged_item_is_a_checksum_mismatch",
    "test_checkpoint_save_skips_the_zip_crc_and_loads",
    "test_tar_shards_every_sample_once_grouped_and_byte_exact",
    "test_rows_round_trip_on_every_store",
})


# A representative subset on az: checkpoints (manifest last, create-only,
# SIGKILL mid-save, retention), DCP, Lightning, both datasets through
# DataLoader workers, resume, and shards.
AZ_TESTS = frozenset({
    "test_save_load_list_latest_and_retention",
    "test_incomplete_checkpoints_are_invisible",
    "test_a_second_writer_of_the_same_step_never_undoes_a_published_checkpoint",
    "test_sigkill_during_saves",
    "test_single_process_save_load_and_the_file_system",
    "test_fit_save_resume_remove",
    "test_spawned_workers_rebuild_the_store_of_the_scheme",
    "test_iterable_dataset_through_dataloader",
    "test_every_sample_once_across_a_crash_at_random_steps",
    "test_tar_shards_every_sample_once_grouped_and_byte_exact",
    "test_rows_round_trip_on_every_store",
})
_ONLY = {"s3": S3_TESTS, "az": AZ_TESTS}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the s3 and az runs of tests outside :data:`S3_TESTS` and
    :data:`AZ_TESTS`."""
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        only = _ONLY.get(callspec.params.get("where")) if callspec is not None else None
        name = getattr(item, "originalname", item.name)
        (dropped if only is not None and name not in only else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@dataclass
class Where:
    """An empty folder on one backend, with ways to seed and inspect it.

    Attributes:
        scheme: ``gs``, ``file``, ``s3`` or ``az``.
        root: URL of the folder (no trailing ``/``).
        client: the client to hand to aioflux (``None`` for files and s3:
            the default store of the URL's scheme serves them).
        kwargs: what a dataset needs to reach the store (the emulator's endpoint).
        emulator: the emulator, on gs.
        s3: the store seeding and inspecting the bucket, on s3 (and az).
    """

    scheme: str
    root: str
    client: Client | None
    kwargs: dict[str, Any] = field(default_factory=dict)
    emulator: Emulator | None = None
    s3: ObjectStore | None = None

    def settings(self, **fields: Any) -> DatasetSettings:
        """The datasets' settings reaching the store, with ``fields`` added."""
        return DatasetSettings(**self.kwargs, **fields)

    @property
    def bucket(self) -> str:
        return parse_url(self.root).bucket

    @property
    def base(self) -> str:
        """The folder's object-name prefix in its bucket (ends with ``/`` unless empty)."""
        name = parse_url(self.root).name
        return name + "/" if name else ""

    @property
    def store(self) -> ObjectStore:
        """A store of the backend, to inspect it (driven on the portal loop)."""
        if self.client is not None:
            return self.client.aio
        return self.s3 if self.s3 is not None else LocalStore()

    def url(self, name: str = "") -> str:
        return f"{self.root}/{name}"

    def put(self, name: str, body: bytes, *, foreign: bool = False) -> None:
        """Store ``body`` as ``name`` under the folder (a name ending in
        ``/`` is a folder placeholder, a directory on files).

        A file is written through LocalStore, so it has a recorded crc32c
        as on GCS; ``foreign=True`` writes it as another tool would, without.
        """
        if self.emulator is not None:
            self.emulator.store.put(self.bucket, self.base + name, body)
            return
        if self.s3 is not None:
            call(self.s3.write(self.bucket, self.base + name, body))
            return
        path = Path("/" + self.bucket) / (self.base + name)
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        elif foreign:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        else:
            call(LocalStore().write(self.bucket, self.base + name, body))

    def rel(self, name: str) -> str:
        """``name`` (an object name in the bucket) relative to the folder."""
        assert name.startswith(self.base), name
        return name[len(self.base):]

    def names(self, under: str = "") -> list[str]:
        """Every object under the folder, relative, sorted; for files every
        file, temporary ones of unfinished writes included."""
        if self.scheme != "file":
            store = self.store

            async def listed() -> list[str]:
                return [o.name async for o in store.list_objects(self.bucket, self.base + under)]

            return sorted(self.rel(name) for name in call(listed()))
        top = Path("/" + self.bucket) / self.base
        return sorted(str(Path(d, f).relative_to(top)) for d, _, files in os.walk(top / under)
                      for f in files)


@pytest.fixture
def s3_where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Where]:
    """An empty folder in a fresh bucket on moto; the default S3 store (and
    every worker's) points at moto."""
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.endpoint)
    # A default store built before (by another test, for AWS) would not see it.
    monkeypatch.setattr(stores, "_defaults", {})
    seeder = S3Store(ClientConfig(max_concurrency=16, retry=FAST_RETRY))
    bucket = unique_bucket("torch")
    call(seeder.create_bucket(bucket))
    try:
        yield Where("s3", f"s3://{bucket}/root", None, s3=seeder)
    finally:
        call(seeder.aclose())
        built = stores._defaults.get("s3")
        if built is not None and built[0] == os.getpid():
            call(built[1].aclose())


@pytest.fixture
def az_where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Where]:
    """An empty folder in a fresh container on Azurite; the default Azure
    store (and every worker's) points at it through the environment."""
    azurite: Azurite = request.getfixturevalue("azurite")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setattr(stores, "_defaults", {})
    seeder = AzureStore(ClientConfig(max_concurrency=16, retry=FAST_RETRY))
    container = unique_bucket("torch")
    call(seeder.create_bucket(container))
    try:
        yield Where("az", f"az://{container}/root", None, s3=seeder)
    finally:
        call(seeder.aclose())
        built = stores._defaults.get("az")
        if built is not None and built[0] == os.getpid():
            call(built[1].aclose())


@pytest.fixture(params=["gs", "file", "s3", "az"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    """An empty folder on each backend in turn."""
    if request.param == "file":
        yield Where("file", f"file://{tmp_path}/root", None)
        return
    if request.param in ("s3", "az"):
        yield request.getfixturevalue(f"{request.param}_where")
        return
    emulator: Emulator = request.getfixturevalue("emulator")
    bucket: str = request.getfixturevalue("bucket")
    with Client(ClientConfig(max_concurrency=16, retry=FAST_RETRY),
                endpoint=emulator.endpoint) as client:
        yield Where("gs", f"gs://{bucket}/root", client, {"endpoint": emulator.endpoint},
                    emulator)


class HeldBack:
    """Pickles only once ``release`` is set: keeps a background save in flight."""

    release = threading.Event()

    def __deepcopy__(self, memo: object) -> HeldBack:
        return self  # the snapshot keeps it; torch.save pickles it in the background

    def __reduce__(self) -> tuple[type[OrderedDict[str, int]], tuple[list[tuple[str, int]]]]:
        self.release.wait(60)
        return (OrderedDict, ([("held", 7)],))  # a type weights_only loads


def a_fork_worker_ends(timeout: float = 20.0) -> None:
    """Start a fork worker (as a DataLoader does) that does nothing; it must
    end, with exit code 0, within ``timeout`` seconds."""
    worker = multiprocessing.get_context("fork").Process(target=int)
    worker.start()
    worker.join(timeout)
    alive = worker.is_alive()
    if alive:
        worker.kill()
        worker.join()
    assert not alive and worker.exitcode == 0
