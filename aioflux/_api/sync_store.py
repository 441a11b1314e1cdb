"""``SyncStore``: the blocking face of any store, generated from its async methods.

A face has one method per public method of its store, made by
:func:`blocking` (fsspec's ``mirror_sync_methods`` in spirit): it runs the
async method on the process's portal (the background event-loop thread).
A coroutine's result comes back as it is; an async iterator (``list``,
``list_objects``, ``stream``) as an iterator fed in batches; an object with
async methods of its own (``start_upload``'s upload) with a face of its
own. ``aclose`` is ``close``, ``async with`` is ``with``. Each method keeps
its async twin's docstring and parameters: there is one copy of each.

The methods of the storage protocol are declared on :class:`SyncStore`,
which is what types them (``blocking`` turns the async signature into the
sync one); a store's own methods (GCS's ``create_bucket``, S3's
``delete_many``) are added to the face of that store's class on first use.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from .._core.concurrency.portal import get_portal, iterate
from .._core.records.types import ObjectInfo
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import ObjectStore, PartUpload, StoreFeatures
from .._engines.download import DEFAULT_PREFETCH_BYTES

__all__ = ["SyncPartUpload", "SyncStore", "blocking"]

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound=ObjectStore)
_F = TypeVar("_F", bound="SyncStore[Any]")

# The sync names of async ones that are not the same word.
_SYNC_NAMES = {"aclose": "close"}
# Most items per hop to the caller's thread: a listing's pages one at a
# time (a page holds up to 1000 objects); anything else in batches.
_BATCH = {"list": 1}
_DEFAULT_BATCH = 64


class SyncPartUpload(Protocol):
    """The blocking face of a :class:`~aioflux._core.storage.protocol.PartUpload`."""

    @property
    def mode(self) -> str:
        """How it uploads: ``single``, ``multipart``, ``resumable``, ``file``..."""
        ...

    def put(self, number: int, data: memoryview, checksum: int | None = None) -> None:
        """Store part ``number``; ``checksum`` is its crc32c if known."""
        ...

    def finish(
        self,
        last_number: int,
        tail: memoryview | None,
        expected: Any,
        tail_checksum: int | None = None,
    ) -> ObjectInfo:
        """Publish the object (see ``PartUpload.finish``)."""
        ...

    def abort(self) -> None:
        """Drop the upload; nothing is published."""
        ...


@overload
def blocking(
    func: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]: ...


@overload
def blocking(
    func: Callable[Concatenate[Any, P], AsyncIterator[T]],
) -> Callable[Concatenate[Any, P], Iterator[T]]: ...


@overload
def blocking(
    func: Callable[Concatenate[Any, P], PartUpload],
) -> Callable[Concatenate[Any, P], SyncPartUpload]: ...


def blocking(func: Callable[..., Any]) -> Callable[..., Any]:
    """The blocking method of the async method ``func``: it calls the
    method of that name on ``self.aio`` (not ``func`` itself, so that an
    override answers), on the portal.

    Args:
        func: the async method (a protocol's or a store's).

    Returns:
        The blocking method, with ``func``'s name, docstring and parameters.
    """
    name = func.__name__

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _run(name, getattr(self.aio, name), args, kwargs)

    method.__name__ = method.__qualname__ = _SYNC_NAMES.get(name, name)
    method.__doc__ = func.__doc__
    method.__wrapped__ = func  # type: ignore[attr-defined]
    signature = inspect.signature(func)
    returns = signature.return_annotation
    if isinstance(returns, str):  # ``from __future__ import annotations``
        returns = returns.replace("AsyncIterator[", "Iterator[").replace(
            "AsyncGenerator[", "Iterator["
        )
    method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return method


def _run(
    name: str, bound: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    # A read into the caller's buffer waits, if interrupted, until the read
    # has stopped writing into it.
    result = get_portal().call(_start(bound, args, kwargs), settled="into" in kwargs)
    if isinstance(result, AsyncIterator):
        if name == "stream":
            # What the stream downloaded ahead waits here for a slow consumer:
            # a quarter of its prefetch_bytes (as ObjectIterableDataset's hand-off),
            # not a count of objects of any size.
            budget = getattr(kwargs.get("options"), "prefetch_bytes", DEFAULT_PREFETCH_BYTES)
            return iterate(
                result, batch=_DEFAULT_BATCH, nbytes=_item_bytes, max_bytes=max(1, budget // 4)
            )
        return iterate(result, batch=_BATCH.get(name, _DEFAULT_BATCH))
    if _async_methods(type(result)):
        return _face_class(_ObjectFace, type(result))(result)
    return result


async def _start(bound: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # On the loop: a method that is not a coroutine (list, start_upload)
    # may still make loop-bound state as it is called.
    result = bound(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def _item_bytes(item: Any) -> int:
    return len(item.data)


def _async_methods(cls: type) -> bool:
    known = _has_async.get(cls)
    if known is None:
        known = _has_async[cls] = any(
            inspect.iscoroutinefunction(getattr(cls, name, None))
            for name in dir(cls)
            if not name.startswith("_")
        )
    return known


_has_async: dict[type, bool] = {}


class _ObjectFace:
    """The blocking face of an object a method returned (an upload),
    ``aio``: its other attributes (``mode``) read through."""

    def __init__(self, aio: Any) -> None:
        self.aio = aio

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.aio, name)


_faces: dict[tuple[type, type], type] = {}
_faces_lock = threading.Lock()


def _face_class(base: type, cls: type) -> type:
    """``base`` with a blocking method for each public method of ``cls``
    that ``base`` does not mirror already (made once per pair)."""
    with _faces_lock:
        face = _faces.get((base, cls))
        if face is None:
            face = type(f"{base.__name__}[{cls.__name__}]", (base,), {})
            face.__module__ = base.__module__
            mirror_methods(face, cls)
            _faces[(base, cls)] = face
        return face


def mirror_methods(face: type, cls: type) -> None:
    """Give ``face`` a blocking twin of every public method and property of
    ``cls`` that it does not have already with the same parameters.

    Args:
        face: the face class (changed in place).
        cls: the class of the async objects it faces.
    """
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, property):
            if not hasattr(face, name):
                setattr(face, name, _forwarded(name, value))
            continue
        if not inspect.isfunction(value):
            continue  # constants, class and static methods (constructors)
        sync_name = _SYNC_NAMES.get(name, name)
        have = getattr(face, sync_name, None)
        wrapped = getattr(have, "__wrapped__", None)
        if have is not None and (wrapped is None or _same(wrapped, value)):
            continue
        setattr(face, sync_name, blocking(value))
    _own_methods(face)


def _own_methods(face: type) -> None:
    # A made method names the class it is on (help(), the API reference).
    for name, value in vars(face).items():
        if getattr(value, "__wrapped__", None) is not None:
            value.__qualname__ = f"{face.__qualname__}.{name}"


def _same(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    return a is b or (a.__doc__ == b.__doc__ and inspect.signature(a) == inspect.signature(b))


def _forwarded(name: str, prop: property) -> property:
    def get(self: Any) -> Any:
        return getattr(self.aio, name)

    return property(get, doc=prop.__doc__)


class SyncStore(Generic[S]):
    """The blocking face of a store: ``SyncStore(S3Store())``.

    Every method runs the store's async method of the same name on the
    process's portal (a background event-loop thread) and waits for it;
    async iterators come back as iterators. The face has a blocking method
    for each of its store's (``aclose`` is ``close``), with the same
    parameters and docstring. ``aioflux.Client`` is GCS's.

    Args:
        store: any store (``GcsStore``, ``S3Store``, ``AzureStore``,
            ``LocalStore``, ``HttpStore``, ``MemoryStore``...). The caller
            owns it: ``close`` (or ``with``) closes it.

    Raises:
        BridgeError: (from its methods) called on the portal's own thread,
            such as from code its event loop runs.
    """

    aio: S

    def __init__(self, store: S) -> None:
        self.aio = store

    if not TYPE_CHECKING:

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            # ``SyncStore(store)`` is the face of the store's own class; a
            # subclass (``Client``) is already made for its one class.
            if cls is not SyncStore or not args:
                return super().__new__(cls)
            return super().__new__(_face_class(cls, type(args[0])))

    @property
    def config(self) -> ClientConfig:
        """The store's settings."""
        return self.aio.config

    @property
    def features(self) -> StoreFeatures:
        """What the store can do beyond the common operations."""
        return self.aio.features

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncStore({self.aio!r})"

    def __reduce__(self) -> str | tuple[Any, ...]:
        # A face's class is made at run time, so it pickles as the call that
        # makes it (its store pickling as that store does); a class of its
        # own (Client) as any class does.
        if type(self) in _faces.values():
            return SyncStore, (self.aio,)
        return super().__reduce__()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _own_methods(cls)

    stat = blocking(ObjectStore.stat)
    exists = blocking(ObjectStore.exists)
    list = blocking(ObjectStore.list)
    list_objects = blocking(ObjectStore.list_objects)
    read = blocking(ObjectStore.read)
    fetch = blocking(ObjectStore.fetch)
    write = blocking(ObjectStore.write)
    start_upload = blocking(ObjectStore.start_upload)
    delete = blocking(ObjectStore.delete)
    copy = blocking(ObjectStore.copy)
    compose = blocking(ObjectStore.compose)
    list_multipart_uploads = blocking(ObjectStore.list_multipart_uploads)
    abort_multipart = blocking(ObjectStore.abort_multipart)
    list_parts = blocking(ObjectStore.list_parts)
    close = blocking(ObjectStore.aclose)


_own_methods(SyncStore)
