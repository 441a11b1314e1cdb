"""The slow-drip rule: a transfer must move at least :data:`MIN_PROGRESS`
bytes in every window of ``read_stall`` seconds, or finish.

The read-stall timeout catches a silent socket, not a server that sends (or
reads) a byte every few seconds: such a transfer was never silent for long,
so a listing, a read or an upload could hang for days. A real transfer
moves megabytes a second; 16 KiB a minute is a broken or hostile peer. The
transfer fails as a :class:`TransportError` and is retried under the retry
policy's deadline like any dropped connection (a read resumes after what
arrived).
"""

from __future__ import annotations

from .._core.settings.config import DEFAULT_READ_STALL_TIMEOUT

__all__ = ["MIN_PROGRESS", "WINDOW", "Pace", "SlowTransfer", "timed_out_early"]

#: the least a transfer moves in each window
MIN_PROGRESS = 16 * 1024
#: the window where the client's own ``read_stall`` is not at hand (metadata
#: answers and request bodies are read and sent outside the media pool)
WINDOW = DEFAULT_READ_STALL_TIMEOUT


class SlowTransfer(TimeoutError):
    """A transfer moved less than :data:`MIN_PROGRESS` bytes in a window."""


class Pace:
    """Counts one transfer's bytes against windows of ``window`` seconds.

    Args:
        window: the window's length in seconds.
        now: the current time (the transfer starts).
    """

    __slots__ = ("_mark", "_start", "window")

    def __init__(self, window: float, now: float) -> None:
        self.window = window
        self._start = now
        self._mark = 0

    def check(self, moved: int, now: float, what: str) -> None:
        """Close the current window if it has passed.

        Args:
            moved: bytes moved since the transfer started.
            now: the current time.
            what: what moved, for the message ("response bytes", ...).

        Raises:
            SlowTransfer: the window passed with too few bytes moved.
        """
        if now - self._start < self.window:
            return
        if moved - self._mark < MIN_PROGRESS:
            raise SlowTransfer(f"only {moved - self._mark} {what} in {now - self._start:.3g} s "
                               f"(a transfer must move {MIN_PROGRESS // 1024} KiB each "
                               f"{self.window:g} s)")
        self._start, self._mark = now, moved

    def due(self, now: float) -> float:
        """Seconds until the current window closes."""
        return max(0.0, self._start + self.window - now)


def timed_out_early(moved: int) -> bool:
    """Whether a body that went silent after ``moved`` bytes counts as a drip.

    A few bytes then silence meet two timers: the silence timer, and the
    pace window, which ends first or second by a hair. Both outcomes must
    agree, or whether such an attempt counts against ``max_attempts`` (a
    drip's bytes are no progress) would be a race: under
    :data:`MIN_PROGRESS` it is a drip either way.
    """
    return moved < MIN_PROGRESS
