"""Smoke tests of ``examples/``: each script runs as a user would run it, with
tiny sizes, and must exit 0 and print its result line.

Every example but the torchrun one starts its own bundled emulator; that
one gets the session emulator through ``STORAGE_EMULATOR_HOST``, as its
docstring tells users to do.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aioflux.testing import Emulator

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None,
        timeout: float = 170) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` from the repository root."""
    full_env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full_env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def ok(proc: subprocess.CompletedProcess[str], pattern: str) -> str:
    """Assert a clean exit and that stdout matches ``pattern``; return stdout."""
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert re.search(pattern, proc.stdout), report
    # The examples close their clients: no connection is left for the GC.
    assert "Unclosed client session" not in proc.stderr, report
    return proc.stdout


@pytest.mark.timeout(180)
def test_async_pipeline() -> None:
    ok(run("examples/async_pipeline.py", "--objects", "200", "--size", "2048"),
       r"async_pipeline: wrote 200 objects .* listed 200 in 2 pages, streamed 200 .* "
       r"ranged read of 512 bytes ok")


@pytest.mark.timeout(180)
def test_map_training() -> None:
    ok(run("examples/map_training.py", "--samples", "256", "--epochs", "2", "--batch-size",
           "32", "--workers", "2"),
       r"map_training: 2 epochs over 256 samples with 2 workers, .* checkpoint step 16 ")


@pytest.mark.timeout(180)
def test_iterable_torchrun_two_ranks(emulator: Emulator) -> None:
    bucket = emulator.create_bucket(f"torchrun-{os.getpid()}")
    # --standalone picks a free rendezvous port itself.
    out = ok(run("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "examples/iterable_torchrun.py", "--url", f"gs://{bucket}/data",
                 "--samples", "203", "--epochs", "2", "--batch-size", "16",
                 env={"STORAGE_EMULATOR_HOST": emulator.endpoint}),
             r"epoch 1: all 203 samples seen across 2 ranks x 2 workers")
    # 203 does not split evenly: the last batch is padded with one sample, so
    # both ranks train as many steps (no join()).
    assert out.count("across 2 ranks x 2 workers (102 + 102, 1 padded)") == 2, out
    assert len(emulator.store.bucket(bucket).names) == 203


@pytest.mark.timeout(180)
def test_iterable_torchrun_needs_shared_storage_for_several_ranks() -> None:
    proc = run("examples/iterable_torchrun.py", env={"WORLD_SIZE": "2"})
    assert proc.returncode == 2, proc.stderr
    assert "STORAGE_EMULATOR_HOST" in proc.stderr


@pytest.mark.timeout(180)
def test_lightning_async_checkpoint() -> None:
    pytest.importorskip("lightning.pytorch")
    ok(run("examples/lightning_async_checkpoint.py", "--epochs", "2", "--samples", "64",
           "--width", "16"),
       r"trained 2 epochs \(4 steps.*resumed from gs://aioflux-examples/lightning/"
       r"epoch=1\.ckpt at step 4 and finished at step 6 .*epoch=0\.ckpt, epoch=1\.ckpt, "
       r"epoch=2\.ckpt")


@pytest.mark.timeout(180)
def test_dcp_async_save() -> None:
    ok(run("examples/dcp_async_save.py", "--steps", "6", "--save-every", "3", "--width", "32"),
       r"dcp_async_save: 2 async saves during 6 steps.* 4 tensors and the optimizer state match")


@pytest.mark.timeout(180)
def test_from_dataflux_aioflux_backend() -> None:
    ok(run("examples/from_dataflux.py", "--backend", "aioflux", "--samples", "128"),
       r"from_dataflux\[aioflux\]: 1 epoch over 128 samples .*checkpoint saved and loaded back")


@pytest.mark.timeout(180)
@pytest.mark.skipif(importlib.util.find_spec("dataflux_pytorch") is not None,
                    reason="dataflux is installed here")
def test_from_dataflux_without_dataflux_says_what_to_install() -> None:
    proc = run("examples/from_dataflux.py", "--backend", "dataflux")
    assert proc.returncode == 1, proc.stderr
    assert "pip install gcs-torch-dataflux" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(180)
def test_from_s3torchconnector_aioflux_backend() -> None:
    # It starts moto's S3 server itself, as its docstring says.
    ok(run("examples/from_s3torchconnector.py", "--backend", "aioflux", "--samples", "96"),
       r"from_s3torchconnector\[aioflux\]: 1 epoch over 96 samples .*checkpoint saved and "
       r"loaded back from s3://examples/from-s3torchconnector/model.pt")


@pytest.mark.timeout(180)
@pytest.mark.skipif(importlib.util.find_spec("s3torchconnector") is not None,
                    reason="s3torchconnector is installed here")
def test_from_s3torchconnector_without_it_says_what_to_install() -> None:
    proc = run("examples/from_s3torchconnector.py", "--backend", "s3torchconnector")
    assert proc.returncode == 1, proc.stderr
    assert "pip install s3torchconnector" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(180)
def test_pytest_suite_with_aioflux_testing_as_documented() -> None:
    # As the README runs it, with every plugin its installs bring (pytest-asyncio
    # among them): the example's own pytest.ini turns warnings into errors, so a
    # start-up warning from a plugin would stop it with an INTERNALERROR.
    ok(run("-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/test_with_aioflux_testing"),
       r"3 passed")


@pytest.mark.timeout(180)
def test_pytest_suite_with_aioflux_testing_without_pytest_asyncio() -> None:
    # A user's project without pytest-asyncio: its asyncio setting is then an
    # unknown key, which must not fail the run either.
    ok(run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:asyncio",
           "examples/test_with_aioflux_testing"), r"3 passed")


@pytest.mark.timeout(180)
def test_typed_usage() -> None:
    # The script .ci/run type-checks with mypy --strict; here it must also run.
    ok(run("examples/typed_usage.py"),
       r"typed_usage: aioflux \d+\.\d+\.\d+\S*: read 'hello, typed world', 192 bytes through "
       r"ObjectMapDataset, latest checkpoint step 2")


def without(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment where ``import module`` fails as if it were not installed
    (a package that raises stands in for the missing one, in every process)."""
    blocker = tmp_path / f"no_{module}" / module
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    path = os.pathsep.join(p for p in (str(blocker.parent), str(ROOT),
                                       os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.mark.timeout(180)
def test_demo_without_numpy_says_what_to_install(tmp_path: Path) -> None:
    # The CPU torch wheel does not bring numpy; aioflux declares it (its
    # datasets compute their epoch orders with it), but an environment can
    # still lack it (installed with --no-deps, or removed): one line says
    # what to install, not a traceback.
    proc = run("-m", "aioflux", "demo", "--samples", "200", "--steps", "12", env=without(tmp_path,
                                                                                 "numpy"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "aioflux demo: " in proc.stderr and "`pip install numpy`" in proc.stderr, proc.stderr
    assert "No module named 'numpy'" in proc.stderr, proc.stderr


# Examples whose dependencies are missing say what to install in one line,
# rather than failing deep inside torch ("Numpy is not available") or with a
# ModuleNotFoundError traceback.
@pytest.mark.timeout(180)
@pytest.mark.parametrize(("script", "module", "hint"), [
    ("examples/iterable_torchrun.py", "numpy", "`pip install numpy`"),
    ("examples/dcp_async_save.py", "numpy", "`pip install numpy`"),
    ("examples/lightning_async_checkpoint.py", "lightning",
     '`pip install "aioflux-storage[lightning]"`'),
])
def test_examples_without_their_dependency_say_what_to_install(
        tmp_path: Path, script: str, module: str, hint: str) -> None:
    proc = run(script, env=without(tmp_path, module))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and hint in proc.stderr, proc.stderr
    assert f"No module named '{module}'" in proc.stderr, proc.stderr
