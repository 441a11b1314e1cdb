"""``hf://`` URLs: a Hugging Face Hub repo (at a revision) is the bucket,
the path in the repo the name.

The forms ``huggingface_hub``'s ``HfFileSystem`` accepts::

    hf://datasets/org/name[@revision]/path
    hf://models/org/name[@revision]/path
    hf://org/name[@revision]/path          (a model)
    hf://spaces/org/name[@revision]/path

A revision is a branch, tag or commit. One with a ``/`` is written
percent-encoded (``@refs%2Fconvert%2Fparquet``), or as written for the
Hub's special refs (``@refs/convert/parquet``, ``@refs/pr/3``), as
``HfFileSystem`` reads them. A repo id is always ``org/name``: the Hub
retired single-segment ids (``gpt2`` is ``openai-community/gpt2``).

The bucket is written one way whatever form named it: the type's plural,
the id, and the revision percent-encoded after ``@``
(``datasets/org/name@refs%2Fconvert%2Fparquet``), so ``hf://`` + bucket +
``/`` + name is a URL that parses back to the same bucket and name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from ..errors import InvalidURL

__all__ = ["HubRepo", "hub_repo", "split_hub_url"]

# The plural prefixes of the repo types (``HfFileSystem``'s).
_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
# The Hub's refs with a "/" that HfFileSystem takes unencoded.
_SPECIAL_REF = re.compile(r"^refs/convert/\w+|^refs/pr/\d+")
# An org or repo name: letters, digits, '-', '_', '.', at most 96 characters.
_PART = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}$")


@dataclass(frozen=True, slots=True)
class HubRepo:
    """A repo on the Hub, at a revision.

    Attributes:
        type: ``model``, ``dataset`` or ``space``.
        id: ``org/name``.
        revision: the branch, tag or commit named (decoded), or None (the
            default branch, ``main``).
    """

    type: str
    id: str
    revision: str | None = None

    @property
    def bucket(self) -> str:
        """The bucket that names this repo and revision (see the module doc)."""
        base = f"{self.type}s/{self.id}"
        return base if self.revision is None else f"{base}@{quote(self.revision, safe='')}"

    @property
    def api_path(self) -> str:
        """``datasets/org/name``: the repo under the Hub's ``/api/``."""
        return f"{self.type}s/{self.id}"

    @property
    def web_path(self) -> str:
        """``datasets/org/name`` (``org/name`` for a model): the repo under
        the Hub's root, where its ``resolve`` URLs are."""
        return self.id if self.type == "model" else f"{self.type}s/{self.id}"


def _repo(kind: str, repo_id: str, revision: str | None, url: str) -> HubRepo:
    org, _, name = repo_id.partition("/")
    if not (_PART.match(org) and _PART.match(name)) or ".." in repo_id or "--" in repo_id:
        raise InvalidURL(f"{url!r}: a Hub repo id is org/name (letters, digits, '-', '_', "
                         f"'.'), got {repo_id!r}")
    if revision is not None and (not revision or "\n" in revision or "\r" in revision):
        raise InvalidURL(f"{url!r}: the revision after '@' is empty or holds a line break")
    return HubRepo(kind, repo_id, revision)


def split_hub_url(body: str, url: str) -> tuple[str, str]:
    """The bucket and name of ``hf://`` + ``body``.

    Args:
        body: what follows ``hf://``.
        url: the whole URL, for messages.

    Returns:
        ``(bucket, name)``: the repo's bucket (:attr:`HubRepo.bucket`) and
        the path in the repo ("" for the repo's root).

    Raises:
        InvalidURL: not a repo the Hub can name.
    """
    location = body.strip("/")
    first, _, rest = location.partition("/")
    kind = _TYPES.get(first)
    if kind is None:
        if first in ("model", "dataset", "space"):
            raise InvalidURL(f"{url!r}: the repo type is plural: hf://{first}s/...")
        if first in ("buckets", "kernels"):
            raise InvalidURL(f"{url!r}: Hub {first} are not served; name a model, dataset or "
                             "space repo")
        kind, rest = "model", location
    at = rest.find("@")
    if at == -1 or rest[:at].count("/") > 1:
        parts = rest.split("/", 2)
        if len(parts) < 2:
            raise InvalidURL(f"{url!r}: a Hub repo is org/name (hf://datasets/org/name/path, "
                             "hf://org/name/path for a model)")
        return _repo(kind, f"{parts[0]}/{parts[1]}", None, url).bucket, "/".join(parts[2:])
    repo_id, after = rest[:at], rest[at + 1:]
    if repo_id.count("/") != 1:
        raise InvalidURL(f"{url!r}: a Hub repo is org/name, got {repo_id!r}")
    special = _SPECIAL_REF.match(after)
    if special is not None:
        revision, name = special.group(), after[special.end():].removeprefix("/")
    else:
        revision, _, name = after.partition("/")
    return _repo(kind, repo_id, unquote(revision), url).bucket, name


def hub_repo(bucket: str) -> HubRepo:
    """The repo a bucket names (as :func:`split_hub_url` writes it).

    Args:
        bucket: ``datasets/org/name[@revision]``.

    Returns:
        The repo.

    Raises:
        InvalidURL: not a Hub bucket.
    """
    first, _, rest = bucket.partition("/")
    kind = _TYPES.get(first)
    repo_id, at, revision = rest.partition("@")
    if kind is None or repo_id.count("/") != 1 or "/" in revision:
        raise InvalidURL(f"{bucket!r} is not a Hub repo's bucket (datasets/org/name, "
                         "models/org/name, with @revision, a '/' in it as %2F)")
    return _repo(kind, repo_id, unquote(revision) if at else None, f"hf://{bucket}")
