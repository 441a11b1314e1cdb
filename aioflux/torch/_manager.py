"""``CheckpointManager``: background saves, manifests, retention, history.

Layout under ``root`` (``gs://bucket/run1``)::

    run1/step-000000000100/state.pt        torch.save output (state.pt.zst with zstd)
    run1/step-000000000100/manifest.json   written last: makes the checkpoint visible
    run1/history.jsonl                     one SaveRecord per save

A checkpoint counts only if its manifest exists and every object it lists
is stored with the listed size and crc32c; a save killed at any point leaves
at most objects without a manifest, which ``list``/``latest`` ignore and the
next retention pass deletes. Retention runs only after a newer manifest is
written, so a complete checkpoint always survives.
"""

from __future__ import annotations

import builtins
import concurrent.futures
import datetime as dt
import json
import logging
import threading
import time
from typing import Any

import torch

from .._bridge import get_portal
from .._client import AsyncClient
from .._crc import decode_crc32c, encode_crc32c
from .._errors import InvalidArgument, NotFound
from .._sync import Client
from .._types import ObjectInfo
from .._urls import parse_url
from .._writer import DEFAULT_MAX_IN_FLIGHT, DEFAULT_PART_SIZE
from ._checkpoint import Checkpoint, raw_writer
from ._history import MANIFEST_FORMAT, CheckpointInfo, SaveRecord
from ._snapshot import snapshot, state_nbytes

__all__ = ["CheckpointManager", "SaveFuture"]

log = logging.getLogger("aioflux.checkpoint")
_MANIFEST = "manifest.json"
_HISTORY = "history.jsonl"


class SaveFuture(concurrent.futures.Future[CheckpointInfo]):
    """Future of a background save; it remembers whether its outcome was
    looked at, so an unobserved failure is raised by the next save."""

    observed = False

    def result(self, timeout: float | None = None) -> CheckpointInfo:
        self.observed = True
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.observed = True
        return super().exception(timeout)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class CheckpointManager:
    """Saves training state under ``root`` and restores the latest complete one.

    Args:
        root: ``gs://bucket/prefix`` of the run.
        keep_last: complete checkpoints to keep (``None`` keeps all).
        compression: ``None`` or ``"zstd"``.
        client: AsyncClient or Client (default: the process-wide client).
        max_pending: background saves in flight at once.
        when_busy: ``"wait"`` (block until a slot frees) or ``"raise"``
            when ``max_pending`` saves are in flight.
        memory_budget: bytes of host memory snapshots may hold at once
            (``None``: unlimited).
        part_size: writer part size.
        max_in_flight: writer parts in flight per save.

    Raises:
        InvalidURL: bad root.
        InvalidArgument: bad settings.
    """

    def __init__(self, root: str, *, keep_last: int | None = None,
                 compression: str | None = None, client: AsyncClient | Client | None = None,
                 max_pending: int = 1, when_busy: str = "wait",
                 memory_budget: int | None = None, part_size: int = DEFAULT_PART_SIZE,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.bucket, prefix = parse_url(root)
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.root = f"gs://{self.bucket}/{self.prefix}"
        if keep_last is not None and keep_last < 1:
            raise InvalidArgument(f"keep_last must be >= 1 or None, got {keep_last}")
        if compression not in (None, "zstd"):
            raise InvalidArgument(f"compression must be None or 'zstd', got {compression!r}")
        if compression == "zstd":
            from . import _zstd  # noqa: F401  (fail now, naming the extra)
        if max_pending < 1 or when_busy not in ("wait", "raise"):
            raise InvalidArgument("max_pending must be >= 1 and when_busy 'wait' or 'raise'")
        self.keep_last = keep_last
        self.compression = compression
        self.max_pending = max_pending
        self.when_busy = when_busy
        self.memory_budget = memory_budget
        self._ckpt = Checkpoint(client, part_size=part_size, max_in_flight=max_in_flight)
        self._client = self._ckpt.client
        self._pool = concurrent.futures.ThreadPoolExecutor(max_pending,
                                                           thread_name_prefix="aioflux-ckpt")
        self._cond = threading.Condition()
        self._pending: dict[SaveFuture, tuple[int, int]] = {}  # future -> (step, bytes)
        self._failed: list[SaveFuture] = []

    # -- naming -----------------------------------------------------------------

    def _dir(self, step: int) -> str:
        return f"{self.prefix}step-{step:012d}/"

    @property
    def _state_name(self) -> str:
        return "state.pt.zst" if self.compression == "zstd" else "state.pt"

    def _call(self, coro: Any) -> Any:
        return get_portal().call(coro)

    # -- saving -----------------------------------------------------------------

    def save(self, state: Any, step: int) -> CheckpointInfo:
        """Save and wait until the checkpoint is complete.

        Args:
            state: nested dicts / lists of tensors and plain values.
            step: training step (names the checkpoint).

        Returns:
            CheckpointInfo of the new checkpoint.

        Raises:
            InvalidArgument: bad step.
            StorageError: this save, or an earlier unobserved background
                save, failed (the original exception).
        """
        started = time.perf_counter()
        self._check_step(step)
        self._raise_unobserved()
        self.wait()
        return self._persist(state, step, started, None)

    def save_async(self, state: Any, step: int) -> SaveFuture:
        """Snapshot ``state`` to host memory and save it in the background.

        Returns once tensors are copied: training may mutate them at once.

        Args:
            state: nested dicts / lists of tensors and plain values.
            step: training step.

        Returns:
            A future of the CheckpointInfo; it re-raises the save's exception.

        Raises:
            InvalidArgument: bad step, ``max_pending`` saves in flight with
                ``when_busy="raise"``, or the state alone exceeds
                ``memory_budget``.
            StorageError: an earlier unobserved background save failed.
        """
        started = time.perf_counter()
        self._check_step(step)
        self._raise_unobserved()
        needed = state_nbytes(state)
        future = SaveFuture()
        with self._cond:
            while True:
                used = sum(n for _, n in self._pending.values())
                budget_ok = self.memory_budget is None or used + needed <= self.memory_budget
                if budget_ok and len(self._pending) < self.max_pending:
                    break
                if not self._pending:
                    raise InvalidArgument(
                        f"checkpoint step {step} needs {needed} bytes of host memory for its "
                        f"snapshot, more than memory_budget={self.memory_budget}; raise the "
                        "budget or use save() (which serializes without a copy)")
                if budget_ok and self.when_busy == "raise":
                    raise InvalidArgument(f"checkpoint step {step}: {len(self._pending)} "
                                          "save(s) still in flight (when_busy='raise')")
                self._cond.wait()
            self._pending[future] = (step, needed)
        try:
            copy = snapshot(state)
        except BaseException:
            self._release(future)
            raise
        blocking = time.perf_counter() - started
        future.set_running_or_notify_cancel()
        self._pool.submit(self._run, future, copy, step, started, blocking)
        return future

    def _run(self, future: SaveFuture, state: Any, step: int, started: float,
             blocking: float) -> None:
        try:
            info = self._persist(state, step, started, blocking)
        except BaseException as exc:
            with self._cond:
                self._failed.append(future)
            self._release(future)
            future.set_exception(exc)
            return
        self._release(future)
        future.set_result(info)

    def _release(self, future: SaveFuture) -> None:
        with self._cond:
            self._pending.pop(future, None)
            self._cond.notify_all()

    def _raise_unobserved(self) -> None:
        with self._cond:
            failed, self._failed = self._failed, []
        for future in failed:
            if not future.observed:
                exc = future.exception()
                assert exc is not None
                raise exc

    def wait(self) -> None:
        """Wait for background saves; raise an unobserved failure.

        Raises:
            StorageError: a background save failed and nobody looked.
        """
        with self._cond:
            while self._pending:
                self._cond.wait()
        self._raise_unobserved()

    def close(self) -> None:
        """Wait for background saves and stop the worker threads.

        Raises:
            StorageError: a background save failed and nobody looked.
        """
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _check_step(step: int) -> None:
        if not isinstance(step, int) or step < 0:
            raise InvalidArgument(f"step must be an int >= 0, got {step!r}")

    def _persist(self, state: Any, step: int, started: float,
                 blocking: float | None) -> CheckpointInfo:
        directory = self._dir(step)
        serialized = 0
        try:
            # A re-save of a step must not leave the old manifest vouching
            # for objects that are being replaced.
            self._delete_quietly(directory + _MANIFEST)
            writer = self._ckpt.writer(f"gs://{self.bucket}/{directory}{self._state_name}",
                                       compression=self.compression)
            with writer:
                torch.save(state, writer)
                serialized = writer.tell()
            stored = raw_writer(writer).info
            assert stored is not None
            created = _now()
            manifest = {"format": MANIFEST_FORMAT, "step": step, "created": created,
                        "compression": self.compression,
                        "objects": [{"name": self._state_name, "size": stored.size,
                                     "crc32c": encode_crc32c(stored.crc32c or 0)}]}
            self._call(self._client.write(self.bucket, directory + _MANIFEST,
                                          json.dumps(manifest).encode(),
                                          content_type="application/json"))
        except BaseException as exc:
            total = time.perf_counter() - started
            self._record(SaveRecord(step, False, serialized, 0,
                                    total if blocking is None else blocking, total, 0.0,
                                    _now(), self.compression, f"{type(exc).__name__}: {exc}"))
            raise
        total = time.perf_counter() - started
        info = CheckpointInfo(step, f"gs://{self.bucket}/{directory}", created, stored.size,
                              {self._state_name: stored.size}, self.compression)
        self._record(SaveRecord(step, True, serialized, stored.size,
                                total if blocking is None else blocking, total,
                                serialized / total / 1e6 if total else 0.0, created,
                                self.compression))
        self._retain(step)
        return info

    # -- reading ----------------------------------------------------------------

    def _scan(self) -> tuple[dict[int, dict[str, ObjectInfo]], list[int]]:
        async def collect() -> list[ObjectInfo]:
            return [o async for o in self._client.list_objects(self.bucket,
                                                               self.prefix + "step-")]

        dirs: dict[int, dict[str, ObjectInfo]] = {}
        for obj in self._call(collect()):
            rest = obj.name[len(self.prefix) + len("step-"):]
            number, slash, leaf = rest.partition("/")
            if slash and number.isdigit() and leaf:
                dirs.setdefault(int(number), {})[leaf] = obj
        return dirs, sorted(dirs)

    def _complete(self, step: int, objects: dict[str, ObjectInfo]) -> CheckpointInfo | None:
        manifest_obj = objects.get(_MANIFEST)
        if manifest_obj is None:
            return None
        try:
            raw = self._call(self._client.read(self.bucket, manifest_obj.name))
            manifest = json.loads(raw)
            listed = {o["name"]: (int(o["size"]), decode_crc32c(o["crc32c"]))
                      for o in manifest["objects"]}
        except (NotFound, ValueError, KeyError, TypeError):
            return None
        for leaf, (size, crc) in listed.items():
            stored = objects.get(leaf)
            if stored is None or stored.size != size or (
                    stored.crc32c is not None and stored.crc32c != crc):
                return None
        return CheckpointInfo(step, f"gs://{self.bucket}/{self._dir(step)}",
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
        dirs, steps = self._scan()
        found = (self._complete(s, dirs[s]) for s in steps)
        return [c for c in found if c is not None]

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint.

        Returns:
            Its CheckpointInfo, or None if there is none.

        Raises:
            StorageError: listing failed.
        """
        dirs, steps = self._scan()
        for step in reversed(steps):
            info = self._complete(step, dirs[step])
            if info is not None:
                return info
        return None

    def load(self, step: int | None = None, *, map_location: Any = None,
             weights_only: bool = True) -> Any:
        """Load a complete checkpoint (the latest by default).

        Args:
            step: the step to load, or None for the latest.
            map_location: as for ``torch.load``.
            weights_only: as for ``torch.load``.

        Returns:
            The saved state.

        Raises:
            NotFound: no complete checkpoint (at that step).
        """
        if step is None:
            info = self.latest()
        else:
            dirs, _ = self._scan()
            info = self._complete(step, dirs.get(step, {}))
        if info is None:
            what = "any" if step is None else f"step {step}"
            raise NotFound(f"load {self.root}: no complete checkpoint for {what}",
                           operation="load checkpoint", bucket=self.bucket, name=self.prefix)
        (leaf,) = [k for k in info.objects if k.startswith("state.pt")]
        return self._ckpt.load(info.url + leaf, map_location=map_location,
                               weights_only=weights_only, compression=info.compression)

    # -- retention and history ----------------------------------------------------

    def _delete_quietly(self, name: str) -> None:
        try:
            self._call(self._client.delete(self.bucket, name))
        except NotFound:
            pass

    def _retain(self, newest: int) -> None:
        dirs, steps = self._scan()
        complete = [s for s in steps if self._complete(s, dirs[s]) is not None]
        keep = set(complete if self.keep_last is None else complete[-self.keep_last:])
        with self._cond:
            busy = {s for s, _ in self._pending.values()}
        for step in steps:
            # Directories without a manifest below the newest are leftovers
            # of killed saves; those of saves still in flight are not.
            if step in keep or step in busy or step >= newest:
                continue
            # Manifest first: a half-deleted checkpoint is then invisible.
            objects = dirs[step]
            if _MANIFEST in objects:
                self._delete_quietly(objects.pop(_MANIFEST).name)
            for obj in objects.values():
                self._delete_quietly(obj.name)

    def _record(self, record: SaveRecord) -> None:
        name = self.prefix + _HISTORY
        try:
            try:
                old = self._call(self._client.read(self.bucket, name))
            except NotFound:
                old = b""
            line = (record.to_json() + "\n").encode()
            self._call(self._client.write(self.bucket, name, old + line,
                                          content_type="application/x-ndjson"))
        except Exception as exc:
            # The checkpoint itself is what matters; a lost history line is not.
            log.warning("could not append to %s%s: %s", self.root, _HISTORY, exc)

    def history(self) -> builtins.list[SaveRecord]:
        """Every recorded save, oldest first.

        Returns:
            SaveRecord per save.

        Raises:
            StorageError: reading failed.
        """
        try:
            raw = self._call(self._client.read(self.bucket, self.prefix + _HISTORY))
        except NotFound:
            return []
        return [SaveRecord.from_json(line) for line in raw.decode().splitlines() if line.strip()]
