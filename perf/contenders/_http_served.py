"""The manifest's shards served by nginx, for the http_shards contenders.

Mirrored from the emulator (its JSON API media GETs) once per machine into
a temporary directory keyed by the bucket and the shards' names and sizes,
under a file lock, untimed; then served by nginx (tests/servers/nginx.py: Debian's
binary, on loopback, a generated configuration) for the contender's
lifetime, behind ``perf/shaper.py`` (the emulator's network: its latency,
per-connection and host caps, as the harness's ``PERF_PROFILE`` names;
run on the project's interpreter, ``PERF_PROJECT_PYTHON``). nginx serves
static files with ranges and strong ETags.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from _contender import Manifest

from perf.shaper import shaped
from tests.servers.nginx import running_nginx

__all__ = ["served"]


def _mirror(manifest: Manifest, names: list[tuple[str, int]]) -> Path:
    key = hashlib.sha256(repr((manifest.bucket, names)).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"aioflux-perf-http-{key}"
    done = root / ".mirrored"
    root.mkdir(exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another contender may be mirroring
        if done.is_file():
            return root
        for name, size in names:
            quoted = urllib.parse.quote(name, safe="")
            url = f"{manifest.endpoint}/storage/v1/b/{manifest.bucket}/o/{quoted}?alt=media"
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(url) as answer, open(path, "wb") as out:
                while chunk := answer.read(1 << 20):
                    out.write(chunk)
            if path.stat().st_size != size:
                raise SystemExit(f"mirror of {name}: {path.stat().st_size} bytes, not {size}")
        done.write_text("ok")
    return root


@contextlib.contextmanager
def served(manifest: Manifest, prefix: str) -> Iterator[list[str]]:
    """The http:// URLs of the manifest's objects under ``prefix``, served by nginx."""
    names = [(n, s) for n, s in manifest.objects if n.startswith(prefix)]
    root = _mirror(manifest, names)
    # One worker process a core, as Debian's nginx.conf has it: a single one
    # is a server the size of one core on the readers' own cores, and every
    # contender reads through it.
    with running_nginx(root, workers="auto") as server, shaped(
        server.endpoint, os.environ.get("PERF_PROFILE", "gcs-like"),
        python=os.environ.get("PERF_PROJECT_PYTHON"),
    ) as front:
        yield [f"{front}/{urllib.parse.quote(name)}" for name, _ in names]
