"""``python -m perf examples``: the examples' peer sides, in the peers' own
environments.

``examples/from_s3torchconnector.py --backend s3torchconnector`` runs
s3torchconnector, which the test extra does not install (it brings its own
torch and a Rust client): only ``perf/.venvs/s3tc`` (``python -m perf setup
s3tc``) has it. It runs there against the emulator's S3 face, as the
``s3_*`` scenarios do, with nothing of aioflux importable; aioflux then reads
back what it wrote. The test suite checks the aioflux side of the example and
what it says when s3torchconnector is missing (tests/examples).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from perf import emulator, peers

__all__ = ["check_all", "check_s3torchconnector"]

_BUCKET = "perf-examples"


def _peer_env() -> dict[str, str]:
    """A peer's environment, as the harness gives it: only its own packages,
    dummy AWS credentials (the emulator checks no signature)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                        "AWS_ENDPOINT_URL_S3")}
    env.update(AWS_ACCESS_KEY_ID="perf", AWS_SECRET_ACCESS_KEY="perf", AWS_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true", PYTHONUNBUFFERED="1")
    return env


def _names(endpoint: str, prefix: str) -> list[str]:
    """The objects under ``prefix``, listed by aioflux (the GCS face of the
    same store)."""
    from aioflux import Client

    with Client(endpoint=endpoint) as client:
        return [o.name for o in client.list_objects(_BUCKET, prefix)]


def check_s3torchconnector(python: Path, *, samples: int = 64) -> str:
    """Run the example's s3torchconnector side under ``python``.

    Args:
        python: an interpreter with torch and s3torchconnector.
        samples: the data set's size.

    Returns:
        The example's result line.

    Raises:
        RuntimeError: the example failed, said something else, or left other
            objects than its data set and checkpoint.
    """
    script = emulator.REPO_ROOT / "examples" / "from_s3torchconnector.py"
    with tempfile.TemporaryDirectory(prefix="perf-examples-") as logs, emulator.start(
            [_BUCKET], kind="aioflux", profile="none", log_dir=Path(logs)) as emu:
        assert emu.s3_endpoint is not None  # aioflux's emulator has its S3 face
        url = f"s3://{_BUCKET}/s3tc"
        # From an empty directory: the checkout's aioflux is not importable there.
        done = subprocess.run(
            [str(python), str(script), "--backend", "s3torchconnector", "--url", url,
             "--endpoint", emu.s3_endpoint, "--region", "us-east-1", "--samples", str(samples),
             "--workers", "0"],
            cwd=logs, env=_peer_env(), text=True, capture_output=True,
            timeout=600, check=False)
        report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        expected = (rf"from_s3torchconnector\[s3torchconnector\]: 1 epoch over {samples} "
                    rf"samples .*checkpoint saved and loaded back from {url}/model\.pt")
        if done.returncode != 0 or not re.search(expected, done.stdout):
            raise RuntimeError(f"{script.name} --backend s3torchconnector: {report}")
        # What s3torchconnector wrote, aioflux reads: the same objects, no others.
        names = _names(emu.endpoint, "s3tc/")
        data = [n for n in names if n.startswith("s3tc/data/")]
        if len(data) != samples or sorted(set(names) - set(data)) != ["s3tc/model.pt"]:
            raise RuntimeError(f"aioflux lists {names} after {script.name}")
        return done.stdout.strip().splitlines()[-1]


def check_all() -> int:
    """Run every check; print each one's result.

    Returns:
        0 if all passed, 1 otherwise (a peer environment not built fails:
        ``python -m perf setup s3tc`` builds it).
    """
    try:
        line = check_s3torchconnector(peers.python_for("s3tc"))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"[examples] from_s3torchconnector FAILED: {exc}", flush=True)
        return 1
    print(f"[examples] ok: {line}", flush=True)
    return 0
