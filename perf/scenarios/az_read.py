"""az_read: N small blobs read concurrently from Azurite (``az://``).

read_small's shape on Azurite, Microsoft's emulator (behind perf/shaper.py,
the emulator's network; a Node process on the same two cores, so its CPU
is reported beside each figure):
aioflux's ``AzureStore.read`` against azure-storage-blob's asyncio client
and adlfs. Parameters: ``count`` (4000; 400 with --quick), ``size``
(102400), ``concurrency`` (64).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet

__all__ = ["plan"]

AZURITE = ("Azurite 3.35.0 (npm, tests/servers/azurite.py), development account, account-key "
           "credentials from its connection string; shaped by perf/shaper.py as the emulator's "
           "network is (20 ms, 100 MB/s a connection, 800 MB/s the host)")


def ready() -> str | None:
    """Why aioflux's Azure contenders cannot run, or None."""
    return project_imports("import aioflux.azure, azure.storage.blob, lxml")


def plan(options: Options) -> Plan:
    count = options.get("count", 400 if options.quick else 4000)
    size = options.get("size", 100 * 1024)
    conc = str(options.get("concurrency", 64))
    return Plan(
        name="az_read",
        description=f"{count:,} x {size / 1024:g} KiB blobs read concurrently from Azurite",
        bucket="perf-az-read",
        objects=[ObjectSet("az_read/obj-", count, size)],
        contenders=[
            Contender("aioflux-az", "az_aioflux.py", None,
                      ("--task", "read", "--concurrency", conc),
                      note=f"AzureStore(ClientConfig(max_concurrency={conc})).read per blob, "
                           "all submitted at once; each read checked (length, the crc32c "
                           "stored in the blob's metadata)", available=ready),
            Contender("azure-blob-aio", "az_sdk.py", "azblob",
                      ("--task", "read", "--concurrency", conc),
                      note=f"azure-storage-blob's aio ContainerClient.download_blob(name)"
                           f".readall(), Semaphore({conc})"),
            Contender("adlfs", "az_adlfs.py", "adlfs", ("--task", "read"),
                      note="AzureBlobFileSystem(connection_string=...).cat(paths): adlfs's "
                           "own cat of a list, one blob after another"),
            Contender(f"adlfs-batch{conc}", "az_adlfs.py", "adlfs",
                      ("--task", "read", "--batch-size", conc),
                      note=f"the filesystem's async _cat_file per blob, {conc} at once on its "
                           "loop (aioflux's requests in flight; cat takes no batch size and "
                           "the async _cat checks each path first, one after another)"),
        ],
        baseline="aioflux-az",
        targets=[Target("azure-blob-aio", 2.0), Target("adlfs", 2.0)],
        notes=[AZURITE, "the emulator CPU column is Azurite's (one Node process)"],
        timeout_s=600.0,
        expect_items=count,
        expect_bytes=count * size,
        seed_concurrency=32,
        azurite=True,
    )
