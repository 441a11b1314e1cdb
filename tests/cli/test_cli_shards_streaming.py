"""``shards ls``, ``index`` and ``verify`` act on the listing as it comes.

They held every shard of the listing, and each one's sidecar state, before
printing the first row: ~1 KB a shard (1 GB for a million shards), and
nothing shown until the last sidecar was read. Here the listing's third
page fails: the rows of the first two pages must be out by then. Bounds are
counts, never times.
"""

from __future__ import annotations

import json

import pytest

from aioflux.testing import Emulator
from aioflux.testing._errors import ApiError

_SHARDS = 2500  # three listing pages of 1000
_SIDECARS_AT_ONCE, _SHARDS_AT_ONCE = 32, 4  # aioflux.cli._shards's


@pytest.fixture
def third_page_fails(emulator: Emulator, bucket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for i in range(_SHARDS):
        emulator.store.put(bucket, f"ds/s{i:04d}.jsonl", b'{"i": 1}\n')
    pages = emulator.store.list_page
    asked: list[object] = []

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(kwargs.get("page_token"))
        if len(asked) == 3:
            raise ApiError(403, "forbidden", "denied on the third page")
        return pages(*args, **kwargs)

    monkeypatch.setattr(emulator.store, "list_page", failing)
    return f"gs://{bucket}/ds"


@pytest.mark.parametrize("action", ["ls", "index", "verify"])
def test_shards_print_each_page_before_the_next_is_listed(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, third_page_fails: str, action: str) -> None:
    code, out, err = run("shards", action, third_page_fails)
    assert code == 1 and err.startswith(f"aioflux shards: list gs://{bucket}") and "403" in err
    shown = [line.split()[-1] for line in out.splitlines()]
    # The listing's failure cancels the sidecar reads (and shards) still in
    # flight: all but those are out, in order.
    assert len(shown) >= 2000 - _SIDECARS_AT_ONCE - _SHARDS_AT_ONCE
    assert shown == [f"gs://{bucket}/ds/s{i:04d}.jsonl" for i in range(len(shown))]
    if action == "index":
        for url in shown:  # each printed once its sidecar was written
            assert emulator.store.get(bucket, url.split("/", 3)[3] + ".idx").size > 0


def test_shards_ls_json_is_still_one_document(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str) -> None:
    for i in range(3):
        emulator.store.put(bucket, f"ds/s{i}.jsonl", b'{"i": 1}\n{"i": 2}\n')
    assert run("shards", "index", f"gs://{bucket}/ds/s0.jsonl")[0] == 0
    code, out, _ = run("shards", "ls", "--json", f"gs://{bucket}/ds")
    assert code == 0 and out.count("\n") == 1
    assert json.loads(out) == {
        "shards": [{"url": f"gs://{bucket}/ds/s{i}.jsonl", "size": 18, "format": "lines",
                    "index": "ok" if i == 0 else "none", "samples": 2 if i == 0 else None}
                   for i in range(3)],
        "total": {"shards": 3, "bytes": 54, "indexed": 1, "samples": 2}}
