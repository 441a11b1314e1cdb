"""ckpt_file contender: a checkpoint to and from local files, aioflux or torch's own.

``--op``: ``save`` / ``load`` (one ``torch.save`` file), ``dcp-save`` /
``dcp-load`` (``torch.distributed.checkpoint`` in one process).
``--impl``:

- ``torch``: ``torch.save(state, f)`` (torch's zip CRC32 on, its default)
  plus ``os.fsync(f)`` with ``--fsync``; ``torch.load(path)``;
  ``FileSystemWriter(dir)`` (``sync_files=True``, its default) and
  ``FileSystemReader(dir)``;
- ``aioflux``: ``Checkpoint().save(state, "file://...")`` and ``.load``;
  ``GcsStorageWriter("file://...")`` and ``GcsStorageReader``;
- ``manager``: ``CheckpointManager("file://...").save(state, step=1)`` and
  ``.load()``.

Every contender works in a folder of its own under ``--where`` (made
empty first, removed at the end). A load's file is written first, untimed,
by the same side (torch's by torch, aioflux's by aioflux); with ``--cold``
its pages are then written back and dropped from the page cache
(``posix_fadvise(DONTNEED)``), so the timed load reads the disk. A DCP
load fills a state of zeros built untimed (a resumed model's own tensors).
"""

from __future__ import annotations

import argparse
import os
import shutil
import warnings
from typing import Any

from _contender import Stopwatch, load, report, rss_mb
from ckpt_common import add_state_args, build_state, drop_cache, fsync_path, state_bytes


def _torch_save(state: dict[str, Any], path: str, fsync: bool) -> None:
    import torch

    with open(path, "wb") as fh:
        torch.save(state, fh)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    if fsync:
        fsync_path(os.path.dirname(path))


def _save(impl: str, state: dict[str, Any], folder: str, fsync: bool) -> None:
    if impl == "torch":
        _torch_save(state, os.path.join(folder, "state.pt"), fsync)
    elif impl == "aioflux":
        from aioflux.torch import Checkpoint

        Checkpoint().save(state, "file://" + os.path.join(folder, "state.pt"))
    else:
        from aioflux.torch import CheckpointManager

        with CheckpointManager("file://" + folder, keep_last=1) as manager:
            manager.save(state, step=1)


def _load(impl: str, folder: str) -> Any:
    if impl == "torch":
        import torch

        return torch.load(os.path.join(folder, "state.pt"), weights_only=True)
    if impl == "aioflux":
        from aioflux.torch import Checkpoint

        return Checkpoint().load("file://" + os.path.join(folder, "state.pt"))
    from aioflux.torch import CheckpointManager

    with CheckpointManager("file://" + folder, keep_last=1) as manager:
        return manager.load()


def _dcp_writer(impl: str, folder: str) -> Any:
    if impl == "torch":
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(folder)
    from aioflux.torch.dcp import GcsStorageWriter

    return GcsStorageWriter("file://" + folder)


def _dcp_reader(impl: str, folder: str) -> Any:
    if impl == "torch":
        from torch.distributed.checkpoint import FileSystemReader

        return FileSystemReader(folder)
    from aioflux.torch.dcp import GcsStorageReader

    return GcsStorageReader("file://" + folder)


def _same(loaded: dict[str, Any], state: dict[str, Any]) -> bool:
    import torch

    return loaded.keys() == state.keys() and all(
        torch.equal(loaded[k], v) if isinstance(v, torch.Tensor) else loaded[k] == v
        for k, v in state.items())


def _prepare(op: str, impl: str, state: dict[str, Any], folder: str, cold: bool) -> Any:
    """What a load needs, untimed: the file(s) written, and a DCP load's target."""
    import torch
    import torch.distributed.checkpoint as dcp

    os.makedirs(folder)
    if op == "load":
        _save(impl, state, folder, fsync=True)
    elif op == "dcp-load":
        dcp.save(state, storage_writer=_dcp_writer(impl, folder))
    if cold:
        drop_cache(folder)
    if op == "dcp-load":
        return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0
                for k, v in state.items()}
    return None


def _timed(op: str, impl: str, state: dict[str, Any], folder: str, fsync: bool,
           target: Any) -> Any:
    """The work the stopwatch times; a load returns what it loaded."""
    import torch.distributed.checkpoint as dcp

    if op == "save":
        _save(impl, state, folder, fsync)
    elif op == "dcp-save":
        dcp.save(state, storage_writer=_dcp_writer(impl, folder))
    elif op == "load":
        return _load(impl, folder)
    else:
        dcp.load(target, storage_reader=_dcp_reader(impl, folder))
        return target
    return None


def main() -> None:
    warnings.filterwarnings("ignore", "torch.distributed is disabled")
    _, rest = load()
    parser = argparse.ArgumentParser()
    add_state_args(parser)
    parser.add_argument("--op", choices=["save", "load", "dcp-save", "dcp-load"], required=True)
    parser.add_argument("--impl", choices=["torch", "aioflux", "manager"], required=True)
    parser.add_argument("--where", required=True, help="the folder the files go under")
    parser.add_argument("--name", required=True, help="this contender's folder there")
    parser.add_argument("--fsync", action="store_true", help="torch.save: fsync the file")
    parser.add_argument("--cold", action="store_true",
                        help="loads: drop the file's pages from the page cache first")
    args = parser.parse_args(rest)
    if args.impl == "manager" and args.op.startswith("dcp"):
        parser.error("DCP has no manager side")
    import torch

    base = os.path.join(args.where, "aioflux-perf-ckpt-file", args.name)
    shutil.rmtree(base, ignore_errors=True)
    try:
        # Untimed: the same work on a small state first, so lazy imports,
        # aioflux's loop thread and torch's first-call set-up are nobody's time.
        small = {"warm.weight": torch.ones(1024), "step": 0}
        target = _prepare(args.op, args.impl, small, os.path.join(base, "warm"), False)
        _timed(args.op, args.impl, small, os.path.join(base, "warm"), args.fsync, target)
        state = build_state(args)
        folder = os.path.join(base, "timed")
        target = _prepare(args.op, args.impl, state, folder, args.cold)
        extra: dict[str, object] = {"rss_state_mb": round(rss_mb(), 1)}
        with Stopwatch() as watch:
            loaded = _timed(args.op, args.impl, state, folder, args.fsync, target)
        ok = True
        if loaded is not None:
            ok = extra["identical"] = _same(loaded, state)
            del loaded, target
        report(watch, nbytes=state_bytes(state), items=1 if ok else 0, **extra)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
