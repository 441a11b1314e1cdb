"""How a ``CheckpointManager`` reads its root back: the complete
checkpoints, their state and data state (each object held to the crc32c
its manifest records), and the history of saves.
"""

from __future__ import annotations

import builtins
import io
from typing import Any, SupportsIndex

import torch

from ..._core.checks.arguments import as_int, check_bool
from ..._core.errors import ChecksumMismatch, NotFound, StorageError
from ..._core.integrity.crc import encode_crc32c
from ..._core.records.types import ObjectInfo
from ..._core.storage.protocol import ObjectStore
from ._checkpoint import Checkpoint
from ._history import CheckpointInfo, SaveRecord
from ._retention import DATA_STATE, MANIFEST, CheckpointStore, leaf_named

__all__ = ["CheckpointRestoring"]


class CheckpointRestoring:
    """What :class:`~._manager.CheckpointManager` offers to read its root
    (its state is the manager's, set up by its ``__init__``)."""

    bucket: str
    prefix: str
    root: str
    _client: ObjectStore
    _store: CheckpointStore
    _ckpt: Checkpoint

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints, oldest first.

        Returns:
            CheckpointInfo per complete checkpoint.

        Raises:
            StorageError: listing failed.
        """
        return self._store.list()

    def latest(self) -> CheckpointInfo | None:
        """The newest complete checkpoint.

        Returns:
            Its CheckpointInfo, or None if there is none.

        Raises:
            ChecksumMismatch: an object of the newest checkpoint was changed
                or damaged after it was saved (of its recorded size, the
                store's crc32c is not the manifest's): no earlier step is put
                in its place unasked.
            StorageError: listing failed.
        """
        return self._store.latest()

    def load(self, step: SupportsIndex | None = None, *, map_location: Any = None,
             weights_only: bool = True) -> dict[str, Any]:
        """Load a complete checkpoint (the highest step by default).

        Args:
            step: the step to load, or None for the latest.
            map_location: as for ``torch.load``.
            weights_only: as for ``torch.load``.

        Returns:
            The saved state dict.

        Raises:
            InvalidArgument: a bad ``step``.
            NotFound: no complete checkpoint (at that step).
            ChecksumMismatch: an object of the checkpoint (the newest with
                all its objects, for None) is not what its manifest records.
            StorageError: the checkpoint holds something other than a dict
                (not written by this manager), or reading failed.
        """
        if step is not None:
            step = as_int("load", "step", step)
        found = self._store.vouched(step)
        if found is None:
            raise self._none_complete("load", step, "load checkpoint")
        info, crcs = found
        leaf = leaf_named(info.objects, "state.pt")
        if leaf is None:
            raise StorageError(f"load {info.url}: its manifest lists no state.pt",
                               operation="load checkpoint", bucket=self.bucket,
                               name=self._store.step_dir(info.step) + MANIFEST)
        name = self._store.step_dir(info.step) + leaf
        stored = self._store.call(self._client.stat(self.bucket, name))
        state = self._ckpt.load(info.url + leaf, map_location=map_location,
                                weights_only=weights_only, compression=info.compression,
                                info=self._expected(stored, crcs[leaf], "load"))
        if not isinstance(state, dict):
            raise StorageError(f"load {info.url}{leaf}: holds a {type(state).__name__}, not the "
                               "state dict this manager saves", operation="load checkpoint",
                               bucket=self.bucket, name=self._store.step_dir(info.step) + leaf)
        return state

    def load_data_state(self, step: SupportsIndex | None = None, *,
                        weights_only: bool = True) -> dict[str, Any] | None:
        """The data position saved with a complete checkpoint (the highest step by default).

        ``sampler.load_state_dict(manager.load_data_state(step))`` (or a
        dataset's, or a StatefulDataLoader's) continues the epoch where the
        checkpoint's model state left it. Give both loads the same step
        (``manager.latest().step``): each alone takes the newest complete
        one, which a save elsewhere may change between the two calls.

        Args:
            step: the step, or None for the latest.
            weights_only: as for ``torch.load``; ``False`` for a data state
                holding more than tensors and plain python values (numpy
                scalars or arrays, say), which the save took as it was.

        Returns:
            The ``data_state`` given to the save, or None if it had none.

        Raises:
            InvalidArgument: a bad ``step``.
            NotFound: no complete checkpoint (at that step).
            ChecksumMismatch: an object of the checkpoint (the newest with
                all its objects, for None) is not what its manifest records.
            StorageError: reading failed, or the object is not a saved data state.
        """
        if step is not None:
            step = as_int("load_data_state", "step", step)
        check_bool("load_data_state", "weights_only", weights_only)
        found = self._store.vouched(step)
        if found is None:
            raise self._none_complete("load_data_state", step, "load data state")
        info, crcs = found
        leaf = leaf_named(info.objects, DATA_STATE)
        if leaf is None:
            return None
        name = self._store.step_dir(info.step) + leaf
        # Checked against the manifest's crc32c too (see _expected; 0: none known).
        raw = self._store.call(self._client.fetch(self.bucket, name,
                                                  crc=crcs[leaf] or None)).data
        assert raw is not None
        try:
            state = torch.load(io.BytesIO(raw), weights_only=weights_only)
        except Exception as exc:  # torch raises several types for a foreign file
            # save() takes any picklable data state (a numpy scalar from a
            # sampler, say): one the safe unpickler refuses is no foreign
            # file, and the message must say how to read it back.
            hint = (" or holds more than tensors and plain values: pass weights_only=False "
                    "if you trust it" if weights_only else "")
            raise StorageError(f"load_data_state {info.url}{leaf}: not a saved data "
                               f"state{hint} ({type(exc).__name__})",
                               operation="load data state", bucket=self.bucket,
                               name=name) from exc
        if not isinstance(state, dict):
            raise StorageError(f"load_data_state {info.url}{leaf}: holds a "
                               f"{type(state).__name__}, not a dict",
                               operation="load data state", bucket=self.bucket, name=name)
        return state

    def _expected(self, stored: ObjectInfo, crc: int, op: str) -> ObjectInfo:
        """What a load of a checkpoint's object reads and checks: ``stored``
        (its stat), with the crc32c the manifest records for it.

        A store keeps no crc32c for a file aioflux did not write (a root
        copied by ``cp -r`` drops the extended attribute holding it, and
        the new modification time voids it): the reader would check only
        the length, and a rotten byte would load in silence. The manifest
        names the crc32c the save wrote, so the bytes are checked against it.

        Raises:
            ChecksumMismatch: the store's crc32c is not the manifest's (the
                object was replaced since the manifest was written).
        """
        if stored.crc32c is None:
            # 0 is what a save records when its store reported no crc32c
            # (``obj.crc32c or 0`` in _persist): nothing known to check
            # against (a real crc32c of 0 is one object in 2**32).
            return stored._replace(crc32c=crc) if crc else stored
        if stored.crc32c != crc:
            raise ChecksumMismatch(
                f"{op} {stored.url}: stored with "
                f"crc32c {encode_crc32c(stored.crc32c)}, its manifest records "
                f"{encode_crc32c(crc)}", operation="load checkpoint",
                bucket=stored.bucket, name=stored.name)
        return stored

    def _none_complete(self, op: str, step: int | None, operation: str) -> NotFound:
        """The error of a load that found no complete checkpoint (of ``step``)."""
        if step is None:
            message = (f"{op} {self.root}: there is no complete checkpoint under this root "
                       "(none was saved there, or no save finished; latest() is None)")
        else:
            message = (f"{op} {self.root}: there is no complete checkpoint of step {step} "
                       "under this root")
        name = self.prefix if step is None else self._store.step_dir(step)
        return NotFound(message, operation=operation, bucket=self.bucket, name=name)

    def history(self) -> builtins.list[SaveRecord]:
        """Every recorded save, oldest first.

        Returns:
            SaveRecord per save.

        Raises:
            StorageError: reading failed.
        """
        return self._store.history()

