"""The reasons a test may skip, in one place, and the hooks that fail a run
on a skip for any other reason.

A test that skips is a test that did not run. The README's test command
installs everything the suite needs (the extras, torch, the servers it
fetches), so a skip there for a missing package, server or tool hides a
test that CI never runs. A reason listed here is one of two kinds:

- the machine: a facility of Linux or of the filesystem, a privilege, a
  build of a dependency, a supported older torch; on a machine without it
  the test cannot run, and CI's machine has it;
- a case that does not apply: one parametrization of a test whose
  behaviour a backend does not have (fake-gcs-server ignores delete
  preconditions, a file system has no endpoint), the rest of its cases run;
  a test of a peer's absence where the peer is installed.

Each reason a test skips for is matched whole (``re.fullmatch``) against
:data:`ALLOWED`. Any other fails the run: exit status 1 (unless it failed
already), and the summary lists the tests and their reasons. xfail is not a
skip here. tests/conftest.py imports the hooks.
"""

from __future__ import annotations

import re

import pytest

__all__ = ["ALLOWED", "allowed", "pytest_collectreport", "pytest_runtest_logreport",
           "pytest_sessionfinish", "pytest_terminal_summary"]

#: Pattern of a skip's reason -> why such a skip is no test left out.
ALLOWED: dict[str, str] = {
    # The machine.
    r"pidfd_open is Linux's": "Linux only",
    r"RUSAGE_THREAD is Linux's": "Linux only",
    r"reads Linux's /proc": "Linux only",
    r"reads Linux's smaps_rollup": "Linux only",
    r"fork only": "a platform without fork",
    r"needs bash": "a machine without bash",
    r"no tar command here": "a machine without tar",
    r"the pure-Python build has no C function to call":
        "a platform with no C build of google-crc32c",
    r"torch < 2\.5 has no switch: its saves keep the CRC32": "an older torch aioflux supports",
    r"zarr 3 needs Python 3\.11": "Python 3.10, where the test extra brings no zarr",
    r"no user xattrs here: files carry no crc32c to check against":
        "a filesystem without user extended attributes",
    r"mounting a filesystem image needs root and mkfs\.ext2": "no root, or no e2fsprogs",
    r"cannot mount a loop device here: .*": "a container without loop devices",
    r"cannot create a directory at / \(.*\)": "a writable /, as root in a container",
    r"root ignores modes and chattr \+i failed: .*":
        "root, on a filesystem without the immutable flag",
    # A case that does not apply.
    r"plain HTTP has no certificate": "the https case runs",
    r"empty means unset there \(the default endpoint\)": "the other settings run",
    r"this server reports no crc32c for a copied part": "the stores that do run",
    r"fake-gcs-server ignores preconditions on delete": "the other backends run",
    r"fake-gcs-server ignores preconditions on resumable uploads": "the other backends run",
    r"fake-gcs-server has no XML multipart uploads to list": "the other backends run",
    r"Azure's uncommitted blocks are no upload to list or drop .*": "the other backends run",
    r"moto does not honour x-amz-copy-source-if-match": "our emulator's S3 face runs",
    r"\w+:// declares no compose": "the stores with compose run",
    r"a file name's limit is the filesystem's \(test_local_races_and_pipes\)":
        "tests/backends/local/test_local_races_and_pipes.py tests it",
    r"no URL scheme reaches a MemoryStore": "the stores with a scheme run",
    r"a file system's root is a folder like any other": "the object stores run",
    r"a missing folder is made, not missing": "the object stores run",
    r"files take no endpoint": "the object stores run",
    r"a file and a folder cannot share a path": "the object stores run",
    r"a path's '//' is one separator on a filesystem": "the object stores run",
    r"dataflux is installed here": "a test of its absence",
    r"s3torchconnector is installed here": "a test of its absence",
}

_PATTERNS = [re.compile(pattern, re.DOTALL) for pattern in ALLOWED]
# (test, reason) of each skip outside the list, in this process: the
# controller's under xdist, which sees every worker's reports.
_OUTSIDE: list[tuple[str, str]] = []


def allowed(reason: str) -> bool:
    """Whether a skip for ``reason`` is in :data:`ALLOWED`."""
    return any(pattern.fullmatch(reason) for pattern in _PATTERNS)


def _record(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not allowed(reason):
        _OUTSIDE.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test's skip (a mark, or ``pytest.skip`` in it or its fixtures)."""
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module's skip (``importorskip`` at its top)."""
    _record(report)


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # an xdist worker's reports go to its controller


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Exit 1 after a skip outside the list, where the run had passed."""
    if (_OUTSIDE and _controller(session.config)
            and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    """List the skips outside the list, and where the list is."""
    del exitstatus
    if not (_OUTSIDE and _controller(config)):
        return
    terminalreporter.section("skipped for a reason tests/_allowed_skips.py does not allow",
                             sep="=", red=True, bold=True)
    for nodeid, reason in _OUTSIDE:
        terminalreporter.line(f"{nodeid}: {reason}")
    terminalreporter.line("A skip hides a test from CI: install what it needs (the README's "
                          "test command), or add its reason to ALLOWED with why.")
