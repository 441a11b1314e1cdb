"""``aioflux shards index`` writes the folder's manifest, which ``ls`` skips
and a dataset counts every shard from with one GET."""

from __future__ import annotations

from typing import Any

import pytest

from aioflux import Client
from aioflux._engines.shards import INDEX_SUFFIX, _build
from aioflux._engines.shards._manifest import MANIFEST_NAME, decode_manifest
from aioflux.testing import Emulator
from aioflux.torch import DatasetSettings, ShardDataset, ShardReads
from tests.cli.test_cli_shards import rows, write_shards


def test_index_writes_the_manifest_and_a_dataset_counts_from_it(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, sync_client: Client,
        monkeypatch: pytest.MonkeyPatch) -> None:
    shards = write_shards(f"gs://{bucket}/ds/train-%03d.tar", 11, 4, index=False,
                          endpoint=emulator.endpoint)
    # One shard already has its sidecar: it is kept, and in the manifest too.
    code, _, err = run("shards", "index", shards[0])
    assert code == 0, err
    sync_client.delete(bucket, f"ds/{MANIFEST_NAME}")
    code, out, err = run("shards", "index", f"gs://{bucket}/ds/")
    assert code == 0, err
    assert rows(out)[-1] == ["indexed", "2", "shards,", "1", "already", "indexed"]
    entries = decode_manifest(sync_client.read(bucket, f"ds/{MANIFEST_NAME}"), "m")
    assert {name: e.samples for name, e in entries.items()} == \
        {"train-000.tar": 4, "train-001.tar": 4, "train-002.tar": 3}
    for name, entry in entries.items():
        info = sync_client.stat(bucket, f"ds/{name}")
        assert (entry.size, entry.crc32c, entry.format) == (info.size, info.crc32c, "tar")
    # ls lists the shards, not the manifest.
    code, out, err = run("shards", "ls", f"gs://{bucket}/ds/")
    assert code == 0, err
    assert [r[-1] for r in rows(out)[:-1]] == shards
    counted: list[str] = []
    real = _build.stream_index

    def counting(store: Any, info: Any, *args: Any) -> Any:
        counted.append(info.url)
        return real(store, info, *args)

    monkeypatch.setattr(_build, "stream_index", counting)
    before = dict(emulator.stats)
    ds = ShardDataset.from_prefix(f"gs://{bucket}/ds/", reads=ShardReads(cache_indexes=False),
                                  settings=DatasetSettings(endpoint=emulator.endpoint))
    media = emulator.stats["get_media"] - before.get("get_media", 0)
    assert ds.counts == [4, 4, 3] and media == 1  # the manifest alone
    assert len(list(ds)) == 11 and counted == []  # the sidecars, read as the shards are
    assert all(sync_client.exists(bucket, f"ds/train-{n:03d}.tar{INDEX_SUFFIX}")
               for n in range(3))
