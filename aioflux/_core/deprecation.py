"""Names on their way out: a use warns, naming the replacement and the
release that removes the old name (docs/migration/deprecations.md lists them all)."""

from __future__ import annotations

import warnings

__all__ = ["REMOVED_IN", "warn_deprecated"]

# Two minor releases after the one that deprecated them (0.1).
REMOVED_IN = "0.3.0"


def warn_deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``.

    Args:
        old: the deprecated name, as the user wrote it (``aioflux.GcsURL``).
        new: what to use instead.
        stacklevel: the frame the warning names (the caller's caller by default).
    """
    warnings.warn(
        f"{old} is deprecated and goes in aioflux {REMOVED_IN}: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
