"""loader_small contender: LitData's ``StreamingRawDataset`` in a DataLoader.

``StreamingRawDataset("gs://BUCKET/FOLDER/")`` serves raw objects as bytes;
its ``__getitems__`` downloads a DataLoader batch at once on an asyncio loop
through obstore (``GCPDownloader._get_store``: a ``GCSStore`` built from a
google-cloud-storage client's credentials) and looks ahead ``max_prefetch``
items. Everything at LitData's defaults except:

- the file index comes from the manifest (``ManifestIndexer``): LitData lists
  with fsspec/gcsfs and uploads an index file next to the data; listing is
  untimed for every contender, and gcsfs is not in this venv;
- the emulator is reached through obstore's own environment settings
  (``GOOGLE_BASE_URL``, ``GOOGLE_SKIP_SIGNATURE``, ``GOOGLE_ALLOW_HTTP``),
  which ``GCSStore`` reads when LitData builds it.

Only the epoch is timed; bodies are reduced to their lengths in collate.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from _contender import Manifest, Stopwatch, load, report


def total_len(batch: list[bytes]) -> int:
    return sum(len(b) for b in batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int]:
    # Read by obstore's GCSStore when LitData constructs it (in each worker).
    os.environ["GOOGLE_BASE_URL"] = manifest.endpoint
    os.environ["GOOGLE_SKIP_SIGNATURE"] = "true"
    os.environ["GOOGLE_ALLOW_HTTP"] = "true"
    import torch.utils.data
    from litdata.raw import FileMetadata, StreamingRawDataset
    from litdata.raw.indexer import BaseIndexer

    root = f"gs://{manifest.bucket}/{args.prefix}"

    class ManifestIndexer(BaseIndexer):
        """The seeded objects under the folder, without a listing."""

        def discover_files(self, input_dir: str,
                           storage_options: dict[str, Any] | None) -> list[FileMetadata]:
            return [FileMetadata(path=f"gs://{manifest.bucket}/{name}", size=size)
                    for name, size in manifest.objects if name.startswith(args.prefix)]

        def build_or_load_index(self, input_dir: str, cache_dir: str,
                                storage_options: dict[str, Any] | None,
                                recompute_index: bool = False) -> list[FileMetadata]:
            return self.discover_files(input_dir, storage_options)

    cache = tempfile.mkdtemp(prefix="litdata-cache-")
    ds = StreamingRawDataset(root, cache_dir=cache, indexer=ManifestIndexer())
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                         collate_fn=total_len)
    nbytes = 0
    with Stopwatch() as watch:
        for size in loader:
            nbytes += size
    return watch, nbytes, len(ds)


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prefix", default="")
    args = p.parse_args(rest)
    watch, nbytes, items = main(manifest, args)
    report(watch, nbytes=nbytes, items=items, workers=args.workers)
