"""The aioflux CLI against the emulator: output, errors and exit codes."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable
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
    monkeypatch.setattr(copy_mod, "_CHUNK", 1024 * 1024)  # and a download of several ranges
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


def test_cp_download_checks_the_combined_crc32c_of_its_ranges(  # type: ignore[no-untyped-def]
        run, emulator: Emulator, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import aioflux.cli._copy as copy_mod
    from aioflux._core.integrity.crc import crc32c

    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)
    monkeypatch.setattr(copy_mod, "_CHUNK", 256 * 1024)
    data = os.urandom(1024 * 1024 + 7)
    emulator.store.put(bucket, "bad.bin", data, crc32c=crc32c(data) ^ 1)  # a lying crc32c
    code, out, err = run("cp", f"gs://{bucket}/bad.bin", str(tmp_path / "bad.bin"))
    assert (code, out) == (1, "")
    assert err.startswith(f"aioflux cp: cp gs://{bucket}/bad.bin: the 1048583 bytes read have "
                          "crc32c ")
    assert list(tmp_path.iterdir()) == []  # neither the target nor a partial file



def test_a_streamed_copy_holds_what_cli_md_states(  # type: ignore[no-untyped-def]
        run, sync_client: Client, bucket: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # cli.md: 8 ranged reads of 8 MiB, into a writer of 8 MiB parts: about
    # 136 MiB a file. The writer kept its default of 16 parts uploading
    # (8 MiB x 17 held): a 600 MB copy between stores peaked at ~245 MiB.
    import aioflux.cli._copy as copy_mod

    given = []
    writer = copy_mod.AsyncObjectWriter

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        given.append(kwargs["options"])
        return writer(*args, **kwargs)

    monkeypatch.setattr(copy_mod, "AsyncObjectWriter", recording)
    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)
    data = os.urandom(64 * 1024)
    (tmp_path / "f.bin").write_bytes(data)
    assert run("cp", str(tmp_path / "f.bin"), f"gs://{bucket}/f.bin")[0] == 0
    assert sync_client.read(bucket, "f.bin") == data
    [options] = given
    reads = copy_mod._RANGES_IN_FLIGHT * copy_mod._CHUNK
    assert options.part_size == 8 * 1024 * 1024
    assert reads + options.part_size * (options.max_in_flight + 1) <= 136 * 1024 * 1024

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
    (["cp", "/no/such/file", "gs://{b}/x"], 1, "stat file:///no/such/file failed: No such file"),
    (["ls", "/no/such/dir"], 1, "list file:///no/such/dir/ failed: no such directory"),
    (["ls", "gs://nosuchbucket-cli"], 1, "404"),
])
def test_failures_are_one_line_exit_1(run, bucket: str, argv: list[str],  # type: ignore[no-untyped-def]
                                      code: int, fragment: str) -> None:
    got, _, err = run(*[a.format(b=bucket) for a in argv])
    assert got == code
    assert err.startswith(f"aioflux {argv[0]}: ") and fragment in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# Usage errors, URLs included, exit 2 with exactly one line (the documented rule).
@pytest.mark.parametrize(("argv", "line"), [
    (["cp", "ftp://host/x", "y"], "aioflux cp: error: argument src: 'ftp://host/x': unknown URL "
                                  "scheme ftp:// (use gs://, s3://, az://, http(s):// (read "
                                  "only), file:// or a local path)"),
    (["cp", "gs://{b}/x", "ftp://{b}/x"], "aioflux cp: error: argument dst: 'ftp://{b}/x': "
                                          "unknown URL scheme ftp:// (use gs://, s3://, az://, "
                                          "http(s):// (read only), file:// or a local path)"),
    (["clean", "s3://x"], "aioflux clean: error: argument url: bucket of 's3://x': invalid S3 "
                          "bucket name 'x': use 3-63 lowercase letters, digits, '-' or '.'"),
    (["rm", "ftp://x/y"], "aioflux rm: error: argument urls: 'ftp://x/y': unknown URL scheme "
                          "ftp:// (use gs://, s3://, az://, http(s):// (read only), file:// "
                          "or a local path)"),
    (["ls", "gs://BAD"], "aioflux ls: error: argument url: bucket of 'gs://BAD': invalid bucket "
                         "name 'BAD': use 3-63 lowercase letters, digits, '-', '_' or '.', "
                         "starting and ending with a letter or digit"),
    (["ls", "file://host/x"], "aioflux ls: error: argument url: a file URL names a local "
                              "absolute path (file:///path), got 'file://host/x'"),
    (["bench", "/tmp/x"], "aioflux bench: error: argument url: expected a gs:// URL, got "
                          "'/tmp/x'"),
    (["ls", "--concurrency", "0", "gs://{b}"],
     "aioflux ls: error: argument --concurrency: must be >= 1, got 0"),
    (["cp", "-j", "0", "gs://{b}/x", "y"], "aioflux cp: error: argument -j/--jobs: must be >= 1, "
                                           "got 0"),
    (["bench", "--size", "-5", "gs://{b}/x"],
     "aioflux bench: error: argument --size: must be >= 0, got -5"),
    (["bench", "gs://{b}", "--ops", "fly"],
     "aioflux bench: error: unknown --ops fly (choose from write, list, read, batches, save, "
     "load)"),
    (["rm", "gs://{b}/dir/"], "aioflux rm: error: gs://{b}/dir/ names a bucket or folder; use -r"),
    (["stat", "gs://{b}"], "aioflux stat: error: gs://{b}/ names no object"),
    (["cat", "gs://{b}/d/"], "aioflux cat: error: gs://{b}/d/ names no object"),
    (["clean", "--older-than", "soon", "gs://{b}"],
     "aioflux clean: error: argument --older-than: expected a duration such as 3600, 90m, 24h "
     "or 0, got 'soon'"),
    (["cp", "gs://{b}/x", "-"], "aioflux cp: error: argument dst: '-': cp copies files and "
                                "objects, not stdin or stdout (to write an object to stdout: "
                                "aioflux cat URL; a file named '-': ./-)"),
    (["cp", "-", "gs://{b}/x"], "aioflux cp: error: argument src: '-': cp copies files and "
                                "objects, not stdin or stdout (to write an object to stdout: "
                                "aioflux cat URL; a file named '-': ./-)"),
    (["ls", "--recursve", "gs://{b}/x/"],
     "aioflux ls: error: unrecognized option --recursve (did you mean --recursive?)"),
    # The unknown option is the error, not the value argparse then took for a URL.
    (["cp", "--concurency", "4", "a", "gs://{b}/y"],
     "aioflux cp: error: unrecognized option --concurency (did you mean --concurrency?)"),
    (["du", "--jsn=1", "--xyzzy", "gs://{b}"],
     "aioflux du: error: unrecognized options --jsn=1 (did you mean --json?), --xyzzy"),
    (["ls", "gs://{b}/x", "gs://{b}/y"], "aioflux ls: error: unrecognized arguments: gs://{b}/y"),
])
def test_usage_errors_are_one_line_exit_2(run, bucket: str, argv: list[str], line: str,  # type: ignore[no-untyped-def]
                                          tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    got, out, err = run(*[a.format(b=bucket) for a in argv])
    assert (got, out) == (2, "")
    assert err == f"{line.format(b=bucket)} (see aioflux {argv[0]} --help)\n"
    assert list(tmp_path.iterdir()) == []  # "ftp://b/x" never became a local ./ftp:/b/x



@pytest.mark.parametrize("argv", [["--region", "us-west-2", "cat", "s3://b/a"],
                                  ["--recursive", "ls", "gs://b"]])
def test_an_option_before_the_command_is_said_to_go_after_it(  # type: ignore[no-untyped-def]
        run, argv: list[str]) -> None:
    # argparse took --region's value for the command, and blamed ls for
    # not knowing --recursive, which it takes.
    assert run(*argv) == (2, "", f"aioflux: error: option {argv[0]} goes after the command "
                                 f"(aioflux {argv[-2]} {argv[0]} ...) (see aioflux --help)\n")


@pytest.mark.parametrize("argv", [["shards", "ls", "--jsn"], ["ckpt", "list", "--jsn"]])
def test_a_mistyped_option_of_a_subcommand_names_it(run, bucket: str,  # type: ignore[no-untyped-def]
                                                    argv: list[str]) -> None:
    got, out, err = run(*argv, f"gs://{bucket}/x/")
    where = " ".join(argv[:2])
    assert (got, out) == (2, "")
    assert err == (f"aioflux {where}: error: unrecognized option --jsn (did you mean --json?) "
                   f"(see aioflux {where} --help)\n")


def test_cp_to_a_dash_is_refused_not_a_file_named_dash(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # gsutil and aws s3 cp take '-' for stdout: `aioflux cp gs://b/x - | tar x`
    # wrote a file named '-' and piped "copied 1 file(s), 1 bytes" to tar.
    sync_client.write(bucket, "x", b"X")
    monkeypatch.chdir(tmp_path)
    code, out, err = run("cp", f"gs://{bucket}/x", "-")
    assert (code, out) == (2, "") and "aioflux cat URL" in err
    assert list(tmp_path.iterdir()) == []
    # A file of that name is still one ./- away.
    assert run("cp", f"gs://{bucket}/x", "./-")[0] == 0
    assert (tmp_path / "-").read_bytes() == b"X"


def test_clean_reports_each_failure_on_stderr(run, emulator: Emulator, bucket: str,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # "error: ..." went to stdout, into what a script parses, and stderr stayed empty.
    from aioflux.testing._errors import ApiError

    # Named as composites are (clean leaves any other name under the prefix).
    x, y = f"aioflux-composed/1-{'0' * 32}", f"aioflux-composed/1-{'1' * 32}"
    emulator.store.put(bucket, x, b"x")
    emulator.store.put(bucket, y, b"y")
    delete = emulator.store.delete

    def refuse_x(b, name, **kwargs):  # type: ignore[no-untyped-def]
        if name == x:
            raise ApiError(403, "forbidden", "not yours")
        return delete(b, name, **kwargs)

    monkeypatch.setattr(emulator.store, "delete", refuse_x)
    code, out, err = run("clean", "--older-than", "0", f"gs://{bucket}")
    assert code == 1
    assert err == (f"aioflux clean: delete gs://{bucket}/{x} failed: HTTP 403 "
                   "forbidden: not yours\n")
    assert "error:" not in out and out.endswith(", 0 skipped, 1 errors\n")
    assert list(emulator.store.bucket(bucket).names) == [x]

@pytest.mark.parametrize("value", ["notaurl", "ftp://127.0.0.1:1", "http://", "127.0.0.1:port"])
def test_bad_endpoint_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["ls", "--endpoint", value, "gs://some-bucket"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aioflux ls: error: argument --endpoint: invalid endpoint {value!r}")
    assert len(err.splitlines()) == 1


def test_endpoint_flag_takes_host_port_like_the_env_var(
        emulator: Emulator, bucket: str, sync_client: Client,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sync_client.write(bucket, "x", b"1")
    host_port = emulator.endpoint.removeprefix("http://")
    assert main(["ls", "--endpoint", host_port, f"gs://{bucket}"]) == 0
    by_flag = capsys.readouterr().out
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host_port)
    assert main(["ls", f"gs://{bucket}"]) == 0
    assert capsys.readouterr().out == by_flag == f"gs://{bucket}/x\n"


def test_every_storage_command_takes_endpoint() -> None:
    from aioflux.cli import build_parser

    parser = build_parser()
    for argv in (["ls", "gs://b-x"], ["stat", "gs://b-x/o"], ["cat", "gs://b-x/o"],
                 ["cp", "a", "gs://b-x"], ["rm", "gs://b-x/o"], ["du", "gs://b-x"],
                 ["clean", "gs://b-x"], ["bench"], ["ckpt", "list", "gs://b-x/r"], ["demo"],
                 ["shards", "verify", "gs://b-x/s-{0..9}.tar"]):
        args = parser.parse_args([*argv, "--endpoint", "127.0.0.1:9"])
        assert args.endpoint == "http://127.0.0.1:9", argv


@pytest.mark.parametrize("argv", [[], ["cp"], ["shards"], ["shards", "ls"], ["cat"], ["ls"]])
def test_the_help_names_web_servers_with_the_other_stores(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "http(s)://" in text or "web servers (http(s), read only)" in text
    if not argv:  # it said "Fast Google Cloud Storage, S3 (and local files)"
        assert "Google Cloud Storage, S3, Azure Blob, local files, and web servers" in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import PackageNotFoundError, version

    import aioflux

    try:
        expected = version("aioflux-storage")
    except PackageNotFoundError:
        expected = aioflux.__version__
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"aioflux {expected}\n"


def test_ls_long_shows_the_generation(run, sync_client: Client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    info = sync_client.write(bucket, "d/a.bin", b"aaaa")
    code, out, _ = run("ls", "-l", f"gs://{bucket}/d/")
    assert code == 0
    size, generation, updated, url = out.split()
    assert (int(size), int(generation), url) == (4, info.generation, f"gs://{bucket}/d/a.bin")
    assert updated == sync_client.stat(bucket, "d/a.bin").updated


def test_cp_into_a_bare_bucket_keeps_the_name(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                              tmp_path: Path) -> None:
    (tmp_path / "local.bin").write_bytes(b"payload")
    code, out, _ = run("cp", str(tmp_path / "local.bin"), f"gs://{bucket}")
    assert (code, out) == (0, "copied 1 file(s), 7 bytes\n")
    assert [o.name for o in sync_client.list_objects(bucket)] == ["local.bin"]
    assert sync_client.read(bucket, "local.bin") == b"payload"


def test_ls_into_a_closed_pipe_exits_quietly(emulator: Emulator, bucket: str) -> None:
    import subprocess
    import sys

    for i in range(4000):  # ~150 KB of output: more than a pipe buffer holds
        emulator.store.put(bucket, f"object-{i:05d}", b"")
    proc = subprocess.Popen([sys.executable, "-m", "aioflux", "ls", f"gs://{bucket}",
                             "--endpoint", emulator.endpoint],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == f"gs://{bucket}/object-00000\n".encode()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(30) == 141
    assert err == b""



def test_cat_with_stdout_closed_is_one_line(emulator: Emulator, bucket: str) -> None:
    # `aioflux cat gs://b/x >&-` was an AttributeError traceback.
    emulator.store.put(bucket, "x", b"X")
    proc = subprocess.run([sys.executable, "-m", "aioflux", "cat", f"gs://{bucket}/x",
                           "--endpoint", emulator.endpoint],
                          stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1),
                          check=False, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == f"aioflux cat: cat gs://{bucket}/x: stdout is closed; nothing was read\n"

def test_emulator_rejects_a_bad_bucket_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["emulator", "--port", "0", "--bucket", "b"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("aioflux emulator: error: --bucket 'b': Invalid bucket "
                                       "name: 'b' (see aioflux emulator --help)\n")


def test_bench_against_a_bucket(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "20", "--size", "1000",
                         "--checkpoint-mb", "6", "--json", "--plot", str(plot))
    assert code == 0, err
    results = {r["op"]: r for r in json.loads(out)["results"]}
    assert set(results) == {"write", "list", "read", "batches", "save", "load"}
    assert results["read"]["bytes"] == 20_000 and results["list"]["items"] == 20
    # 20 objects in batches of 32: one batch, every byte once.
    assert results["batches"]["bytes"] == 20_000 and results["batches"]["batches"] == 1
    assert results["load"]["bytes"] == 6 << 20
    # Request latency percentiles from client.stats, per measured operation.
    assert results["read"]["requests"] == 20 and results["write"]["requests"] == 20
    for r in results.values():
        assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"], r
    assert results["save"]["requests"] >= 1 and results["load"]["requests"] >= 1
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert list(sync_client.list_objects(bucket)) == []  # cleaned up


def test_bench_table_keeps_its_columns(run, bucket: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run("bench", f"gs://{bucket}/area", "--objects", "3", "--size", "10",
                         "--checkpoint-mb", "1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    table = lines[1:-1]  # the header and one row per op
    assert [row.split()[0] for row in table] == ["op", "write", "list", "read", "batches",
                                                 "save", "load"]
    # Every column right-aligned under its header ("batches" once pushed its row out by one).
    assert len({len(row) for row in table}) == 1, out
    assert lines[-1].startswith("  batches: 1 batch of up to 3, batch p50 "), lines[-1]


def test_bench_on_bundled_emulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--objects", "10", "--size", "100", "--ops", "write,read"]) == 0
    out = capsys.readouterr().out
    assert "the emulator (GCS-like profile)" in out and "read" in out
    assert "p50 ms" in out and "p99 ms" in out


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
    # 19 steps an epoch (the last of 12): epoch 0 resumed at step 6, sample 96, not at 0.
    assert "continuing epoch 0 at sample 96 of 300" in out
    assert "samples trained on           380 = 380 planned, none repeated" in out
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


def test_emulator_is_quiet_when_clients_drop_connections() -> None:
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "aioflux", "emulator", "--port", "0",
                             "--bucket", "drops", "--bandwidth-mbps", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().split()[-1]
        host, port = endpoint.removeprefix("http://").split(":")
        big = b"x" * 1_000_000
        with urllib.request.urlopen(urllib.request.Request(
                f"{endpoint}/upload/storage/v1/b/drops/o?uploadType=media&name=big", data=big,
                method="POST"), timeout=30) as resp:
            assert resp.status == 200
        heads = [  # an upload cut mid-body (JSON and XML), a download dropped mid-body
            b"POST /upload/storage/v1/b/drops/o?uploadType=media&name=cut HTTP/1.1\r\n"
            b"Host: x\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000,
            b"PUT /drops/cut HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000,
            b"GET /download/storage/v1/b/drops/o/big?alt=media HTTP/1.1\r\nHost: x\r\n\r\n",
        ]

        def stats() -> dict[str, int]:  # the stats request itself is not counted
            with urllib.request.urlopen(f"{endpoint}/_aioflux_stats", timeout=10) as resp:
                counts: dict[str, int] = json.load(resp)
                return counts

        def until(done: Callable[[dict[str, int]], bool], what: str) -> None:
            # Waits on the emulator's own counts, not on the clock: a loaded
            # machine only takes longer; 30 s bounds a hang.
            deadline = time.monotonic() + 30
            while not done(got := stats()):
                assert time.monotonic() < deadline, f"{what}: {got}"
                time.sleep(0.01)

        for head in heads:
            taken = stats()["requests"]
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(head)
                # Dropped once the emulator is handling the request, so the
                # drop lands mid-body, not before the request was read.
                until(lambda s, taken=taken: s["requests"] > taken,
                      "the emulator never took the request")
        until(lambda s: s.get("client_disconnects", 0) >= 2, "the drops were not counted")
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        assert proc.stderr is not None and proc.stdout is not None
        err = proc.stderr.read()
        proc.stderr.close()
        proc.stdout.close()
    assert err == ""


def test_demo_on_a_missing_bucket_fails_in_one_line(emulator: Emulator) -> None:
    import subprocess
    import sys

    # STORAGE_EMULATOR_HOST without a scheme, as the env var allows.
    env = {**os.environ, "STORAGE_EMULATOR_HOST": emulator.endpoint.removeprefix("http://")}
    proc = subprocess.run([sys.executable, "-m", "aioflux", "demo", "--url",
                           "gs://nobucket-demo/x", "--samples", "300"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == "aioflux demo on gs://nobucket-demo/x\n"
    (line,) = proc.stderr.splitlines()
    assert line.startswith("aioflux demo: write gs://nobucket-demo/x/demo-")
    assert "The specified bucket does not exist" in line


# -- any store: gs://, file:// and local paths ------------------------------------

_BIG = 11 * 1024 * 1024 + 5  # streamed (thresholds lowered below): 11 ranges, 3 parts on gs


def _location(kind: str, bucket: str, root: Path, name: str, *, as_url: bool) -> str:
    if kind == "gs":
        return f"gs://{bucket}/{name}"
    # file:// URLs and plain paths are the same store: use both forms.
    return f"file://{root / name}" if as_url else str(root / name)


@pytest.mark.parametrize(("src_kind", "dst_kind"), [("file", "file"), ("file", "gs"),
                                                     ("gs", "file"), ("gs", "gs")])
def test_cp_between_any_two_stores(run, sync_client: Client, bucket: str,  # type: ignore[no-untyped-def]
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   src_kind: str, dst_kind: str) -> None:
    import aioflux.cli._copy as copy_mod
    from aioflux.gcs import AsyncClient
    from aioflux.local import LocalStore

    monkeypatch.setattr(copy_mod, "STREAM_THRESHOLD", 1024)
    monkeypatch.setattr(copy_mod, "_CHUNK", 1024 * 1024)
    fetched: list[tuple[str, int, int | None]] = []
    for cls in (LocalStore, AsyncClient):
        def spy(self, bucket, name, *, _orig=cls.fetch, **kw):  # type: ignore[no-untyped-def]
            fetched.append((name, kw.get("start", 0), kw.get("end")))
            return _orig(self, bucket, name, **kw)
        monkeypatch.setattr(cls, "fetch", spy)
    big = os.urandom(_BIG)
    files = {"src/a/x": b"AX", "src/a/y/z": big, "src/a2/x": b"A2X"}
    for name, data in files.items():
        if src_kind == "gs":
            sync_client.write(bucket, name, data)
        else:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(data)

    def src(name: str) -> str:
        return _location(src_kind, bucket, tmp_path, name, as_url=False)

    def dst(name: str) -> str:
        return _location(dst_kind, bucket, tmp_path, name, as_url=True)

    def read(name: str) -> bytes:
        if dst_kind == "gs":
            return sync_client.read(bucket, name)
        return (tmp_path / name).read_bytes()

    # The folder rule: src/a copies a/x and a/y/z into out/, never a2/.
    assert run("cp", "-r", "-j", "2", src("src/a"), dst("out")) == (
        0, f"copied 2 file(s), {_BIG + 2} bytes\n", "")
    assert read("out/x") == b"AX" and read("out/y/z") == big
    if dst_kind == "gs":
        assert [o.name for o in sync_client.list_objects(bucket, "out")] == ["out/x", "out/y/z"]
    else:
        assert sorted(p.relative_to(tmp_path / "out").as_posix()
                      for p in (tmp_path / "out").rglob("*")) == ["x", "y", "y/z"]
    # One large object, and one into a folder URL that keeps its base name.
    assert run("cp", src("src/a/y/z"), dst("single.bin"))[:2] == (0, f"copied 1 file(s), "
                                                                  f"{_BIG} bytes\n")
    assert read("single.bin") == big
    assert run("cp", src("src/a2/x"), dst("into") + "/")[:2] == (0, "copied 1 file(s), 3 bytes\n")
    assert read("into/x") == b"A2X"
    assert list(tmp_path.rglob("*aioflux-tmp*")) == []  # no temporary file left behind
    # Memory stays bounded: the large object was read in ranges of _CHUNK
    # (GCS copies it on the server).
    big_reads = [(start, end) for name, start, end in fetched if name.endswith("src/a/y/z")]
    if src_kind == dst_kind == "gs":
        assert big_reads == []
    else:
        assert len(big_reads) == 2 * 11 + 2  # 12 ranges, twice
        assert all(end is not None and end - start <= 1024 * 1024 for start, end in big_reads)


def test_cp_r_of_a_directory_to_a_file_url(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "dir"
    (tree / "sub").mkdir(parents=True)
    (tree / "a").write_bytes(b"a")
    (tree / "sub" / "b").write_bytes(b"bb")
    assert run("cp", "-r", str(tree), f"file://{tmp_path}/dst") == (
        0, "copied 2 file(s), 3 bytes\n", "")
    assert (tmp_path / "dst" / "a").read_bytes() == b"a"
    assert (tmp_path / "dst" / "sub" / "b").read_bytes() == b"bb"
    # Without -r a directory is a usage error naming it; nothing is copied.
    code, out, err = run("cp", str(tree), f"file://{tmp_path}/other")
    assert (code, out) == (2, "")
    assert err == (f"aioflux cp: error: file://{tree} names a folder; use -r "
                   "(see aioflux cp --help)\n")
    assert not (tmp_path / "other").exists()
    # Into an existing directory, a file keeps its name.
    assert run("cp", str(tree / "a"), str(tmp_path / "dst" / "sub"))[0] == 0
    assert (tmp_path / "dst" / "sub" / "a").read_bytes() == b"a"


def test_object_commands_on_local_files(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "t"
    for name, data in {"a/x": b"AX", "a/y/z": b"AYZ", "a2/x": b"A2X", "top": b"T"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    url = f"file://{root}"
    assert run("ls", str(root)) == (0, f"{url}/a/\n{url}/a2/\n{url}/top\n", "")
    assert run("ls", "-r", f"{url}/a") == (0, f"{url}/a/x\n{url}/a/y/z\n", "")
    code, out, _ = run("ls", "-l", str(root / "top"))
    size, generation, updated, listed = out.split()
    assert (code, int(size), listed) == (0, 1, f"{url}/top")
    mtime_ns = (root / "top").stat().st_mtime_ns
    assert int(generation) == mtime_ns
    assert updated == dt.datetime.fromtimestamp(mtime_ns // 1000 / 1e6, dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    code, out, _ = run("stat", str(root / "a" / "x"))
    info = json.loads(out)
    assert (code, info["url"], info["size"], info["crc32c"]) == (0, f"{url}/a/x", 2, None)
    code, out, _ = run("du", "--json", str(root / "a"))
    assert (code, json.loads(out)) == (0, {"url": f"{url}/a", "objects": 2, "bytes": 5})
    assert run("cat", f"{url}/a2/x")[:2] == (0, "A2X")
    assert run("rm", "-r", f"{url}/a") == (0, "removed 2 object(s)\n", "")
    assert run("rm", str(root / "top")) == (0, "removed 1 object(s)\n", "")
    # The files are gone; the directories made by hand stay (a delete removes
    # only directories aioflux's own writes made).
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "a", "a/y", "a2", "a2/x"]
    code, out, err = run("rm", str(root / "a2") + "/")
    assert (code, err) == (2, f"aioflux rm: error: {url}/a2/ names a bucket or folder; use -r "
                              "(see aioflux rm --help)\n")


def test_stat_shows_the_crc32c_of_a_file_aioflux_wrote(run, sync_client: Client,  # type: ignore[no-untyped-def]
                                                       bucket: str, tmp_path: Path) -> None:
    info = sync_client.write(bucket, "o", b"payload")
    assert run("cp", f"gs://{bucket}/o", str(tmp_path / "o"))[0] == 0
    code, out, _ = run("stat", str(tmp_path / "o"))
    assert (code, json.loads(out)["crc32c"]) == (0, info.crc32c)


def test_the_cli_accepts_exactly_the_schemes_with_a_backend(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from aioflux._api import stores
    from aioflux._api.stores import default_store
    from aioflux._core.errors import InvalidArgument
    from aioflux._core.records.urls import AZURE_ALIASES, SCHEMES
    from aioflux.cli._common import SERVED_SCHEMES, url_arg

    # An Azure account to build the default az:// store for (no request is sent).
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    monkeypatch.setattr(stores, "_defaults", {})
    # Every scheme a URL may have is served, by a store of that scheme
    # (adlfs's abfs:// and abfss:// by the az:// one).
    assert sorted(SERVED_SCHEMES) == sorted(SCHEMES + AZURE_ALIASES)
    for scheme in SCHEMES + AZURE_ALIASES:
        served = "az" if scheme in AZURE_ALIASES else scheme
        assert default_store(served).features.scheme == served
        where = "/tmp/x" if scheme == "file" else "bucket-x/k"
        assert url_arg(f"{scheme}://{where}").scheme == served
    with pytest.raises(InvalidArgument, match="no storage backend serves ftp://"):
        default_store("ftp")


@pytest.mark.parametrize("io_encoding", ["utf-8:strict", "ascii:strict"])
def test_ls_prints_a_file_name_that_is_not_utf8(tmp_path: Path, io_encoding: str) -> None:
    # os.fsdecode escapes such bytes as surrogates; a strict stdout (an
    # en_US.UTF-8 locale) raised UnicodeEncodeError midway through ls.
    folder = tmp_path / "names"
    folder.mkdir()
    (folder / os.fsdecode(b"bad\xff.bin")).write_bytes(b"x")
    (folder / "caf\u00e9.bin").write_bytes(b"y")
    env = {**os.environ, "PYTHONIOENCODING": io_encoding}
    done = subprocess.run([sys.executable, "-m", "aioflux", "ls", str(folder)],
                          capture_output=True, env=env, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, b"")
    lines = sorted(done.stdout.splitlines())
    if io_encoding.startswith("utf-8"):
        # The file's own bytes, so a pipe to xargs finds it.
        assert lines == sorted([f"file://{folder}/".encode() + b"bad\xff.bin",
                                f"file://{folder}/caf\u00e9.bin".encode()])
    else:
        assert lines == sorted([f"file://{folder}/bad\\udcff.bin".encode(),
                                f"file://{folder}/caf\\xe9.bin".encode()])


@pytest.mark.parametrize(("flag", "value"), [("--port", "99999"), ("--s3-port", "70000"),
                                             ("--port", "-1"), ("--s3-port", "-2")])
def test_emulator_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str], flag: str,
                                              value: str) -> None:
    # 99999 listened on 34463 (wrapped by the socket layer) without a word.
    with pytest.raises(SystemExit) as exc:
        main(["emulator", flag, value])
    assert exc.value.code == 2
    assert "to 65535, got" in capsys.readouterr().err
