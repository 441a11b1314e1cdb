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

from .checkpoint._checkpoint import Checkpoint
from .checkpoint._history import CheckpointInfo, SaveRecord
from .checkpoint._manager import CheckpointManager, SaveFuture
from .data._iterable_dataset import IterableDataset
from .data._map_dataset import MapDataset
from .data._sampler import ResumableBatchSampler, ResumableSampler
from .data._shard_dataset import ShardDataset
from .data._shard_map_dataset import ShardMapDataset
from .data._shard_writer import ShardWriter

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
]

# aioflux's own list_files and load_files, once also exported here:
# deprecated (docs/migration/deprecations.md).
_MOVED = ("list_files", "load_files")
# Not typing's: not a public name of this package (mypy reads any
# TYPE_CHECKING as its flag).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._api.iterables import list_files as list_files
    from .._api.iterables import load_files as load_files
else:

    def __getattr__(name: str) -> object:
        if name not in _MOVED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from .._api import iterables
        from .._core.deprecation import warn_deprecated

        warn_deprecated(f"aioflux.torch.{name}", f"aioflux.{name}")
        return getattr(iterables, name)
del TYPE_CHECKING
