"""Tests of my_pipeline against the emulator, including injected 503s."""

from __future__ import annotations

import os
from pathlib import Path

from my_pipeline import count_objects, upload_dir

from aioflux import Client
from aioflux.testing import Emulator, Faults


def make_tree(root: Path, count: int) -> dict[str, bytes]:
    """``count`` files of random bytes in a few subdirectories."""
    files = {f"part-{i % 3}/file-{i:03d}.bin": os.urandom(100 + i) for i in range(count)}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_upload_then_count(tmp_path: Path, client: Client, gcs_bucket: str) -> None:
    files = make_tree(tmp_path, 12)
    assert upload_dir(tmp_path, f"gs://{gcs_bucket}/run1", client) == 12
    assert count_objects(f"gs://{gcs_bucket}/run1/", client) == 12
    assert count_objects(f"gs://{gcs_bucket}/run1/part-0/", client) == 4
    assert count_objects(f"gs://{gcs_bucket}/run2/", client) == 0
    assert client.read(gcs_bucket, "run1/part-1/file-001.bin") == files["part-1/file-001.bin"]


def test_empty_dir_uploads_nothing(tmp_path: Path, client: Client, gcs_bucket: str) -> None:
    assert upload_dir(tmp_path, f"gs://{gcs_bucket}/empty", client) == 0
    assert count_objects(f"gs://{gcs_bucket}/", client) == 0


def test_survives_injected_503s(tmp_path: Path, client: Client, gcs_emulator: Emulator,
                                gcs_bucket: str) -> None:
    files = make_tree(tmp_path, 60)
    before = gcs_emulator.stats["injected_503"]
    # One request in five fails with 503 (seeded, so the run is repeatable);
    # gcs_bucket resets the faults after the test.
    gcs_emulator.faults = Faults(p_503=0.2, seed=1)

    assert upload_dir(tmp_path, f"gs://{gcs_bucket}/flaky", client) == 60
    assert count_objects(f"gs://{gcs_bucket}/flaky/", client) == 60

    assert gcs_emulator.stats["injected_503"] > before  # faults did fire...
    for rel, data in files.items():  # ...and every object still holds the right bytes
        assert client.read(gcs_bucket, f"flaky/{rel}") == data
