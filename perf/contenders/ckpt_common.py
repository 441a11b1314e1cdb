"""What the checkpoint contenders share: the state dict, the RSS figures, and
syncing files to the disk and dropping them from the page cache.

Not a contender itself. Imported as a sibling (like ``_contender``) by the
``ckpt_*`` scripts, under the project's python and under the peers' venvs,
so it needs only the standard library and torch.

Every contender builds the same state, untimed, before its stopwatch starts:
``count`` fp32 tensors of ``tensor_mib`` MiB from ``torch.manual_seed(0)``.
``kind="random"`` is plain ``randn`` (what a freshly initialised model looks
like to a compressor: next to nothing to gain); ``kind="half16"`` rounds
every other tensor through fp16 (13 low mantissa bits zero), a stand-in for
weights trained or stored in reduced precision, which zstd can shrink.

``Stopwatch`` notes RSS when the timed region starts, i.e. after the state
is built, and the harness's "RSS growth" column is peak minus that: the
saver's own memory beyond the state dict.

``ensure_composed`` is for ``ckpt_load``: the harness seeds objects of at
most 256 MiB (``seed.py`` draws its random pool with one ``getrandbits``),
so the 1 GiB checkpoint is seeded as parts and composed into one object,
server-side with one JSON compose request and untimed, by whichever
contender runs first. Standard library only, so no client under test
shapes the data.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

__all__ = ["add_state_args", "build_state", "checkpoint_object", "drop_cache", "ensure_composed",
           "fsync_path", "state_bytes"]


def drop_cache(folder: str) -> None:
    """Write back and drop from the page cache every file under ``folder``:
    a load timed after it reads the disk."""
    for top, _, files in os.walk(folder):
        for leaf in files:
            fd = os.open(os.path.join(top, leaf), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fsync_path(path: str) -> None:
    """fsync a file or a folder by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def add_state_args(parser: argparse.ArgumentParser) -> None:
    """The flags that say which state to build (the scenario passes them)."""
    parser.add_argument("--count", type=int, default=64, help="tensors")
    parser.add_argument("--tensor-mib", type=int, default=16, help="MiB per tensor")
    parser.add_argument("--kind", choices=["random", "half16"], default="random")


def build_state(args: argparse.Namespace) -> dict[str, Any]:
    """The state dict the scenario saves (same bytes in every contender)."""
    import torch  # here: the load contenders do not need it

    torch.manual_seed(0)
    numel = args.tensor_mib * 2**20 // 4
    state: dict[str, Any] = {}
    for i in range(args.count):
        tensor = torch.randn(numel, dtype=torch.float32)
        if args.kind == "half16" and i % 2:
            tensor = tensor.half().float()
        state[f"layer{i:03d}.weight"] = tensor
    state["step"] = 1
    # Temporaries of the fp16 round trip must not count as the saver's memory.
    gc.collect()
    return state


def state_bytes(state: dict[str, Any]) -> int:
    """Tensor bytes in ``state``."""
    import torch

    return sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))


def ensure_composed(endpoint: str, bucket: str, parts: list[str], name: str) -> None:
    """Compose ``parts`` (in order) into ``name`` unless it already exists."""
    base = f"{endpoint}/storage/v1/b/{bucket}/o/"
    try:
        with urllib.request.urlopen(base + quote(name, safe="")) as resp:
            resp.read()
            return
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
    body = json.dumps({
        "sourceObjects": [{"name": p} for p in parts],
        "destination": {"contentType": "application/octet-stream"},
    }).encode()
    request = urllib.request.Request(base + quote(name, safe="") + "/compose", data=body,
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
    with urllib.request.urlopen(request) as resp:
        resp.read()


def checkpoint_object(manifest: Any, name: str = "ckpt_load/state.pt") -> tuple[str, int]:
    """The one object ``ckpt_load`` reads: the seeded parts, composed.

    Returns:
        Its name and size.
    """
    ensure_composed(manifest.endpoint, manifest.bucket, manifest.names, name)
    return name, sum(size for _, size in manifest.objects)
