"""fsspec's own tests for filesystems (``fsspec.tests.abstract``), on every backend.

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


class TestCopy(abstract.AbstractCopyTests, _Fixtures):  # type: ignore[misc]
    pass


class TestGet(abstract.AbstractGetTests, _Fixtures):  # type: ignore[misc]
    pass


class TestPut(abstract.AbstractPutTests, _Fixtures):  # type: ignore[misc]
    pass


class TestPipe(abstract.AbstractPipeTests, _Fixtures):  # type: ignore[misc]
    pass


class TestOpen(abstract.AbstractOpenTests, _Fixtures):  # type: ignore[misc]
    pass
