"""A griffe extension for the API reference: Sphinx roles in docstrings.

aioflux's docstrings name other objects the way ``help()`` readers and
Sphinx know, ``:class:`~aioflux.AsyncClient```; Markdown would print the
role. Each becomes inline code, linked (an optional cross-reference:
plain code when the target has no page) to the object it names.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")


def _link(match: re.Match[str]) -> str:
    short, target = match.group(1) == "~", match.group(2).strip()
    if "<" in target and target.endswith(">"):  # :class:`title <target>`
        title, target = (part.strip() for part in target[:-1].split("<", 1))
    else:
        title = target.rsplit(".", 1)[-1] if short else target
    title = title.removesuffix("()")
    if not target.startswith("aioflux"):
        target = f"aioflux.{target}"
    code = f"<code>{html.escape(title)}</code>"
    return f'<autoref identifier="{html.escape(target)}" optional>{code}</autoref>'


def convert(text: str) -> str:
    """``text`` with every Sphinx role turned into a cross-referenced code span."""
    return _ROLE.sub(_link, text)


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx roles in every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
