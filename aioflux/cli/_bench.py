"""``aioflux bench``: list/read/write/save/load throughput of a bucket.

``batches`` reads the same objects as a data loader would, ``--batch`` at a
time through the download planner (``--hedge-after`` hedges its reads), and
reports how long each batch took (p50/p95/p99) beside the request latencies.

Against a real bucket (``gs://bucket/prefix``) or, by default, the bundled
emulator with the GCS-like profile, started as a subprocess so the emulator
does not share the benchmark's interpreter lock. Everything it writes goes
under a fresh ``aioflux-bench/<id>/`` prefix and is deleted afterwards, also
after a failure or Ctrl-C (once the requests in flight have stopped); on
the bundled emulator, whose objects end with its process, nothing is
deleted: a Ctrl-C in a terminal stops that process too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from .._api.open import open as gs_open
from .._api.sync import Client
from .._core.concurrency.portal import call
from .._core.concurrency.window import gather_bounded
from .._core.metrics import BatchStats, LatencyHistogram, RequestStats
from .._core.records.types import ObjectInfo
from .._core.settings.config import ClientConfig
from .._engines.download import Downloader, DownloadOptions
from .._engines.hedge import HedgeAfter
from ..gcs._client import AsyncClient
from ..testing._subprocess import emulator_process
from ._common import add_client_arguments, emit_json, gs_url_arg, human, int_at_least
from ._png import bar_chart_png
from ._registry import UsageError, command
from ._text import one_line

__all__: list[str] = []

OPS = ("write", "list", "read", "batches", "save", "load")


@dataclass
class Result:
    """One measured operation, and the latency of the requests it sent
    (milliseconds, from the client's stats: see ``client.stats``)."""

    op: str
    items: int
    bytes: int
    seconds: float
    requests: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    batches: int = 0
    batch_p50_ms: float = 0.0
    batch_p95_ms: float = 0.0
    batch_p99_ms: float = 0.0
    hedges_sent: int = 0
    hedges_won: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0


@contextmanager
def _measured(stats: RequestStats, results: list[Result], op: str, items: int,
              nbytes: Callable[[], int]) -> Iterator[None]:
    """Time the block and append its Result, with the latency percentiles
    of the requests sent meanwhile (the stats' histograms start empty)."""
    stats.latency.clear()
    t0 = time.perf_counter()
    yield
    seconds = time.perf_counter() - t0
    latency = LatencyHistogram.merged(stats.latency.values())
    results.append(Result(op, items, nbytes(), seconds, latency.count,
                          latency.percentile(0.5) * 1e3, latency.percentile(0.95) * 1e3,
                          latency.percentile(0.99) * 1e3))


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", type=gs_url_arg,
                        help="gs://bucket[/prefix] (default: the bundled emulator)")
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma list of {', '.join(OPS)}")
    parser.add_argument("--objects", type=int_at_least(1), default=1000,
                        help="objects to write and read")
    parser.add_argument("--size", type=int_at_least(0), default=100 * 1024,
                        help="bytes per object")
    parser.add_argument("--batch", type=int_at_least(1), default=32,
                        help="objects per batch of the batches op (default 32)")
    parser.add_argument("--hedge-after", type=_hedge_arg, default=None, metavar="SECONDS|auto",
                        help="batches op: a second GET for a read slower than this")
    parser.add_argument("--checkpoint-mb", type=int_at_least(1), default=256,
                        help="size of save/load")
    add_client_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--plot", type=Path, help="write a PNG bar chart of MB/s here")


def _hedge_arg(value: str) -> HedgeAfter:
    if value == "auto":
        return "auto"
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or 'auto', got {value!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value!r}")
    return seconds


async def _batches(down: Downloader, objects: list[ObjectInfo], batch: int,
                   stats: BatchStats) -> list[int]:
    """Read ``objects`` ``batch`` at a time, one batch after the other, as a
    DataLoader without workers does; returns each object's length."""
    sizes: list[int] = []
    for at in range(0, len(objects), batch):
        started = time.perf_counter()
        datas = await down.download_many(objects[at:at + batch])
        stats.record(time.perf_counter() - started, len(datas))
        sizes.extend(map(len, datas))
    return sizes


def _batch_figures(result: Result, stats: BatchStats, down: Downloader) -> None:
    summary = stats.summary()
    result.batches = stats.latency.count
    result.batch_p50_ms = summary["p50"] * 1e3
    result.batch_p95_ms = summary["p95"] * 1e3
    result.batch_p99_ms = summary["p99"] * 1e3
    result.hedges_sent = down.stats.hedge.sent
    result.hedges_won = down.stats.hedge.won


async def _write_read_list(client: AsyncClient, bucket: str, prefix: str, ops: list[str],
                           count: int, size: int, batch: int = 32,
                           hedge_after: HedgeAfter = None) -> list[Result]:
    results: list[Result] = []
    payload = os.urandom(size)
    names = [f"{prefix}obj-{i:07d}" for i in range(count)]
    stats = client.stats
    if {"write", "list", "read", "batches"} & set(ops):
        # Written for list and read even when "write" is not measured.
        kept = results if "write" in ops else []
        with _measured(stats, kept, "write", count, lambda: count * size):
            # A failure stops the other writes before it is raised: the
            # clean-up's listing then sees every object they published.
            await gather_bounded(client.write(bucket, n, payload) for n in names)
    if "list" in ops:
        listed: list[ObjectInfo] = []
        with _measured(stats, results, "list", count, lambda: 0):
            listed.extend([o async for o in client.list_objects(bucket, prefix)])
        results[-1].items = len(listed)
    if "read" in ops:
        datas: list[bytes] = []
        with _measured(stats, results, "read", count, lambda: sum(map(len, datas))):
            datas.extend(await gather_bounded(client.read(bucket, n) for n in names))
    if "batches" in ops:
        # Sizes (and crc32c) as a dataset has them from its listing, untimed.
        objects = await gather_bounded(client.stat(bucket, n) for n in names)
        down = Downloader(client, DownloadOptions(hedge_after=hedge_after))
        batch_stats = BatchStats()
        sizes: list[int] = []
        with _measured(stats, results, "batches", count, lambda: sum(sizes)):
            sizes.extend(await _batches(down, objects, batch, batch_stats))
        _batch_figures(results[-1], batch_stats, down)
    return results


def _save_load(client: Client, url: str, ops: list[str], megabytes: int) -> list[Result]:
    results: list[Result] = []
    block = os.urandom(1 << 20)
    if {"save", "load"} & set(ops):
        kept = results if "save" in ops else []
        with _measured(client.stats, kept, "save", 1, lambda: megabytes << 20):
            with gs_open(url, "wb", client=client) as f:
                for _ in range(megabytes):
                    f.write(block)
    if "load" in ops:
        total = 0
        with _measured(client.stats, results, "load", 1, lambda: total):
            with gs_open(url, "rb", client=client) as f:
                while chunk := f.read(8 << 20):
                    total += len(chunk)
    return results


def _cleanup(client: Client, bucket: str, prefix: str) -> None:
    """Delete everything under ``prefix``: every delete runs to its end,
    then the first failure is raised."""
    names = [o.name for o in client.list_objects(bucket, prefix)]

    async def delete_all() -> None:
        outcomes = await asyncio.gather(
            *(client.aio.delete(bucket, n, missing_ok=True) for n in names),
            return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    call(delete_all())


def _cleanup_after_failure(client: Client, bucket: str, prefix: str) -> None:
    """The clean-up while a failure or an interrupt is on its way out: that
    one stays what the command reports (a Ctrl-C exits 130); a clean-up that
    fails too is a line of its own."""
    try:
        _cleanup(client, bucket, prefix)
    except Exception as exc:
        print(f"aioflux bench: what it wrote under gs://{bucket}/{prefix} may be left: "
              f"{one_line(str(exc))}", file=sys.stderr)


def _print_table(results: list[Result], where: str) -> None:
    op = max(map(len, OPS))  # "batches" overran a column sized for "write"
    print(f"aioflux bench against {where}")
    print(f"  {'op':<{op}} {'items':>8} {'bytes':>11} {'seconds':>8} {'items/s':>10} "
          f"{'MB/s':>9} {'requests':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for r in results:
        print(f"  {r.op:<{op}} {r.items:>8,} {human(r.bytes):>11} {r.seconds:>8.2f} "
              f"{r.items_per_s:>10,.0f} {r.mb_per_s:>9.1f} {r.requests:>9,} "
              f"{r.p50_ms:>8.1f} {r.p95_ms:>8.1f} {r.p99_ms:>8.1f}")
    for r in results:
        if r.batches:
            batches = f"{r.batches:,} batch{'es' if r.batches != 1 else ''}"
            print(f"  {r.op}: {batches} of up to {-(-r.items // r.batches):,}, "
                  f"batch p50 {r.batch_p50_ms:.1f} ms, p95 {r.batch_p95_ms:.1f} ms, "
                  f"p99 {r.batch_p99_ms:.1f} ms; hedges sent {r.hedges_sent:,}, "
                  f"won {r.hedges_won:,}")


@command("bench", _args)
def _bench(args: argparse.Namespace) -> int:
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = set(ops) - set(OPS)
    if unknown:
        raise UsageError(f"unknown --ops {', '.join(sorted(unknown))} "
                         f"(choose from {', '.join(OPS)})")

    config = ClientConfig(max_concurrency=args.concurrency)
    use_emulator = args.url is None and args.endpoint is None
    with (emulator_process("--profile", "gcs-like", "--bucket", "aioflux-bench") if use_emulator
          else _nothing()) as emu:
        endpoint = emu or args.endpoint
        bucket, base = args.url if args.url is not None else ("aioflux-bench", "")
        prefix = f"{base.rstrip('/') + '/' if base else ''}aioflux-bench/{uuid.uuid4().hex[:8]}/"
        with Client(config, endpoint=endpoint, user_project=args.user_project) as client:
            try:
                results = call(_write_read_list(client.aio, bucket, prefix, ops, args.objects,
                                                args.size, args.batch, args.hedge_after))
                results += _save_load(client, f"gs://{bucket}/{prefix}checkpoint.bin", ops,
                                      args.checkpoint_mb)
            except BaseException:
                # The bundled emulator's objects go with its process, which
                # a Ctrl-C in a terminal (or `timeout`'s SIGTERM to the
                # group) has stopped already: no request to it could succeed.
                if not use_emulator:
                    _cleanup_after_failure(client, bucket, prefix)
                raise
            if not use_emulator:
                _cleanup(client, bucket, prefix)
    where = f"gs://{bucket}/{base}" if args.url is not None else "the emulator (GCS-like profile)"
    if args.json:
        emit_json({"target": where, "results": [
            dict(asdict(r), mb_per_s=r.mb_per_s, items_per_s=r.items_per_s) for r in results]})
    else:
        _print_table(results, where)
    if args.plot:
        # MB/s only: the listing's objects/s is another unit and stays in the table.
        args.plot.write_bytes(bar_chart_png(
            [(f"{r.op} {r.mb_per_s:.1f} mb/s", r.mb_per_s) for r in results if r.bytes]))
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield None
