"""A griffe extension for the API reference: the stores' operations
documented by the ``ObjectStore`` protocol.

Each operation's docstring is written once, on the protocol
(``aioflux/_core/storage/protocol.py``); ``StoreBase`` takes them at import
(``_take_docs``), and a backend's override without a docstring of its own
shows the base's (``inspect.getdoc``). griffe reads the source and sees
neither: the stores' pages would show those methods bare. This gives each
undocumented operation of ``StoreBase`` and of every class built on it the
protocol's docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import griffe

BASE = "aioflux._core.storage.base.StoreBase"


def _modules(module: griffe.Module) -> Iterator[griffe.Module]:
    yield module
    for sub in module.modules.values():
        if not sub.is_alias:
            yield from _modules(sub)


def _is_store(cls: griffe.Class) -> bool:
    if cls.path == BASE:
        return True
    try:
        return any(base.path == BASE for base in cls.mro())
    except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        # an inconsistent order, or a base griffe cannot resolve: not a store
        return False


class ProtocolDocs(griffe.Extension):
    """Copies ``ObjectStore``'s docstrings to the stores' undocumented operations."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aioflux":
            return
        protocol = pkg["_core.storage.protocol.ObjectStore"]
        stores = (cls for module in _modules(pkg) for cls in module.classes.values()
                  if not cls.is_alias and _is_store(cls))
        for cls in stores:
            for name, member in cls.members.items():
                source = protocol.members.get(name)
                if member.is_alias or source is None or source.docstring is None:
                    continue
                if member.docstring is None:
                    member.docstring = griffe.Docstring(source.docstring.value,
                                                        lineno=source.docstring.lineno,
                                                        endlineno=source.docstring.endlineno,
                                                        parent=member,
                                                        parser=source.docstring.parser,
                                                        parser_options=source.docstring.parser_options)
