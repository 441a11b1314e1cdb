"""Lightning ``CheckpointIO`` plugins for object URLs and paths (``aioflux-storage[lightning]``).

``GcsCheckpointIO`` saves through the streaming multipart writer and loads
through the parallel ranged reader. ``AsyncGcsCheckpointIO`` snapshots the
checkpoint to host memory and returns at once; the upload runs in the
background, and its failure is raised at the next save or at teardown.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

try:
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("aioflux.torch.lightning needs Lightning: "
                      "pip install 'aioflux-storage[lightning]'") from exc

from .._api.stores import AnyClient
from .._core.options import WriterOptions
from .._core.portal import get_portal
from ._checkpoint import Checkpoint
from ._snapshot import snapshot

__all__ = ["AsyncGcsCheckpointIO", "GcsCheckpointIO"]


class GcsCheckpointIO(CheckpointIO):
    """Lightning CheckpointIO reading and writing ``gs://``, ``s3://`` and ``file://`` paths.

    Args:
        client: the store for paths of its scheme (default: the process-wide
            store of each path's scheme; files need none).
        compression: ``None`` or ``"zstd"``.
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
            storage_options: unused.

        Raises:
            StorageError: the upload failed.
        """
        self._ckpt.save(checkpoint, str(path), compression=self.compression)

    def load_checkpoint(self, path: Any, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint.

        Args:
            path: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a path.
            map_location: as for ``torch.load``.
            weights_only: as for ``torch.load`` (Lightning checkpoints hold
                plain python objects, so the default is False).

        Returns:
            The checkpoint dict.

        Raises:
            NotFound: no such object.
        """
        loaded: dict[str, Any] = self._ckpt.load(
            str(path), map_location=map_location, compression=self.compression,
            weights_only=bool(weights_only))
        return loaded

    def remove_checkpoint(self, path: Any) -> None:
        """Delete a checkpoint (missing is fine).

        Args:
            path: ``gs://bucket/name``, ``s3://bucket/key``, ``file:///path`` or a path.
        """
        store, (bucket, name) = self._ckpt.locate(str(path))
        get_portal().call(store.delete(bucket, name, missing_ok=True))


class AsyncGcsCheckpointIO(GcsCheckpointIO):
    """GcsCheckpointIO whose ``save_checkpoint`` returns after a host-memory
    snapshot; one background save at a time.

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

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # re-raises the background save's own exception

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        """Snapshot and save in the background.

        Args:
            checkpoint: the state Lightning hands over (tensors are copied now).
            path: object URL or path to save to.
            storage_options: unused (Lightning's interface).

        Raises:
            StorageError: the previous background save failed.
        """
        self._wait()
        copy = snapshot(checkpoint)
        if self._pool is None:
            # Lightning tears plugins down after fit() but may save again later.
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="aioflux-pl")
        self._pending = self._pool.submit(super().save_checkpoint, copy, path)

    def load_checkpoint(self, path: Any, map_location: Any | None = None,
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
        """Wait for a pending save, then delete.

        Args:
            path: object URL or path of the checkpoint.

        Raises:
            StorageError: the pending save failed.
        """
        self._wait()
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        """Wait for the last save; raise its failure."""
        try:
            self._wait()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True)

