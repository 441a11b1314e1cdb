"""The backends the torch tests run on: our emulator (gs) and the local filesystem (file)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aioflux import Client, ClientConfig
from aioflux._core.portal import call
from aioflux._core.urls import parse_url
from aioflux.local import LocalStore
from aioflux.testing import Emulator
from tests.conftest import FAST_RETRY


@dataclass
class Where:
    """An empty folder on one backend, with ways to seed and inspect it.

    Attributes:
        scheme: ``gs`` or ``file``.
        root: URL of the folder (no trailing ``/``).
        client: the client to hand to aioflux (``None`` for files: none needed).
        kwargs: what a dataset needs to reach the store (the emulator's endpoint).
    """

    scheme: str
    root: str
    client: Client | None
    kwargs: dict[str, Any] = field(default_factory=dict)
    emulator: Emulator | None = None

    @property
    def bucket(self) -> str:
        return parse_url(self.root).bucket

    @property
    def base(self) -> str:
        """The folder's object-name prefix in its bucket (ends with ``/`` unless empty)."""
        name = parse_url(self.root).name
        return name + "/" if name else ""

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
        if self.client is not None:
            return sorted(self.rel(o.name)
                          for o in self.client.list_objects(self.bucket, self.base + under))
        top = Path("/" + self.bucket) / self.base
        return sorted(str(Path(d, f).relative_to(top)) for d, _, files in os.walk(top / under)
                      for f in files)


@pytest.fixture(params=["gs", "file"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    """An empty folder on each backend in turn."""
    if request.param == "file":
        yield Where("file", f"file://{tmp_path}/root", None)
        return
    emulator: Emulator = request.getfixturevalue("emulator")
    bucket: str = request.getfixturevalue("bucket")
    with Client(ClientConfig(max_concurrency=16, retry=FAST_RETRY),
                endpoint=emulator.endpoint) as client:
        yield Where("gs", f"gs://{bucket}/root", client, {"endpoint": emulator.endpoint},
                    emulator)
