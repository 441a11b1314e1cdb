"""fsspec's own tests for filesystems (``fsspec.tests.abstract``).

Opening and piping run on every backend. Copy, get and put (135 cases a
backend) test how :class:`AiofluxFileSystem` maps fsspec's path rules
(trailing slashes, globs, ``recursive``, ``maxdepth``) onto a store's
listing and transfer calls: the same code for every store, so they run on
one object store (our emulator) and on the local filesystem, whose
folders really exist. What a store itself does with those calls is the
conformance suite's, on every backend
(tests/backends/test_client_conformance.py). Run on moto, Azurite and
fake-gcs-server too, they proved nothing more at a high price: moto's and
Azurite's runs took about 2.5 minutes each, against the emulator's 45 s.

Skipped, as for gcsfs and s3fs: what needs an empty directory (object
stores have none; folders exist while an object lies under them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

import fsspec.tests.abstract as abstract
import pytest

from aioflux.fsspec import AiofluxFileSystem


class _Fixtures(abstract.AbstractFixtures):  # type: ignore[misc]
    @pytest.fixture
    def fs(self, backend: tuple[AiofluxFileSystem, str]) -> AiofluxFileSystem:
        return backend[0]

    @pytest.fixture
    def fs_path(self, backend: tuple[AiofluxFileSystem, str]) -> str:
        return backend[1]

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return posixpath.join

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False


# The path-rule suites' backends (see the module's docstring).
_PATH_RULES = pytest.mark.parametrize("backend", ["emulator", "localfs"], indirect=True)


@_PATH_RULES
class TestCopy(abstract.AbstractCopyTests, _Fixtures):  # type: ignore[misc]
    pass


@_PATH_RULES
class TestGet(abstract.AbstractGetTests, _Fixtures):  # type: ignore[misc]
    pass


@_PATH_RULES
class TestPut(abstract.AbstractPutTests, _Fixtures):  # type: ignore[misc]
    pass


class TestPipe(abstract.AbstractPipeTests, _Fixtures):  # type: ignore[misc]
    pass


class TestOpen(abstract.AbstractOpenTests, _Fixtures):  # type: ignore[misc]
    pass
