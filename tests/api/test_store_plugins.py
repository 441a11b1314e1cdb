"""One table of schemes, which another package extends through the
``aioflux.stores`` entry point group: a test distribution (a ``*.dist-info``
on ``sys.path``) serves ``fake://`` URLs through ``open``, the iterables and
the CLI, imported only when such a URL is first used."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import aioflux
from aioflux import InvalidArgument, InvalidURL
from aioflux._api import stores
from aioflux._core.records import store_plugins
from aioflux.cli import main

PLUGIN = """
from dataclasses import replace

from aioflux.testing import MemoryStore

BUILT = []


class FakeStore(MemoryStore):
    @property
    def features(self):
        return replace(super().features, scheme="fake")


def build(scheme, config, **settings):
    BUILT.append((scheme, settings))
    return FakeStore(buckets=["bkt"])
"""


@pytest.fixture
def fake_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "fake_aioflux_backend.py").write_text(PLUGIN)
    info = tmp_path / "fake_aioflux_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-aioflux-backend\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""\
        [aioflux.stores]
        fake = fake_aioflux_backend:build
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    stores._defaults.pop("fake", None)
    store_plugins._loaded.pop("fake", None)
    sys.modules.pop("fake_aioflux_backend", None)


def test_an_unknown_scheme_names_the_entry_point_group() -> None:
    with pytest.raises(InvalidURL, match="unknown scheme 'fake'"):
        aioflux.parse_url("fake://bkt/x")
    with pytest.raises(InvalidArgument, match=r"aioflux\.stores entry points"):
        stores.new_store("fake")


def test_a_packages_scheme_serves_open_and_the_iterables(fake_distribution: Path) -> None:
    assert "fake_aioflux_backend" not in sys.modules
    assert aioflux.parse_url("fake://bkt/a/x") == aioflux.StoreURL("bkt", "a/x", "fake")
    assert "fake_aioflux_backend" not in sys.modules  # parsing imports nothing
    with aioflux.open("fake://bkt/a/x", "wb") as out:
        out.write(b"payload")
    with aioflux.open("fake://bkt/a/x", "rb") as src:
        assert src.read() == b"payload"
    # The URLs listed are the ones its records give (a MemoryStore's here).
    assert list(aioflux.list_files("fake://bkt/a/")) == ["memory://bkt/a/x"]
    plugin = sys.modules["fake_aioflux_backend"]
    assert plugin.BUILT == [("fake", {})]  # one default store for the process


def test_new_store_hands_the_settings_given_to_the_packages_builder(
    fake_distribution: Path,
) -> None:
    store = stores.new_store("fake", endpoint="http://127.0.0.1:9")
    assert isinstance(store, aioflux.ObjectStore)
    assert sys.modules["fake_aioflux_backend"].BUILT == [
        ("fake", {"endpoint": "http://127.0.0.1:9"})
    ]


def test_the_cli_builds_a_packages_store(fake_distribution: Path, tmp_path: Path) -> None:
    (tmp_path / "src.bin").write_bytes(b"abc")
    assert main(["cp", str(tmp_path / "src.bin"), "fake://bkt/copied.bin"]) == 0
    assert sys.modules["fake_aioflux_backend"].BUILT == [("fake", {})]


def test_a_builder_must_build_a_store(
    fake_distribution: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(store_plugins._loaded, "fake", lambda scheme, config: object())
    with pytest.raises(InvalidArgument, match="built a object, not a store"):
        stores.new_store("fake")


def test_aioflux_schemes_refuse_settings_of_other_stores() -> None:
    with pytest.raises(InvalidArgument, match="user_project is a GCS setting"):
        stores.new_store("s3", user_project="p")
    with pytest.raises(InvalidArgument, match="region is an S3 setting"):
        stores.new_store("gs", region="us-east-1")
    with pytest.raises(InvalidArgument, match="credentials is not taken here"):
        stores.new_store("https", credentials="anonymous")


def test_files_pass_by_the_settings_a_job_gives_every_store() -> None:
    # A CLI or dataset given an emulator's endpoint for its gs:// URLs reads
    # file:// URLs as well.
    store = stores.new_store("file", endpoint="http://127.0.0.1:1", credentials="anonymous",
                             region="us-east-1")
    assert store.features.scheme == "file"


def test_fsspec_serves_a_packages_scheme(fake_distribution: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    from aioflux.fsspec import AiofluxFileSystem, register

    fs = AiofluxFileSystem("fake")
    fs.pipe("fake://bkt/f/x.bin", b"through fsspec")
    assert fs.cat("bkt/f/x.bin") == b"through fsspec"
    register(["fake"])
    registered = fsspec.filesystem("fake")  # the instance fsspec.open finds again
    registered.pipe("fake://bkt/f/y.bin", b"registered")
    with fsspec.open("fake://bkt/f/y.bin", "rb") as src:
        assert src.read() == b"registered"
    assert sys.modules["fake_aioflux_backend"].BUILT[0][0] == "fake"
