"""The real ``huggingface_hub`` client and HF ``datasets`` streaming, run
unchanged against the fake Hub (``HF_ENDPOINT``): what they accept keeps
the fake honest. Each runs in a subprocess, since both read their
settings from the environment once, at import."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioflux.testing import FakeHub
from tests.backends.hf.conftest import TOKEN


def _run(hub: FakeHub, home: Path, code: str, **env: str) -> Any:
    """Run ``code`` with the Hub's settings; what it prints last, as JSON."""
    environment = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home),
                   "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "ds"),
                   "HF_TOKEN_PATH": str(home / "token"), "HF_HUB_DISABLE_TELEMETRY": "1",
                   "HF_HUB_DISABLE_PROGRESS_BARS": "1", **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment,
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def files(hub: FakeHub) -> dict[str, bytes]:
    content = {f"data/train-{n}.bin": bytes(range(256)) * (n + 1) for n in range(5)}
    content["README.md"] = b"---\nlicense: mit\n---\n# ds\n"
    content["data/small.txt"] = b"small"
    hub.create_repo("org/ds")
    hub.push("org/ds", content)
    return content


def test_hf_api_lists_the_tree_a_page_at_a_time(hub: FakeHub, hub_environment: Path,
                                                files: dict[str, bytes]) -> None:
    got = _run(hub, hub_environment, """
        import json
        from huggingface_hub import HfApi
        api = HfApi()
        tree = [(e.path, getattr(e, "size", None)) for e in
                api.list_repo_tree("org/ds", repo_type="dataset", recursive=True)]
        info = api.dataset_info("org/ds", revision="main")
        paths = api.get_paths_info("org/ds", ["data/train-2.bin", "data"], repo_type="dataset")
        print(json.dumps({"tree": tree, "sha": info.sha,
                          "paths": [(p.path, type(p).__name__) for p in paths],
                          "lfs": paths[0].lfs.sha256}))
    """)
    files_listed = {path: size for path, size in got["tree"] if size is not None}
    assert files_listed == {name: len(data) for name, data in files.items()}
    assert [path for path, size in got["tree"] if size is None] == ["data"]
    assert got["sha"] == hub.commit("org/ds")
    assert got["paths"] == [["data/train-2.bin", "RepoFile"], ["data", "RepoFolder"]]
    assert got["lfs"] == hashlib.sha256(files["data/train-2.bin"]).hexdigest()
    # 8 entries, 3 a page: the client followed the Link headers.
    assert sum("/tree/" in r.path for r in hub.sent("hub")) == 3


def test_hf_filesystem_reads_ranges_through_the_cdn(hub: FakeHub, hub_environment: Path,
                                                    files: dict[str, bytes]) -> None:
    converted = hub.push("org/ds", {"default/train/0000.parquet": b"P" * 300},
                         branch="refs/convert/parquet")
    got = _run(hub, hub_environment, """
        import json
        from huggingface_hub import HfFileSystem
        fs = HfFileSystem()
        with fs.open("datasets/org/ds/data/train-3.bin", "rb", block_size=100) as f:
            f.seek(300)
            part = f.read(50)
        print(json.dumps({
            "part": list(part),
            "ls": fs.ls("datasets/org/ds/data", detail=False),
            "size": fs.info("hf://datasets/org/ds/data/train-4.bin")["size"],
            "small": fs.cat_file("datasets/org/ds/data/small.txt").decode(),
            "converted": len(fs.cat_file(
                "datasets/org/ds@refs%2Fconvert%2Fparquet/default/train/0000.parquet")),
        }))
    """)
    assert bytes(got["part"]) == files["data/train-3.bin"][300:350]
    assert set(got["ls"]) == {f"datasets/org/ds/{n}" for n in files if n.startswith("data/")}
    assert got["size"] == len(files["data/train-4.bin"])
    assert got["small"] == "small" and got["converted"] == 300
    cdn = hub.sent("cdn")
    assert any((r.headers.get("Range") or "").startswith("bytes=300-") for r in cdn)
    assert hub.commit("org/ds", "refs/convert/parquet") == converted
    assert any("/revision/refs%2Fconvert%2Fparquet" in r.path for r in hub.sent("hub"))


def test_hf_hub_download_with_hf_endpoint_and_hf_token(hub: FakeHub, hub_environment: Path,
                                                       files: dict[str, bytes]) -> None:
    hub.create_repo("org/gated", repo_type="model", gated=True)
    hub.push("org/gated", {"model.safetensors": b"w" * 1000}, repo_type="model")
    code = """
        import json
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import GatedRepoError
        out = {}
        for repo, name, kind in (("org/ds", "data/train-1.bin", "dataset"),
                                 ("org/ds", "data/small.txt", "dataset"),
                                 ("org/gated", "model.safetensors", "model")):
            try:
                path = hf_hub_download(repo, name, repo_type=kind)
            except GatedRepoError:
                out[name] = "gated"
            else:
                out[name] = len(open(path, "rb").read())
        print(json.dumps(out))
    """
    anonymous = _run(hub, hub_environment, code)
    assert anonymous == {"data/train-1.bin": len(files["data/train-1.bin"]),
                         "data/small.txt": 5, "model.safetensors": "gated"}
    allowed = _run(hub, hub_environment, code, HF_TOKEN=TOKEN)
    assert allowed["model.safetensors"] == 1000
    assert all("Authorization" not in r.headers for r in hub.sent("cdn"))
    assert any(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in hub.sent("hub"))


def _parquet(first: int, rows: int) -> bytes:
    table = pa.table({"id": list(range(first, first + rows)),
                      "text": [f"row {n}" for n in range(first, first + rows)]})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=5)
    return out.getvalue()


@pytest.mark.slow  # ~9-12 s on 2 busy cores: datasets' import and first load_dataset
def test_datasets_streaming_of_parquet_and_jsonl(hub: FakeHub, hub_environment: Path) -> None:
    hub.create_repo("org/pq")
    hub.push("org/pq", {f"data/train-{n:05d}-of-00003.parquet": _parquet(n * 20, 20)
                        for n in range(3)})
    hub.create_repo("org/jl")
    hub.push("org/jl", {"train.jsonl": b"".join(b'{"a": %d}\n' % n for n in range(40))})
    got = _run(hub, hub_environment, """
        import json
        from datasets import load_dataset
        parquet = load_dataset("org/pq", split="train", streaming=True)
        lines = load_dataset("org/jl", split="train", streaming=True)
        print(json.dumps({"ids": [row["id"] for row in parquet],
                          "texts": [row["text"] for row in parquet][:2],
                          "a": [row["a"] for row in lines]}))
    """)
    assert got["ids"] == list(range(60))
    assert got["texts"] == ["row 0", "row 1"]
    assert got["a"] == list(range(40))
    # The Parquet files were read by range, through the CDN.
    assert any(r.headers.get("Range") for r in hub.sent("cdn"))
