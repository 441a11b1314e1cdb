"""Helpers shared by CLI commands: clients, URLs, output, progress."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from .._config import DEFAULT_MAX_CONCURRENCY, ClientConfig
from .._sync import Client
from .._urls import GcsURL, parse_url

__all__ = ["Progress", "add_client_arguments", "emit_json", "human", "make_client", "url_arg"]


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every storage command takes.

    Args:
        parser: the subcommand parser.
    """
    parser.add_argument("--endpoint", help="API root (default: STORAGE_EMULATOR_HOST or GCS)")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_MAX_CONCURRENCY,
                        help="requests in flight")


def make_client(args: argparse.Namespace) -> Client:
    """A sync Client from the common flags.

    Args:
        args: parsed arguments.

    Returns:
        The Client.
    """
    return Client(ClientConfig(max_concurrency=args.concurrency), endpoint=args.endpoint)


def url_arg(value: str) -> GcsURL:
    """argparse type for gs:// URLs (a bad URL is a usage error, exit 2)."""
    try:
        return parse_url(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def human(n: float) -> str:
    """Bytes as a short human string (1.5 MiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def emit_json(value: Any) -> None:
    """Print one JSON document to stdout."""
    print(json.dumps(value, indent=None, sort_keys=True))


class Progress:
    """A one-line progress bar on stderr, shown only when stderr is a terminal
    (or when forced), so pipes and tests get clean output.

    Args:
        total: expected bytes (0 if unknown).
        label: what is being done.
        enabled: force on/off; default: stderr is a TTY.
    """

    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._lock = threading.Lock()
        self._last = 0.0
        self._start = time.perf_counter()

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
        sys.stderr.write(f"\r{self.label} [{bar}] {pct}{human(self.done)} "
                         f"{human(rate)}/s ")
        sys.stderr.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw(time.perf_counter())
            sys.stderr.write("\n")
