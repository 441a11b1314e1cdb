"""``aioflux cp --progress`` says when the service throttles it: the
attempts refused and the rate it is paced at, against the emulator capped
by its token bucket (``qps_limit``, 429 past it); and nothing more when
nothing was throttled.

Bounded by counts: the line's count of throttled attempts is the
emulator's count of the 429s it sent, whatever the machine's speed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aioflux._core.metrics import RequestStats
from aioflux.cli import main
from aioflux.cli._progress import throttling
from aioflux.testing import Emulator, EmulatorProfile
from tests.cli.conftest import OBJECTS

# The emulator's bucket holds a second of its rate: cp's OBJECTS reads at
# once (-j) against a cap of CAP/s find CAP tokens, and the rest are
# refused at once, by construction, however fast the machine is.
CAP = 20


def _cp(emu: Emulator, bucket: str, to: Path,
        capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["cp", "-r", "-j", str(OBJECTS), "--progress", f"gs://{bucket}/d", str(to),
                 "--endpoint", emu.endpoint])
    out, err = capsys.readouterr()
    return code, out, err


def _last_line(err: str) -> str:
    # The bar is redrawn in place ("\r"); close() draws the final state.
    return err.split("\n")[0].split("\r")[-1]


def _copied_right(to: Path) -> bool:
    return all((to / f"o{i}").read_bytes() == f"object {i}".encode() for i in range(OBJECTS))


def test_cp_progress_shows_the_throttling(dataset: tuple[Emulator, str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    emu, bucket = dataset
    emu.profile = EmulatorProfile(qps_limit=CAP)
    code, out, err = _cp(emu, bucket, tmp_path / "out", capsys)
    size = sum(len(f"object {i}") for i in range(OBJECTS))
    assert (code, out) == (0, f"copied {OBJECTS} file(s), {size} bytes\n")
    assert _copied_right(tmp_path / "out")
    refused = emu.stats["throttled"]
    # Then pacing (which stays on for at least a minute without a 429).
    assert refused > 0
    line = _last_line(err)
    match = re.search(r"\(throttled: (\d+), paced at (\d+) req/s\)", line)
    assert match is not None, line
    # Every 429 the emulator sent is one the line counts (the listing's too).
    assert int(match[1]) == refused, (line, refused)
    assert int(match[2]) > 0


def test_cp_progress_says_nothing_more_when_not_throttled(
        dataset: tuple[Emulator, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    emu, bucket = dataset
    code, _, err = _cp(emu, bucket, tmp_path / "out", capsys)
    assert code == 0 and _copied_right(tmp_path / "out")
    assert emu.stats["throttled"] == 0
    line = _last_line(err)
    assert line.startswith("cp [") and line.rstrip().endswith("/s"), line
    assert "throttled" not in err and "paced" not in err


def test_the_note_names_each_paced_bucket_when_there_are_several() -> None:
    quiet, refused, paced = RequestStats(), RequestStats(), RequestStats()
    assert throttling([quiet]) == ""
    refused.throttled = 3
    assert throttling([quiet, refused]) == "throttled: 3"
    paced.rates.update({"src read": 95.4, "dst write": 40.0})
    assert throttling([refused, paced]) == \
        "throttled: 3, paced at 40 req/s (dst write), 95 req/s (src read)"
    # Paced by what another process of the node was refused.
    assert throttling([RequestStats(rates={"b read": 7.0})]) == \
        "throttled: 0, paced at 7 req/s"
