"""Rank body of the ``ObjectMapDataset.from_objects(listing=...)`` tests: 2 processes,
gloo on CPU, file:// objects.

``python -m tests.torch._objects_listing_worker RANK WORLD INIT_FILE ROOT OUT``

The machinery is :mod:`tests.torch._rank_listing_worker`'s (the request
counter, the rank-1 request ban, the change rank 0 makes right after its
own lookup and the marker rank 1 waits for); here the lookup is the stat of
the given URLs, and the change replaces one of them with a longer body. So
with ``listing="each"`` rank 1 always stats the new version, and with
``listing="rank0"`` it would too, if it made a request. Each rank writes,
per scenario, the names, sizes and versions its dataset holds, the requests
it made, and the error it raised (type, message, notes, operation, bucket,
name) to ``OUT/<rank>.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from aioflux import PermissionDenied, StorageError
from aioflux.torch import ObjectMapDataset
from aioflux.torch.data import _source
from tests.torch import _rank_listing_worker as base
from tests.torch._two_ranks import rank_main

NAMES = [f"{i:03d}" for i in range(6)]


def _instrument() -> None:
    base._instrument()
    stat_all = _source.DatasetSource.stat_all

    def looked_up(self: _source.DatasetSource, urls: Any) -> Any:
        found = stat_all(self, urls)
        base._after()  # rank 0's change lands after its stats, before it hands them on
        return found

    _source.DatasetSource.stat_all = looked_up  # type: ignore[method-assign]


class Scenario(base.Scenario):
    def made(self, name: str, make: Callable[[], ObjectMapDataset[Any]], **kwargs: Any
             ) -> dict[str, Any]:
        """``run``, also recording the objects' sizes and versions and the error's place."""
        held: list[ObjectMapDataset[Any]] = []
        where: dict[str, Any] = {}

        def recorded() -> ObjectMapDataset[Any]:
            try:
                ds = make()
            except StorageError as exc:
                where.update(operation=exc.operation, bucket=exc.bucket, name=exc.name)
                raise
            held.append(ds)
            return ds

        seen = self.run(name, recorded, **kwargs)
        if held:
            seen["sizes"] = [o.size for o in held[0].objects]
            seen["versions"] = [o.generation for o in held[0].objects]
        if "error" in seen:
            seen["error"].update(where)
        return seen


def scenarios(s: Scenario) -> dict[str, Callable[[], dict[str, Any]]]:
    root = s.root
    urls = [f"file://{root}/o/{n}" for n in NAMES]

    def replace(name: str, size: int) -> Callable[[], None]:
        return lambda: s.put(f"o/{name}", b"n" * size)

    denied = PermissionDenied(f"stat file://{root}/o/001: denied by the test",
                              operation="stat", bucket=root.parts[1], name="o/001")
    return {
        # The defect, on the default path: rank 1 stats a replaced object.
        "objects_each": lambda: s.made(
            "objects_each", lambda: ObjectMapDataset.from_objects(urls),
            change=replace("003", 30), forbid=False),
        "objects_rank0": lambda: s.made(
            "objects_rank0", lambda: ObjectMapDataset.from_objects(urls, listing="rank0"),
            change=replace("004", 40), forbid=True, read=True),
        "objects_check": lambda: s.made(
            "objects_check", lambda: ObjectMapDataset.from_objects(urls, listing="check"),
            change=replace("005", 50), forbid=False),
        "objects_check_unchanged": lambda: s.made(
            "objects_check_unchanged", lambda: ObjectMapDataset.from_objects(urls, listing="check"),
            change=None, forbid=False),
        "objects_rank0_missing": lambda: s.made(
            "objects_rank0_missing", lambda: ObjectMapDataset.from_objects(
                [*urls, f"file://{root}/o/missing"], listing="rank0"),
            change=None, forbid=True),
        "objects_check_rank1_denied": lambda: s.made(
            "objects_check_rank1_denied", lambda: ObjectMapDataset.from_objects(
                urls, listing="check"),
            change=None, rank1_fails=denied, forbid=False),
    }


def main() -> None:
    _instrument()
    rank_main(sys.argv[1:], base.GUARD,
              lambda rank, root, out: scenarios(Scenario(rank, root, out)))


if __name__ == "__main__":
    main()
