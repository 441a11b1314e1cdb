"""shards_tar contender: LitData's ``StreamingDataset`` over the tar shards' samples.

LitData reads its own format, so the samples are converted first, untimed:
``litdata.optimize(fn, inputs=the tar shards, output_dir=a local temp dir,
chunk_bytes="32MB")``, where ``fn`` downloads one shard
(google-cloud-storage) and yields its samples as ``{"__key__", "jpg",
"cls"}`` dicts; then its chunks and ``index.json`` are uploaded to
``gs://BUCKET/PREFIX`` with google-cloud-storage. (``optimize`` straight
into ``gs://`` uploads through obstore, which signs uploads even with
``GOOGLE_SKIP_SIGNATURE``, and the emulator's anonymous credentials cannot
sign.) The first round that finds no ``index.json`` there converts, and
reports the time of both steps as ``convert_s``; the emulator keeps the
result for the later rounds.

Timed: ``StreamingDataset(gs://BUCKET/PREFIX, cache_dir=a fresh temp dir)``
at its defaults (no shuffle; chunks downloaded whole into the cache, then
read from it) through ``StreamingDataLoader``.

LitData moves chunks with obstore's ``GCSStore`` (built from a
google-cloud-storage client's credentials, which ``STORAGE_EMULATOR_HOST``
makes anonymous): it reaches the emulator through obstore's own
environment settings (``GOOGLE_BASE_URL``, ``GOOGLE_SKIP_SIGNATURE``,
``GOOGLE_ALLOW_HTTP``), as in ``loader_litdata.py``.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _contender import Manifest, Stopwatch, load, report


def shard_samples(item: tuple[str, str]) -> Iterator[dict[str, Any]]:
    """One tar shard's samples (module level: optimize's workers import it)."""
    from google.cloud import storage

    bucket, name = item
    data = storage.Client().bucket(bucket).blob(name).download_as_bytes()
    sample: dict[str, Any] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            key, _, field = member.name.partition(".")
            if sample and sample["__key__"] != key:
                yield sample
                sample = {}
            extracted = tar.extractfile(member)
            assert extracted is not None
            sample["__key__"] = key
            sample[field] = extracted.read()
    if sample:
        yield sample


def convert(manifest: Manifest, args: argparse.Namespace) -> float | None:
    """Convert the shards unless an earlier round did; the seconds it took, or None."""
    from google.cloud import storage
    from litdata import optimize

    if storage.Client().bucket(manifest.bucket).blob(f"{args.prefix}index.json").exists():
        return None
    inputs = [(manifest.bucket, name) for name in manifest.names if name.startswith(args.source)]
    start = time.perf_counter()
    out = tempfile.mkdtemp(prefix="litdata-optimized-")
    try:
        optimize(fn=shard_samples, inputs=inputs, output_dir=out, chunk_bytes="32MB",
                 verbose=False)
        bucket = storage.Client().bucket(manifest.bucket)
        names = sorted(os.listdir(out), key=lambda n: n == "index.json")  # the index last

        def upload(name: str) -> None:
            bucket.blob(f"{args.prefix}{name}").upload_from_filename(os.path.join(out, name))

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, names[:-1]))
        upload(names[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return time.perf_counter() - start


def tar_batch(batch: list[dict[str, Any]]) -> tuple[int, int]:
    return sum(len(s["jpg"]) + len(s["cls"]) for s in batch), len(batch)


def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, int, float | None]:
    from litdata import StreamingDataLoader, StreamingDataset

    converted = convert(manifest, args)
    cache = tempfile.mkdtemp(prefix="litdata-cache-")
    try:
        ds = StreamingDataset(f"gs://{manifest.bucket}/{args.prefix}", cache_dir=cache)
        loader = StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                     collate_fn=tar_batch)
        nbytes = items = 0
        with Stopwatch() as watch:
            for size, count in loader:
                nbytes += size
                items += count
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return watch, nbytes, items, converted


if __name__ == "__main__":
    manifest, rest = load()
    # Read by obstore's GCSStore when LitData builds it (in each process).
    os.environ["GOOGLE_BASE_URL"] = manifest.endpoint
    os.environ["GOOGLE_SKIP_SIGNATURE"] = "true"
    os.environ["GOOGLE_ALLOW_HTTP"] = "true"
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--source", default="", help="the tar shards' folder")
    p.add_argument("--prefix", default="", help="where optimize() writes")
    args = p.parse_args(rest)
    watch, nbytes, items, converted = main(manifest, args)
    extra = {} if converted is None else {"convert_s": round(converted, 2)}
    report(watch, nbytes=nbytes, items=items, workers=args.workers, **extra)
