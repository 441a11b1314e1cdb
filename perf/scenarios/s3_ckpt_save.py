"""s3_ckpt_save: ``torch.save`` of a 1 GiB state dict to one ``s3://`` object.

ckpt_save's shape (64 fp32 tensors of 16 MiB, built untimed inside each
contender) on the emulator's S3 face: aioflux's checkpoint save
(``Checkpoint.save``, and plain ``torch.save`` into ``aioflux.open``)
against s3torchconnector 1.5's ``S3Checkpoint.writer``. Two untimed rounds
first: a fresh emulator faults in new memory for the first overwrites of
each object (a save took twice as long in the first timed round after one
warm-up round, whichever contender ran first). Parameters:
``count`` (64; 8 with --quick), ``tensor_mib`` (16), ``kind``.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.scenarios.ckpt_save import _IN_FLIGHT, _PART_MIB

__all__ = ["plan"]


def _ready() -> str | None:
    return project_imports("import aioflux.s3, aioflux; aioflux.open; aioflux.S3Store")


def plan(options: Options) -> Plan:
    count = options.get("count", 8 if options.quick else 64)
    tensor_mib = options.get("tensor_mib", 16)
    kind = options.params.get("kind", "random")
    state = ("--count", str(count), "--tensor-mib", str(tensor_mib), "--kind", kind)
    ours = (*state, "--part-mib", str(_PART_MIB), "--in-flight", str(_IN_FLIGHT))
    return Plan(
        name="s3_ckpt_save",
        description=f"torch.save of a {count * tensor_mib} MiB state dict ({count} fp32 "
                    f"tensors x {tensor_mib} MiB, {kind}) to one s3:// object on the "
                    "emulator's S3 face",
        bucket="perf-s3-ckpt-save",
        objects=[],
        contenders=[
            Contender("aioflux-s3", "ckpt_save_aioflux_s3.py", None,
                      (*ours, "--mode", "save"),
                      note=f"Checkpoint(store).save(state, 's3://...'): torch.save into the "
                           f"streaming multipart writer, {_PART_MIB} MiB parts, {_IN_FLIGHT} in "
                           "flight, x-amz-checksum-crc32c per part, without torch's zip CRC32 "
                           "(the writer's crc32c covers the same bytes); "
                           "S3Store(sign_payload=False): bodies UNSIGNED-PAYLOAD as over "
                           "https (s3tc sends them so too)",
                      available=_ready),
            Contender("aioflux-s3-open", "ckpt_save_aioflux_s3.py", None,
                      (*ours, "--mode", "open"),
                      note="torch.save(state, aioflux.open('s3://...', 'wb')): the same writer "
                           "under torch's defaults (zip CRC32 computed)",
                      available=_ready),
            Contender("s3tc", "ckpt_save_s3tc.py", "s3tc", state,
                      note="torch.save into S3Checkpoint(region, endpoint=S3 face, "
                           "S3ClientConfig(force_path_style=True)).writer(url): its CRT "
                           "client's streaming multipart upload at its defaults"),
        ],
        baseline="aioflux-s3",
        targets=[Target("s3tc", 1.5)],
        notes=["state built inside each contender before the timed region; 'RSS growth' is "
               "the saver's memory beyond the state dict (target for aioflux: < 256 MiB)"],
        timeout_s=900.0,
        expect_items=1,
        warm_read=False,
        warm_rounds=2,
    )
