"""Virtual environments for the peers aioflux is measured against.

Each peer gets its own environment under ``perf/.venvs/NAME`` because their
pins conflict: gcs-torch-dataflux 1.4.0's checkpoint module needs
``google-cloud-storage<3`` while current gcsfs needs ``>=3.14``. Peer code
never runs in the project's interpreter; the harness starts each peer's
script with that environment's ``python``.

Building is idempotent: a marker file holds the requirement set an
environment was built from, and a matching marker means "reuse". A changed
requirement set rebuilds the environment from scratch, so a stale package
cannot linger and skew a measurement.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PEERS", "VENV_ROOT", "PeerEnv", "build", "build_all", "python_for", "versions"]

VENV_ROOT = Path(__file__).resolve().parent / ".venvs"
_MARKER = ".aioflux-perf.json"

# torch is installed on its own first, pinned, so the resolver never reaches
# for an unpinned (CUDA, multi-GB) build when dataflux asks for "torch".
_TORCH = "torch==2.13.0"


@dataclass(frozen=True)
class PeerEnv:
    """One peer's environment.

    Attributes:
        name: directory name under ``perf/.venvs`` and the key contenders use.
        first: requirements installed in a pip call of their own, before
            ``requirements`` (pins the resolver must then respect).
        requirements: the peer itself and its companions.
        probe: distributions whose versions go into the results notes.
    """

    name: str
    first: tuple[str, ...]
    requirements: tuple[str, ...]
    probe: tuple[str, ...]

    @property
    def path(self) -> Path:
        return VENV_ROOT / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def spec(self) -> dict[str, object]:
        """What the marker records; any change here forces a rebuild."""
        return {
            "python": sys.version.split()[0],
            "first": list(self.first),
            "requirements": list(self.requirements),
        }


PEERS: dict[str, PeerEnv] = {
    env.name: env
    for env in (
        PeerEnv(
            name="dataflux",
            first=(_TORCH,),
            requirements=("gcs-torch-dataflux", "google-cloud-storage<3"),
            probe=("gcs-torch-dataflux", "google-cloud-storage", "torch"),
        ),
        PeerEnv(
            name="gcsfs",
            # torch for the checkpoint scenarios (torch.save into gcsfs files);
            # webdataset for shards_tar (its tar pipeline over fsspec).
            first=(_TORCH,),
            requirements=("gcsfs", "webdataset"),
            probe=("gcsfs", "fsspec", "aiohttp", "torch", "webdataset"),
        ),
        PeerEnv(
            name="gcs",
            first=(),
            requirements=("google-cloud-storage>=3,<4",),
            probe=("google-cloud-storage", "requests", "urllib3"),
        ),
        PeerEnv(
            name="obstore",
            first=(),
            # uvloop: the loop aioflux's contenders run on, so both sides get it.
            requirements=("obstore", "uvloop"),
            probe=("obstore", "uvloop"),
        ),
        PeerEnv(
            name="litdata",
            # torchvision is a litdata requirement; resolved against the pin.
            # Its GCS downloader builds its obstore store from a
            # google-cloud-storage client's credentials, an optional import.
            first=(_TORCH,),
            requirements=("litdata", "google-cloud-storage"),
            probe=("litdata", "obstore", "google-cloud-storage", "torch", "torchvision"),
        ),
        PeerEnv(
            name="streaming",
            # MosaicML Streaming (MDSWriter, StreamingDataset) for the scale
            # scenario: per-process memory and start-up over local MDS shards.
            first=(_TORCH,),
            requirements=("mosaicml-streaming",),
            probe=("mosaicml-streaming", "numpy", "torch"),
        ),
        PeerEnv(
            name="msc",
            # torch for msc.torch.save/load; the extra brings google-cloud-storage.
            first=(_TORCH,),
            requirements=("multi-storage-client[google-cloud-storage]",),
            probe=("multi-storage-client", "google-cloud-storage", "torch"),
        ),
        PeerEnv(
            name="s3tc",
            # Amazon's s3torchconnector (S3MapDataset, S3IterableDataset,
            # S3Checkpoint) over its Rust/CRT client (mountpoint-s3-client),
            # measured on the emulator's S3 face (the s3_* scenarios).
            # webdataset for shards_tar: its tar expander and grouping over
            # S3IterableDataset's readers.
            first=(_TORCH,),
            requirements=("s3torchconnector==1.5.0", "webdataset"),
            probe=("s3torchconnector", "s3torchconnectorclient", "torch", "webdataset"),
        ),
        PeerEnv(
            name="azblob",
            # Microsoft's azure-storage-blob with its asyncio client (aiohttp
            # transport), measured on Azurite (the az_* scenarios); torch for
            # the map-style epoch and the checkpoints.
            first=(_TORCH,),
            requirements=("azure-storage-blob", "aiohttp", "uvloop"),
            probe=("azure-storage-blob", "azure-core", "aiohttp", "torch"),
        ),
        PeerEnv(
            name="adlfs",
            # fsspec's Azure filesystem (over azure-storage-blob's asyncio
            # client), on Azurite; torch for the epoch and the checkpoints.
            first=(_TORCH,),
            requirements=("adlfs",),
            probe=("adlfs", "fsspec", "azure-storage-blob", "aiohttp", "torch"),
        ),
        PeerEnv(
            name="s3fs",
            # fsspec's S3 filesystem (aiobotocore), on the emulator's S3 face
            # (shards_lines: open() and line iteration); torch for the DataLoader.
            first=(_TORCH,),
            requirements=("s3fs",),
            probe=("s3fs", "fsspec", "aiobotocore", "torch"),
        ),
        # The fsspec_* scenarios: gcsfs and s3fs with pyarrow (Parquet
        # footers and pq.read_table), without torch. Environments of their
        # own: adding pyarrow to gcsfs's or s3fs's would rebuild those.
        PeerEnv(
            name="gcsfs-pyarrow",
            first=(),
            requirements=("gcsfs", "pyarrow"),
            probe=("gcsfs", "fsspec", "aiohttp", "pyarrow"),
        ),
        # parquet: litdata's Parquet path (index_parquet_dataset, ParquetLoader)
        # over hf:// needs polars, pyarrow and huggingface_hub beside it; an
        # environment of its own so the litdata one is not rebuilt.
        PeerEnv(
            name="litdata-parquet",
            first=(_TORCH,),
            requirements=("litdata", "polars", "pyarrow", "huggingface_hub"),
            probe=("litdata", "polars", "pyarrow", "huggingface_hub", "fsspec", "torch"),
        ),
        PeerEnv(
            name="s3fs-pyarrow",
            first=(),
            requirements=("s3fs", "pyarrow"),
            probe=("s3fs", "fsspec", "aiobotocore", "botocore", "pyarrow"),
        ),
    )
}


def _read_marker(env: PeerEnv) -> dict[str, object] | None:
    try:
        data = json.loads((env.path / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _run(cmd: list[str]) -> None:
    print("  $", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        # This machine's pip config names local indexes that lack most
        # projects; pip warns once per package. Everything else is shown.
        if not (line.startswith("WARNING: Location 'file://") and "is ignored" in line):
            print(line, end="", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def build(env: PeerEnv, *, force: bool = False) -> Path:
    """Create or reuse ``env``; return its python.

    Raises:
        subprocess.CalledProcessError: venv creation or pip failed.
    """
    marker = _read_marker(env)
    if (
        not force
        and marker is not None
        and marker.get("spec") == env.spec()
        and env.python.exists()
    ):
        print(f"[setup] {env.name}: up to date at {env.path}", flush=True)
        return env.python
    if env.path.exists():
        why = "forced" if force else "requirements changed or build incomplete"
        print(f"[setup] {env.name}: rebuilding ({why})", flush=True)
        shutil.rmtree(env.path)
    else:
        print(f"[setup] {env.name}: creating {env.path}", flush=True)
    VENV_ROOT.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(env.path)])
    pip = [str(env.python), "-m", "pip", "install", "--quiet"]
    if env.first:
        _run([*pip, *env.first])
    _run([*pip, *env.first, *env.requirements])
    # The marker goes last: an interrupted build has none and is redone.
    found = _query_versions(env)
    (env.path / _MARKER).write_text(json.dumps({"spec": env.spec(), "versions": found}, indent=2))
    print(
        f"[setup] {env.name}: ready ({', '.join(f'{k} {v}' for k, v in found.items())})", flush=True
    )
    return env.python


def build_all(names: list[str] | None = None, *, force: bool = False) -> None:
    """Build the named peers' environments (all of them by default)."""
    for name in names or list(PEERS):
        build(PEERS[name], force=force)


def python_for(name: str) -> Path:
    """The interpreter of a built environment.

    Raises:
        RuntimeError: the environment is missing or out of date.
    """
    env = PEERS[name]
    marker = _read_marker(env)
    if marker is None or marker.get("spec") != env.spec() or not env.python.exists():
        raise RuntimeError(
            f"peer environment {name!r} is not built; run `python -m perf setup {name}`"
        )
    return env.python


def _query_versions(env: PeerEnv) -> dict[str, str]:
    code = (
        "import json, sys\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "out = {}\n"
        "for d in sys.argv[1:]:\n"
        "    try: out[d] = version(d)\n"
        "    except PackageNotFoundError: out[d] = 'missing'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(env.python), "-c", code, *env.probe], check=True, capture_output=True, text=True
    )
    result: dict[str, str] = json.loads(done.stdout)
    return result


def versions(name: str) -> dict[str, str]:
    """Versions recorded when ``name`` was built (empty if unknown)."""
    marker = _read_marker(PEERS[name]) or {}
    found = marker.get("versions")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
