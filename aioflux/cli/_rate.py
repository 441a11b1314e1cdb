"""``aioflux rate show|reset [URL]``: the request-rate state this machine's
processes share (:mod:`aioflux._core.rate.shared_table`).

A key is an endpoint, a bucket and a kind (reads or writes). ``show``
lists each key a client of this user used: whether its requests are paced,
the rate, when it was last throttled. ``reset`` forgets the state of every
key, or of a bucket's keys, under the table's lock, so other processes
may run meanwhile: their requests are no longer paced until the service
throttles them again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from .._core.errors import InvalidURL
from .._core.rate.shared_table import Entry, entries, reset, state_dir
from .._core.records.urls import parse_url
from ._registry import action_parsers, command
from ._text import one_line

__all__: list[str] = []

_HEADER = ("ENDPOINT", "BUCKET", "KIND", "PACED", "RATE", "LAST THROTTLE", "TIMES PACED",
           "LAST USE")


def _bucket(value: str) -> str:
    """argparse type: a URL's bucket (``gs://b/x`` is ``b``), or a bucket name."""
    if "://" not in value:
        return value
    try:
        url = parse_url(value)
    except InvalidURL as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if url.scheme == "file":
        raise argparse.ArgumentTypeError(f"{value}: local files are not rate limited")
    return url.bucket


def _endpoint(value: str) -> str:
    """argparse type: an endpoint as keys hold it (``host:port`` is ``http://host:port``)."""
    value = value.strip()
    return (value if "://" in value else f"http://{value}").rstrip("/")


def _configure(parser: argparse.ArgumentParser) -> None:
    for action, p in action_parsers(parser, (
            ("show", "each endpoint, bucket and kind: paced or not, the rate, the throttles"),
            ("reset", "forget the state: requests are not paced until the service throttles "
                      "them again"))):
        p.add_argument("target", nargs="?", type=_bucket, metavar="URL",
                       help="only this bucket's keys: gs://bucket, s3://bucket, az://container, "
                            "http(s)://host or a bucket name (default: every key)")
        p.add_argument("--endpoint", type=_endpoint, metavar="URL",
                       help="only this endpoint's keys (as `rate show` lists them)")
        if action == "show":
            p.add_argument("--json", action="store_true", help="one JSON document")


def _parts(entry: Entry) -> tuple[str | None, str | None, str | None]:
    """Endpoint, bucket and kind (None each for a key no process recorded)."""
    if entry.key is None:
        return None, None, None
    endpoint, bucket, kind = entry.key.rsplit("|", 2)
    return endpoint, bucket, kind


def _chooser(args: argparse.Namespace) -> Callable[[Entry], bool]:
    def chosen(entry: Entry) -> bool:
        endpoint, bucket, _ = _parts(entry)
        if args.target is not None and bucket != args.target:
            return False
        return args.endpoint is None or endpoint == args.endpoint

    return chosen


def _ago(at: float, now: float) -> float | None:
    """Seconds since ``at`` (monotonic), None if never."""
    return now - at if 0.0 < at <= now else None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _document(entry: Entry, now: float) -> dict[str, object]:
    endpoint, bucket, kind = _parts(entry)
    state = entry.state
    return {"endpoint": endpoint, "bucket": bucket, "kind": kind, "slot": entry.slot,
            "paced": state.throttled, "rate": state.rate if state.throttled else None,
            "times_paced": state.epoch, "owed": state.debt,
            "throttled_seconds_ago": _ago(max(state.throttle_at, state.owed_at), now),
            "paced_seconds_ago": _ago(state.started_at, now) if state.throttled else None,
            "used_seconds_ago": _ago(entry.used_at, now)}


def _row(entry: Entry, now: float) -> tuple[str, ...]:
    endpoint, bucket, kind = _parts(entry)
    state = entry.state
    return (endpoint or f"(not recorded: slot {entry.slot})", one_line(bucket or "-"),
            kind or "-", "yes" if state.throttled else "no",
            f"{state.rate:.1f}/s" if state.throttled else "-",
            _age(_ago(max(state.throttle_at, state.owed_at), now)), str(state.epoch),
            _age(_ago(entry.used_at, now)))


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())


def _order(entry: Entry) -> tuple[bool, str, int]:
    return entry.key is None, entry.key or "", entry.slot


@command("rate", _configure)
def _run(args: argparse.Namespace) -> int:
    chosen = _chooser(args)
    if args.action == "show":
        found = sorted((entry for entry in entries() if chosen(entry)), key=_order)
    else:
        found = sorted(reset(chosen), key=_order)
    filtered = args.target is not None or args.endpoint is not None
    if args.action == "show" and args.json:
        now = time.monotonic()
        print(json.dumps({"directory": state_dir(),
                          "keys": [_document(entry, now) for entry in found]}, sort_keys=True))
    if not found:
        # A typo in a URL matches nothing: a script is told, as by `ls`.
        what = "no request-rate state" + (" matches" if filtered else "")
        print(f"aioflux rate: {what} in {state_dir()}", file=sys.stderr)
        return 1 if filtered else 0
    if args.action == "show":
        if not args.json:
            # Keys an older aioflux left unnamed are many on a busy machine:
            # a row for those paced or owing throttles, a count of the rest.
            shown = [e for e in found if e.key is not None or e.state.throttled or e.state.debt]
            now = time.monotonic()
            if shown:
                _table([_HEADER, *(_row(entry, now) for entry in shown)])
            if len(shown) < len(found):
                print(f"{len(found) - len(shown)} more key(s) not recorded by name, not paced")
        return 0
    for entry in found:
        endpoint, bucket, kind = _parts(entry)
        name = (f"{endpoint} {one_line(bucket or '')} {kind}" if entry.key is not None
                else f"slot {entry.slot} (key not recorded)")
        was = f"paced at {entry.state.rate:.1f}/s" if entry.state.throttled else "not paced"
        print(f"reset {name} (was {was})")
    print(f"reset {len(found)} key(s) in {state_dir()}")
    return 0
