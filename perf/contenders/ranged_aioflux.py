"""ranged contenders: large objects read one after another, either in
parallel ranged chunks into one preallocated buffer or as a single stream.

Reports ``extra_mb``: peak RSS growth beyond one destination buffer (each
buffer is dropped before the next object is read).
"""

from __future__ import annotations

import argparse

from _contender import Manifest, Stopwatch, load, report, rss_mb, run

from aioflux import AsyncClient, ClientConfig, Downloader, DownloadOptions


async def main(manifest: Manifest, args: argparse.Namespace) -> tuple[Stopwatch, int, float]:
    async with AsyncClient(ClientConfig(max_concurrency=64), endpoint=manifest.endpoint) as c:
        infos = [await c.stat(manifest.bucket, n) for n in manifest.names]
        dl = Downloader(c, DownloadOptions(ranged_threshold=1, chunk_size=args.chunk))
        peak = 0.0
        nbytes = 0
        with Stopwatch() as watch:
            for info in infos:
                if args.mode == "ranged":
                    data = await dl.download(info)
                else:
                    data = await c.read(manifest.bucket, info.name)
                nbytes += len(data)
                peak = max(peak, rss_mb() - watch.rss_start_mb - len(data) / 2**20)
                del data
    return watch, nbytes, peak


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ranged", "single"], default="ranged")
    p.add_argument("--chunk", type=int, default=16 * 1024 * 1024)
    args = p.parse_args(rest)
    (watch, nbytes, extra), loop = run(main(manifest, args))
    report(watch, nbytes=nbytes, items=len(manifest.objects), mode=args.mode,
           extra_mb=round(extra, 1), loop=loop)
