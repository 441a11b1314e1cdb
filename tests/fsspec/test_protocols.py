"""aioflux's own protocol names, as fsspec's registry hands out their classes."""

from __future__ import annotations

import pickle

import fsspec
import pytest

from aioflux.fsspec import AiofluxFileSystem
from tests.fsspec.conftest import Site


def test_each_own_protocol_name_is_a_filesystem_of_its_store(site: Site) -> None:
    # fsspec.filesystem(name) passes the class no URL: with one class for
    # the four names, "aioflux-s3" and "aioflux-file" made GCS filesystems.
    fs = fsspec.filesystem(f"aioflux-{site.scheme}", skip_instance_cache=True, **site.options)
    assert isinstance(fs, AiofluxFileSystem) and fs.scheme == site.scheme
    fs.pipe_file(site.path("x"), b"through the registry")
    assert site.fs.cat_file(site.path("x")) == b"through the registry"
    back = pickle.loads(pickle.dumps(fs))
    assert type(back) is type(fs) and back.scheme == site.scheme
    assert back.cat_file(site.path("x")) == b"through the registry"
    # From a URL too.
    with fsspec.open(site.url("x"), "rb", **site.options) as f:
        assert f.read() == b"through the registry"


@pytest.mark.parametrize(("name", "scheme"), [("aioflux-gs", "gs"), ("aioflux-s3", "s3"),
                                              ("aioflux-az", "az"), ("aioflux-file", "file")])
def test_the_registry_s_class_of_each_name_knows_its_store(name: str, scheme: str) -> None:
    cls = fsspec.get_filesystem_class(name)
    assert issubclass(cls, AiofluxFileSystem) and cls.default_scheme == scheme
    assert name in cls.protocol
