"""What every method of ``AiofluxFileSystem`` stands on: its store (one per
process, closed with the filesystem), its settings, its recent metadata and
its paths.

Sync calls run on aioflux's process-wide portal loop (fsspec's
``self.loop``), so no second loop thread starts, and a process forked from
one that used the filesystem gets its own loop and store (fsspec's own loop
refuses to run after a fork).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any

import fsspec.asyn

from .._api.stores import BACKENDS, new_store
from .._core.checks.arguments import Credentials
from .._core.concurrency.portal import close_soon, get_portal
from .._core.concurrency.window import LoopSemaphore
from .._core.errors import InvalidArgument
from .._core.records.store_plugins import plugin_scheme
from .._core.settings.config import ClientConfig
from .._core.storage.protocol import ObjectStore
from ._options import settings_of
from ._paths import SCHEME_OF, split, strip_protocol
from ._recent import EXPIRY_S, Listings, RecentMetadata
from ._transfers import STREAMING_PUTS, TRANSFER_BLOCKS

__all__ = ["SCHEMES", "FileSystemBase"]

#: The stores a filesystem serves: the schemes of the one table (and, below,
#: another package's, from its entry point).
SCHEMES = tuple(BACKENDS)
_store_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _store_lock
    _store_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_held(held: list[tuple[int, ObjectStore]]) -> None:
    """Close a collected filesystem's store, if this process built it."""
    pid, store = held[0]
    if pid == os.getpid():
        close_soon(store)


class _StripFor:
    """An instance's ``_strip_protocol``: its own store's protocols only."""

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme

    def __call__(self, path: Any) -> Any:
        if isinstance(path, list):
            return [self(p) for p in path]
        return strip_protocol(os.fspath(path), local=self.scheme == "file", scheme=self.scheme)


class FileSystemBase(fsspec.asyn.AsyncFileSystem):  # type: ignore[misc]
    """The store, settings, recent metadata and paths of a filesystem (see
    ``AiofluxFileSystem``, which documents the arguments)."""

    default_scheme = "gs"
    root_marker = ""
    async_impl = True
    cachable = True

    def __init__(self, scheme: str | None = None, *, config: ClientConfig | None = None,
                 endpoint: str | None = None, credentials: Credentials = None,
                 region: str | None = None, asynchronous: bool = False, loop: Any = None,
                 **storage_options: Any) -> None:
        scheme = scheme or type(self).default_scheme
        if scheme not in SCHEMES and not plugin_scheme(scheme):
            raise InvalidArgument(f"AiofluxFileSystem: scheme must be one of "
                                  f"{', '.join(SCHEMES)}, got {scheme!r}")
        settings = settings_of(scheme, endpoint, credentials, region, storage_options)
        # fsspec's loop thread is never started: sync calls go to the portal's (see loop).
        options = {"listings_expiry_time": EXPIRY_S,
                   # A local stat costs microseconds, and programs write beside
                   # the filesystem with plain open(): a remembered listing hid
                   # their files for the expiry.
                   "use_listings_cache": scheme != "file", **settings.fsspec}
        super().__init__(asynchronous=asynchronous,
                         loop=None if asynchronous else get_portal().loop, **options)
        self.dircache = Listings(**options)
        self.recent = RecentMetadata(self.dircache)
        self.scheme = scheme
        # fsspec asks the instance, whose store may not be its class's
        # default: a path without a protocol on ``file`` is a file's,
        # relative to the working directory as in LocalFileSystem, and a URL
        # of another store is refused rather than read from this one.
        self._strip_protocol = _StripFor(scheme)  # type: ignore[method-assign]
        self._config, self._settings = config, settings
        self._blocks = LoopSemaphore(TRANSFER_BLOCKS)
        self._streaming_puts = LoopSemaphore(STREAMING_PUTS)
        # Built now so that bad settings fail here, and kept (not built twice).
        # Closed when the filesystem is collected: its connections stayed
        # open until exit (one filesystem a call, skip_instance_cache=True,
        # kept two descriptors each).
        self._held: list[tuple[int, ObjectStore]] = [(os.getpid(), self._new_store())]
        weakref.finalize(self, _close_held, self._held)

    def _new_store(self) -> ObjectStore:
        s = self._settings
        return new_store(self.scheme, self._config, endpoint=s.endpoint,
                         credentials=s.credentials, region=s.region,
                         user_project=s.user_project, requester_pays=s.requester_pays)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop sync calls run on: aioflux's portal (this process's)."""
        return None if self.asynchronous else get_portal().loop

    @property
    def store(self) -> ObjectStore:
        """This process's store (built on first use, again after a fork)."""
        held = self._held[0]
        if held[0] != os.getpid():
            # Under the lock: threads opening files at once (pyarrow's
            # writers) would each build a store, and the connections of all
            # but the one kept would never close.
            with _store_lock:
                held = self._held[0]
                if held[0] != os.getpid():
                    held = (os.getpid(), self._new_store())
                    self._held[0] = held
        return held[1]

    # -- paths ---------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return strip_protocol(os.fspath(path), local=cls.default_scheme == "file")

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        head = path.split("://", 1)[0] if "://" in path else ""
        scheme = SCHEME_OF.get(head.removeprefix("aioflux-"))
        return {"scheme": scheme} if scheme else {}

    def unstrip_protocol(self, name: str) -> str:
        """The URL of a path.

        Args:
            name: a path (``b/k``) or URL.

        Returns:
            Its URL on this filesystem's store (``gs://b/k``, ``file:///p``).
        """
        path = strip_protocol(name, local=self.scheme == "file")
        return f"file://{path}" if self.scheme == "file" else f"{self.scheme}://{path}"

    def _split(self, path: str, *, folder: bool = False) -> tuple[str, str]:
        # Of Azure's, a path may name an account (adlfs's container@account).
        return split(self.scheme, path, folder=folder,
                     store=self.store if self.scheme == "az" else None)

    def _refuse_pins(self, op: str, path: str, kwargs: dict[str, Any]) -> None:
        """Refuse gcsfs's ``generation=`` and s3fs's ``version_id=``: dropped,
        the current version was read as if it were the one asked for."""
        for pin in ("generation", "version_id"):
            if kwargs.get(pin) is not None:
                raise InvalidArgument(f"{op} {self.unstrip_protocol(path)}: {pin}= is not "
                                      "supported (aioflux reads the current version, and a "
                                      "file keeps the version it opened)")

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forget what recent listings and stats said of ``path`` and the
        folders above it, and of everything under it (all, if None).

        Args:
            path: a file or folder, or None.
        """
        if path is None:
            self.recent.clear()
        else:
            self.recent.forget(self._strip_protocol(path), tree=True)
