"""``aioflux ckpt list|history`` against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aioflux import Client
from aioflux.torch import CheckpointManager


@pytest.fixture
def root(sync_client: Client, bucket: str) -> str:
    """A run with complete checkpoints at steps 10 and 20, a step-30
    directory left by a killed save (no manifest), and their history."""
    url = f"gs://{bucket}/runs/a"
    with CheckpointManager(url, client=sync_client) as manager:
        manager.save({"w": torch.arange(4.0)}, step=10)
        manager.save({"w": torch.arange(1024.0)}, step=20)
    sync_client.write(bucket, "runs/a/step-000000000030/state.pt", b"partial")
    return url


def test_list_table_and_json(run, root: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("ckpt", "list", root)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["STEP", "CREATED", "SIZE", "COMPRESSION", "URL"]
    assert [ln.split()[0] for ln in lines[1:]] == ["10", "20"]  # not the manifest-less 30
    assert lines[2].split()[-1] == f"{root}/step-000000000020/"

    code, out, _ = run("ckpt", "list", "--json", root + "/")  # a trailing slash is the same root
    assert code == 0
    rows = json.loads(out)
    assert [r["step"] for r in rows] == [10, 20]
    assert all(set(r["objects"]) == {"state.pt"} and r["size"] > 0 for r in rows)
    assert rows[0]["compression"] is None


def test_history_table_and_json(run, root: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("ckpt", "history", root)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["STEP", "RESULT", "BYTES"]
    assert [ln.split()[:2] for ln in lines[1:]] == [["10", "ok"], ["20", "ok"]]

    code, out, _ = run("ckpt", "history", "--json", root)
    records = json.loads(out)
    assert [(r["step"], r["ok"]) for r in records] == [(10, True), (20, True)]
    assert records[1]["bytes"] > records[0]["bytes"] > 0  # 1024 floats serialise larger than 4
    assert all(r["total_seconds"] >= r["blocking_seconds"] >= 0 for r in records)


@pytest.mark.parametrize("argv", [["list"], ["list", "--json"], ["history"],
                                  ["history", "--json"]])
def test_a_root_holding_no_checkpoint_fails_as_ls_of_nothing(  # type: ignore[no-untyped-def]
        run, root: str, argv: list[str]) -> None:
    # A mistyped root and an empty one look alike on a bucket: exit 1, so
    # that a script stops at the typo (it said "no complete checkpoints", exit 0).
    typo = root.replace("runs/a", "runs/typo")
    code, out, err = run("ckpt", *argv, typo)
    what = "no complete checkpoints" if argv[0] == "list" else "no saves recorded"
    assert (code, out) == (1, "")
    assert err == f"aioflux ckpt: ckpt {argv[0]} {typo}/: {what} under it\n"


def test_errors_exit_1_with_one_line(run, sync_client: Client,  # type: ignore[no-untyped-def]
                                     bucket: str) -> None:
    code, out, err = run("ckpt", "list", "gs://no-such-bucket-for-ckpt/run")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("aioflux ckpt:")
    assert "no-such-bucket-for-ckpt" in err
    # A bucket that is not there has no history either: it said "no saves
    # recorded" (and --json "[]"), exit 0, where list failed.
    for argv in (["history"], ["history", "--json"]):
        code, out, err = run("ckpt", *argv, "gs://no-such-bucket-for-ckpt/run")
        assert (code, out) == (1, "")
        assert len(err.strip().splitlines()) == 1 and "no-such-bucket-for-ckpt" in err, err

    sync_client.write(bucket, "bad/history.jsonl", b'{"step": 1}\nnot json\n')
    code, out, err = run("ckpt", "history", f"gs://{bucket}/bad")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "history.jsonl" in err


def test_usage_errors_exit_2(run, bucket: str) -> None:  # type: ignore[no-untyped-def]
    assert run("ckpt", f"gs://{bucket}/run")[0] == 2  # no action
    code, out, err = run("ckpt", "list", "ftp://bucket/run")
    assert (code, out) == (2, "")
    assert err == ("aioflux ckpt list: error: argument root: 'ftp://bucket/run': unknown URL "
                   "scheme ftp:// (use gs://, s3://, az://, http(s):// (read only), file:// "
                   "or a local path) "
                   "(see aioflux ckpt list --help)\n")
    assert run("ckpt", "history", "ftp://host/run")[0] == 2


def test_list_and_history_of_a_root_on_the_filesystem(run, root: str,  # type: ignore[no-untyped-def]
                                                      tmp_path: Path) -> None:
    # The run copied to a directory with the CLI itself is a root like any other.
    assert run("cp", "-r", root, f"file://{tmp_path}/run")[0] == 0
    url = f"file://{tmp_path}/run"
    code, out, err = run("ckpt", "list", "--json", str(tmp_path / "run"))  # a plain path
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["step"], r["url"]) for r in rows] == [(10, f"{url}/step-000000000010/"),
                                                     (20, f"{url}/step-000000000020/")]
    code, out, err = run("ckpt", "history", url)
    assert code == 0, err
    assert [ln.split()[:2] for ln in out.splitlines()[1:]] == [["10", "ok"], ["20", "ok"]]


def test_a_history_record_of_wrong_field_types_is_one_line(  # type: ignore[no-untyped-def]
        run, tmp_path: Path) -> None:
    # "bytes": "x" reached the table: a TypeError traceback.
    root = tmp_path / "ck"
    root.mkdir()
    (root / "history.jsonl").write_text(
        '{"step":1,"ok":true,"bytes":"x","stored_bytes":1,"blocking_seconds":1,'
        '"total_seconds":1,"mb_per_s":1,"created":"t"}\n')
    code, _, err = run("ckpt", "history", str(root))
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# A failed save's multi-line error in ``ckpt history`` stays on its row.


class _Unpicklable:
    def __reduce__(self) -> tuple[object, ...]:
        raise RuntimeError("first line of the failure\nsecond line of the failure")


def test_ckpt_history_shows_a_multi_line_error_on_its_row(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str) -> None:
    # The ERROR cell is the failed save's exception text; printed raw, its
    # line break would split the record over two lines of the table.
    url = f"gs://{bucket}/runs/m"
    with CheckpointManager(url, client=sync_client) as manager:
        manager.save({"w": torch.arange(4.0)}, step=1)
        with pytest.raises(RuntimeError):
            manager.save({"bad": _Unpicklable()}, step=2)
    code, out, err = run("ckpt", "history", url)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3, out  # the header and one row per save
    assert lines[2].split()[:2] == ["2", "FAILED"]
    assert lines[2].endswith("RuntimeError: first line of the failure\\nsecond line of the "
                             "failure")
    # --json keeps the text as it is.
    code, out, _ = run("ckpt", "history", "--json", url)
    assert code == 0 and "first line of the failure\\nsecond line" in out
