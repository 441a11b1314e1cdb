"""read_small contender: google-cloud-storage 3.x, one thread per request.

``blob.download_as_bytes()`` in a ``ThreadPoolExecutor(T)`` -- the usual
way to get concurrency out of the synchronous client. The requests
connection pool is widened to T: its default of 10 would otherwise make
threads beyond ten reconnect for every object, measuring a misconfiguration
rather than the library. Checksums stay at the library default ("auto").
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import requests.adapters
from _contender import Manifest, Stopwatch, load, report
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


def main(manifest: Manifest, threads: int) -> tuple[Stopwatch, int, int]:
    client = storage.Client(
        project="perf",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": manifest.endpoint},
    )
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=threads)
    client._http.mount("http://", adapter)
    bucket = client.bucket(manifest.bucket)

    def one(name: str) -> int:
        return len(bucket.blob(name).download_as_bytes())

    with ThreadPoolExecutor(threads) as pool, Stopwatch() as watch:
        sizes = list(pool.map(one, manifest.names))
    client.close()
    return watch, sum(sizes), len(sizes)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args(rest)
    watch, nbytes, items = main(manifest, args.threads)
    report(watch, nbytes=nbytes, items=items, threads=args.threads)
