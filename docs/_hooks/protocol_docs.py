"""A griffe extension for the API reference: ``StoreBase``'s operations
documented by the ``ObjectStore`` protocol.

Each operation's docstring is written once, on the protocol
(``aioflux/_core/store.py``); ``StoreBase`` takes them at import
(``_take_docs``), which griffe, reading the source, does not see. The
stores' pages (``inherited_members``) would show those methods bare: this
gives each undocumented ``StoreBase`` member the protocol's docstring.
"""

from __future__ import annotations

from typing import Any

import griffe


class ProtocolDocs(griffe.Extension):
    """Copies ``ObjectStore``'s docstrings to ``StoreBase``'s members."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aioflux":
            return
        protocol = pkg["_core.store.ObjectStore"]
        base = pkg["_core.store_base.StoreBase"]
        for name, member in base.members.items():
            source = protocol.members.get(name)
            if member.is_alias or source is None or source.docstring is None:
                continue
            if member.docstring is None:
                member.docstring = griffe.Docstring(source.docstring.value,
                                                    lineno=source.docstring.lineno,
                                                    endlineno=source.docstring.endlineno,
                                                    parent=member)
