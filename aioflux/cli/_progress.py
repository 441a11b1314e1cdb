"""The progress line of a command that moves bytes (``cp``), and what it
says of the service's throttling: the attempts refused and the request
rate the node's processes are paced at (:mod:`aioflux._net.throttle`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable

from .._core.metrics import RequestStats
from ._common import human

__all__ = ["Progress", "throttling"]


def throttling(counters: Iterable[RequestStats]) -> str:
    """The attempts the services throttled and the request rate paced to,
    ``"throttled: 12, paced at 95 req/s"`` (one rate per bucket and kind,
    each named when there are several), or "" when nothing was throttled
    nor paced: a run the controller never touched shows nothing more.

    Args:
        counters: the stores' ``stats``.

    Returns:
        The note, or "".
    """
    throttled = 0
    rates: dict[str, float] = {}
    for stats in counters:
        throttled += stats.throttled
        rates.update(stats.rates)
    if not throttled and not rates:
        return ""
    # Paced by what another process of the node was refused, this one may
    # not have been throttled itself: its pace is still why it is slower.
    parts = [f"throttled: {throttled}"]
    if len(rates) == 1:
        parts.append(f"paced at {next(iter(rates.values())):.0f} req/s")
    elif rates:
        parts.append("paced at " + ", ".join(f"{rate:.0f} req/s ({label})"
                                             for label, rate in sorted(rates.items())))
    return ", ".join(parts)


class Progress:
    """A one-line progress bar on stderr, shown only when stderr is a terminal
    (or when forced), so pipes and tests get clean output.

    Args:
        total: expected bytes (0 if unknown).
        label: what is being done.
        enabled: force on/off; default: stderr is a TTY.
        note: called at each redraw, its text ("" for none) ends the line
            (:func:`throttling`: a copy slowed by the service's throttling
            says so).
    """

    def __init__(self, total: int, label: str, enabled: bool | None = None,
                 note: Callable[[], str] | None = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._note = note
        self._lock = threading.Lock()
        self._last = 0.0
        self._start = time.perf_counter()
        self._width = 0  # of the line drawn last

    def add(self, n: int) -> None:
        """Count ``n`` more bytes and redraw at most 5 times a second."""
        with self._lock:
            self.done += n
            now = time.perf_counter()
            if self.enabled and now - self._last > 0.2:
                self._last = now
                self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.done / max(now - self._start, 1e-9)
        pct = f"{100 * self.done / self.total:5.1f}% " if self.total else ""
        width = 30
        filled = int(width * self.done / self.total) if self.total else 0
        bar = "#" * filled + "-" * (width - filled)
        line = f"{self.label} [{bar}] {pct}{human(self.done)} {human(rate)}/s "
        note = self._note() if self._note is not None else ""
        if note:
            line += f"({note}) "
        # A note that ended (pacing stopped) leaves no tail of itself behind.
        sys.stderr.write(f"\r{line.ljust(self._width)}")
        self._width = len(line)
        sys.stderr.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw(time.perf_counter())
            sys.stderr.write("\n")
