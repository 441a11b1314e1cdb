"""The fake Hub (``aioflux.testing.FakeHub``) as a process of its own, for
the parquet contenders: its serving CPU is the network's, not a
contender's. Run on the project's interpreter:

    python _hub_server.py ROOT REPO

pushes every file under ROOT into the dataset repo REPO (one commit, the
files LFS: each resolve a 302 to the CDN), prints ``hub HUB CDN`` and then
answers lines on stdin:

- ``cdn URL``: the CDN origin the resolve redirects name from now on (the
  shaper in front of the CDN); answers ``ok``;
- ``bytes``: ``bytes N``, the bytes of file content the CDN has answered
  with so far (a range's length, a whole file's size; HEADs none): every
  file is LFS, so the Hub's origin answers redirects and listings only.

It exits at the end of stdin.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from aioflux.testing import FakeHub, HubRequest


def _answered(request: HubRequest, size: int) -> int:
    if request.method != "GET":
        return 0
    spec = {k.lower(): v for k, v in request.headers.items()}.get("range", "")
    if not spec.startswith("bytes="):
        return size
    first, _, last = spec[6:].split(",")[0].strip().partition("-")
    if not first:
        return min(int(last), size)
    end = min(int(last) + 1, size) if last else size
    return max(0, end - int(first))


def _cdn_bytes(hub: FakeHub, sizes: dict[str, int]) -> int:
    return sum(
        _answered(r, sizes.get(r.path.split("?", 1)[0].strip("/"), 0)) for r in hub.sent("cdn")
    )


def main() -> int:
    root, repo = Path(sys.argv[1]), sys.argv[2]
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }
    with FakeHub(lfs_threshold=1024) as hub:
        hub.create_repo(repo)
        hub.push(repo, files)
        sizes = {hashlib.sha256(data).hexdigest(): len(data) for data in files.values()}
        print(f"hub {hub.endpoint} {hub.cdn_endpoint}", flush=True)
        for line in sys.stdin:
            word, _, rest = line.strip().partition(" ")
            if word == "cdn":
                hub.cdn_endpoint = rest
                print("ok", flush=True)
            elif word == "requests":  # what each origin was asked, in order: one JSON line
                print(
                    json.dumps(
                        [
                            [
                                r.origin,
                                r.method,
                                r.path.split("?", 1)[0],
                                r.headers.get("Range", ""),
                            ]
                            for r in hub.requests
                        ]
                    ),
                    flush=True,
                )
            elif word == "bytes":
                print(f"bytes {_cdn_bytes(hub, sizes)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
