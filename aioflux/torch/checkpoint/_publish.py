"""How a ``CheckpointManager`` save becomes a complete checkpoint.

One save, in a saver thread (``save_async``) or the caller's (``save``):
claim the top of the step's folder, check the step against the standing
checkpoints and the ``keep_last`` window, write the state (and the data
state) at the top or into a folder of its own, publish the manifest
create-only (or in place of exactly the one it replaces), then delete what
the new manifest replaced and run retention. ``_manager``'s docstring
tells what each of these guards against.
"""

from __future__ import annotations

import builtins
import datetime as dt
import io
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import torch

from ..._core.errors import Conflict, InvalidArgument, PreconditionFailed
from ..._core.integrity.crc import encode_crc32c
from ..._core.records.types import ObjectInfo
from ..._core.records.urls import format_url
from ..._core.storage.protocol import ObjectStore
from ._checkpoint import Checkpoint, raw_writer, save_into
from ._history import MANIFEST_FORMAT, CheckpointInfo, SaveRecord
from ._retention import CLAIM, DATA_STATE, MANIFEST, REPLACING, CheckpointStore
from ._save_future import SaveFuture

__all__ = ["CheckpointPublishing"]

log = logging.getLogger("aioflux.checkpoint")


def _serialize(data_state: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(data_state), buffer)
    return buffer.getvalue()


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class CheckpointPublishing:
    """What :class:`~._manager.CheckpointManager` does to publish one save
    (its state is the manager's, set up by its ``__init__``)."""

    bucket: str
    root: str
    keep_last: int | None
    compression: str | None
    _client: ObjectStore
    _store: CheckpointStore
    _ckpt: Checkpoint
    # Guards the publications and the saves in flight (``_pending``).
    _cond: threading.Condition
    _pending: dict[SaveFuture, tuple[int, int]]
    _publications: int
    _published_at: dict[int, int]
    _marks: dict[object, int]
    _highest_done: int | None
    _retaining: threading.Lock

    def _url(self, name: str) -> str:
        return format_url(self._client.features.scheme, self.bucket, name)

    @property
    def _state_name(self) -> str:
        return "state.pt.zst" if self.compression == "zstd" else "state.pt"

    def _check_target(self, step: int, overwrite: bool,
                      mark: int) -> tuple[ObjectInfo | None, builtins.list[str]]:
        """Refuse a save that would replace a checkpoint or be deleted at once.

        Steps this manager published since ``mark`` (the save's place in its
        publications) are not in the window it is checked against.

        Returns:
            The manifest an overwrite replaces (None when there is none), and
            the names of the manager's other objects in the step's folder
            now: what that manifest lists and leftovers of killed saves.
        """
        if self.keep_last is None:
            # No window to check: one listing of this step's folder, not of every step.
            objects = self._store.objects_of(step)
        else:
            # One listing (the retention pass lists again once there is more to see).
            dirs = self._store.scan()
            objects = dirs.get(step, {})
            with self._cond:
                later = {s for s, n in self._published_at.items() if n >= mark}
            kept = sorted(s for s, objs in dirs.items()
                          if MANIFEST in objs and s != step and s not in later)
            window = kept[-self.keep_last:]
            if len(window) == self.keep_last and step < window[0]:
                # Before refusing, the manifests are read: a step whose
                # manifest vouches for nothing whole (its objects deleted or
                # cut, its manifest torn) is no checkpoint latest() would
                # resume from, and the run resumed below it must save on
                # (its save of that step replaces it: see below).
                complete = self._store.complete_all({s: dirs[s] for s in kept})
                window = sorted(complete)[-self.keep_last:]
            if len(window) == self.keep_last and step < window[0]:
                raise InvalidArgument(
                    f"save {self.root}: step {step} is below the {self.keep_last} highest "
                    f"steps keep_last keeps ({', '.join(map(str, window))}); retention "
                    "would delete it at once. Delete the newer checkpoints or use a higher step")
        manifest = objects.get(MANIFEST)
        if manifest is not None and not overwrite:
            if self._store.complete(step, objects) is not None:
                raise self._conflict(step)
            # A manifest that vouches for nothing whole: latest() and list()
            # skip the step, so a run resumed from an earlier one comes back
            # to it, and a Conflict there ("already has a checkpoint") ended
            # that run. It is replaced as an overwrite replaces a checkpoint:
            # conditional on this manifest's generation, so another writer
            # publishing there meanwhile still wins.
            log.warning("save %s: step %d has a manifest without the objects it lists "
                        "(an incomplete checkpoint); replacing it", self.root, step)
        return manifest, [obj.name for leaf, obj in objects.items() if leaf != MANIFEST]

    def _claim(self, directory: str) -> str | None:
        """Claim the top of a step's folder for this save: the create-only
        write of a small ``claim.json`` (host, process, time).

        Two processes saving one step (a preempted job still saving while
        its replacement runs) both find no manifest there; without a claim
        the later one's ``state.pt`` would land over the one the earlier
        one's manifest vouches for, and that checkpoint would be lost.

        Returns:
            The claim's object name, or None when another save holds it (one
            in flight, or one killed before it could drop its claim).
        """
        name = directory + CLAIM
        body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "created": _now(),
                           "token": secrets.token_hex(8)}).encode()
        try:
            self._store.call(self._client.write(self.bucket, name, body,
                                                content_type="application/json",
                                                if_generation_match=0))
        except PreconditionFailed:
            return None
        return name

    def _conflict(self, step: int) -> Conflict:
        return Conflict(f"save {self.root}: step {step} already has a checkpoint; pass "
                        "overwrite=True to replace it", operation="save checkpoint",
                        bucket=self.bucket, name=self._store.step_dir(step))

    def _persist(self, state: Any, step: int, started: float, blocking: float | None,
                 overwrite: bool, data_state: Mapping[str, Any] | None,
                 mark: int) -> CheckpointInfo:
        directory = self._store.step_dir(step)
        serialized = 0
        claim: str | None = None
        try:
            # Claimed before the check, so a save that claims after another
            # has published (and dropped its claim) sees that manifest.
            claim = self._claim(directory)
            replaced, earlier = self._check_target(step, overwrite, mark)
            # Only the save holding the claim writes at the top of the step's
            # folder. An overwrite must not touch what the standing manifest
            # lists, and a save without the claim must not publish over the
            # objects of another save of this step (in flight, or killed):
            # their objects go into a folder of their own.
            own_folder = replaced is not None or claim is None
            folder = f"{REPLACING}{secrets.token_hex(8)}/" if own_folder else ""
            writer = self._ckpt.writer(self._url(directory + folder + self._state_name),
                                       compression=self.compression)
            with writer:
                save_into(state, writer)
                serialized = writer.tell()
            stored = raw_writer(writer).info
            assert stored is not None
            leaves = {folder + self._state_name: stored}
            if data_state is not None:
                # Listed in the manifest like state.pt: a checkpoint whose
                # data position is missing or torn is not complete.
                leaves[folder + DATA_STATE] = self._store.call(self._client.write(
                    self.bucket, directory + folder + DATA_STATE, _serialize(data_state)))
            created = _now()
            manifest = {"format": MANIFEST_FORMAT, "step": step, "created": created,
                        "compression": self.compression,
                        "objects": [{"name": leaf, "size": obj.size,
                                     "crc32c": encode_crc32c(obj.crc32c or 0)}
                                    for leaf, obj in leaves.items()]}
            # Create-only (If-None-Match: * on S3, ifGenerationMatch=0 on
            # GCS), or in place of exactly the manifest replaced (If-Match,
            # ifGenerationMatch): another writer's is never replaced silently.
            try:
                self._store.call(self._client.write(
                    self.bucket, directory + MANIFEST, json.dumps(manifest).encode(),
                    content_type="application/json",
                    if_generation_match=0 if replaced is None else replaced.generation))
            except PreconditionFailed as exc:
                # Another save of this step published or swapped its manifest
                # first (the store already told a retry of our own write from
                # it): the documented Conflict, not the manifest's 412. What
                # this save wrote is nobody else's (a folder of its own, or
                # the top of the folder under its claim: the winner's objects
                # are in a folder then), and no manifest will list it.
                self._store.delete_quietly([directory + leaf for leaf in leaves])
                raise Conflict(f"save {self.root}: step {step} was saved by another writer "
                               "while this save ran", operation="save checkpoint",
                               bucket=self.bucket, name=directory + MANIFEST) from exc
            with self._cond:
                self._published_at[step] = self._publications
                self._publications += 1
        except BaseException as exc:
            if claim is not None and isinstance(exc, Exception):
                # The next save of this step may write at the top again (a
                # claim is in no manifest: dropping it never breaks a checkpoint).
                self._store.delete_quietly([claim])
            total = time.perf_counter() - started
            self._store.append_history(SaveRecord(
                step, False, serialized, 0, total if blocking is None else blocking, total,
                0.0, _now(), self.compression, f"{type(exc).__name__}: {exc}"))
            raise
        total = time.perf_counter() - started
        info = CheckpointInfo(step, self._url(directory), created,
                              sum(o.size for o in leaves.values()),
                              {leaf: o.size for leaf, o in leaves.items()}, self.compression)
        self._store.append_history(SaveRecord(
            step, True, serialized, stored.size, total if blocking is None else blocking, total,
            serialized / total / 1e6 if total else 0.0, created, self.compression))
        # What the new manifest replaced, and leftovers of killed or failed
        # saves of this step (a data_state.pt the new manifest does not list,
        # an earlier overwrite's folder): in a checkpoint that is kept they
        # would stay for good. Never what this save wrote, nor an object
        # that appeared since the check (another writer's, which loses at
        # its manifest). And the claim: a save claiming after this manifest
        # sees it.
        mine = {directory + leaf for leaf in leaves}
        doomed = [name for name in earlier if name not in mine and name != claim]
        self._store.delete_quietly(doomed if claim is None else [*doomed, claim])
        with self._retaining:
            with self._cond:
                # Saves in flight are spared until they publish; this one is
                # complete. One that published but is still finishing (its
                # history line, its own pass) is complete too: spared, it
                # would be kept for good when its own pass ran before a newer
                # step published (keep_last=2 ending with 3 kept).
                busy = {s for future, (s, _) in self._pending.items()
                        if self._published_at.get(s, -1) < self._marks.get(future, 0)} - {step}
                if self._highest_done is None or step > self._highest_done:
                    self._highest_done = step
                newest = self._highest_done
            try:
                self._store.retain(newest, self.keep_last, busy)
            except Exception as exc:
                # The checkpoint is complete (its history line says so):
                # failing its save for an older one that could not be
                # deleted made save() raise, and a retry of the step a
                # Conflict. What stays is deleted by a later pass.
                log.error("save %s: step %d is saved, but retention could not delete older "
                          "checkpoints (a later save tries again): %s: %s", self.root, step,
                          type(exc).__name__, exc)
        return info
