"""A griffe extension for the API reference: the blocking stores' methods.

``SyncStore`` and ``Client`` make their methods from the async ones
(``stat = blocking(ObjectStore.stat)``, ``aioflux/_api/sync_store.py``);
griffe reads the source and sees attributes. This turns each such
attribute into the method it is at run time: the async method's
parameters and docstring, an async iterator returned as an iterator.
Runs after ``protocol_docs`` (the stores' docstrings are the protocol's).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# Each face, and the store whose docstrings its methods spelt out for mypy
# (``if TYPE_CHECKING: def list(...)``, undocumented) take.
FACES = {
    "aioflux._api.sync_store.SyncStore": "aioflux._core.storage.protocol.ObjectStore",
    "aioflux._api.sync.Client": "aioflux.gcs._client.GcsStore",
}
_MADE = re.compile(r"^blocking\((\w+)\.(\w+)\)$")


def _target(obj: Any) -> Any:
    return obj.final_target if obj.is_alias else obj


def _method(attribute: griffe.Attribute, source: griffe.Function) -> griffe.Function:
    returns = source.returns
    if returns is not None:
        returns = re.sub(r"^Async(Iterator|Generator)\[", "Iterator[", str(returns))
    made = griffe.Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        parameters=source.parameters,
        returns=returns,
    )
    if source.docstring is not None:
        made.docstring = griffe.Docstring(
            source.docstring.value,
            parent=made,
            parser=source.docstring.parser,
            parser_options=source.docstring.parser_options,
        )
    return made


class SyncFaces(griffe.Extension):
    """Gives the blocking stores' made methods their async twins' signatures and docs."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aioflux":
            return
        for path, store_path in FACES.items():
            face = pkg[path.removeprefix("aioflux.")]
            store = pkg[store_path.removeprefix("aioflux.")]
            module = face.parent
            for name, member in list(face.members.items()):
                if isinstance(member, griffe.Function) and member.docstring is None:
                    twin = store.all_members.get(name)
                    if twin is not None and _target(twin).docstring is not None:
                        doc = _target(twin).docstring
                        member.docstring = griffe.Docstring(
                            doc.value,
                            parent=member,
                            parser=doc.parser,
                            parser_options=doc.parser_options,
                        )
                if member.is_alias or not isinstance(member, griffe.Attribute):
                    continue
                made = _MADE.match(str(member.value))
                if made is None:
                    continue
                owner = _target(module[made.group(1)])
                source = _target(owner.all_members[made.group(2)])
                method = _method(member, source)
                face.set_member(name, method)
