"""``aioflux demo``: the library's main job, end to end, in under two minutes.

On the bundled emulator (GCS-like profile: 20 ms to first byte, 100 MB/s per
connection, 800 MB/s per host, 1% injected 503s and 0.5% 429s) or a real bucket (``--url``):
write a synthetic dataset, train a small model reading it through
``ObjectIterableDataset`` with DataLoader workers, checkpoint with
``CheckpointManager.save_async`` (the dataset's position travels with each
checkpoint as ``data_state``), crash (SIGKILL) while a save is in flight,
resume model and data from ``latest()`` in the middle of the epoch, check
that the restored run trained on every planned sample once per epoch, and
print a summary table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._core.concurrency.portal import call
from .._core.concurrency.window import gather_bounded
from .._core.errors import StorageError
from .._core.records.urls import parse_url
from .._core.settings.config import ClientConfig
from ..gcs._auth import emulator_endpoint
from ..gcs._client import AsyncClient
from ..testing._subprocess import emulator_process
from ._common import endpoint_arg, gs_url_arg
from ._registry import command

__all__: list[str] = []

_NO_NUMPY = "Failed to initialize NumPy"


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", type=gs_url_arg,
                        help="run against gs://bucket/prefix instead of the emulator")
    parser.add_argument("--samples", type=int, default=4000, help="samples in the dataset")
    parser.add_argument("--steps", type=int, default=300, help="training steps in all")
    parser.add_argument("--ckpt-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument("--crash-at", type=int, default=150,
                        help="step whose checkpoint is in flight when the process is killed")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--keep", action="store_true", help="keep what was written (--url)")
    parser.add_argument("--endpoint", type=endpoint_arg, metavar="URL",
                        help="API root for --url, e.g. http://127.0.0.1:9023 or 127.0.0.1:9023 "
                             "(default: STORAGE_EMULATOR_HOST, else GCS)")


async def _write_dataset(endpoint: str | None, url: str, count: int) -> tuple[int, float]:
    import torch

    from ._demo_train import CLASSES, FEATURES, encode_sample

    bucket, prefix = parse_url(url)
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(FEATURES, CLASSES, generator=generator)
    t0 = time.perf_counter()
    async with AsyncClient(ClientConfig(max_concurrency=64), endpoint=endpoint) as client:
        async def put(i: int) -> int:
            features = torch.randn(FEATURES, generator=torch.Generator().manual_seed(i))
            label = int((features @ weights).argmax())  # a learnable rule
            data = encode_sample(features, label, i)
            await client.write(bucket, f"{prefix}sample-{i:06d}.bin", data)
            return len(data)

        # gather_bounded, not gather: on the first failure (no such bucket)
        # the other writes are cancelled before the client closes, instead
        # of opening a session of their own that nobody closes.
        sizes = await gather_bounded((put(i) for i in range(count)), 64)
    return sum(sizes), time.perf_counter() - t0


async def _delete_prefix(endpoint: str | None, url: str) -> int:
    bucket, prefix = parse_url(url)
    async with AsyncClient(endpoint=endpoint) as client:
        names = [o.name async for o in client.list_objects(bucket, prefix)]
        await asyncio.gather(*(client.delete(bucket, n, missing_ok=True) for n in names))
        # The crash left the in-flight checkpoint's multipart upload open.
        uploads = await client.list_multipart_uploads(bucket, prefix)
        await asyncio.gather(*(client.abort_multipart(bucket, u.name, u.upload_id)
                               for u in uploads))
    return len(names) + len(uploads)


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _emulator_stats(endpoint: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{endpoint}/_aioflux_stats", timeout=10) as resp:
        return dict(json.load(resp))


@command("demo", _configure)
def _run(args: argparse.Namespace) -> int:
    # The CPU torch wheel comes without numpy: where it is missing, torch
    # warns at import and aioflux.torch says in one line what to install;
    # the warning would bury that line.
    warnings.filterwarnings("ignore", _NO_NUMPY, UserWarning)
    from ._demo_train import TrainPlan, train

    faulty_gcs = ("--profile", "gcs-like", "--p-503", "0.01", "--p-429", "0.005", "--seed", "1",
                  "--bucket", "aioflux-demo")
    with (emulator_process(*faulty_gcs) if args.url is None
          else _no_emulator(args.endpoint)) as endpoint:
        base = str(args.url).rstrip("/") if args.url else "gs://aioflux-demo"
        run_id = uuid.uuid4().hex[:8]
        data_url = f"{base}/demo-{run_id}/data/"
        ckpt_root = f"{base}/demo-{run_id}/checkpoints"
        where = "the bundled emulator (GCS-like profile, 1% 503 + 0.5% 429 injected)" \
            if args.url is None else base
        print(f"aioflux demo on {where}")
        nbytes, seconds = call(_write_dataset(endpoint, data_url, args.samples))
        print(f"  wrote {args.samples:,} samples ({nbytes / 1e6:.1f} MB) in {seconds:.1f} s")
        with tempfile.TemporaryDirectory() as tmp:
            events = Path(tmp) / "events.jsonl"
            plan = TrainPlan(data_url=data_url, ckpt_root=ckpt_root, endpoint=endpoint,
                             total_steps=args.steps, ckpt_every=args.ckpt_every,
                             batch_size=args.batch_size, workers=args.workers,
                             crash_at=args.crash_at, events=str(events))
            print(f"  training {args.steps} steps, {args.workers} DataLoader workers, "
                  f"save_async every {args.ckpt_every} steps; crash at step {args.crash_at}")
            crashed = _crash_phase(plan)
            if crashed != -9:
                raise StorageError(f"demo: the training process exited with {crashed} "
                                   "instead of being killed", operation="demo")
            print("  crashed: training process SIGKILLed with a checkpoint save in flight")
            from ..torch import CheckpointManager

            client = AsyncClient(endpoint=endpoint)
            manager = CheckpointManager(ckpt_root, client=client)
            latest = manager.latest()
            data_state = manager.load_data_state(latest.step) if latest else None
            where_in_data = (f"epoch {data_state['epoch']} at sample "
                             f"{data_state['samples']:,} of {args.samples:,}"
                             if data_state else "from the start")
            print(f"  resume: latest complete checkpoint is step "
                  f"{latest.step if latest else None}; continuing {where_in_data}")
            train(TrainPlan(**{**plan.__dict__, "crash_at": None}), "resume")
            history = manager.history()
            kept = [c.step for c in manager.list()]
            manager.close()
            call(client.aclose())
            log = _events(events)
        stats = _emulator_stats(endpoint) if args.url is None and endpoint else {}
        if args.url is not None and not args.keep:
            removed = call(_delete_prefix(endpoint, f"{base}/demo-{run_id}/"))
            print(f"  removed the {removed} objects and open uploads the demo left")
    _summary(log, history, kept, stats, _check_samples(log, args))
    return 0


def _crash_phase(plan: Any) -> int:
    import dataclasses
    import subprocess
    import sys

    # A separate interpreter whose -W flag also reaches its multiprocessing
    # resource tracker: after the SIGKILL the tracker frees the DataLoader's
    # semaphores, which is expected here and not worth a warning.
    return subprocess.run(
        [sys.executable, "-W", "ignore:resource_tracker:UserWarning",
         "-W", f"ignore:{_NO_NUMPY}:UserWarning", "-c",
         "from aioflux.cli._demo_train import main; main()",
         json.dumps(dataclasses.asdict(plan))], check=False).returncode


@contextmanager
def _no_emulator(endpoint: str | None) -> Iterator[str | None]:
    # The training subprocess gets the endpoint explicitly, with the scheme
    # STORAGE_EMULATOR_HOST may leave out ("127.0.0.1:9023").
    yield endpoint or emulator_endpoint()


def _planned(count: int, batch: int, steps: int) -> dict[int, int]:
    """Samples per epoch of ``steps`` steps of ``batch`` (an epoch's last batch may be short)."""
    per_epoch = -(-count // batch)
    planned: dict[int, int] = {}
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        planned[epoch] = planned.get(epoch, 0) + min(batch, count - k * batch)
    return planned


def _check_samples(log: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Check what the final model trained on: the crashed phase up to the
    restored checkpoint, then the resumed phase. Raises if a sample repeats
    within an epoch or the count differs from the plan."""
    resumed = next((e["step"] for e in log if e["kind"] == "resumed"), 0)
    pairs = [tuple(p) for e in log if e["kind"] == "trained"
             and (e["phase"] != "train" or e["step"] <= resumed) for p in e["samples"]]
    planned = _planned(args.samples, args.batch_size, args.steps)
    by_epoch: dict[int, list[int]] = {}
    for epoch, index in pairs:
        by_epoch.setdefault(epoch, []).append(index)
    repeats = sum(len(ids) - len(set(ids)) for ids in by_epoch.values())
    counts = {e: len(ids) for e, ids in sorted(by_epoch.items())}
    if repeats or counts != planned:
        raise StorageError(f"resume check: the restored run trained {sum(counts.values()):,} "
                           f"samples (per epoch {counts}), {repeats} of them repeated within "
                           f"an epoch; planned {planned}, none repeated", operation="demo")
    return (f"{sum(counts.values()):,} = {sum(planned.values()):,} planned, none repeated "
            f"({len(planned)} epochs; resumed mid-epoch at step {resumed})")


def _summary(log: list[dict[str, Any]], history: list[Any], kept: list[int],
             stats: dict[str, int], trained: str) -> None:
    last_by_phase: dict[str, dict[str, Any]] = {}
    for event in log:
        if "count" in event:
            last_by_phase[event["phase"]] = event
    samples = sum(e["count"] for e in last_by_phase.values())
    seconds = sum(e["seconds"] for e in last_by_phase.values())
    blocked = sum(e["blocked"] for e in last_by_phase.values())
    listed = sum(e["objects"] for e in log if e["kind"] == "listed")
    ok = [r for r in history if r.ok]
    rates = [r.mb_per_s for r in ok if r.mb_per_s]
    done = next((e for e in log if e["kind"] == "done"), {})
    faults = stats.get("injected_503", 0) + stats.get("injected_429", 0)
    rows = [
        ("training throughput", f"{samples / seconds:,.0f} samples/s" if seconds else "n/a"),
        ("samples trained on", trained),
        ("time blocked by checkpoints", f"{blocked:.2f} s of {seconds:.1f} s "
                                        f"({100 * blocked / seconds:.1f}%)" if seconds else "n/a"),
        ("checkpoints saved", f"{len(ok)} (kept: steps {', '.join(map(str, kept))})"),
        ("checkpoint throughput", f"{statistics.median(rates):,.0f} MB/s median" if rates
         else "n/a"),
        ("objects listed", f"{listed:,}"),
        # Samples of up to 32 KiB are read 32 at a time through composites.
        ("object GETs", f"{stats.get('get_media', samples):,}"
                        + (f" ({stats['compose']:,} of them composites)"
                           if stats.get("compose") else "")),
        ("faults injected and retried", f"{faults:,}" if stats else "n/a (real bucket)"),
        ("final loss", f"{done.get('loss', float('nan')):.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n  " + "-" * (width + 30))
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print("  " + "-" * (width + 30))
