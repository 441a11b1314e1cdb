"""torch integration: datasets over a bucket (and checkpointing).

Importing this package imports torch; ``import aioflux`` alone does not.
"""

from .._api.iterables import list_files, load_files
from ._checkpoint import Checkpoint
from ._datasets import IterableDataset, MapDataset
from ._history import CheckpointInfo, SaveRecord
from ._manager import CheckpointManager, SaveFuture

__all__ = [
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointManager",
    "IterableDataset",
    "MapDataset",
    "SaveFuture",
    "SaveRecord",
    "list_files",
    "load_files",
]
