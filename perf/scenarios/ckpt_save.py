"""ckpt_save: ``torch.save`` of a 1 GiB state dict to one object.

The state (64 fp32 tensors of 16 MiB from ``randn``; see
``contenders/ckpt_common.py``) is built inside every contender, untimed,
before its stopwatch starts, so "RSS growth" is each saver's own memory
beyond the state dict. Every contender overwrites its own object, so the
emulator holds one copy per contender, not one per round.

Parameters (``--param k=v``): ``count`` (64 tensors; 8 with --quick),
``tensor_mib`` (16), ``kind`` (random or half16), ``part_mib`` and
``in_flight`` (aioflux writer settings, also used by the bare aiohttp
upload; default: the library's).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target

__all__ = ["plan"]

# Mirror aioflux.WriterOptions' defaults (the bare upload sends the same parts);
# perf must import without aioflux.
_PART_MIB = 8
_IN_FLIGHT = 16


def _aioflux_ready() -> str | None:
    return project_imports("import aioflux, aioflux.torch; aioflux.torch.CheckpointManager")


def plan(options: Options) -> Plan:
    count = options.get("count", 8 if options.quick else 64)
    tensor_mib = options.get("tensor_mib", 16)
    kind = options.params.get("kind", "random")
    state = ("--count", str(count), "--tensor-mib", str(tensor_mib), "--kind", kind)
    tuning: tuple[str, ...] = ()
    for key, flag in (("part_mib", "--part-mib"), ("in_flight", "--in-flight")):
        if key in options.params:
            tuning += (flag, options.params[key])
    ours = (*state, *tuning)
    # The bare upload uses the writer's part size and parts in flight.
    part_mib = int(options.params.get("part_mib", _PART_MIB))
    in_flight = int(options.params.get("in_flight", _IN_FLIGHT))
    contenders = [
        Contender(
            "aioflux",
            "ckpt_save_aioflux.py",
            None,
            (*ours, "--mode", "open"),
            note=(
                "torch.save(state, aioflux.open(url, 'wb')): streaming XML multipart upload, "
                "parts leave while torch.save is still writing"
                + (f" ({' '.join(tuning)})" if tuning else " (library defaults)")
            ),
            available=_aioflux_ready,
        ),
        Contender(
            "aiohttp-bare",
            "ckpt_save_aiohttp.py",
            None,
            (*state, "--part-mib", str(part_mib), "--in-flight", str(in_flight)),
            note=(
                f"bare aiohttp XML multipart upload of the tensors' memory: {part_mib} MiB "
                f"parts, {in_flight} in flight, no torch.save, copies or checksums; the "
                "ceiling the emulator allows on this machine"
            ),
        ),
        Contender(
            "dataflux",
            "ckpt_save_dataflux.py",
            "dataflux",
            state,
            note=(
                "DatafluxCheckpoint(project_name='perf', bucket_name=B).writer(name) with "
                "torch.save into it; its own storage.Client picks up STORAGE_EMULATOR_HOST and "
                "anonymous credentials, nothing bypassed; the whole checkpoint is serialised "
                "into a BytesIO, then uploaded on close (XML multipart, 8 threads x 32 MiB)"
            ),
        ),
        Contender(
            "gcsfs",
            "ckpt_save_gcsfs.py",
            "gcsfs",
            state,
            note=(
                "torch.save into GCSFileSystem(token='anon').open(path, 'wb') at gcsfs's "
                "default block size (one resumable session, chunks in sequence); the gRPC "
                "bucket-type probe is disabled (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false)"
            ),
        ),
        Contender(
            "msc",
            "ckpt_save_msc.py",
            "msc",
            state,
            caveat="its Python provider: a custom endpoint turns MSC's Rust client off",
            note=(
                "multistorageclient.torch.save(state, 'msc://perf/...'): MSC's GCS provider "
                "with endpoint_url=emulator, skip_signature=True (contenders/msc_common.py); "
                "MSC turns its Rust client off for a custom endpoint, so its Python provider "
                "(google-cloud-storage) uploads, at MSC's defaults"
            ),
        ),
        Contender(
            f"msc-c{in_flight}",
            "ckpt_save_msc.py",
            "msc",
            (*state, "--max-concurrency", str(in_flight)),
            caveat="its Python provider: a custom endpoint turns MSC's Rust client off",
            note=(
                f"the msc row at its best: max_concurrency={in_flight}, aioflux's parts in "
                "flight (MSC's one concurrency option, default 8 threads of 32 MiB parts)"
            ),
        ),
        Contender(
            "aioflux-ckpt",
            "ckpt_save_aioflux.py",
            None,
            (*ours, "--mode", "checkpoint"),
            note=(
                "Checkpoint(client).save(state, url): the same writer, without torch's zip "
                "CRC32 (the writer's crc32c covers the same bytes), as CheckpointManager saves"
            ),
            available=_aioflux_ready,
        ),
        Contender(
            "aioflux-mgr-save",
            "ckpt_save_aioflux.py",
            None,
            (*ours, "--mode", "manager"),
            note=(
                "CheckpointManager(keep_last=1).save(state, step=1): the writer plus manifest, "
                "history line and retention scan; seconds = the blocking call"
            ),
            available=_aioflux_ready,
        ),
        Contender(
            "aioflux-mgr-async",
            "ckpt_save_aioflux.py",
            None,
            (*ours, "--mode", "async"),
            note=(
                "CheckpointManager(keep_last=1).save_async: an untimed first save (fresh "
                "host buffers; its blocking time is first_blocking_s in the JSON lines), the "
                "tensors changed in place, then the timed save_async(step=2) as in a training "
                "run: seconds = only the blocking part (the snapshot into the reused buffers), "
                "so its MB/s is not a transfer rate; the time until the future resolves is "
                "total_s; its RSS growth includes the snapshot (a second copy, by design)"
            ),
            available=_aioflux_ready,
        ),
    ]
    return Plan(
        name="ckpt_save",
        description=(
            f"torch.save of a {count * tensor_mib} MiB state dict ({count} fp32 tensors x "
            f"{tensor_mib} MiB, {kind}) to one object; the blocking time of "
            "CheckpointManager.save vs save_async for the same state."
        ),
        bucket="perf-ckpt-save",
        objects=[],
        contenders=contenders,
        baseline="aioflux",
        # save_async may block for at most 10% of a blocking save: its
        # "speed" (the same bytes over its blocking seconds) >= 10x.
        targets=[Target("dataflux", 2.0), Target("msc", 1.5),
                 Target("aioflux-mgr-save", 10.0, "aioflux-mgr-async")],
        notes=[
            (
                "state built inside each contender before the timed region; 'RSS growth' is "
                "therefore the saver's memory beyond the state dict (target for aioflux: "
                "< 256 MiB)"
            ),
            (
                "save_async blocking-time target: aioflux-mgr-async median s <= 0.10 x "
                "aioflux-mgr-save median s (the last target line)"
            ),
        ],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
        warm_rounds=1,
    )
