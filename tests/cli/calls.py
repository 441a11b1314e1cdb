"""The CLI called in-process, as a test reads it."""

from __future__ import annotations

import pytest

from aioflux.cli import main


def call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``aioflux *argv``: its exit code (argparse's usage errors included),
    stdout and stderr."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
