"""A griffe extension for the API reference: no private base in "Bases:".

``AsyncClient`` gets its multipart calls from a private mixin, the
resumable samplers their state from a private base. Their pages show those
members as the class's own (``inherited_members``), and the "Bases:" line
(docs/_templates/python/material/class.html.jinja) only the bases a user
can import: each class gets ``extra["aioflux"]["bases"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import griffe

# The packages and modules whose names are public (their __all__).
PUBLIC_MODULES = ("", "torch", "torch.lightning", "torch.dcp", "testing", "fsspec", "otel")


def _classes(obj: griffe.Object) -> Iterator[griffe.Class]:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            yield member
        if isinstance(member, (griffe.Module, griffe.Class)):
            yield from _classes(member)


def _path(base: str | griffe.Expr) -> str:
    if isinstance(base, griffe.ExprSubscript):
        base = base.left
    return base.canonical_path if isinstance(base, griffe.Expr) else base


class PublicBases(griffe.Extension):
    """Lists each class's bases, private aioflux ones left out."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aioflux":
            return
        public = set()
        for name in PUBLIC_MODULES:
            module = pkg[name] if name else pkg
            for export in module.exports or ():
                member = module.members.get(str(export))
                if isinstance(member, griffe.Alias):
                    public.add(member.target_path)
                elif member is not None:
                    public.add(member.path)
        for cls in _classes(pkg):
            cls.extra["aioflux"]["bases"] = [
                b for b in cls.bases
                if not (_path(b).startswith("aioflux.")
                        and any(p.startswith("_") for p in _path(b).split("."))
                        and _path(b) not in public)]
