"""The ``objects`` property both per-object datasets have."""

from __future__ import annotations

from collections.abc import Sequence

from ..._core.memory.object_index import ObjectIndex
from ..._core.records.types import ObjectInfo
from ._source import DatasetSource, check_objects

__all__ = ["ObjectsProperty"]


class ObjectsProperty:
    """``objects``, checked when set; a subclass names itself in ``_op`` and
    may start over in :meth:`_objects_set`."""

    _op: str
    _source: DatasetSource
    _objects: ObjectIndex

    @property
    def objects(self) -> Sequence[ObjectInfo]:
        """The objects, one sample each: a read-only sequence kept in columns
        that forked DataLoader workers share instead of copying (see
        :class:`~aioflux._core.memory.object_index.ObjectIndex`). Setting them checks them
        as the constructor does (their scheme picks the store read); an
        iterable dataset then starts over at epoch 0.

        Raises:
            InvalidArgument: (setting) not ObjectInfo, or on more than one store.
        """
        return self._objects

    @objects.setter
    def objects(self, objects: Sequence[ObjectInfo]) -> None:
        self._objects = check_objects(self._op, self._source, objects)
        self._objects_set()

    def _objects_set(self) -> None:
        """Called after the objects are set (the map dataset keeps no state of them)."""
