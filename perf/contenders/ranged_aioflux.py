"""ranged contenders: large objects read one after another, either in
parallel ranged chunks into one preallocated buffer or as a single stream.

Memory, per object (Linux): RSS just before the download, RSS right after
it with the result still alive (that growth is the destination buffer),
and the peak during it (``VmHWM``, reset per object through
``/proc/self/clear_refs``). Reported: ``extra_mb``, the worst peak beyond
the RSS before the download plus the object's own bytes, i.e. what the
download needs on top of its destination buffer (claim: < 64 MiB ranged);
and ``buffer_mb``, the worst growth that stayed while the result was alive.
"""

from __future__ import annotations

import argparse

from _contender import Manifest, Stopwatch, load, report, rss_mb, run

from aioflux import AsyncClient, ClientConfig, Downloader, DownloadOptions


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS
    except OSError:
        return False
    return True


def _peak_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def main(manifest: Manifest,
               args: argparse.Namespace) -> tuple[Stopwatch, int, float, float, bool]:
    config = ClientConfig(max_concurrency=64, lean_reads=args.lean)
    async with AsyncClient(config, endpoint=manifest.endpoint) as c:
        infos = [await c.stat(manifest.bucket, n) for n in manifest.names]
        dl = Downloader(c, DownloadOptions(ranged_threshold=1, range_size=args.chunk))
        extra = buffer = 0.0
        exact = True
        nbytes = 0
        with Stopwatch() as watch:
            for info in infos:
                before = rss_mb()
                exact = _reset_peak() and exact
                if args.mode == "ranged":
                    data = await dl.download(info)
                else:
                    data = await c.read(manifest.bucket, info.name)
                nbytes += len(data)
                size_mb = len(data) / 2**20
                buffer = max(buffer, rss_mb() - before)
                extra = max(extra, (_peak_mb() if exact else rss_mb()) - before - size_mb)
                del data
    return watch, nbytes, extra, buffer, exact


if __name__ == "__main__":
    manifest, rest = load()
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ranged", "single"], default="ranged")
    p.add_argument("--chunk", type=int, default=16 * 1024 * 1024)
    p.add_argument("--no-lean", dest="lean", action="store_false",
                   help="ClientConfig(lean_reads=False): bodies through aiohttp")
    args = p.parse_args(rest)
    (watch, nbytes, extra, buffer, exact), loop = run(main(manifest, args))
    report(watch, nbytes=nbytes, items=len(manifest.objects), mode=args.mode,
           extra_mb=round(extra, 1), buffer_mb=round(buffer, 1), peak_is_vmhwm=exact, loop=loop,
           lean_reads=args.lean)
