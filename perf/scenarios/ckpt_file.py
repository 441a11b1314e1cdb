"""ckpt_file: checkpoints on ``file://``, aioflux against torch's own (issue 61, item 3).

No emulator traffic: every contender saves or loads a state of ``count``
fp32 tensors of ``tensor_mib`` MiB (``contenders/ckpt_common.py``, 16 x 16
MiB) in a folder of its own, on ``/dev/shm`` (tmpfs: ``-shm`` rows) and
on a disk folder (``-disk`` rows; ``$AIOFLUX_PERF_DISK_DIR``, default
``/tmp``, ext4 on the VM's virtio disk here). Contenders
(``contenders/ckpt_file.py``), each a fresh process a round, each after
the same work on a small state, untimed (lazy imports, aioflux's loop
thread):

- ``torch-save``: ``torch.save`` into an open file (zip CRC32 on, torch's
  default), plus ``os.fsync`` of the file and its folder on the disk,
  since aioflux's local store fsyncs before it publishes;
  ``aioflux-save``: ``Checkpoint().save(state, "file://...")``;
  ``aioflux-mgr-save``: ``CheckpointManager.save(state, step=1)`` (plus
  its manifest, claim and history);
- ``torch-load``: ``torch.load(path)``; ``aioflux-load``:
  ``Checkpoint().load``; ``aioflux-mgr-load``: ``CheckpointManager.load()``
  (each loads a file its own side wrote, untimed);
- ``torch-dcp-save`` / ``aioflux-dcp-save``: ``dcp.save`` with
  ``FileSystemWriter`` (``sync_files=True``, its default) or
  ``GcsStorageWriter("file://...")``;
- ``torch-dcp-load`` / ``aioflux-dcp-load``: ``dcp.load`` into a state
  of zeros with ``FileSystemReader`` or ``GcsStorageReader``.

On the disk, a load's files are written back and dropped from the page
cache first (``posix_fadvise(DONTNEED)``): the load reads the disk.
Parameters: ``count`` (16; 4 with --quick), ``tensor_mib`` (16),
``where`` (``shm,disk``).
"""

from __future__ import annotations

import os

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target

__all__ = ["plan"]

_SIDES = {"save": ("torch", "aioflux", "manager"), "load": ("torch", "aioflux", "manager"),
          "dcp-save": ("torch", "aioflux"), "dcp-load": ("torch", "aioflux")}


def _ready() -> str | None:
    return project_imports("import aioflux.torch.dcp; aioflux.torch.CheckpointManager")


def _name(op: str, impl: str, where: str) -> str:
    side = {"torch": "torch", "aioflux": "aioflux", "manager": "aioflux-mgr"}[impl]
    verb = op if not op.startswith("dcp") else "dcp-" + op[4:]
    return f"{side}-{verb}-{where}"


def plan(options: Options) -> Plan:
    count = options.get("count", 4 if options.quick else 16)
    tensor_mib = options.get("tensor_mib", 16)
    places = options.params.get("where", "shm,disk").split(",")
    folders = {"shm": "/dev/shm", "disk": os.environ.get("AIOFLUX_PERF_DISK_DIR", "/tmp")}
    state = ("--count", str(count), "--tensor-mib", str(tensor_mib), "--kind", "random")
    contenders: list[Contender] = []
    targets: list[Target] = []
    for where in places:
        disk = where == "disk"
        for op, impls in _SIDES.items():
            for impl in impls:
                name = _name(op, impl, where)
                args: tuple[str, ...] = (*state, "--op", op, "--impl", impl,
                                         "--where", folders[where], "--name", name)
                if disk and impl == "torch" and op == "save":
                    args += ("--fsync",)
                if disk and op.endswith("load"):
                    args += ("--cold",)
                contenders.append(Contender(
                    name, "ckpt_file.py", None, args, available=_ready,
                    note=f"{op} by {impl} in {folders[where]}"))
                if impl != "torch":
                    targets.append(Target(_name(op, "torch", where), 1.0, name))
    return Plan(
        name="ckpt_file",
        description=(f"Checkpoints of {count * tensor_mib} MiB ({count} fp32 tensors x "
                     f"{tensor_mib} MiB) on file:// ({', '.join(places)}): save, load, "
                     "DCP save and load, aioflux against torch's own"),
        bucket="perf-ckpt-file",
        objects=[],
        contenders=contenders,
        baseline=_name("load", "aioflux", places[0]),
        targets=targets,
        notes=[
            f"folders: shm {folders['shm']} (tmpfs), disk {folders['disk']} (ext4 on the VM's "
            "virtio disk); the disk's loads read files dropped from the page cache",
            "torch-save on the disk fsyncs the file and its folder (aioflux's local store "
            "fsyncs both before it publishes); FileSystemWriter fsyncs its files by default",
            "each contender first does the same work on a 4 KiB state, untimed; loads check "
            "the loaded state bit for bit against the saved one (items 0 if not)",
        ],
        timeout_s=300.0,
        expect_items=1,
        expect_bytes=count * tensor_mib * 2**20,
        warm_read=False,
    )
