"""Every renamed or retired name still works for a release, with a
DeprecationWarning that names its replacement and the release it goes in
(docs/migration/deprecations.md lists them)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from aioflux._core.deprecation import REMOVED_IN

# (module, old name, the new name the warning must give, the object it is)
RENAMED = [
    ("aioflux.torch", "list_files", "aioflux.list_files", ("aioflux", "list_files")),
    ("aioflux.torch", "load_files", "aioflux.load_files", ("aioflux", "load_files")),
    ("aioflux", "GcsURL", "aioflux.StoreURL", ("aioflux", "StoreURL")),
    (
        "aioflux.torch",
        "MapDataset",
        "aioflux.torch.ObjectMapDataset",
        ("aioflux.torch", "ObjectMapDataset"),
    ),
    (
        "aioflux.torch",
        "IterableDataset",
        "aioflux.torch.ObjectIterableDataset",
        ("aioflux.torch", "ObjectIterableDataset"),
    ),
    (
        "aioflux",
        "download_many",
        "aioflux.Downloader(store, options).download_many(objects)",
        ("aioflux._engines.download", "download_many"),
    ),
    (
        "aioflux.torch.dcp",
        "GcsStorageWriter",
        "aioflux.torch.dcp.DcpWriter",
        ("aioflux.torch.dcp", "DcpWriter"),
    ),
    (
        "aioflux.torch.dcp",
        "GcsStorageReader",
        "aioflux.torch.dcp.DcpReader",
        ("aioflux.torch.dcp", "DcpReader"),
    ),
]


@pytest.mark.parametrize(
    ("module", "old", "new", "target"), RENAMED, ids=[f"{m}.{o}" for m, o, _, _ in RENAMED]
)
def test_an_old_name_warns_and_is_its_replacement(
    module: str, old: str, new: str, target: tuple[str, str]
) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(mod, old)
    (warning,) = caught
    message = str(warning.message)
    assert f"{module}.{old}" in message and new in message and REMOVED_IN in message
    assert warning.filename == __file__  # it names the line that used the old name
    assert value is getattr(importlib.import_module(target[0]), target[1])


def test_removal_is_two_minor_releases_on() -> None:
    from aioflux import __version__

    major, minor = (int(p) for p in __version__.split(".")[:2])
    removed = tuple(int(p) for p in REMOVED_IN.split(".")[:2])
    assert removed >= (major, minor + 2)


def test_every_deprecated_name_is_tested_and_on_the_migration_page() -> None:
    import aioflux
    import aioflux.torch
    import aioflux.torch.dcp

    declared = (
        {("aioflux", n) for n in aioflux._DEPRECATED}
        | {("aioflux.torch", n) for n in aioflux.torch._DEPRECATED}
        | {("aioflux.torch.dcp", n) for n in aioflux.torch.dcp._RENAMED}
    )
    assert declared == {(module, old) for module, old, _, _ in RENAMED}
    page = Path(__file__).resolve().parents[2] / "docs" / "migration" / "deprecations.md"
    rows = page.read_text().splitlines()
    for module, old, _, _ in RENAMED:
        (row,) = [r for r in rows if r.startswith("|") and f"`{module}.{old}" in r]
        assert REMOVED_IN in row, row
