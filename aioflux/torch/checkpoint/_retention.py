"""What a checkpoint root holds: listing, validation, retention, history.

Split from ``_manager.py`` so that read-only users (``aioflux ckpt list``,
``aioflux ckpt history``) can inspect a root without a manager's worker
threads, and so the manager (and its ``_publish`` and ``_restore``) keeps
only the saving and loading logic.

Layout under a root ``gs://bucket/prefix/``::

    step-000000000100/state.pt        (state.pt.zst with zstd)
    step-000000000100/data_state.pt   the data position, if given
    step-000000000100/manifest.json   written last: makes the checkpoint visible
    step-000000000100/replace-<16 hex>/state.pt   an overwrite's objects
    history.jsonl                     one SaveRecord per save

A checkpoint is complete only if its manifest parses and every object it
lists is stored with the listed size and crc32c.

Only what a manager writes is its own: a folder named ``step-`` and the
twelve digits it formats a step with, and in it the leaf names above.
Retention deletes nothing else, so a DCP checkpoint in ``run/step-100/``
or a file a user put beside the state survives.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import logging
import re
import threading
from collections.abc import Collection, Coroutine
from typing import Any, TypeVar

from ..._core.concurrency.portal import get_portal
from ..._core.concurrency.window import gather_bounded
from ..._core.errors import ChecksumMismatch, Conflict, InvalidURL, NotFound, PreconditionFailed
from ..._core.integrity.crc import decode_crc32c
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url
from ..._core.storage.protocol import ObjectStore, delete_all
from ._history import CheckpointInfo, SaveRecord

__all__ = ["CLAIM", "DATA_STATE", "HISTORY", "MANIFEST", "REPLACING", "CheckpointStore",
           "leaf_named", "root_prefix", "steps_to_delete"]

log = logging.getLogger("aioflux.checkpoint")

MANIFEST = "manifest.json"
HISTORY = "history.jsonl"
DATA_STATE = "data_state.pt"
# An overwrite writes its objects into a folder of its own inside the step's
# (REPLACING + 16 hex digits), so the checkpoint it replaces stands until its
# manifest is swapped for the new one.
REPLACING = "replace-"
# The create-only object by which a save claims the top of a step's folder
# (CheckpointManager._claim); in no manifest.
CLAIM = "claim.json"
_STEP = "step-"
_OWN_LEAF = re.compile(rf"(?:{re.escape(REPLACING)}[0-9a-f]{{16}}/)?"
                       rf"(?:state\.pt|state\.pt\.zst|{re.escape(DATA_STATE)})"
                       rf"|{re.escape(MANIFEST)}|{re.escape(CLAIM)}")
# A claim younger than this marks a save in flight, in this process or
# another (a preempted job still saving while its replacement runs):
# retention spares its step. An older one is a killed save's leftover.
# Generous against the longest save and the hosts' clocks' skew.
CLAIM_GRACE_S = 6 * 3600.0
# Reads and conditional writes of the history before its line is given up.
_APPEND_ATTEMPTS = 8
# Deletes in flight when a store deletes one object per request.
_DELETES_IN_FLIGHT = 16
# Manifest reads in flight in a retention pass or a listing.
_READS_IN_FLIGHT = 16

T = TypeVar("T")

# step -> object name relative to the step directory -> its metadata
StepDirs = dict[int, dict[str, ObjectInfo]]


def _step_of(folder: str) -> int | None:
    """The step a folder name after ``step-`` stands for, if a manager
    wrote it: exactly the digits ``step_dir`` formats (``step-100`` is
    someone else's, a DCP checkpoint's say)."""
    if folder.isdigit() and folder == f"{int(folder):012d}":
        return int(folder)
    return None


def leaf_named(objects: Collection[str], base: str) -> str | None:
    """The object of a checkpoint whose leaf name is ``base`` (``state.pt``
    at the top of the step's folder, or in an overwrite's folder).

    Args:
        objects: the names a manifest lists, relative to the step's folder.
        base: the leaf name wanted, or its start (``state.pt`` matches
            ``state.pt.zst``).

    Returns:
        The listed name, or None.
    """
    for name in objects:
        if name.rpartition("/")[2].startswith(base):
            return name
    return None


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


def root_prefix(url: str, prefix: str) -> str:
    """The object-name prefix of a checkpoint root: ``prefix`` ending with
    one ``/``, or empty for a whole bucket.

    Only trailing slashes go: ``gs://b//run`` names objects ``/run/...`` (a
    legal, if odd, name), and writing under ``run/`` instead would be
    writing under a name the user did not give.

    Args:
        url: the root as given, for messages.
        prefix: its object-name prefix (``StoreURL``'s).

    Raises:
        InvalidURL: the prefix is slashes only (``gs://b///``): neither the
            bucket's root nor a name.
    """
    kept = prefix.rstrip("/")
    if prefix and not kept:
        raise InvalidURL(f"checkpoint root {url!r} names only slashes; name the bucket "
                         "(gs://bucket) or a folder in it (gs://bucket/run)")
    return kept + "/" if kept else ""


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
        # Background saves (max_pending > 1) append to the history at once.
        self._history_lock = threading.Lock()

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
        """Every object a manager writes under a step's directory, grouped by
        step; folders and objects of other names are not a manager's.

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
            folder, _, leaf = rest.partition("/")
            step = _step_of(folder)
            if step is not None and _OWN_LEAF.fullmatch(leaf):
                dirs.setdefault(step, {})[leaf] = obj
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
        return self.call(self._complete(step, objects))

    def complete_all(self, dirs: StepDirs) -> dict[int, CheckpointInfo]:
        """:meth:`complete` for every step of ``dirs``, their manifests read
        concurrently (a root with a thousand checkpoints and no ``keep_last``
        is read by every retention pass: one after another, 20 s at 20 ms a
        read).

        Args:
            dirs: what :meth:`scan` found.

        Returns:
            step -> CheckpointInfo, for the complete steps only.

        Raises:
            StorageError: reading a manifest failed for another reason
                than its absence.
        """
        found = self.call(gather_bounded((self._complete(step, objects)
                                          for step, objects in dirs.items()),
                                         _READS_IN_FLIGHT))
        return {info.step: info for info in found if info is not None}

    def vouched(self, step: int | None, operation: str = "load checkpoint"
                ) -> tuple[CheckpointInfo, dict[str, int]] | None:
        """The complete checkpoint at ``step`` (the highest for None), with
        the crc32c its manifest records for each object.

        A store that keeps no crc32c of its own for an object (a local file
        copied by ``cp -r``, its extended attributes dropped) cannot check
        the bytes read; the manifest's crc32c then must.

        Args:
            step: training step, or None for the latest.
            operation: what the caller does, for the error's message.

        Returns:
            ``(CheckpointInfo, leaf name -> crc32c)``, or None if there is no
            complete checkpoint (at that step).

        Raises:
            ChecksumMismatch: an object its manifest lists is there but
                differs from what the manifest records (see :meth:`_vouched`);
                for None, of the newest step that has all its objects.
            StorageError: listing or reading the manifest failed.
        """
        dirs = self.scan()
        for at in sorted(dirs, reverse=True) if step is None else [step]:
            found = self.call(self._vouched(at, dirs.get(at, {}), operation=operation))
            if found is not None:
                return found
        return None

    async def _complete(self, step: int,
                        objects: dict[str, ObjectInfo]) -> CheckpointInfo | None:
        found = await self._vouched(step, objects)
        return None if found is None else found[0]

    async def _vouched(self, step: int, objects: dict[str, ObjectInfo], *,
                       operation: str | None = None
                       ) -> tuple[CheckpointInfo, dict[str, int]] | None:
        """The step's checkpoint and its manifest's crc32c of each object, or
        None where the manifest vouches for nothing whole (a save, a
        deletion or a copy part-way). With ``operation`` (a load, or
        ``latest()``), an object the manifest lists at its size whose stored
        crc32c is not the one recorded is a ``ChecksumMismatch``: the
        checkpoint was changed after it was saved, and an earlier step put
        in its place unasked would resume training from the wrong state. The
        manager never writes over what a standing manifest lists (an
        overwrite writes beside it), so only damage, or another tool, makes
        it so. Retention and ``list()`` skip such a step as incomplete."""
        manifest_obj = objects.get(MANIFEST)
        if manifest_obj is None:
            return None
        try:
            raw = await self.client.read(self.bucket, manifest_obj.name)
            manifest = json.loads(raw)
            listed = {o["name"]: (int(o["size"]), decode_crc32c(o["crc32c"]))
                      for o in manifest["objects"]}
        except (NotFound, ValueError, KeyError, TypeError):
            # Deleted under us, or not a manifest this version wrote.
            return None
        for leaf, (size, crc) in listed.items():
            stored = objects.get(leaf)
            # Missing or of another size: a save, a deletion or a copy of
            # the root part-way (a resumed run saves over it).
            if stored is None or stored.size != size:
                return None
            # An object the store keeps no crc32c for passes on its size
            # here; its load checks the bytes against the manifest's.
            if stored.crc32c is not None and stored.crc32c != crc:
                if operation is None:
                    return None
                raise self._changed(operation, step, stored, crc)
        url = format_url(self.client.features.scheme, self.bucket, self.step_dir(step))
        info = CheckpointInfo(step, url,
                              str(manifest.get("created", "")),
                              sum(s for s, _ in listed.values()),
                              {k: s for k, (s, _) in listed.items()},
                              manifest.get("compression"))
        return info, {k: c for k, (_, c) in listed.items()}

    def _changed(self, operation: str, step: int, stored: ObjectInfo,
                 crc: int) -> ChecksumMismatch:
        url = format_url(self.client.features.scheme, self.bucket, stored.name)
        return ChecksumMismatch(
            f"{operation} {url}: step {step}'s object has crc32c {stored.crc32c:08x} where "
            f"its manifest records {crc:08x}: it was changed or damaged after the checkpoint "
            "was saved. Load another step (load(step=...)), or delete this step's folder to "
            "resume from the one before", operation=operation, bucket=self.bucket,
            name=stored.name)

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first.

        Returns:
            CheckpointInfo per complete checkpoint.

        Raises:
            StorageError: listing failed.
        """
        found = self.complete_all(self.scan())
        return [found[s] for s in sorted(found)]

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint.

        Returns:
            Its CheckpointInfo, or None if there is none.

        Raises:
            ChecksumMismatch: an object of the newest checkpoint is not what
                its manifest records (as :meth:`vouched`).
            StorageError: listing failed.
        """
        found = self.vouched(None, operation="latest checkpoint")
        return None if found is None else found[0]

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

    def objects_of(self, step: int) -> dict[str, ObjectInfo]:
        """The manager's objects in ``step``'s folder, as :meth:`scan` finds them.

        Args:
            step: training step.

        Returns:
            leaf name -> ObjectInfo (the manifest's generation is the one a
            replacement must match).

        Raises:
            StorageError: listing failed.
        """
        prefix = self.step_dir(step)

        async def collect() -> list[ObjectInfo]:
            return [o async for o in self.client.list_objects(self.bucket, prefix)]

        return {leaf: obj for obj in self.call(collect())
                if _OWN_LEAF.fullmatch(leaf := obj.name[len(prefix):])}

    def delete_quietly(self, names: Collection[str]) -> None:
        """Delete objects a save no longer needs; a failure is only logged
        (they are leftovers the next save of the step or retention removes).

        Args:
            names: object names.
        """
        try:
            self.call(delete_all(self.client, self.bucket, list(names),
                                 concurrency=_DELETES_IN_FLIGHT))
        except Exception as exc:
            log.warning("could not delete %d leftover object(s) under %s: %s",
                        len(names), self.root, exc)

    def retain(self, newest: int, keep_last: int | None,
               busy: Collection[int]) -> builtins.list[int]:
        """Delete old checkpoints and leftovers of killed saves.

        Args:
            newest: the highest step saved (nothing at or above it is touched).
            keep_last: complete checkpoints to keep, or None for all.
            busy: steps with a save still in flight.

        Returns:
            The steps deleted.

        Raises:
            StorageError: listing or a delete failed (the first failure,
                once every other step was dealt with).
        """
        dirs = self.scan()
        complete = sorted(self.complete_all(dirs))
        doomed = steps_to_delete(dirs, complete, keep_last, busy, newest)
        done = set(complete)
        doomed = [step for step in doomed if step in done or not self._claimed_now(dirs[step])]
        rest: builtins.list[str] = []
        failure: Exception | None = None
        for step in doomed:
            # Manifests first: a half-deleted checkpoint is then invisible.
            objects = dirs[step]
            if MANIFEST in objects:
                try:
                    self.call(self.client.delete(self.bucket, objects.pop(MANIFEST).name,
                                                 missing_ok=True))
                except Exception as exc:
                    # That checkpoint stays whole; the steps after it still
                    # go (one step whose objects may not be deleted, under a
                    # retention lock say, stopped every later pass at it).
                    failure = failure or exc
                    continue
            rest.extend(obj.name for obj in objects.values())
        # Then the rest at once: in batches where the store has them (S3).
        self.call(delete_all(self.client, self.bucket, rest, concurrency=_DELETES_IN_FLIGHT))
        if failure is not None:
            raise failure
        return doomed

    def _claimed_now(self, objects: dict[str, ObjectInfo]) -> bool:
        """Whether an incomplete step holds a claim younger than
        :data:`CLAIM_GRACE_S`: another process's save in flight, whose
        objects a pass must not delete before it writes its manifest."""
        claim = objects.get(CLAIM)
        if claim is None:
            return False
        try:
            body = json.loads(self.call(self.client.read(self.bucket, claim.name)))
            created = dt.datetime.fromisoformat(body["created"])
            age = (dt.datetime.now(dt.timezone.utc) - created).total_seconds()
        except NotFound:
            # Dropped since the listing: its save has just published (its
            # manifest unseen by the scan) or given up. A later pass decides.
            return True
        except (ValueError, KeyError, TypeError):
            return False  # not a claim a manager wrote (a time without its zone)
        return age < CLAIM_GRACE_S

    def append_history(self, record: SaveRecord) -> None:
        """Append one line to ``history.jsonl``; failures are only logged.

        The history is a read-modify-write of one small object: appends
        from this store's background saves take turns, and each is written
        over exactly the version it read, so another process's manager
        appending meanwhile makes it read again.

        Args:
            record: the save to record.
        """
        name = self.prefix + HISTORY
        with self._history_lock:
            self._append(name, record)

    def _append(self, name: str, record: SaveRecord) -> None:
        line = (record.to_json() + "\n").encode()
        try:
            for _ in range(_APPEND_ATTEMPTS):
                # Written over exactly the version read: another process's
                # manager appending meanwhile makes this one read again, not
                # drop its line (the last writer's file won).
                try:
                    info = self.call(self.client.stat(self.bucket, name))
                    old = self.call(self.client.read(self.bucket, name,
                                                     generation=info.generation))
                    generation = info.generation
                except NotFound:
                    old, generation = b"", 0
                try:
                    self.call(self.client.write(self.bucket, name, old + line,
                                                content_type="application/x-ndjson",
                                                if_generation_match=generation))
                    return
                except PreconditionFailed:
                    continue
            raise Conflict(f"{_APPEND_ATTEMPTS} other appends came first",
                           operation="write", bucket=self.bucket, name=name)
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
