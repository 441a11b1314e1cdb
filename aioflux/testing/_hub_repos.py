"""The fake Hub's repositories: commits of whole file trees, branches that
move on a push, and the records the Hub's APIs answer with.

A commit is immutable: a push makes a new one, so what a commit names
stays readable after its branch moved on (as on the Hub). A file at or
over ``lfs_threshold`` bytes is an LFS file: its ``resolve`` answers with
a redirect to the CDN, which serves it by its SHA-256.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Blob", "Repo", "Repos", "git_oid"]

REPO_TYPES = ("model", "dataset", "space")


def git_oid(data: bytes) -> str:
    """The git blob id of ``data`` (what the Hub's ``oid`` is)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True, slots=True)
class Blob:
    """One file's bytes and the ids the Hub gives them."""

    data: bytes
    oid: str
    sha256: str
    lfs: bool

    @classmethod
    def of(cls, data: bytes, lfs_threshold: int) -> Blob:
        return cls(data, git_oid(data), hashlib.sha256(data).hexdigest(),
                   len(data) >= lfs_threshold)

    @property
    def etag(self) -> str:
        """The ETag ``resolve`` states (``X-Linked-Etag`` of an LFS file)."""
        return f'"{self.sha256 if self.lfs else self.oid}"'

    def entry(self, path: str) -> dict[str, object]:
        """The tree API's record of this file at ``path``."""
        record: dict[str, object] = {"type": "file", "oid": self.oid, "size": len(self.data),
                                     "path": path}
        if self.lfs:
            record["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": 134}
        return record


@dataclass
class Repo:
    """A repository: its commits (sha -> files) and branches (name -> sha).

    ``private``: unseen without a token; ``gated``: its files need a token,
    one of ``granted`` if that is not None.
    """

    type: str
    id: str
    private: bool = False
    gated: bool = False
    granted: set[str] | None = None
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)

    def commit_of(self, revision: str) -> str | None:
        """The commit a branch or a commit sha names, or None."""
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None

    def info(self, sha: str) -> dict[str, object]:
        """The repo info API's record at commit ``sha``."""
        return {"id": self.id, "_id": self.id, "sha": sha, "private": self.private,
                "gated": "auto" if self.gated else False, "disabled": False,
                "downloads": 0, "likes": 0, "tags": [], "author": self.id.split("/")[0],
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": path} for path in sorted(self.commits[sha])]}

    def entries(self, sha: str, folder: str, recursive: bool) -> list[dict[str, object]]:
        """The tree API's records under ``folder`` ("" the root) at ``sha``:
        files and folders of that level (all levels when ``recursive``),
        sorted by path."""
        files = self.commits[sha]
        base = f"{folder}/" if folder else ""
        found: dict[str, dict[str, object]] = {}
        for path, blob in files.items():
            if not path.startswith(base):
                continue
            rest = path[len(base):].split("/")
            for depth in range(1, len(rest)):
                if depth > 1 and not recursive:
                    break
                sub = base + "/".join(rest[:depth])
                found.setdefault(sub, {"type": "directory", "size": 0, "path": sub,
                                       "oid": git_oid(sub.encode())})
            if recursive or len(rest) == 1:
                found[path] = blob.entry(path)
        return [found[key] for key in sorted(found)]

    def is_folder(self, sha: str, path: str) -> bool:
        return any(name.startswith(path + "/") for name in self.commits[sha])


class Repos:
    """Every repository the fake Hub serves (safe to change from any thread).

    Args:
        lfs_threshold: files at least this large are LFS files.
    """

    def __init__(self, lfs_threshold: int = 1024) -> None:
        self.lfs_threshold = lfs_threshold
        self.lock = threading.Lock()
        self._repos: dict[tuple[str, str], Repo] = {}
        self._blobs: dict[str, Blob] = {}  # LFS files by SHA-256 (the CDN's)
        self._counter = itertools.count(1)

    def create(self, repo_id: str, *, repo_type: str = "dataset", private: bool = False,
               gated: bool = False) -> Repo:
        if repo_type not in REPO_TYPES or repo_id.count("/") != 1:
            raise ValueError(f"a repo is a {'/'.join(REPO_TYPES)} named org/name, got "
                             f"{repo_type} {repo_id!r}")
        with self.lock:
            repo = Repo(repo_type, repo_id, private, gated)
            self._repos[(repo_type, repo_id)] = repo
            sha = self._new_sha(repo_id)
            repo.commits[sha] = {}
            repo.branches["main"] = sha
            return repo

    def push(self, repo_id: str, files: Mapping[str, bytes | None], *,
             repo_type: str = "dataset", branch: str = "main") -> str:
        """A new commit on ``branch``: ``files`` added or replaced (None
        deletes); the branch is made from ``main`` if new. Returns its sha."""
        with self.lock:
            repo = self._repos[(repo_type, repo_id)]
            parent = repo.branches.get(branch, repo.branches["main"])
            tree = dict(repo.commits[parent])
            for path, data in files.items():
                if data is None:
                    tree.pop(path, None)
                    continue
                blob = Blob.of(bytes(data), self.lfs_threshold)
                tree[path] = blob
                if blob.lfs:
                    self._blobs[blob.sha256] = blob
            sha = self._new_sha(repo_id)
            repo.commits[sha] = tree
            repo.branches[branch] = sha
            return sha

    def get(self, repo_type: str, repo_id: str) -> Repo | None:
        return self._repos.get((repo_type, repo_id))

    def blob(self, sha256: str) -> Blob | None:
        return self._blobs.get(sha256)

    def _new_sha(self, repo_id: str) -> str:
        return hashlib.sha1(f"{repo_id} {next(self._counter)}".encode()).hexdigest()
