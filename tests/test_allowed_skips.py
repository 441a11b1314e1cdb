"""tests/_allowed_skips.py: a skip for a reason outside its list fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._allowed_skips import ALLOWED, allowed

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_tells_the_machine_and_the_cases_from_what_the_install_brings() -> None:
    assert allowed("reads Linux's /proc")
    assert allowed("s3:// declares no compose") and allowed("az:// declares no compose")
    assert allowed("root ignores modes and chattr +i failed: chattr: Operation not\nsupported")
    # What the README's install brings is no reason: such a test did not run.
    assert not allowed("could not import 'zstandard': No module named 'zstandard'")
    assert not allowed("nginx cannot be had here: apt-get download nginx failed")
    assert not allowed("reads Linux's /proc, and more")  # matched whole
    assert all(why for why in ALLOWED.values())


def _pytest(tmp_path: Path, **files: str) -> subprocess.CompletedProcess[str]:
    """pytest on test files with the hooks as its only plugin (~0.3 s of CPU)."""
    for name, body in files.items():
        (tmp_path / f"{name}.py").write_text(body)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests._allowed_skips",
                           "-p", "no:cacheprovider", *(f"{name}.py" for name in files)],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=60,
                          check=False)


@pytest.mark.timeout(120)
def test_a_skip_outside_the_list_fails_the_run_and_says_which(tmp_path: Path) -> None:
    done = _pytest(tmp_path, test_marks="import pytest\n"
                   "def test_linux():\n    pytest.skip(\"reads Linux's /proc\")\n"
                   "@pytest.mark.skipif(True, reason='no server here')\n"
                   "def test_server():\n    pass\n"
                   "@pytest.mark.xfail(reason='known')\n"
                   "def test_known():\n    assert False\n",
                   test_module="import pytest\npytest.importorskip('no_such_module_here')\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_marks.py::test_server: no server here" in done.stdout, done.stdout
    assert "test_module.py: could not import 'no_such_module_here'" in done.stdout, done.stdout
    assert "test_linux:" not in done.stdout and "test_known:" not in done.stdout, done.stdout


@pytest.mark.timeout(120)
def test_skips_on_the_list_pass(tmp_path: Path) -> None:
    done = _pytest(tmp_path, test_it="import pytest\n"
                   "def test_linux():\n    pytest.skip(\"reads Linux's /proc\")\n"
                   "def test_runs():\n    pass\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 skipped" in done.stdout, done.stdout
