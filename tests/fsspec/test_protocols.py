"""aioflux's own protocol names, as fsspec's registry hands out their classes."""

from __future__ import annotations

import pickle

import fsspec
import pytest

from aioflux import InvalidURL
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


FOREIGN = {"gs": "s3", "s3": "gs", "file": "gs"}
OWN_ALIAS = {"gs": "gcs", "s3": "s3a", "file": "local"}


def test_a_url_of_another_store_is_refused_not_served_from_this_one(site: Site) -> None:
    # A gs:// filesystem given s3://b/k read gs://b/k (every protocol was
    # stripped alike), and one given file:///tmp/x wrote to a bucket "tmp".
    fs = site.fs
    fs.pipe_file(site.path("x"), b"this store's")
    elsewhere = site.url("x", protocol=FOREIGN[site.scheme])
    for call in (lambda: fs.cat_file(elsewhere), lambda: fs.info(elsewhere),
                 lambda: fs.open(elsewhere, "rb"), lambda: fs.pipe_file(elsewhere, b"no"),
                 lambda: fs.rm(elsewhere), lambda: fs.ls(elsewhere),
                 lambda: fs.cp_file(site.path("x"), elsewhere)):
        with pytest.raises(InvalidURL, match=f"not a path of this filesystem's store "
                                             f"\\({site.scheme}://\\)"):
            call()
    assert site.names() == ["x"] and fs.cat_file(site.path("x")) == b"this store's"
    # Its own protocol's names are its own.
    alias = site.url("x", protocol=OWN_ALIAS[site.scheme])
    assert fs.cat_file(alias) == b"this store's"
    assert fs.cat_file(site.url("x")) == b"this store's"
