"""A count a server states in text (a size, a generation), read strictly.

``isdigit()`` alone passes "²" and other scripts' digits; ``int()`` alone
takes " 12", "+1", "1_2" and "-5", and refuses a string past 4,300 digits
with a bare ValueError naming nothing.
"""

from __future__ import annotations

__all__ = ["MOST_DIGITS", "count_of"]

#: The most digits a count may have: an int64's (sizes, generations).
MOST_DIGITS = 19


def count_of(text: str) -> int | None:
    """``text`` as a count: ASCII digits only, at most :data:`MOST_DIGITS`.

    Args:
        text: what the server sent.

    Returns:
        The count, or None when ``text`` is none.
    """
    if text.isascii() and text.isdigit() and len(text) <= MOST_DIGITS:
        return int(text)
    return None
