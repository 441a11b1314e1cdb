"""``aioflux ckpt list|history ROOT``: inspect a CheckpointManager's root.

Read-only: it lists what ``CheckpointManager.list()`` and ``.history()``
would return, without building a manager (no worker threads, nothing
written). A root holding no complete checkpoint (``list``) or no recorded
save (``history``) fails (exit 1), as ``ls`` of nothing does: a mistyped
root and an empty one look alike on a bucket. ``aioflux.torch`` is imported
only when the command runs, so the other commands do not pay for importing
torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .._core.errors import AiofluxError, InvalidArgument, NotFound
from .._core.storage.protocol import ObjectStore
from ._common import add_client_arguments, emit_json, human, portal_store, url_arg
from ._registry import action_parsers, command
from ._text import one_line

__all__: list[str] = []


def _ckpt_args(parser: argparse.ArgumentParser) -> None:
    for _, p in action_parsers(parser, (("list", "complete checkpoints, oldest first"),
                                        ("history", "every recorded save, oldest first"))):
        p.add_argument("root", type=url_arg,
                       help="root of the CheckpointManager: gs://bucket/prefix, "
                            "s3://bucket/prefix, az://container/prefix, file:///path or a "
                            "local path")
        p.add_argument("--json", action="store_true", help="one JSON document")
        add_client_arguments(p)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> None:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    print(line(header))
    for row in rows:
        print(line(row))


async def _listable(client: ObjectStore, bucket: str, prefix: str) -> None:
    """List one page under ``prefix``: raises NotFound for a missing bucket."""
    async for _ in client.list(bucket, prefix, page_size=1):
        return


def _nothing(op: str, store: Any, what: str) -> NotFound:
    """The failure of a root holding no checkpoint (exit 1, as ``ls`` of
    nothing): a mistyped root and an empty one look alike on a bucket, and
    "nothing here" with exit 0 let a script go on with the typo."""
    return NotFound(f"ckpt {op} {store.root}: {what}", operation=op,
                    bucket=store.bucket, name=store.prefix)


def _list(store: Any, as_json: bool) -> None:
    found = store.list()
    if not found:
        raise _nothing("list", store, "no complete checkpoints under it")
    if as_json:
        emit_json([{"step": c.step, "url": c.url, "created": c.created, "size": c.size,
                    "objects": c.objects, "compression": c.compression} for c in found])
        return
    rows = [(str(c.step), c.created, human(c.size), c.compression or "-", c.url) for c in found]
    _table(("STEP", "CREATED", "SIZE", "COMPRESSION", "URL"), rows, right={0, 2})


def _history(store: Any, as_json: bool) -> None:
    try:
        records = store.history()
    except AiofluxError:
        raise
    except (ValueError, TypeError) as exc:
        # A line that is not a SaveRecord is an expected failure: one line, exit 1.
        raise InvalidArgument(f"history {store.root}history.jsonl is not valid JSON lines: "
                              f"{exc}") from exc
    if not records:
        # A missing bucket fails as such (its listing says so), a root with
        # no history as nothing found.
        store.call(_listable(store.client, store.bucket, store.prefix))
        raise _nothing("history", store, "no saves recorded under it")
    if as_json:
        from dataclasses import asdict

        emit_json([asdict(r) for r in records])
        return
    try:
        rows = [(str(r.step), "ok" if r.ok else "FAILED", human(r.bytes), human(r.stored_bytes),
                 f"{r.blocking_seconds:.2f}", f"{r.total_seconds:.2f}", f"{r.mb_per_s:.1f}",
                 # A failed save's error is its exception's text, which may
                 # span lines (torch's errors often do): one row a record.
                 r.created, one_line(r.error or "")) for r in records]
    except (ValueError, TypeError) as exc:
        # A field of the wrong type ("bytes": "x") reached the table: one line, exit 1.
        raise InvalidArgument(f"history {store.root}history.jsonl holds a record whose fields "
                              f"are not numbers where numbers belong: {exc}") from exc
    _table(("STEP", "RESULT", "BYTES", "STORED", "BLOCKED_S", "TOTAL_S", "MB/S", "CREATED",
            "ERROR"), rows, right={0, 2, 3, 4, 5, 6})


@command("ckpt", _ckpt_args)
def _ckpt(args: argparse.Namespace) -> int:
    from ..torch.checkpoint._retention import CheckpointStore, root_prefix

    bucket, prefix = args.root
    prefix = root_prefix(str(args.root), prefix)
    with portal_store(args, args.root) as client:
        store = CheckpointStore(client, bucket, prefix)
        if args.action == "list":
            _list(store, args.json)
        else:
            _history(store, args.json)
    return 0
