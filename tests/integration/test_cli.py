"""The aioflux CLI against the emulator: output, errors and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aioflux import Client
from aioflux.cli import main
from aioflux.testing import Emulator


def test_ls_stat_cat_du(run, sync_client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    sync_client.write(bucket, "d/a.bin", b"aaaa")
    sync_client.write(bucket, "d/sub/b.bin", b"bb")
    sync_client.write(bucket, "top", b"t")
    code, out, _ = run("ls", f"gs://{bucket}")
    assert code == 0
    assert out.split() == [f"gs://{bucket}/d/", f"gs://{bucket}/top"]
    code, out, _ = run("ls", "-r", "--json", f"gs://{bucket}/d/")
    rows = json.loads(out)
    assert [(r["url"], r["size"]) for r in rows] == [(f"gs://{bucket}/d/a.bin", 4),
                                                     (f"gs://{bucket}/d/sub/b.bin", 2)]
    code, out, _ = run("ls", "-l", "-r", f"gs://{bucket}/d/")
    assert code == 0 and "4" in out.split()
    code, out, _ = run("stat", f"gs://{bucket}/d/a.bin")
    assert json.loads(out)["size"] == 4
    code, out, _ = run("du", "--json", f"gs://{bucket}/d/")
    assert json.loads(out) == {"url": f"gs://{bucket}/d/", "objects": 2, "bytes": 6}
    assert run("cat", f"gs://{bucket}/d/a.bin")[:2] == (0, "aaaa")


def test_cp_round_trips_files_and_trees(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux.cli._copy as copy_mod

    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)  # exercise the streaming path
    big = os.urandom(6 * 1024 * 1024 + 5)
    (tmp_path / "big.bin").write_bytes(big)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a").write_bytes(b"a")
    (tree / "sub" / "b").write_bytes(b"b")
    assert run("cp", str(tmp_path / "big.bin"), f"gs://{bucket}/x/")[0] == 0
    assert sync_client.read(bucket, "x/big.bin") == big
    assert run("cp", "-r", str(tree), f"gs://{bucket}/t")[0] == 0
    assert sorted(o.name for o in sync_client.list_objects(bucket, "t/")) == ["t/a", "t/sub/b"]
    assert run("cp", f"gs://{bucket}/x/big.bin", str(tmp_path / "back.bin"))[0] == 0
    assert (tmp_path / "back.bin").read_bytes() == big
    assert not list(tmp_path.glob("*.aioflux-partial"))
    assert run("cp", "-r", f"gs://{bucket}/t", str(tmp_path / "down"))[0] == 0
    assert (tmp_path / "down" / "sub" / "b").read_bytes() == b"b"
    assert run("cp", f"gs://{bucket}/t/a", f"gs://{bucket}/copy/a")[0] == 0
    assert sync_client.read(bucket, "copy/a") == b"a"


def test_rm(run, sync_client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    for i in range(5):
        sync_client.write(bucket, f"r/{i}", b"x")
    code, out, _ = run("rm", f"gs://{bucket}/r/0")
    assert code == 0 and "removed 1" in out
    code, out, _ = run("rm", "-r", f"gs://{bucket}/r/")
    assert code == 0 and "removed 4" in out
    assert list(sync_client.list_objects(bucket, "r/")) == []


@pytest.mark.parametrize(("argv", "code", "fragment"), [
    (["stat", "gs://{b}/missing"], 1, "404"),
    (["cat", "gs://{b}/missing"], 1, "missing"),
    (["rm", "gs://{b}/missing"], 1, "404"),
    (["rm", "-r", "gs://{b}/none/"], 1, "nothing matches"),
    (["cp", "/no/such/file", "gs://{b}/x"], 1, "no such file"),
    (["cp", "a", "b"], 1, "gs:// URL"),
    (["ls", "s3://bucket"], 2, "not a gs:// URL"),
    (["ls", "gs://BAD"], 2, "invalid bucket name"),
])
def test_errors_are_one_line_with_exit_codes(run, bucket: str, argv: list[str],  # type: ignore[no-untyped-def]
                                             code: int, fragment: str) -> None:
    got, _, err = run(*[a.format(b=bucket) for a in argv])
    assert got == code
    assert fragment in err
    assert "Traceback" not in err
    if code == 1:
        assert len(err.strip().splitlines()) == 1


def test_bench_against_a_bucket(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "20", "--size", "1000",
                         "--checkpoint-mb", "6", "--json", "--plot", str(plot))
    assert code == 0, err
    results = {r["op"]: r for r in json.loads(out)["results"]}
    assert set(results) == {"write", "list", "read", "save", "load"}
    assert results["read"]["bytes"] == 20_000 and results["list"]["items"] == 20
    assert results["load"]["bytes"] == 6 << 20
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert list(sync_client.list_objects(bucket)) == []  # cleaned up


def test_bench_on_bundled_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--objects", "10", "--size", "100", "--ops", "write,read"]) == 0
    out = capsys.readouterr().out
    assert "the emulator (GCS-like profile)" in out and "read" in out


def test_bench_rejects_unknown_ops(run) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run("bench", "gs://some-bucket", "--ops", "fly")
    assert code == 1 and "unknown --ops fly" in err


def test_emulator_command_serves_until_terminated() -> None:
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "aioflux", "emulator", "--port", "0",
                             "--bucket", "cli-emu"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("aioflux emulator listening on http://127.0.0.1:")
        endpoint = line.split()[-1]
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b/cli-emu", timeout=10) as resp:
            assert json.load(resp)["name"] == "cli-emu"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.timeout(240)
def test_demo_small(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--samples", "300", "--steps", "24", "--ckpt-every", "6",
                 "--crash-at", "12", "--batch-size", "16"])
    out = capsys.readouterr().out
    assert code == 0
    assert "crashed: training process SIGKILLed" in out
    assert "latest complete checkpoint is step 6;" in out  # step 12's save was in flight
    for row in ("training throughput", "time blocked by checkpoints", "checkpoint throughput",
                "objects listed", "object GETs", "faults injected and retried"):
        assert row in out
    assert "kept: steps 12, 18, 24" in out


def test_console_script_entry_point_resolves() -> None:
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="aioflux")
    assert script.load() is main


@pytest.mark.timeout(240)
def test_demo_against_a_bucket_url_cleans_up(emulator: Emulator, bucket: str,
                                             sync_client: Client,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator.endpoint)
    code = main(["demo", "--url", f"gs://{bucket}/runs", "--samples", "200", "--steps", "12",
                 "--ckpt-every", "4", "--crash-at", "8", "--batch-size", "16"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"aioflux demo on gs://{bucket}/runs" in out
    assert "faults injected and retried  n/a (real bucket)" in out
    assert "removed the" in out
    assert list(sync_client.list_objects(bucket)) == []
    assert sync_client.list_multipart_uploads(bucket) == []
