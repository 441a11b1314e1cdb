"""Rank body of the listing-agreement tests: 2 processes, gloo on CPU, file:// folders.

``python -m tests.torch._rank_listing_worker RANK WORLD INIT_FILE ROOT OUT``

Each rank runs every scenario of :data:`SCENARIOS` in turn and writes what
it saw to ``OUT/<rank>.json``: per scenario, the names (or shard counts)
its dataset holds, its ``len``, the store requests it made while making
the dataset, and the error it raised (type, message, notes). The test
process asserts on those.

The order of events is fixed by the program, never by timing: where a
scenario changes the folder, rank 0 changes it from inside its own listing
(or indexing), after it has listed and before it hands anything on, then
writes a marker file; rank 1 makes its dataset only once the marker
exists, and a barrier starts each scenario. So with ``listing="each"``
rank 1 always lists the changed folder, and with ``listing="rank0"`` it
would too, if it listed. The waits and the process group's timeout are
hang guards only.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import torch.distributed as dist

from aioflux import PermissionDenied
from aioflux._core.concurrency.portal import call
from aioflux.local import LocalStore
from aioflux.torch import (
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
    ShardDataset,
    ShardMapDataset,
    ShardReads,
)
from aioflux.torch.data import _shard_source, _source
from tests.torch._two_ranks import rank_main

# Store requests (LocalStore operations) this process made, by kind.
REQUESTS: Counter[str] = Counter()
# Set while rank 1 makes a dataset that rank 0 lists for: any request fails.
FORBIDDEN = False
# Run once, by this rank, right after its next listing (or indexing) returns.
AFTER: list[Callable[[], None]] = []
GUARD = 60.0  # seconds: a hang guard, never reached when the program is right


class Unpicklable(Exception):
    """An error whose pickle does not load (its constructor wants two arguments)."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def _instrument() -> None:
    run = LocalStore._run

    async def counted(self: LocalStore, op: str, bucket: str, name: str, work: Any,
                      *args: Any, **kwargs: Any) -> Any:
        if FORBIDDEN:
            raise AssertionError(f"this rank made a {op!r} request for {name!r}")
        REQUESTS[op] += 1
        return await run(self, op, bucket, name, work, *args, **kwargs)

    LocalStore._run = counted  # type: ignore[method-assign]
    held = LocalStore._read_held

    def counted_held(self: LocalStore, bucket: str, name: str, work: Any, received: Any) -> Any:
        # A read done in the calling thread (page-cached bytes) is a request too.
        if FORBIDDEN:
            raise AssertionError(f"this rank made a 'read' request for {name!r}")
        REQUESTS["read"] += 1
        return held(self, bucket, name, work, received)

    LocalStore._read_held = counted_held  # type: ignore[method-assign]

    pager = _source.iter_pages  # type: ignore[attr-defined]

    async def listed(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        pages = pager(*args, **kwargs)
        async with aclosing(pages):
            async for page in pages:
                yield page
        # Off the loop thread: the change writes through the portal, as a user would.
        await asyncio.to_thread(_after)

    _source.iter_pages = listed  # type: ignore[attr-defined]

    # Files are listed as columns, not through iter_pages: the same hook.
    columns = LocalStore.list_columns

    async def listed_columns(self: LocalStore, *args: Any,
                             **kwargs: Any) -> AsyncGenerator[Any, None]:
        pages = columns(self, *args, **kwargs)
        async with aclosing(pages):
            async for page in pages:
                yield page
        await asyncio.to_thread(_after)

    LocalStore.list_columns = listed_columns  # type: ignore[method-assign]

    indexer = _shard_source.count_all

    def indexed(*args: Any, **kwargs: Any) -> Any:
        found = indexer(*args, **kwargs)
        _after()
        return found

    _shard_source.count_all = indexed  # type: ignore[assignment]


def _after() -> None:
    if AFTER:
        AFTER.pop()()


class Scenario:
    def __init__(self, rank: int, root: Path, out: Path) -> None:
        self.rank, self.root, self.out = rank, root, out

    def put(self, name: str, body: bytes) -> None:
        path = self.root / name
        call(LocalStore().write(path.parts[1], "/".join(path.parts[2:]), body))

    def changed(self, name: str) -> Path:
        return self.out / f"{name}.changed"

    def wait(self, name: str) -> None:
        deadline = time.monotonic() + GUARD
        while not self.changed(name).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: rank 0 never changed the folder")
            time.sleep(0.01)

    def run(self, name: str, make: Callable[[], Any], *, change: Callable[[], None] | None,
            rank0_fails: BaseException | None = None, rank1_fails: BaseException | None = None,
            forbid: bool, read: bool = False) -> dict[str, Any]:
        """Make a dataset on both ranks; ``change`` runs on rank 0 after its listing."""
        global FORBIDDEN
        dist.barrier()  # no rank runs ahead into the next scenario's change
        if self.rank == 0:
            def after() -> None:
                if change is not None:
                    change()
                self.changed(name).touch()
                if rank0_fails is not None:
                    raise rank0_fails
            AFTER[:] = [after]
        else:
            if change is not None:
                self.wait(name)
            if rank1_fails is not None:
                def fail() -> None:
                    raise rank1_fails
                AFTER[:] = [fail]
            FORBIDDEN = forbid
        before = REQUESTS.copy()
        seen: dict[str, Any] = {}
        try:
            ds = make()
        except Exception as exc:
            seen["error"] = {"type": type(exc).__name__, "message": str(exc),
                             "notes": list(getattr(exc, "__notes__", []))}
        else:
            seen["len"] = len(ds)
            if isinstance(ds, (ObjectMapDataset, ObjectIterableDataset)):
                seen["names"] = [o.name for o in ds.objects]
            else:
                seen["counts"] = ds.counts
        finally:
            FORBIDDEN = False
            AFTER.clear()
            seen["requests"] = dict(REQUESTS - before)
        if read and "error" not in seen:
            seen["read"] = [ds[i].decode() for i in range(len(ds))]
        return seen


def scenarios(s: Scenario) -> dict[str, Callable[[], dict[str, Any]]]:
    root = s.root
    objects, shards = f"file://{root}/d/", f"file://{root}/s/"
    pattern = f"file://{root}/s/part-{{0..2}}.jsonl"

    def add(name: str) -> Callable[[], None]:
        return lambda: s.put(f"d/{name}", name.encode())

    def add_shard(name: str) -> Callable[[], None]:
        return lambda: s.put(f"s/{name}.jsonl", b'{"x": 1}\n' * 5)

    def grow_part_1(lines: int) -> Callable[[], None]:
        return lambda: s.put("s/part-1.jsonl", b'{"x": 2}\n' * lines)

    denied = PermissionDenied(f"list {objects}: denied by the test", operation="list",
                              bucket=root.parts[1], name="d/")
    return {
        # The defect, on the default path: rank 1 lists a changed folder.
        "iterable_each": lambda: s.run(
            "iterable_each", lambda: ObjectIterableDataset.from_prefix(objects,
                                                                       order=Order(batch_size=1)),
            change=add("iterable_each"), forbid=False),
        "iterable_rank0": lambda: s.run(
            "iterable_rank0", lambda: ObjectIterableDataset.from_prefix(
                objects, order=Order(batch_size=1), listing="rank0"),
            change=add("iterable_rank0"), forbid=True),
        "map_rank0": lambda: s.run(
            "map_rank0", lambda: ObjectMapDataset.from_prefix(
                objects, listing="rank0", transform=bytes),
            change=add("map_rank0"), forbid=True, read=True),
        "map_check": lambda: s.run(
            "map_check", lambda: ObjectMapDataset.from_prefix(objects, listing="check"),
            change=add("map_check"), forbid=False),
        "map_check_unchanged": lambda: s.run(
            "map_check_unchanged", lambda: ObjectMapDataset.from_prefix(objects, listing="check"),
            change=None, forbid=False),
        "map_rank0_denied": lambda: s.run(
            "map_rank0_denied", lambda: ObjectMapDataset.from_prefix(objects, listing="rank0"),
            change=None, rank0_fails=denied, forbid=True),
        "map_rank0_unpicklable": lambda: s.run(
            "map_rank0_unpicklable", lambda: ObjectMapDataset.from_prefix(objects, listing="rank0"),
            change=None, rank0_fails=Unpicklable("odd failure", "detail"), forbid=True),
        "iterable_rank0_empty": lambda: s.run(
            "iterable_rank0_empty", lambda: ObjectIterableDataset.from_prefix(
                f"file://{root}/empty/", listing="rank0"),
            change=None, forbid=True),
        "map_check_rank1_denied": lambda: s.run(
            "map_check_rank1_denied", lambda: ObjectMapDataset.from_prefix(objects,
                                                                           listing="check"),
            change=None, rank1_fails=denied, forbid=False),
        "shards_each": lambda: s.run(
            "shards_each", lambda: ShardDataset.from_prefix(
                shards, format="lines", reads=ShardReads(cache_indexes=False)),
            change=add_shard("shards_each"), forbid=False),
        "shards_rank0": lambda: s.run(
            "shards_rank0", lambda: ShardDataset.from_prefix(
                shards, format="lines", reads=ShardReads(cache_indexes=False, listing="rank0")),
            change=add_shard("shards_rank0"), forbid=True),
        "shardmap_each": lambda: s.run(
            "shardmap_each", lambda: ShardMapDataset(
                pattern, format="lines", reads=ShardReads(cache_indexes=False)),
            change=grow_part_1(7), forbid=False),
        "shardmap_rank0": lambda: s.run(
            "shardmap_rank0", lambda: ShardMapDataset(
                pattern, format="lines", reads=ShardReads(cache_indexes=False, listing="rank0")),
            change=grow_part_1(9), forbid=True),
        "shardmap_check": lambda: s.run(
            "shardmap_check", lambda: ShardMapDataset(
                pattern, format="lines", reads=ShardReads(cache_indexes=False, listing="check")),
            change=grow_part_1(11), forbid=False),
        "shards_rank0_bad_format": lambda: s.run(
            "shards_rank0_bad_format", lambda: ShardDataset(
                f"file://{root}/s/part-0.jsonl", format="tar",
                reads=ShardReads(cache_indexes=False, listing="rank0")),
            change=None, forbid=True),
    }



def main() -> None:
    _instrument()
    rank_main(sys.argv[1:], GUARD,
              lambda rank, root, out: scenarios(Scenario(rank, root, out)))


if __name__ == "__main__":
    main()
