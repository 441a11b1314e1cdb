"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from aioflux.cli import main
from aioflux.testing import Emulator


@pytest.fixture
def run(emulator: Emulator, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Call the CLI against the emulator: ``run(*argv)`` gives
    ``(exit code, stdout, stderr)``."""

    def invoke(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main([*argv, "--endpoint", emulator.endpoint])
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
