"""``CheckpointManager``: background saves, manifests, retention, history.

Layout under ``root`` (``gs://bucket/run1``)::

    run1/step-000000000100/state.pt        torch.save output (state.pt.zst with zstd)
    run1/step-000000000100/data_state.pt   the data loader's position, if given
    run1/step-000000000100/manifest.json   written last: makes the checkpoint visible
    run1/step-000000000100/claim.json      while a save runs: who writes at the top
    run1/history.jsonl                     one SaveRecord per save

A checkpoint counts only if its manifest exists and every object it lists
is stored with the listed size and crc32c; a save killed at any point leaves
at most objects without a manifest, which ``list``/``latest`` ignore and the
next retention pass deletes (or the next save of that step). Retention runs
only after a newer manifest is written, so a complete checkpoint always
survives. An overwrite of a step writes its objects into a folder of their
own beside the checkpoint it replaces (``replace-<16 hex>/``) and then swaps
the manifest, conditional on the one it replaces: until that swap the old
checkpoint stands whole, so a failed or killed overwrite loses nothing. A
first save of a step claims the top of its folder (a create-only
``claim.json``, dropped once its manifest is written); a save finding the
claim held (another process saving that step, or one killed mid-save) writes
into a folder of its own too, so it never lands over objects another
save's manifest vouches for. Listing, manifest checks, retention and the history file live in
``_retention.CheckpointStore``; one save's way to its manifest in
``_publish``, the reading methods in ``_restore``, and this module keeps the
background saves: their slots, memory budget, failures and the exit hook.

Steps order everything: ``latest()`` is the highest complete step and
``keep_last=n`` keeps the ``n`` highest complete steps, whatever the order
the saves came in. So a save that would fall outside that window (step 10
after 350 and 400 with ``keep_last=2``) is refused before anything is
written, rather than being deleted by its own retention pass; and saving a
step that already has a checkpoint is a ``Conflict`` unless
``overwrite=True``; a manifest that vouches for nothing whole (its objects
deleted or cut since) is no checkpoint there, and a save replaces it.
"""

from __future__ import annotations

import concurrent.futures
import copy
import functools
import logging
import os
import threading
import time
import traceback
import weakref
from collections.abc import Mapping
from typing import Any, SupportsIndex

from ..._api.stores import AnyClient, store_for_url
from ..._api.sync import Client
from ..._core.checks.arguments import as_int, check_bool, check_instance, check_int, check_str
from ..._core.errors import BridgeError, Conflict, InvalidArgument
from ..._core.records.urls import format_url
from ..._core.settings.options import WriterOptions
from ..._core.storage.protocol import ObjectStore
from ..._engines.compression import require_zstd
from ._checkpoint import Checkpoint
from ._history import CheckpointInfo
from ._publish import CheckpointPublishing
from ._restore import CheckpointRestoring
from ._retention import DATA_STATE, CheckpointStore, root_prefix
from ._save_future import SaveFuture
from ._snapshot import accelerated, process_pool, snapshot, state_nbytes

__all__ = ["DATA_STATE", "CheckpointManager", "SaveFuture"]

log = logging.getLogger("aioflux.checkpoint")


class CheckpointManager(CheckpointPublishing, CheckpointRestoring):
    """Saves training state under ``root`` and restores the latest complete one.

    Usage: ``save``/``save_async`` while training; ``close()`` (or a
    ``with`` block) at the end waits for background saves and raises a
    failure nobody looked at. To resume, ``manager.latest()`` (``None`` on a
    fresh run) and ``manager.load()``.

    Args:
        root: ``gs://bucket/prefix`` of the run, ``s3://bucket/prefix``,
            ``file:///dir`` or a path (``str`` or ``os.PathLike``).
        keep_last: complete checkpoints to keep, the highest steps
            (``None`` keeps all).
        compression: ``None`` or ``"zstd"``.
        client: the client for a ``gs://`` root (default: the process-wide
            one); a ``file://`` root or a path needs none.
        max_pending: background saves in flight at once.
        when_busy: ``"wait"`` (block until a slot frees) or ``"raise"``
            when ``max_pending`` saves are in flight.
        memory_budget: bytes of host memory snapshots may hold at once
            (``None``: unlimited).
        writer: part size and parts in flight per save.
        reuse_buffers: keep the last snapshot's host buffers and copy the
            next state into them (~3x less ``save_async`` blocking time, at
            the price of one state's worth of host memory between saves;
            released by ``close()`` or when ``memory_budget`` needs it).
            The buffers are the process's pool (:attr:`buffers`: one
            snapshot, shared by its managers), pinned for CUDA states.
            Pinned buffers come from torch's pinned-memory allocator, which
            rounds each up to a power of two and keeps what is released
            for its next pinned tensor: up to twice ``pinned_nbytes`` stay
            page-locked, also after ``close()``.

    Attributes:
        buffers: the snapshot buffers' pool (``None`` without
            ``reuse_buffers``): its ``nbytes`` and ``pinned_nbytes``, a cap
            ``max_bytes``, ``pin`` (False: keep pageable buffers) and
            ``pin_error`` (why pinning failed: pageable buffers are used).

    Raises:
        InvalidURL: bad root.
        InvalidArgument: bad settings (wrong type or range), checked at once.
    """

    def __init__(self, root: str | os.PathLike[str], *, keep_last: int | None = None,
                 compression: str | None = None, client: AnyClient | None = None,
                 max_pending: int = 1, when_busy: str = "wait",
                 memory_budget: int | None = None, writer: WriterOptions | None = None,
                 reuse_buffers: bool = True) -> None:
        op = "CheckpointManager"
        # What a pickled manager is made again from (see __getstate__).
        self._settings: dict[str, Any] = {
            "root": root, "keep_last": keep_last, "compression": compression, "client": client,
            "max_pending": max_pending, "when_busy": when_busy, "memory_budget": memory_budget,
            "writer": writer, "reuse_buffers": reuse_buffers}
        check_instance(op, "client", client, (ObjectStore, Client), optional=True)
        store, parsed = store_for_url(root, client)
        self.bucket, prefix = parsed
        self.prefix = root_prefix(str(root), prefix)
        self.root = format_url(parsed.scheme, self.bucket, self.prefix)
        check_int(op, "keep_last", keep_last, minimum=1, optional=True)
        check_str(op, "compression", compression, optional=True, choices=("zstd",))
        check_int(op, "max_pending", max_pending, minimum=1)
        check_str(op, "when_busy", when_busy, choices=("wait", "raise"))
        check_int(op, "memory_budget", memory_budget, minimum=1, optional=True)
        check_instance(op, "writer", writer, WriterOptions, optional=True)
        check_bool(op, "reuse_buffers", reuse_buffers)
        if compression == "zstd":
            require_zstd(f"{op}({self.root!r}, compression='zstd')")  # now, naming the extra
        self.keep_last = keep_last
        self.compression = compression
        self.max_pending = max_pending
        self.when_busy = when_busy
        self.memory_budget = memory_budget
        self.buffers = process_pool() if reuse_buffers else None
        self._ckpt = Checkpoint(store, writer=writer)
        self._client = store
        self._store = CheckpointStore(self._client, self.bucket, self.prefix)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_pending,
                                                           thread_name_prefix="aioflux-ckpt")
        self._cond = threading.Condition()
        self._pending: dict[SaveFuture, tuple[int, int]] = {}  # future -> (step, bytes)
        self._failed: list[SaveFuture] = []
        # Publication order, for the keep_last check of saves in flight
        # together: a step this manager published after a save was asked
        # for (a later save that finished first) does not push that save
        # out of the window. Each save's mark is the count of publications
        # when it was asked for; entries older than every mark are dropped.
        self._publications = 0
        self._published_at: dict[int, int] = {}  # step -> publication number
        self._marks: dict[object, int] = {}  # save (future or token) -> mark
        # The highest step this manager completed: saves finish out of order
        # when several are in flight, and each retention pass must keep the
        # window below the highest, not below its own step.
        self._highest_done: int | None = None
        self._retaining = threading.Lock()
        # Set by close(): its pool takes no more work, so a save_async after
        # it must be refused before its future joins _pending (where nothing
        # would ever complete it, and close() and the exit hook would wait
        # for it forever).
        self._closed = False
        # A script that ends without close(): its saves in flight must still
        # complete, and a failure be heard of. This runs when the interpreter
        # starts to exit, before thread pools refuse work (they register the
        # same way, earlier, and these run last registered first).
        self._pid = os.getpid()
        threading._register_atexit(  # type: ignore[attr-defined]
            functools.partial(_finish_at_exit, weakref.ref(self), self._pid))

    def __getstate__(self) -> dict[str, Any]:
        """By settings: a copy in another process (a LightningModule holding
        one under ``ddp_spawn``, a spawned worker) is a new manager of the
        same root, with no saves in flight; those stay this process's."""
        return {"settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        settings = dict(state["settings"])
        self.__init__(settings.pop("root"), **settings)  # type: ignore[misc]

    def save(self, state: Mapping[str, Any], step: SupportsIndex, *, overwrite: bool = False,
             data_state: Mapping[str, Any] | None = None) -> CheckpointInfo:
        """Save and wait until the checkpoint is complete.

        Args:
            state: a dict of tensors, nested dicts / lists and plain values.
            step: training step, 0 or more (names and orders the checkpoint): an
                int, or what stands for one (a numpy integer, a 0-d integer tensor).
            overwrite: replace a complete checkpoint of the same step.
            data_state: the data position to resume from with this state
                (a sampler's, dataset's or StatefulDataLoader's
                ``state_dict()``); stored beside it, in the same manifest,
                and read back by :meth:`load_data_state`.

        Returns:
            CheckpointInfo of the new checkpoint.

        Raises:
            InvalidArgument: bad state or step, or a step below the
                ``keep_last`` highest ones (retention would delete it).
            Conflict: a checkpoint of ``step`` exists and ``overwrite`` is False.
            StorageError: this save, or an earlier unobserved background
                save, failed (the original exception).
        """
        started = time.perf_counter()
        step = as_int("save", "step", step)
        self._check_save("save", state, overwrite, data_state)
        self._raise_unobserved()
        self.wait()
        token = object()
        with self._cond:
            self._marks[token] = mark = self._publications
        try:
            return self._persist(state, step, started, None, overwrite, data_state, mark)
        finally:
            with self._cond:
                self._forget(token)

    def save_async(self, state: Mapping[str, Any], step: SupportsIndex, *, overwrite: bool = False,
                   data_state: Mapping[str, Any] | None = None) -> SaveFuture:
        """Snapshot ``state`` to host memory and save it in the background.

        Returns once tensors are copied: training may mutate them at once.

        Args:
            state: a dict of tensors, nested dicts / lists and plain values.
            step: training step, 0 or more.
            overwrite: replace a complete checkpoint of the same step.
            data_state: the data position to resume from with this state
                (copied now, as ``state`` is); see :meth:`save`.

        Returns:
            A future of the CheckpointInfo; it re-raises the save's exception
            (``Conflict`` for an existing step, ``InvalidArgument`` for a
            step below the ``keep_last`` window: both found in the background;
            steps this manager published after this save was asked for, saves
            in flight that finished first, do not count).

        Raises:
            InvalidArgument: bad state or step, ``max_pending`` saves in
                flight with ``when_busy="raise"``, or the state alone exceeds
                ``memory_budget``.
            Conflict: a save of the same step is still in flight.
            StorageError: an earlier unobserved background save failed.
            BridgeError: the manager was made in the parent of this forked
                process, or is closed.
        """
        started = time.perf_counter()
        step = as_int("save_async", "step", step)
        self._check_save("save_async", state, overwrite, data_state)
        if self._pid != os.getpid():
            # The saver threads and the saves in flight are the parent's:
            # work handed to the copied pool would never start.
            raise BridgeError(f"save_async {self.root}: this CheckpointManager was made in "
                              f"process {self._pid}; make one in this forked child")
        self._raise_unobserved()
        with self._cond:
            if any(s == step for s, _ in self._pending.values()):
                raise Conflict(f"save_async {self.root}: step {step} is already being saved",
                               operation="save checkpoint", bucket=self.bucket,
                               name=self._store.step_dir(step))
        needed = state_nbytes(state)
        future = SaveFuture()
        with self._cond:
            while True:
                if self._closed:
                    raise BridgeError(f"save_async {self.root}: the CheckpointManager is "
                                      "closed; make a new one (or use save())")
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
            self._marks[future] = mark = self._publications
        if self.buffers is not None and self.memory_budget is not None and (
                used + needed + self.buffers.nbytes > self.memory_budget):
            self.buffers.clear()  # idle buffers count against the budget too
        try:
            on_device = accelerated(state)
            copied = snapshot(state, self.buffers)
            # The loader moves on at once: save where it stood at this step.
            data_copy = copy.deepcopy(dict(data_state)) if data_state is not None else None
        except BaseException:
            self._release(future)
            raise
        blocking = time.perf_counter() - started
        future.set_running_or_notify_cancel()
        try:
            # Handed over in a list _run empties (see _run).
            self._pool.submit(self._run, future, [copied, data_copy, on_device], step,
                              started, blocking, overwrite, mark)
        except BaseException:
            self._release(future)  # never started: nothing may wait for it
            raise
        return future

    def _run(self, future: SaveFuture, job: list[Any], step: int, started: float,
             blocking: float, overwrite: bool, mark: int) -> None:
        # The snapshot and data state, taken out of the list the pool's work
        # item holds: a failure's traceback keeps this frame, and through
        # it the work item's (its caller's, still linked), for as long as
        # the future is kept.
        state, data_state, on_device = job
        job.clear()
        try:
            info = self._persist(state, step, started, blocking, overwrite, data_state, mark)
        except BaseException as exc:
            # The future keeps the exception, its traceback the frames it
            # passed through, and they the snapshot: a failed save the
            # caller still holds (or that waits in _failed) would keep a whole
            # state in host memory that memory_budget no longer counts.
            # The frames lose their variables, not their lines.
            traceback.clear_frames(exc.__traceback__)
            if self.buffers is not None:
                self.buffers.refill(state, pinned=on_device)
            state = data_state = None  # this frame is in the traceback too
            with self._cond:
                self._failed.append(future)
            self._release(future)
            future.set_exception(exc)
            return
        if self.buffers is not None:
            self.buffers.refill(state, pinned=on_device)
        self._release(future)
        future.set_result(info)

    def _release(self, future: SaveFuture) -> None:
        with self._cond:
            self._pending.pop(future, None)
            self._forget(future)
            self._cond.notify_all()

    def _forget(self, save: object) -> None:
        """Drop a finished save's mark, and the publications no save in
        flight was asked for before (under ``_cond``)."""
        self._marks.pop(save, None)
        floor = min(self._marks.values(), default=self._publications)
        self._published_at = {s: n for s, n in self._published_at.items() if n >= floor}

    def _raise_unobserved(self, *, last: bool = False) -> None:
        """Raise the first background failure nobody looked at.

        One call raises one failure: the others stay for the next
        ``save*``, ``wait`` or ``close`` (emptying the list here lost every
        failure after the first of several saves in flight, never raised
        nor logged). With ``last`` (``close``: no call may come after it)
        the others are logged now, as the exit hook would log them.
        """
        with self._cond:
            failed = [f for f in self._failed if not f.observed]
            self._failed = [] if last else failed[1:]
        if not failed:
            return
        if last:
            for future in failed[1:]:
                _log_unraised(self.root, future, "close() raised another one")
        exc = failed[0].exception()  # marks it looked at
        assert exc is not None
        raise exc

    def wait(self) -> None:
        """Wait for background saves; raise an unobserved failure.

        Raises:
            StorageError: a background save failed and nobody looked.
        """
        if self._pid != os.getpid():
            return  # a forked child's copy: the saves in flight are the parent's
        self._wait(last=False)

    def _wait(self, *, last: bool) -> None:
        with self._cond:
            while self._pending:
                self._cond.wait()
        self._raise_unobserved(last=last)

    def close(self) -> None:
        """Wait for background saves and stop the worker threads.

        A ``save_async`` after (or while) closing raises ``BridgeError``;
        ``save`` and the reading methods still work.

        Raises:
            StorageError: a background save failed and nobody looked (the
                first such; the others are logged as errors).
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()  # a save_async waiting for a slot gives up
        try:
            if self._pid == os.getpid():  # a forked child's saves are the parent's
                self._wait(last=True)
        finally:
            self._pool.shutdown(wait=True)
            if self.buffers is not None:
                self.buffers.clear()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _check_save(op: str, state: object, overwrite: object, data_state: object) -> None:
        check_instance(op, "state", state, Mapping)
        check_bool(op, "overwrite", overwrite)
        check_instance(op, "data_state", data_state, Mapping, optional=True)


def _finish_at_exit(ref: weakref.ref[CheckpointManager], pid: int) -> None:
    """At exit without ``close()``: wait for the saves in flight, then log
    each one that failed with nobody looking (``close()`` would have raised it).

    Not in a forked child (a DataLoader worker runs these hooks as it ends):
    the saves are the parent's, and would never end in the child's copy."""
    manager = ref()
    if manager is None or pid != os.getpid():
        return
    with manager._cond:
        while manager._pending:
            manager._cond.wait()
        failed = [f for f in manager._failed if not f.observed]
    for future in failed:
        _log_unraised(manager.root, future, "close() was never called to raise it")


def _log_unraised(root: str, future: SaveFuture, why: str) -> None:
    """Log a background save's failure no call will raise (marks it looked at)."""
    exc = future.exception()
    log.error("CheckpointManager(%s): a background save failed and %s: %s: %s",
              root, why, type(exc).__name__, exc)
