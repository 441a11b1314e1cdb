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
from .data._iterable_dataset import ObjectIterableDataset
from .data._map_dataset import ObjectMapDataset
from .data._order_options import Order
from .data._parquet_options import Parquet
from .data._sampler import ResumableBatchSampler, ResumableSampler
from .data._settings import DatasetSettings
from .data._shard_dataset import ShardDataset
from .data._shard_map_dataset import ShardMapDataset
from .data._shard_reads import ShardReads
from .data._shard_writer import ShardWriter

__all__ = [
    "Checkpoint",
    "CheckpointInfo",
    "CheckpointManager",
    "DatasetSettings",
    "ObjectIterableDataset",
    "ObjectMapDataset",
    "Order",
    "Parquet",
    "ResumableBatchSampler",
    "ResumableSampler",
    "SaveFuture",
    "SaveRecord",
    "ShardDataset",
    "ShardMapDataset",
    "ShardReads",
    "ShardWriter",
]

# Names on their way out (docs/migration/deprecations.md): each use warns,
# naming what replaces it. aioflux's own list_files and load_files were once
# exported here; the datasets' old names were torch's own classes' names.
_DEPRECATED = {
    "list_files": ("aioflux._api.iterables", "list_files", "aioflux.list_files"),
    "load_files": ("aioflux._api.iterables", "load_files", "aioflux.load_files"),
    "MapDataset": (__name__, "ObjectMapDataset", "aioflux.torch.ObjectMapDataset"),
    "IterableDataset": (__name__, "ObjectIterableDataset",
                        "aioflux.torch.ObjectIterableDataset"),
}
# Not typing's: not a public name of this package (mypy reads any
# TYPE_CHECKING as its flag).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._api.iterables import list_files as list_files
    from .._api.iterables import load_files as load_files

    IterableDataset = ObjectIterableDataset
    MapDataset = ObjectMapDataset
else:

    def __getattr__(name: str) -> object:
        if name not in _DEPRECATED:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        from .._core.deprecation import warn_deprecated

        home, attr, new = _DEPRECATED[name]
        warn_deprecated(f"aioflux.torch.{name}", new)
        return getattr(import_module(home), attr)
del TYPE_CHECKING
