"""Backends from other packages: the ``aioflux.stores`` entry point group.

A package serves a scheme by declaring an entry point named for it, in its
``pyproject.toml``::

    [project.entry-points."aioflux.stores"]
    hf = "aioflux_hf:build_store"

whose object builds a store: ``build_store(scheme, config, **settings)``
returns an :class:`~aioflux._core.storage.protocol.ObjectStore` (``settings``: what ``new_store``
was given, such as ``endpoint``; refuse the ones it does not take with
``TypeError``). Nothing is imported until a URL of that scheme is used;
aioflux's own schemes are not looked up (``aioflux._api.stores.BACKENDS``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["GROUP", "StoreBuilder", "plugin_builder", "plugin_scheme"]

GROUP = "aioflux.stores"

# (scheme, config, **settings) -> the store (checked by whoever builds it:
# this module stays below the storage protocol, which urls.py is under).
StoreBuilder = Callable[..., Any]

_loaded: dict[str, StoreBuilder] = {}
_lock = threading.Lock()


def _entry_point(scheme: str) -> Any:
    # Looked up each time until found: a package installed while the
    # process runs (or a test's distribution) is seen.
    from importlib.metadata import entry_points

    found = entry_points(group=GROUP, name=scheme)
    return next(iter(found), None)


def plugin_scheme(scheme: str) -> bool:
    """Whether an installed package serves ``scheme`` (nothing imported).

    Args:
        scheme: a URL's scheme, not one of aioflux's own.

    Returns:
        True if an ``aioflux.stores`` entry point is named for it.
    """
    return scheme in _loaded or (scheme.isidentifier() and _entry_point(scheme) is not None)


def plugin_builder(scheme: str) -> StoreBuilder | None:
    """The builder an installed package declares for ``scheme``, imported
    on first use.

    Args:
        scheme: a URL's scheme, not one of aioflux's own.

    Returns:
        The builder, or None when no package serves the scheme.

    Raises:
        ImportError: the package's entry point does not import (as raised).
    """
    with _lock:
        builder = _loaded.get(scheme)
        if builder is None and scheme.isidentifier():
            point = _entry_point(scheme)
            if point is not None:
                builder = _loaded[scheme] = point.load()
        return builder
