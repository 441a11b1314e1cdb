"""Lightning ``CheckpointIO`` plugins for object URLs and paths (``aioflux-storage[lightning]``).

``GcsCheckpointIO`` saves through the streaming multipart writer and loads
through the parallel ranged reader. ``AsyncGcsCheckpointIO`` snapshots the
checkpoint to host memory and returns at once; the upload runs in the
background, and its failure is raised at the next save or at teardown (a
save in flight when the script ends is finished, and a failure logged).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
import weakref
from typing import Any

try:
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("aioflux.torch.lightning needs Lightning: "
                      "pip install 'aioflux-storage[lightning]'") from exc

from .._api.stores import AnyClient
from .._core.concurrency.portal import get_portal
from .._core.errors import InvalidArgument
from .._core.records.urls import folder_prefix
from .._core.settings.options import WriterOptions
from .._core.storage.protocol import ObjectStore, delete_all
from .checkpoint._checkpoint import Checkpoint
from .checkpoint._snapshot import accelerated, process_pool, snapshot

__all__ = ["AsyncGcsCheckpointIO", "GcsCheckpointIO"]

log = logging.getLogger("aioflux.checkpoint")


def _on_cpu(storage: Any, location: str) -> Any:
    """``map_location`` leaving every storage where torch.load made it, in
    host memory: TorchCheckpointIO's default, which Lightning relies on (its
    Strategy.load_checkpoint passes no map_location)."""
    return storage


def _check_storage_options(path: Any, storage_options: Any) -> None:
    # As TorchCheckpointIO: options the plugin would not apply are refused,
    # not dropped.
    if storage_options is not None:
        raise InvalidArgument(f"save {path}: storage_options are not supported by aioflux's "
                              "CheckpointIO; give it writer= or compression= instead")


async def _remove(store: ObjectStore, bucket: str, name: str) -> None:
    await store.delete(bucket, name, missing_ok=True)
    # A checkpoint saved as a folder (sharded strategies) goes whole, as
    # TorchCheckpointIO's recursive rm does; its prefix siblings stay
    # (epoch=1.ckpt/ is the folder, never epoch=10.ckpt).
    names = [o.name async for o in store.list_objects(bucket, folder_prefix(name))]
    await delete_all(store, bucket, names, concurrency=store.config.max_concurrency)


def _url(path: Any) -> str:
    """``path`` as the store's URL. Lightning passes a local root through
    ``os.path.normpath``, which makes ``file:///tmp/run`` ``file:/tmp/run``
    (one slash: the same file URL, RFC 8089's short form)."""
    text = str(path)
    if text.startswith("file:/") and not text.startswith("file://"):
        return "file://" + text[len("file:"):]
    return text


def _prune_folder(top: str) -> None:
    """Remove the directories under and including ``top`` that are empty,
    deepest first (a folder checkpoint's tree, its files deleted).

    LocalStore removes only the directories its own writes made; a
    strategy's (``os.makedirs``) stayed behind as an empty tree. A directory
    still holding anything (a file the listing skips, a symbolic link) stays.
    """
    if os.path.islink(top) or not os.path.isdir(top):
        return
    for directory, _, _ in os.walk(top, topdown=False):
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty: not ours to remove


class GcsCheckpointIO(CheckpointIO):
    """Lightning CheckpointIO reading and writing ``gs://``, ``s3://`` and ``file://`` paths.

    Args:
        client: the store for paths of its scheme (default: the process-wide
            store of each path's scheme; files need none).
        compression: ``None`` or ``"zstd"``, for saves (loads find a
            checkpoint's compression themselves).
        writer: part size and parts in flight of saves.
    """

    def __init__(self, client: AnyClient | None = None, *,
                 compression: str | None = None, writer: WriterOptions | None = None) -> None:
        self._ckpt = Checkpoint(client, writer=writer)
        self.compression = compression

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` to ``path`` (published only when complete).

        Args:
            checkpoint: the dict Lightning built.
            path: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a path.
            storage_options: must be None (as for TorchCheckpointIO).

        Raises:
            StorageError: the upload failed.
            InvalidArgument: ``storage_options`` given.
        """
        _check_storage_options(path, storage_options)
        self._ckpt.save(checkpoint, _url(path), compression=self.compression)

    def load_checkpoint(self, path: Any, map_location: Any | None = _on_cpu,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint.

        Args:
            path: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a path.
            map_location: as for ``torch.load``; by default every tensor is
                loaded into host memory, as by TorchCheckpointIO (``None``:
                onto the device it was saved from).
            weights_only: as for ``torch.load`` (Lightning checkpoints hold
                plain python objects, so the default is False).

        Returns:
            The checkpoint dict, decompressed if the object is zstd (found
            from its first bytes, whatever ``compression`` says).

        Raises:
            NotFound: no such object.
            InvalidArgument: a zstd checkpoint without the zstandard package.
        """
        # The compression is found from the object's first bytes, not taken
        # from this plugin's setting: a checkpoint saved before compression
        # was switched on (or off) loads too.
        loaded: dict[str, Any] = self._ckpt.load(
            _url(path), map_location=map_location, weights_only=bool(weights_only))
        return loaded

    def remove_checkpoint(self, path: Any) -> None:
        """Delete a checkpoint (missing is fine): the object ``path``, and the
        objects under ``path/`` if it is a folder (a sharded checkpoint).

        Args:
            path: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a path.

        Raises:
            StorageError: a delete or the listing failed.
        """
        store, (bucket, name) = self._ckpt.locate(_url(path))
        get_portal().call(_remove(store, bucket, name))
        if store.features.scheme == "file":
            # Only under and including ``path``: never a prefix sibling
            # (epoch=10.ckpt beside epoch=1.ckpt) nor the folder holding it.
            _prune_folder(os.path.join("/", bucket, name))


class AsyncGcsCheckpointIO(GcsCheckpointIO):
    """GcsCheckpointIO whose ``save_checkpoint`` returns after a host-memory
    snapshot; one background save at a time. The snapshot reuses the host
    buffers of the last one (the process's pool, pinned for CUDA states:
    see ``CheckpointManager.buffers``).

    Args:
        client: the store for paths of its scheme (default: the process-wide
            store of each path's scheme; files need none).
        compression: ``None`` or ``"zstd"``.
        writer: part size and parts in flight of saves.
    """

    # Class-level "none yet" so GcsCheckpointIO.__init__ serves both classes;
    # the first background save sets them on the instance.
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _pending: concurrent.futures.Future[None] | None = None
    _pending_path = ""
    # Where the save in flight publishes: (scheme, bucket, object name).
    _pending_at: tuple[str, str, str] | None = None
    _exit_hook = False

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        self._pending_at = None
        if pending is not None:
            pending.result()  # re-raises the background save's own exception

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        """Snapshot and save in the background.

        Args:
            checkpoint: the state Lightning hands over (tensors are copied now).
            path: object URL or path to save to.
            storage_options: must be None (as for TorchCheckpointIO).

        Raises:
            StorageError: the previous background save failed.
            InvalidArgument: ``storage_options`` given.
        """
        _check_storage_options(path, storage_options)
        self._wait()
        pool = process_pool()
        on_device = accelerated(checkpoint)
        copy = snapshot(checkpoint, pool)
        if self._pool is None:
            # Lightning tears plugins down after fit() but may save again later.
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="aioflux-pl")
        if not self._exit_hook:
            # A script that ends with a save in flight and no teardown (one
            # after fit(), say): the save must still land, and a failure be
            # heard of. This runs when the interpreter starts to exit, before
            # thread pools refuse work (the local store's refused it, and the
            # checkpoint was lost); as in CheckpointManager.
            threading._register_atexit(  # type: ignore[attr-defined]
                functools.partial(_finish_at_exit, weakref.ref(self), os.getpid()))
            self._exit_hook = True
        _, at = self._ckpt.locate(_url(path))
        self._pending = self._pool.submit(self._save_then_pool, [copy], path, on_device)
        self._pending_path = _url(path)
        self._pending_at = (at.scheme, at.bucket, at.name)

    def _save_then_pool(self, job: list[Any], path: Any, on_device: bool) -> None:
        # The snapshot in a list emptied here: a failure's traceback keeps
        # this frame, and must not keep the buffers the pool now owns.
        copy = job.pop()
        try:
            super().save_checkpoint(copy, path)
        finally:
            process_pool().refill(copy, pinned=on_device)
            del copy

    def load_checkpoint(self, path: Any, map_location: Any | None = _on_cpu,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Wait for a pending save, then load (see GcsCheckpointIO).

        Args:
            path: object URL or path of the checkpoint.
            map_location: as for ``torch.load``.
            weights_only: as for ``torch.load``.

        Returns:
            The checkpoint dict.

        Raises:
            StorageError: the pending save failed, or the load did.
        """
        self._wait()
        return super().load_checkpoint(path, map_location, weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        """Delete a checkpoint; first wait for the pending save if it writes
        that checkpoint (or into its folder).

        With a save in flight elsewhere, the checkpoint is removed in the
        background once that save has landed, and not at all if it fails:
        ModelCheckpoint removes the checkpoint falling out of its
        ``save_top_k`` right after it saves the new one, and waiting for
        that save there made every save blocking, while removing at once
        left no checkpoint when the machine died (or the upload failed)
        before the new one was complete. A failure is raised by the next
        save, load or ``teardown``.

        Args:
            path: object URL or path of the checkpoint.

        Raises:
            StorageError: the pending save of this checkpoint failed, or a
                delete or the listing failed.
        """
        if self._pending_at is not None:
            _, at = self._ckpt.locate(_url(path))
            scheme, bucket, name = self._pending_at
            if (scheme, bucket) == (at.scheme, at.bucket) and (
                    name == at.name or name.startswith(folder_prefix(at.name))):
                self._wait()  # else the save would publish what was removed
            elif self._pending is not None and self._pool is not None:
                # After the save, in the pool's one thread: the new checkpoint
                # is complete before the one it replaces goes.
                self._pending = self._pool.submit(self._remove_after, self._pending, path)
                return
        super().remove_checkpoint(path)

    def _remove_after(self, save: concurrent.futures.Future[None], path: Any) -> None:
        save.result()  # it failed: the checkpoint it would replace stays, its error carries on
        GcsCheckpointIO.remove_checkpoint(self, path)

    def teardown(self) -> None:
        """Wait for the last save; raise its failure."""
        try:
            self._wait()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)
            process_pool().clear()  # the snapshot buffers, till the next save


def _finish_at_exit(ref: weakref.ref[AsyncGcsCheckpointIO], pid: int) -> None:
    """At exit with a save in flight that nothing waited for: wait, and log
    its failure (a later save or teardown would have raised it). Not in a
    forked child: the save is the parent's (see CheckpointManager's)."""
    plugin = ref()
    pending = None if plugin is None else plugin._pending
    if plugin is None or pending is None or pid != os.getpid():
        return
    try:
        pending.result()
    except BaseException as exc:
        log.error("AsyncGcsCheckpointIO: the background save to %s failed and no later save "
                  "or teardown was left to raise it: %s: %s", plugin._pending_path,
                  type(exc).__name__, exc)
