"""``aioflux cache info|clear DIR``: inspect or empty a local disk cache.

The directory must be one a dataset or ``load_files`` made (it holds
``aioflux-cache.json``): ``clear`` never deletes from any other directory,
so a mistyped path cannot wipe a home directory.
"""

from __future__ import annotations

import argparse
import os

from .._core.errors import InvalidArgument
from .._engines.cache import clear, info, is_cache
from .._engines.cache._files import MARKER
from ._common import emit_json, human
from ._registry import action_parsers, command

__all__: list[str] = []


def _configure(parser: argparse.ArgumentParser) -> None:
    for action, p in action_parsers(parser, (
            ("info", "entries, bytes and the recorded limit of a cache"),
            ("clear", "remove every entry (and leftovers of killed writers)"))):
        p.add_argument("directory", help="the cache directory (cache_dir=)")
        if action == "info":
            p.add_argument("--json", action="store_true", help="one JSON document")
        # Accepted so scripts can pass every command the same flags; a cache is local.
        p.add_argument("--endpoint", help=argparse.SUPPRESS)


def _cache_dir(path: str) -> str:
    root = os.path.abspath(path)
    if not is_cache(root):
        raise InvalidArgument(f"cache {root}: not an aioflux cache directory (no {MARKER})")
    return root


@command("cache", _configure)
def _run(args: argparse.Namespace) -> int:
    root = _cache_dir(args.directory)
    if args.action == "clear":
        entries, size = clear(root)
        print(f"removed {entries} entries ({human(size)}) from {root}")
        return 0
    found = info(root)
    if args.json:
        emit_json({"directory": found.directory, "entries": found.entries,
                   "bytes": found.bytes, "limit": found.limit,
                   "temporaries": found.temporaries, "oldest_seconds": found.oldest})
        return 0
    print(f"directory    {found.directory}")
    print(f"entries      {found.entries}")
    print(f"bytes        {found.bytes} ({human(found.bytes)})")
    print("limit        " + ("none recorded" if found.limit is None
                             else f"{found.limit} ({human(found.limit)})"))
    print(f"temporaries  {found.temporaries}")
    if found.oldest is not None:
        print(f"oldest use   {found.oldest:.0f} s ago")
    return 0
