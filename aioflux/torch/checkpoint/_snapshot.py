"""Host-memory snapshots of state dicts for background saving.

``save_async`` must return as soon as training may mutate its tensors
again, so every tensor is copied to CPU host memory first; containers are
rebuilt around the copies and a tensor reached twice is copied once (shared
tensors stay shared in the saved file, as ``torch.save`` would keep them).
So are tensors that are views of one storage (tied weights: ``state_dict()``
hands out a new tensor per name), copied once as one span of bytes, unless
that span is larger than their separate copies (two small views of a large
buffer are copied apart, compactly). Other objects are deep-copied, with
the tensors they hold; a meta tensor, which holds no data, is kept as it is.
"""

from __future__ import annotations

import copy
import copyreg
import os
import threading
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["BufferPool", "accelerated", "mapped_like", "process_pool", "snapshot",
           "state_nbytes"]

_Key = tuple[tuple[int, ...], torch.dtype]
# A storage the state reaches through several tensors: (device, data
# pointer, bytes). The pointer alone is not one storage: two tensors made
# over one numpy array (``torch.from_numpy(a[:10])``, ``torch.from_numpy(a)``)
# have storages of their own that start at the same address, and the span
# of both, copied out of the smaller, failed the save ("Trying to resize
# storage that is not resizable"). Storages equal in all three hold the
# same bytes, so copying the span out of either is right.
_StorageKey = tuple[str, int, int]


class BufferPool:
    """Host buffers of a finished snapshot, reused by the next one.

    Copying a state into memory that is already mapped skips the page
    faults of fresh allocations, most of such a copy's time, and that copy
    is all of ``save_async``'s blocking time. The pool holds at most one
    snapshot's tensors (each refill replaces the previous content), and no
    more than ``max_bytes`` of them.

    A snapshot of accelerator (CUDA) tensors is refilled with pinned
    (page-locked) buffers, allocated in the saver thread after its save,
    so the next snapshot copies at the link's speed with ``non_blocking``
    copies; pinning is done once per buffer, the pool keeps them. Where
    pinning fails (a CPU-only build, a locked-memory limit) the pageable
    buffers are kept, and :attr:`pin_error` says why.

    Attributes:
        nbytes: bytes of host memory the pool holds now.
        pinned_nbytes: how many of them are pinned.
        max_bytes: the most it keeps (``None``: one snapshot, whatever its size).
        pin: pin the buffers of accelerator states (set False to keep pageable ones).
        pin_error: why pinning last failed, or None.
    """

    def __init__(self, max_bytes: int | None = None, *, pin: bool = True) -> None:
        self._free: dict[_Key, list[torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.nbytes = 0
        self.pinned_nbytes = 0
        self.max_bytes = max_bytes
        self.pin = pin
        self.pin_error: str | None = None

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """A free buffer of this shape and dtype, or None.

        Args:
            shape: tensor shape.
            dtype: tensor dtype.

        Returns:
            A contiguous CPU tensor now owned by the caller, or None.
        """
        with self._lock:
            free = self._free.get((shape, dtype))
            if not free:
                return None
            buf = free.pop()
            size = _nbytes(buf)
            self.nbytes -= size
            if buf.is_pinned():
                self.pinned_nbytes -= size
            return buf

    def refill(self, state: Any, *, pinned: bool = False) -> None:
        """Keep the plain CPU tensors of a finished snapshot for reuse.

        Args:
            state: the snapshot (no one else may use its tensors any more).
            pinned: the snapshot is of accelerator tensors: its pageable
                buffers are replaced by pinned ones (if :attr:`pin`).
        """
        free: dict[_Key, list[torch.Tensor]] = {}
        nbytes = pinned_nbytes = 0
        for tensor in _plain_tensors(state, set()):
            if tensor.requires_grad:
                tensor = tensor.detach()  # an alias of the buffer, which does not
            size = _nbytes(tensor)
            if self.max_bytes is not None and nbytes + size > self.max_bytes:
                continue  # a smaller one may still fit
            if pinned and self.pin and self.pin_error is None and not tensor.is_pinned():
                tensor = self._pinned_like(tensor)
            free.setdefault((tuple(tensor.shape), tensor.dtype), []).append(tensor)
            nbytes += size
            pinned_nbytes += size if tensor.is_pinned() else 0
        with self._lock:
            self._free, self.nbytes, self.pinned_nbytes = free, nbytes, pinned_nbytes

    def _pinned_like(self, tensor: torch.Tensor) -> torch.Tensor:
        """A pinned buffer for ``tensor``'s shape, or ``tensor`` itself
        where pinning fails (not tried again until :meth:`clear`)."""
        try:
            buf = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        except RuntimeError as exc:
            self.pin_error = str(exc)
            return tensor
        return buf

    def clear(self) -> None:
        """Release every pooled buffer (and try pinning again)."""
        with self._lock:
            self._free, self.nbytes, self.pinned_nbytes = {}, 0, 0
            self.pin_error = None


_process_pool: tuple[int, BufferPool] | None = None
_process_pool_lock = threading.Lock()


def process_pool() -> BufferPool:
    """This process's pool (a forked child makes its own: pinned memory
    and the parent's buffers are no child's)."""
    global _process_pool
    with _process_pool_lock:
        if _process_pool is None or _process_pool[0] != os.getpid():
            _process_pool = (os.getpid(), BufferPool())
        return _process_pool[1]


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())


def _dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` has a shape and strides over one storage: a
    nested tensor's layout is strided too, but its components' shapes differ."""
    return tensor.layout == torch.strided and not tensor.is_nested


#: the tensors a sparse tensor's bytes are in
_SPARSE_PARTS: dict[torch.layout, Callable[[torch.Tensor], tuple[torch.Tensor, ...]]] = {
    torch.sparse_coo: lambda t: (t._indices(), t._values()),
    torch.sparse_csr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_bsr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_csc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
    torch.sparse_bsc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
}


def _held_nbytes(tensor: torch.Tensor) -> int:
    """Bytes a copy of ``tensor`` holds: a sparse tensor's indices and
    values (not its dense size), none for a meta tensor."""
    parts = _SPARSE_PARTS.get(tensor.layout)
    if parts is not None:
        return sum(_nbytes(part) for part in parts(tensor))
    return 0 if tensor.is_meta else _nbytes(tensor)


def _reusable(tensor: torch.Tensor) -> bool:
    # Only a tensor that is its whole storage: the views of a shared span
    # (see _spans) handed out as separate buffers would be filled over
    # each other by the next snapshot.
    return (type(tensor) is torch.Tensor and _dense(tensor)
            and tensor.device.type == "cpu" and tensor.is_contiguous()
            and tensor.storage_offset() == 0
            and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size())


def _plain_tensors(obj: Any, seen: set[int]) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen or not _reusable(obj):
            return []
        seen.add(id(obj))
        storage = obj.untyped_storage().data_ptr()
        if storage in seen:
            return []
        seen.add(storage)
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _plain_tensors(v, seen)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _plain_tensors(v, seen)]
    return []


#: what copy.deepcopy returns as it is (its table of atomic types)
_ATOMIC = frozenset({type(None), int, float, bool, complex, str, bytes, range,
                     types.CodeType, types.FunctionType, types.BuiltinFunctionType,
                     weakref.ref, property, type(Ellipsis), type(NotImplemented)})


def _walk(obj: Any, seen: set[int], found: list[torch.Tensor],
          objects: list[Any] | None = None) -> None:
    """Every tensor reachable from ``obj`` through its containers, each
    object once; and, into ``objects``, the other values snapshot()
    deep-copies (not the atomic ones)."""
    if isinstance(obj, torch.Tensor):
        if id(obj) not in seen:
            seen.add(id(obj))
            found.append(obj)
    elif isinstance(obj, Mapping):
        for v in obj.values():
            _walk(v, seen, found, objects)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _walk(v, seen, found, objects)
    elif objects is not None and type(obj) not in _ATOMIC and id(obj) not in seen:
        seen.add(id(obj))
        objects.append(obj)


def _storage_key(tensor: torch.Tensor) -> _StorageKey | None:
    """The storage ``tensor`` views, or None for one without (sparse)."""
    try:
        storage = tensor.untyped_storage()
        return str(tensor.device), storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def _extent(tensor: torch.Tensor) -> tuple[_StorageKey, int, int] | None:
    """The storage a plain strided tensor views and the bytes of it it
    spans, or None for one that is copied on its own (a subclass, a sparse,
    nested, empty, conjugate or meta tensor, or one without a storage)."""
    if (type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.numel() == 0
            or tensor.layout != torch.strided or tensor.is_nested or tensor.is_meta
            or tensor.is_conj() or tensor.is_neg()):
        return None
    key = _storage_key(tensor)
    if key is None:
        return None
    size = tensor.element_size()
    start = int(tensor.storage_offset()) * size
    last = sum((n - 1) * step for n, step in zip(tensor.shape, tensor.stride(), strict=True))
    return key, start, start + (last + 1) * size


def _spans(tensors: list[torch.Tensor]) -> dict[int, tuple[_StorageKey, int, int]]:
    """Tensors to copy as views of one copied span of their storage.

    A storage reached through several tensors is copied once, as the span
    of bytes they cover, when that span is no larger than their separate
    copies (tied weights: half; views tiling a flat buffer: the same) and
    each starts at a multiple of its element size within it.

    Returns:
        ``id(tensor) -> (storage, span start, span end)``.
    """
    groups: dict[_StorageKey, list[tuple[torch.Tensor, int, int]]] = {}
    for tensor in tensors:
        extent = _extent(tensor)
        if extent is not None:
            groups.setdefault(extent[0], []).append((tensor, extent[1], extent[2]))
    shared: dict[int, tuple[_StorageKey, int, int]] = {}
    for key, members in groups.items():
        if len(members) < 2:
            continue
        low = min(start for _, start, _ in members)
        high = max(end for _, _, end in members)
        apart = sum(t.numel() * t.element_size() for t, _, _ in members)
        if high - low > apart or any((start - low) % t.element_size()
                                     for t, start, _ in members):
            continue
        for tensor, _, _ in members:
            shared[id(tensor)] = (key, low, high)
    return shared


def state_nbytes(state: Any) -> int:
    """Bytes of host memory a snapshot of ``state`` takes (each tensor once,
    views of one storage as the span they share, a sparse tensor as its
    indices and values; see :func:`snapshot`), with the CPU tensors the
    objects it holds (a module, a dataclass) reach, as their deep copies
    hold them.

    Args:
        state: nested dicts / lists / tuples of tensors and other values.

    Returns:
        The byte count.
    """
    tensors: list[torch.Tensor] = []
    objects: list[Any] = []
    _walk(state, set(), tensors, objects)
    shared = _spans(tensors)
    alone = sum(_held_nbytes(t) for t in tensors if id(t) not in shared)
    spans = {(key, low, high) for key, low, high in shared.values()}
    return int(alone + sum(high - low for _, low, high in spans)
               + _objects_nbytes(objects, tensors))


def _objects_nbytes(objects: list[Any], tensors: list[torch.Tensor]) -> int:
    """Host bytes of the deep copies snapshot() makes of ``objects``."""
    if not objects:
        return 0
    if _objects_share(tensors):
        # One memo for all, holding the copies of the state's own tensors.
        return _deepcopy_nbytes(_reached(objects, {id(t): t for t in tensors}))
    return sum(_deepcopy_nbytes(_reached([obj], {})) for obj in objects)


def _reached(objects: list[Any], seen: dict[int, Any]) -> list[torch.Tensor]:
    """The tensors copy.deepcopy copies of ``objects``, each once, except
    those in ``seen`` (id -> object: kept alive, so no id is reused)."""
    found: list[torch.Tensor] = []
    stack = list(objects)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        else:
            stack.extend(_parts(obj))
    return found


def _parts(obj: Any) -> list[Any]:
    """What copy.deepcopy copies of ``obj``, one level down: the items of
    a container, else what its reduction (``__reduce_ex__(4)``) hands over."""
    cls = type(obj)
    if cls in _ATOMIC or isinstance(obj, type):
        return []
    if cls in (list, tuple):
        return list(obj)
    if cls is dict:
        return [*obj.keys(), *obj.values()]
    if hasattr(obj, "__deepcopy__"):
        # It copies itself its own way (a numpy array: its bytes; an object
        # kept as it is), which only running it would tell.
        return []
    reductor = copyreg.dispatch_table.get(cls)
    # Raises what the snapshot's deepcopy would raise (a lock: TypeError).
    reduced = reductor(obj) if reductor is not None else obj.__reduce_ex__(4)
    if isinstance(reduced, str):
        return []  # a global, copied as it is
    parts = list(reduced[1:3])  # the constructor's arguments, the state
    for items in reduced[3:5]:  # list items, dict items (pairs)
        if items is not None:
            parts.extend(items)
    return parts


def _deepcopy_nbytes(tensors: list[torch.Tensor]) -> int:
    """Host bytes copy.deepcopy makes of ``tensors``: a plain tensor's
    whole storage, once a storage (``Tensor.__deepcopy__`` copies it so); a
    Parameter's or sparse tensor's own bytes."""
    storages: dict[_StorageKey, int] = {}
    alone = 0
    for tensor in tensors:
        if tensor.device.type != "cpu":
            continue  # a meta tensor holds no data; an accelerator's is copied there
        key = _storage_key(tensor) if type(tensor) is torch.Tensor else None
        if key is None:
            alone += _held_nbytes(tensor)
        else:
            storages[key] = key[2]
    return alone + sum(storages.values())


def accelerated(state: Any) -> bool:
    """Whether ``state`` holds a tensor on an accelerator (CUDA, not CPU or meta)."""
    tensors: list[torch.Tensor] = []
    _walk(state, set(), tensors)
    return any(t.device.type not in ("cpu", "meta") for t in tensors)


def snapshot(state: Any, pool: BufferPool | None = None) -> Any:
    """Copy ``state`` so later in-place updates of its tensors cannot leak in.

    CUDA tensors are copied on a side stream of their device (after the
    work queued on its current stream), ``non_blocking`` into the pool's
    pinned buffers, and synchronised once at the end: when this returns,
    every copy is done and the tensors may change.

    Args:
        state: nested dicts / lists / tuples of tensors and plain values.
        pool: reuse host buffers from here where shape and dtype match.

    Returns:
        The same structure with every tensor cloned into CPU memory and other
        leaves deep-copied; tensors that viewed one storage view one copy.
    """
    tensors: list[torch.Tensor] = []
    _walk(state, set(), tensors)
    copier = _Copier(shares_objects=_objects_share(tensors))
    memo: dict[int, Any] = {}
    try:
        spans = _Spans(_spans(tensors), copier)
        for tensor in tensors:
            # Before the state's other leaves, which an object holding one
            # of them would otherwise deep-copy apart (on its device).
            _copy(tensor, memo, pool, spans, copier)
        return _copy(state, memo, pool, spans, copier)
    finally:
        copier.finish()  # also on failure: no copy may still write a dropped buffer


def _objects_share(tensors: list[torch.Tensor]) -> bool:
    """Whether the state's objects are copied with its tensors' memo: on a
    host state only (see :func:`_copy`)."""
    return all(t.device.type in ("cpu", "meta") for t in tensors)


class _Copier:
    """Copies of tensors into host memory; those of CUDA tensors queued on
    one side stream per device, waited for together in :meth:`finish`."""

    def __init__(self, shares_objects: bool = True) -> None:
        self._streams: dict[torch.device, Any] = {}
        #: objects other than containers are copied with the tensors' memo
        self.shares_objects = shares_objects

    def to_host(self, source: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        """``source`` copied into ``out`` (a fresh CPU tensor if None)."""
        if source.device.type != "cuda":
            return source.to("cpu", copy=True) if out is None else out.copy_(source)
        with torch.cuda.stream(self._stream(source.device)):
            if out is None:
                out = mapped_like(source)
                if out is None:
                    return source.to("cpu", copy=True)
            # Into pinned memory the copy is queued and this returns at
            # once; into pageable memory CUDA copies before returning.
            return out.copy_(source, non_blocking=out.is_pinned())

    def _stream(self, device: torch.device) -> Any:
        stream = self._streams.get(device)
        if stream is None:
            stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
            self._streams[device] = stream
            # The tensors' last updates are queued on the current stream.
            stream.wait_stream(torch.cuda.current_stream(device))
        return stream

    def finish(self) -> None:
        """Wait until every queued copy is done."""
        for stream in self._streams.values():
            stream.synchronize()
        self._streams.clear()


#: below this, a fresh buffer's few pages are not worth a pass of their own
_MAP_AHEAD_BYTES = 1 << 20


def mapped_like(source: torch.Tensor) -> torch.Tensor | None:
    """A fresh CPU tensor of ``source``'s shape and dtype with its pages
    already mapped (zeroed on torch's intra-op threads), or None where
    ``source`` is small or not a plain contiguous tensor.

    A device-to-host copy into fresh pageable memory maps its pages one
    fault at a time on the one thread that copies: a fresh ``.to("cpu")``
    of a 4 GiB state ran at 1.4 GiB/s on an H200 node, where the same copy
    into memory already mapped ran at 13.5 GB/s. Zeroing maps the pages on
    every intra-op thread first (a pass the first snapshot pays; the pool's
    buffers are reused after it): the first ``save_async`` of that state
    then blocked 0.69 s, against 3.12 s for a fresh ``.to("cpu")``.
    """
    if (type(source) is not torch.Tensor or not _dense(source)
            or source.is_quantized or source.is_conj() or source.is_neg()
            or not source.is_contiguous()
            or source.numel() * source.element_size() < _MAP_AHEAD_BYTES):
        return None
    out = torch.empty(source.shape, dtype=source.dtype)
    out.view(-1).view(torch.uint8).zero_()  # as bytes: every dtype alike, float8 and bits too
    return out


class _Spans:
    """The copied spans of the storages several tensors of a state view."""

    def __init__(self, shared: dict[int, tuple[_StorageKey, int, int]],
                 copier: _Copier) -> None:
        self.shared = shared
        self._copier = copier
        self._copies: dict[tuple[_StorageKey, int, int], torch.Tensor] = {}

    def view(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """``tensor`` as a view of its span's copy (None: not shared)."""
        found = self.shared.get(id(tensor))
        if found is None:
            return None
        _, low, high = found
        span = self._copies.get(found)
        if span is None:
            source = torch.empty(0, dtype=torch.uint8, device=tensor.device)
            source.set_(tensor.untyped_storage(), low, (high - low,), (1,))
            span = self._copies[found] = self._copier.to_host(source, None)
        size = tensor.element_size()
        return torch.empty(0, dtype=tensor.dtype).set_(
            span.untyped_storage(), (tensor.storage_offset() * size - low) // size,
            tensor.shape, tensor.stride())


def _copy(obj: Any, memo: dict[int, Any], pool: BufferPool | None, spans: _Spans,
          copier: _Copier) -> Any:
    key = id(obj)
    if key in memo:
        return memo[key]
    result: Any
    if isinstance(obj, torch.Tensor) and (view := spans.view(obj)) is not None:
        result = view
    elif isinstance(obj, torch.Tensor):
        result = _tensor_copy(obj, pool, copier)
    elif isinstance(obj, dict):
        # A shallow copy keeps the type and what it holds beyond its items
        # (a defaultdict's default_factory: type(obj)(items) raised
        # TypeError for it, and save_async stored a plain dict where save()
        # stored the defaultdict); then every value is copied in place.
        result = copy.copy(obj)
        for k, v in obj.items():
            result[k] = _copy(v, memo, pool, spans, copier)
    elif isinstance(obj, Mapping):
        items = {k: _copy(v, memo, pool, spans, copier) for k, v in obj.items()}
        try:
            result = type(obj)(items)  # type: ignore[call-arg]
        except TypeError:
            result = items
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        result = type(obj)(*(_copy(v, memo, pool, spans, copier) for v in obj))
    elif isinstance(obj, (list, tuple)):
        result = type(obj)(_copy(v, memo, pool, spans, copier) for v in obj)
    else:
        # The one memo on a host state: a tensor the object holds that the
        # state reaches elsewhere too is the snapshot's copy, still shared,
        # as torch.save keeps it (snapshot() copies those tensors first).
        # Not on a device's: a module beside its own weight would hold that
        # weight's host copy and its other tensors' device clones.
        result = copy.deepcopy(obj, memo if copier.shares_objects else {})
    if type(obj) is torch.nn.Parameter:
        # detach() made it a plain tensor: save() stores the Parameter (a
        # state_dict(keep_vars=True), or the parameters themselves).
        result = torch.nn.Parameter(result, requires_grad=obj.requires_grad)
    elif type(obj) is torch.Tensor and obj.requires_grad:
        # As save() keeps it (a learnable tensor that is no Parameter). An
        # alias of the copy: a pooled buffer itself must not require grad,
        # or the next snapshot's copy_ into it fails.
        result = result.detach().requires_grad_(True)
    memo[key] = result
    return result


def _tensor_copy(tensor: torch.Tensor, pool: BufferPool | None, copier: _Copier) -> torch.Tensor:
    """``tensor`` detached and copied to CPU (a CPU tensor still gets its
    own storage), into a pooled buffer where one fits."""
    if tensor.device.type == "meta":
        # No data to copy (nor any to copy out): torch.save stores its
        # shape, dtype and strides, as this alias keeps them.
        return tensor.detach()
    buf = None
    if pool is not None and type(tensor) is torch.Tensor and _dense(tensor):
        buf = pool.take(tuple(tensor.shape), tensor.dtype)
    return copier.to_host(tensor.detach(), buf)
