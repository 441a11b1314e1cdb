"""What ``HF_HUB_OFFLINE`` reads: ``huggingface_hub``'s own cache, never the Hub.

``huggingface_hub`` keeps a repo's files in ``{cache}/{type}s--{org}--{name}``:
``refs/{revision}`` holds the commit a revision resolved to, and
``snapshots/{commit}/{path}`` is each downloaded file, a link to
``blobs/{etag}`` (the LFS file's SHA-256, else its git blob id: the ETag
the Hub states, so a file's generation is the one an online read gives).
Offline, a revision resolves by its ref, and stat, listing and reads see
the files of the commit's snapshot: only what was downloaded. Anything
else is an ``InvalidRequest`` naming the setting.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .._core.errors import InvalidRequest, NotFound, describe
from .._core.records.hub_paths import HubRepo
from .._core.records.types import ObjectInfo
from ._tree import etag_generation

__all__ = ["HubCache", "cache_dir"]


def cache_dir() -> Path:
    """``huggingface_hub``'s cache: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``."""
    found = os.environ.get("HF_HUB_CACHE")
    if found:
        return Path(found).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def offline_error(operation: str, bucket: str, name: str, what: str) -> InvalidRequest:
    """The refusal of an operation the cache cannot answer."""
    return InvalidRequest(
        f"{describe(operation, bucket, name, 'hf')} failed: HF_HUB_OFFLINE "
        f"is set, so only huggingface_hub's cache is read, and {what}",
        operation=operation,
        bucket=bucket,
        name=name,
    )


class HubCache:
    """A repo's files as ``huggingface_hub``'s cache holds them (see the module).

    Args:
        root: the cache's directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def _repo_dir(self, repo: HubRepo) -> Path:
        return self.root / f"{repo.type}s--{repo.id.replace('/', '--')}"

    def commit(self, bucket: str, repo: HubRepo, revision: str) -> str:
        """The commit the cache resolved ``revision`` to.

        Raises:
            InvalidRequest: the cache holds no such ref.
        """
        ref = self._repo_dir(repo) / "refs" / revision
        try:
            sha = ref.read_text(encoding="utf-8").strip()
        except OSError:
            raise offline_error(
                "resolve",
                bucket,
                "",
                f"it holds no ref {revision!r} of the repo (looked in {ref.parent})",
            ) from None
        if len(sha) != 40 or not all(c in "0123456789abcdef" for c in sha):
            raise offline_error("resolve", bucket, "", f"its ref {ref} holds no commit sha")
        return sha

    def _snapshot(self, repo: HubRepo, commit: str) -> Path:
        return self._repo_dir(repo) / "snapshots" / commit

    def stat(self, bucket: str, repo: HubRepo, commit: str, name: str) -> ObjectInfo:
        """A cached file's size and generation.

        Raises:
            NotFound: the cache does not hold it.
        """
        path = self._snapshot(repo, commit) / name
        try:
            size = path.stat().st_size
        except OSError:
            raise NotFound(
                f"{describe('stat', bucket, name, 'hf')} failed: HF_HUB_OFFLINE is "
                "set and huggingface_hub's cache does not hold it at commit "
                f"{commit}",
                operation="stat",
                bucket=bucket,
                name=name,
            ) from None
        if not path.is_file():
            raise NotFound(
                f"{describe('stat', bucket, name, 'hf')} failed: a folder",
                operation="stat",
                bucket=bucket,
                name=name,
            )
        return ObjectInfo(bucket, name, size, generation=_generation(path), scheme="hf")

    def names(self, bucket: str, repo: HubRepo, commit: str, prefix: str) -> Iterator[ObjectInfo]:
        """Every cached file of the commit under ``prefix``, sorted by name."""
        root = self._snapshot(repo, commit)
        found = []
        for folder, _dirs, files in os.walk(root):
            for file in files:
                path = Path(folder, file)
                name = path.relative_to(root).as_posix()
                if name.startswith(prefix) and path.is_file():
                    found.append((name, path))
        for name, path in sorted(found):
            yield ObjectInfo(
                bucket, name, path.stat().st_size, generation=_generation(path), scheme="hf"
            )

    def read(
        self, bucket: str, repo: HubRepo, commit: str, name: str, start: int, end: int | None
    ) -> tuple[bytes, int, int]:
        """``[start, end)`` of a cached file: the bytes, the file's size and generation.

        Raises:
            NotFound: the cache does not hold it.
        """
        info = self.stat(bucket, repo, commit, name)
        stop = info.size if end is None else min(end, info.size)
        with open(self._snapshot(repo, commit) / name, "rb") as file:
            file.seek(start)
            data = file.read(max(0, stop - start))
        return data, info.size, info.generation


def _generation(path: Path) -> int:
    """The file's generation: its blob's name is the ETag the Hub stated (0:
    a copy, not a link, where links are not made)."""
    if not path.is_symlink():
        return 0
    return etag_generation(Path(os.readlink(path)).name)
