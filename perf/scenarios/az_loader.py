"""az_loader: one map-style epoch of N x 100 KiB blobs from Azurite through a DataLoader.

aioflux's ``MapDataset.from_prefix('az://...')`` against map-style datasets
a user would write over azure-storage-blob's asyncio client (a batch
fetched concurrently by ``__getitems__``) and over adlfs (``fs.cat`` of
the batch, and its async ``_cat_file`` of the batch gathered); batch 64,
no workers; listing untimed for everyone.
Parameters: ``count`` (4000; 400 with --quick), ``size`` (102400),
``batch`` (64), ``concurrency`` (aioflux's, 128).
"""

from __future__ import annotations

from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.az_read import AZURITE, ready
from perf.seed import ObjectSet

__all__ = ["plan"]

FOLDER = "az_loader/"


def plan(options: Options) -> Plan:
    count = options.get("count", 400 if options.quick else 4000)
    size = options.get("size", 100 * 1024)
    batch = str(options.get("batch", 64))
    conc = str(options.get("concurrency", 128))
    common = ("--task", "epoch", "--batch", batch, "--prefix", FOLDER)
    return Plan(
        name="az_loader",
        description=f"one map-style epoch of {count:,} x {size / 1024:g} KiB from Azurite "
                    f"through DataLoader(batch {batch}, num_workers=0); listing untimed",
        bucket="perf-az-loader",
        objects=[ObjectSet(f"{FOLDER}obj-", count, size)],
        contenders=[
            Contender("aioflux-az-map", "az_aioflux.py", None,
                      (*common, "--concurrency", conc),
                      note="MapDataset.from_prefix('az://B/FOLDER/'): each batch fetched at "
                           "once, the next one prefetched; reads checked", available=ready),
            Contender("azure-blob-aio-map", "az_sdk.py", "azblob", common,
                      note="Dataset.__getitems__ gathering download_blob().readall() of the "
                           "batch on one event loop kept for the epoch"),
            Contender("adlfs-map", "az_adlfs.py", "adlfs", common,
                      note="Dataset.__getitems__ = fs.cat(batch paths): adlfs's own cat of a "
                           "list, one blob after another"),
            Contender(f"adlfs-map-batch{batch}", "az_adlfs.py", "adlfs",
                      (*common, "--batch-size", batch),
                      note="Dataset.__getitems__ gathering the filesystem's async _cat_file "
                           "of the batch at once on its loop"),
        ],
        baseline="aioflux-az-map",
        targets=[Target("azure-blob-aio-map", 2.0), Target("adlfs-map", 2.0)],
        notes=[AZURITE],
        timeout_s=600.0,
        expect_items=count,
        expect_bytes=count * size,
        seed_concurrency=32,
        azurite=True,
    )
