"""A map-style dataset reading files through an fsspec filesystem, in a
module of its own: spawned DataLoader workers import it (and torch) only,
not the consumer tests' pandas and pyarrow."""

from __future__ import annotations

import os
from typing import Any

import torch


class FilesDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i``: ``(path, its bytes, the reading process's pid)``; even
    items through ``fs.cat_file``, odd ones through ``fs.open(...).read()``."""

    def __init__(self, fs: Any, paths: list[str]) -> None:
        self.fs = fs
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[str, bytes, int]:
        path = self.paths[i]
        if i % 2 == 0:
            data = self.fs.cat_file(path)
        else:
            with self.fs.open(path, "rb") as f:
                data = f.read()
        return path, data, os.getpid()
