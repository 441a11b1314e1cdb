"""read_small contender: gcs-torch-dataflux's compose-and-split download.

``dataflux_core.download.dataflux_download_threaded`` is what the map-style
dataset's ``__getitems__`` calls: each thread composes up to 32 small
objects into a temporary object under ``dataflux-composed-objects/``,
downloads it once, splits it by the listed sizes and deletes it. Called
here on the whole object list at once, the most favourable batching for
its throughput; it returns every body in one list, so its peak RSS holds
the data set. The client is google-cloud-storage 2.x (dataflux needs <3),
anonymous, with the requests pool widened to the thread count.
"""

from __future__ import annotations

import argparse

import requests.adapters
from _contender import Manifest, Stopwatch, load, report
from dataflux_core import download
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


def main(manifest: Manifest, threads: int, max_composite: int) -> tuple[Stopwatch, int, int]:
    client = storage.Client(
        project="perf",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": manifest.endpoint},
    )
    client._http.mount(
        "http://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=threads)
    )
    params = download.DataFluxDownloadOptimizationParams(max_composite_object_size=max_composite)
    with Stopwatch() as watch:
        bodies = download.dataflux_download_threaded(
            "perf",
            manifest.bucket,
            manifest.objects,
            storage_client=client,
            dataflux_download_optimization_params=params,
            threads=threads,
        )
        nbytes = sum(len(body) for body in bodies)
    return watch, nbytes, len(bodies)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=16)
    # dataflux's own default (Config.max_composite_object_size).
    parser.add_argument("--max-composite", type=int, default=100_000_000)
    args = parser.parse_args(rest)
    watch, nbytes, items = main(manifest, args.threads, args.max_composite)
    report(watch, nbytes=nbytes, items=items, threads=args.threads)
