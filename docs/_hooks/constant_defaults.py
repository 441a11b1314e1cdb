"""A griffe extension for the API reference: defaults shown as values.

Signatures say ``max_concurrency: int = DEFAULT_MAX_CONCURRENCY``; a
reader wants ``128``. A default (or a dataclass field's value) that names a
module constant whose value is a literal, or arithmetic on literals
(``32 * 1024 * 1024``), is shown as that value. Anything else (an f-string,
a call) keeps its name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import griffe


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    for member in obj.members.values():
        if isinstance(member, griffe.Alias):
            continue
        yield member
        if isinstance(member, (griffe.Module, griffe.Class)):
            yield from _objects(member)


def _plain(value: str | griffe.Expr) -> bool:
    """A literal, or arithmetic on literals."""
    if isinstance(value, str):
        return True
    return isinstance(value, griffe.ExprBinOp) and all(
        isinstance(part, str) for part in value.iterate(flat=True))


def _value(default: str | griffe.Expr, loader: griffe.GriffeLoader) -> str | griffe.Expr | None:
    """The literal a constant's name stands for, or None."""
    for _ in range(3):  # DEFAULT_PREFETCH = DEFAULT_MAX_CONCURRENCY = 128
        if not isinstance(default, griffe.ExprName):
            break
        try:
            target = loader.modules_collection[default.canonical_path]
            if target.is_alias:
                target = target.final_target
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
        if not isinstance(target, griffe.Attribute) or target.value is None:
            return None
        default = target.value
    return default if _plain(default) else None


class ConstantDefaults(griffe.Extension):
    """Replaces constant names in defaults by their values."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        if pkg.name != "aioflux":
            return
        for obj in _objects(pkg):
            if isinstance(obj, griffe.Function):
                for param in obj.parameters:
                    if isinstance(param.default, griffe.ExprName):
                        param.default = _value(param.default, loader) or param.default
            elif isinstance(obj, griffe.Attribute) and isinstance(obj.value, griffe.ExprName) \
                    and isinstance(obj.parent, griffe.Class):
                obj.value = _value(obj.value, loader) or obj.value
