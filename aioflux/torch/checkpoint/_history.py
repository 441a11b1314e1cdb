"""Records of checkpoints and of every save (the JSON-lines history)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MANIFEST_FORMAT", "CheckpointInfo", "SaveRecord"]

MANIFEST_FORMAT = "aioflux-checkpoint/1"


@dataclass(frozen=True)
class CheckpointInfo:
    """One complete checkpoint.

    Attributes:
        step: training step.
        url: URL of its directory (``gs://...`` or ``file:///...``, ends with ``/``).
        created: UTC time the manifest was written (ISO 8601).
        size: bytes stored (compressed size with zstd).
        objects: object name (relative to the directory) -> size.
        compression: ``None`` or ``"zstd"``.
    """

    step: int
    url: str
    created: str
    size: int
    objects: dict[str, int] = field(default_factory=dict)
    compression: str | None = None


@dataclass(frozen=True)
class SaveRecord:
    """One save, as kept in ``history.jsonl``.

    Attributes:
        step: training step.
        ok: whether the save completed.
        bytes: bytes serialized (before compression).
        stored_bytes: bytes stored.
        blocking_seconds: time the caller was blocked.
        total_seconds: time until the checkpoint was complete (or failed).
        mb_per_s: ``bytes`` / ``total_seconds`` in MB/s (10**6).
        created: UTC time the record was written (ISO 8601).
        compression: ``None`` or ``"zstd"``.
        error: the failure, if not ``ok``.
    """

    step: int
    ok: bool
    bytes: int
    stored_bytes: int
    blocking_seconds: float
    total_seconds: float
    mb_per_s: float
    created: str
    compression: str | None = None
    error: str | None = None

    def to_json(self) -> str:
        """The record as one JSON line, as ``history.jsonl`` holds it.

        Returns:
            The JSON text (no newline).
        """
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> SaveRecord:
        """Parse a line written by :meth:`to_json` (unknown keys ignored).

        Args:
            line: the JSON text.

        Returns:
            The record.
        """
        raw: dict[str, Any] = json.loads(line)
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)
