"""torch integration: datasets over a bucket (and checkpointing).

Importing this package imports torch; ``import aioflux`` alone does not.
It needs numpy too (a dependency of aioflux's, which torch's CPU wheel does
not bring): the epoch orders are computed in numpy blocks.
"""

try:
    import numpy  # noqa: F401
except ImportError as exc:
    # One line saying what to install, not a traceback from deep inside an order.
    raise ModuleNotFoundError(f"aioflux.torch computes its epoch orders with numpy, which did "
                              f"not import ({exc}): `pip install numpy`", name="numpy") from exc

from .._api.iterables import list_files, load_files
from ._checkpoint import Checkpoint
from ._history import CheckpointInfo, SaveRecord
from ._iterable_dataset import IterableDataset
from ._manager import CheckpointManager, SaveFuture
from ._map_dataset import MapDataset
from ._sampler import ResumableBatchSampler, ResumableSampler
from ._shard_dataset import ShardDataset
from ._shard_map_dataset import ShardMapDataset
from ._shard_writer import ShardWriter

__all__ = [
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointManager",
    "IterableDataset",
    "MapDataset",
    "ResumableBatchSampler",
    "ResumableSampler",
    "SaveFuture",
    "SaveRecord",
    "ShardDataset",
    "ShardMapDataset",
    "ShardWriter",
    "list_files",
    "load_files",
]
