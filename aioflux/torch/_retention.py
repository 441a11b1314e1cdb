"""What a checkpoint root holds: listing, validation, retention, history.

Split from ``_manager.py`` so that read-only users (``aioflux ckpt list``,
``aioflux ckpt history``) can inspect a root without a manager's worker
threads, and so the manager keeps only the saving and loading logic.

Layout under a root ``gs://bucket/prefix/``::

    step-000000000100/state.pt        (state.pt.zst with zstd)
    step-000000000100/manifest.json   written last: makes the checkpoint visible
    history.jsonl                     one SaveRecord per save

A checkpoint is complete only if its manifest parses and every object it
lists is stored with the listed size and crc32c.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Collection, Coroutine
from typing import Any, TypeVar

from .._core.crc import decode_crc32c
from .._core.errors import NotFound
from .._core.portal import get_portal
from .._core.store import ObjectStore, delete_all
from .._core.types import ObjectInfo
from .._core.urls import format_url
from ._history import CheckpointInfo, SaveRecord

__all__ = ["HISTORY", "MANIFEST", "CheckpointStore", "steps_to_delete"]

log = logging.getLogger("aioflux.checkpoint")

MANIFEST = "manifest.json"
HISTORY = "history.jsonl"
_STEP = "step-"
# Deletes in flight when a store deletes one object per request.
_DELETES_IN_FLIGHT = 16

T = TypeVar("T")

# step -> object name relative to the step directory -> its metadata
StepDirs = dict[int, dict[str, ObjectInfo]]


def steps_to_delete(steps: Collection[int], complete: list[int], keep_last: int | None,
                    busy: Collection[int], newest: int) -> list[int]:
    """Which step directories a retention pass removes.

    Kept: the ``keep_last`` newest complete checkpoints (all of them for
    ``None``), steps whose save is still in flight, and everything at or
    above ``newest`` (a directory without a manifest there may be a save in
    progress elsewhere). Everything else is either an old complete
    checkpoint or the leftover of a killed save.

    Args:
        steps: every step directory found.
        complete: the complete steps, ascending.
        keep_last: complete checkpoints to keep, or None for all.
        busy: steps with a save in flight in this process.
        newest: the step just saved.

    Returns:
        The steps to delete, ascending.
    """
    keep = set(complete if keep_last is None else complete[-keep_last:])
    return sorted(s for s in steps if s not in keep and s not in busy and s < newest)


class CheckpointStore:
    """Blocking access to the objects under one checkpoint root.

    Every method drives ``client`` on the portal loop, so it must not be
    called from that loop's thread.

    Args:
        client: the store.
        bucket: bucket name.
        prefix: the root's prefix, empty or ending with ``/``.
    """

    def __init__(self, client: ObjectStore, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    @property
    def root(self) -> str:
        """``gs://bucket/prefix/`` (``file:///...`` on the filesystem)."""
        return format_url(self.client.features.scheme, self.bucket, self.prefix)

    def step_dir(self, step: int) -> str:
        """Object-name prefix of ``step``'s directory (ends with ``/``).

        Args:
            step: training step.

        Returns:
            The prefix.
        """
        return f"{self.prefix}{_STEP}{step:012d}/"

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal loop and wait for it.

        Args:
            coro: a coroutine using :attr:`client`.

        Returns:
            Its result.
        """
        return get_portal().call(coro)

    def scan(self) -> StepDirs:
        """Every object under a ``step-N/`` directory, grouped by step.

        Returns:
            step -> leaf name -> ObjectInfo.

        Raises:
            StorageError: listing failed.
        """

        async def collect() -> list[ObjectInfo]:
            return [o async for o in self.client.list_objects(self.bucket, self.prefix + _STEP)]

        dirs: StepDirs = {}
        for obj in self.call(collect()):
            rest = obj.name[len(self.prefix) + len(_STEP):]
            number, slash, leaf = rest.partition("/")
            if slash and number.isdigit() and leaf:
                dirs.setdefault(int(number), {})[leaf] = obj
        return dirs

    def complete(self, step: int, objects: dict[str, ObjectInfo]) -> CheckpointInfo | None:
        """The checkpoint at ``step`` if its manifest vouches for ``objects``.

        Args:
            step: training step.
            objects: what :meth:`scan` found in its directory.

        Returns:
            Its CheckpointInfo, or None if it is incomplete or unreadable.

        Raises:
            StorageError: reading the manifest failed for another reason
                than its absence.
        """
        manifest_obj = objects.get(MANIFEST)
        if manifest_obj is None:
            return None
        try:
            raw = self.call(self.client.read(self.bucket, manifest_obj.name))
            manifest = json.loads(raw)
            listed = {o["name"]: (int(o["size"]), decode_crc32c(o["crc32c"]))
                      for o in manifest["objects"]}
        except (NotFound, ValueError, KeyError, TypeError):
            # Deleted under us, or not a manifest this version wrote.
            return None
        for leaf, (size, crc) in listed.items():
            stored = objects.get(leaf)
            if stored is None or stored.size != size or (
                    stored.crc32c is not None and stored.crc32c != crc):
                return None
        url = format_url(self.client.features.scheme, self.bucket, self.step_dir(step))
        return CheckpointInfo(step, url,
                              str(manifest.get("created", "")),
                              sum(s for s, _ in listed.values()),
                              {k: s for k, (s, _) in listed.items()},
                              manifest.get("compression"))

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first.

        Returns:
            CheckpointInfo per complete checkpoint.

        Raises:
            StorageError: listing failed.
        """
        dirs = self.scan()
        found = (self.complete(s, dirs[s]) for s in sorted(dirs))
        return [c for c in found if c is not None]

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint.

        Returns:
            Its CheckpointInfo, or None if there is none.

        Raises:
            StorageError: listing failed.
        """
        dirs = self.scan()
        for step in sorted(dirs, reverse=True):
            info = self.complete(step, dirs[step])
            if info is not None:
                return info
        return None

    def get(self, step: int) -> CheckpointInfo | None:
        """The complete checkpoint at ``step``.

        Args:
            step: training step.

        Returns:
            Its CheckpointInfo, or None if there is no complete one.

        Raises:
            StorageError: listing failed.
        """
        return self.complete(step, self.scan().get(step, {}))

    def delete_quietly(self, name: str) -> None:
        """Delete object ``name``; one already gone is fine.

        Args:
            name: object name.

        Raises:
            StorageError: the delete failed.
        """
        self.call(self.client.delete(self.bucket, name, missing_ok=True))

    def retain(self, newest: int, keep_last: int | None,
               busy: Collection[int]) -> builtins.list[int]:
        """Delete old checkpoints and leftovers of killed saves.

        Args:
            newest: the step just saved (nothing at or above it is touched).
            keep_last: complete checkpoints to keep, or None for all.
            busy: steps with a save still in flight.

        Returns:
            The steps deleted.

        Raises:
            StorageError: listing or a delete failed.
        """
        dirs = self.scan()
        complete = [s for s in sorted(dirs) if self.complete(s, dirs[s]) is not None]
        doomed = steps_to_delete(dirs, complete, keep_last, busy, newest)
        rest: builtins.list[str] = []
        for step in doomed:
            # Manifests first: a half-deleted checkpoint is then invisible.
            objects = dirs[step]
            if MANIFEST in objects:
                self.delete_quietly(objects.pop(MANIFEST).name)
            rest.extend(obj.name for obj in objects.values())
        # Then the rest at once: in batches where the store has them (S3).
        self.call(delete_all(self.client, self.bucket, rest, concurrency=_DELETES_IN_FLIGHT))
        return doomed

    def append_history(self, record: SaveRecord) -> None:
        """Append one line to ``history.jsonl``; failures are only logged.

        The history is a read-modify-write of one small object: the manager
        saves one step at a time per root, so there is no concurrent writer.

        Args:
            record: the save to record.
        """
        name = self.prefix + HISTORY
        try:
            try:
                old = self.call(self.client.read(self.bucket, name))
            except NotFound:
                old = b""
            line = (record.to_json() + "\n").encode()
            self.call(self.client.write(self.bucket, name, old + line,
                                        content_type="application/x-ndjson"))
        except Exception as exc:
            # The checkpoint itself is what matters; a lost history line is not.
            log.warning("could not append to %s%s: %s", self.root, HISTORY, exc)

    def history(self) -> builtins.list[SaveRecord]:
        """Every recorded save, oldest first.

        Returns:
            SaveRecord per save (empty if there is no history yet).

        Raises:
            StorageError: reading failed.
            ValueError: a history line is not valid JSON.
        """
        try:
            raw = self.call(self.client.read(self.bucket, self.prefix + HISTORY))
        except NotFound:
            return []
        return [SaveRecord.from_json(line) for line in raw.decode().splitlines() if line.strip()]
