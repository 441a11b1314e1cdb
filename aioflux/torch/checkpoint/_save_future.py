"""``SaveFuture``: the future of a ``CheckpointManager`` background save.

Apart from the manager so that the manager's parts (``_publish``, which
spares the steps of saves in flight from retention) can name the futures
they share without importing the manager.
"""

from __future__ import annotations

import concurrent.futures

from ._history import CheckpointInfo

__all__ = ["SaveFuture"]


class SaveFuture(concurrent.futures.Future[CheckpointInfo]):
    """Future of a background save; it remembers whether its outcome was
    looked at, so an unobserved failure is raised by the next save."""

    observed = False

    def result(self, timeout: float | None = None) -> CheckpointInfo:
        """Wait for the save and return what it saved (marks the outcome looked
        at, unless the wait timed out).

        Args:
            timeout: most seconds to wait; None: until it is done.

        Returns:
            The complete checkpoint.

        Raises:
            TimeoutError: not done within ``timeout``.
            Exception: the save's own failure, re-raised as it was (a
                ``StorageError``, ``Conflict``...).
        """
        # Marked only once the outcome is there to be seen: a poll that timed
        # out (``result(timeout=0)`` while the upload ran) looked at nothing,
        # and marking it made the save's later failure pass unraised by the
        # next save, ``close()`` and the exit hook alike.
        super().exception(timeout)  # TimeoutError while the save still runs
        self.observed = True
        return super().result()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the save and return its failure (marks the outcome looked at,
        unless the wait timed out).

        Args:
            timeout: most seconds to wait; None: until it is done.

        Returns:
            The save's exception, or None if it succeeded.

        Raises:
            TimeoutError: not done within ``timeout``.
        """
        exc = super().exception(timeout)  # TimeoutError: nothing looked at (see result)
        self.observed = True
        return exc
