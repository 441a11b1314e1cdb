"""The Troubleshooting page's (docs/guides/troubleshooting.md) entry on
throttling names what a throttled job has: the settings, the error, the
counters and the machine's shared state with the commands that show and
reset it; each name is real and each command parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import aioflux
from aioflux import ClientConfig
from aioflux._core.metrics import RequestStats
from aioflux._core.rate.shared_table import state_dir
from aioflux.cli._main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "guides" / "troubleshooting.md").read_text()


def throttle_entry() -> str:
    """The Symptoms item on 429s, its nested items included."""
    entries: list[str] = re.findall(r"(?ms)^- \*\*429\b.*?(?=^- |^## |\Z)", PAGE)
    (entry,) = entries
    return entry


def test_the_429_entry_names_the_controller_not_a_smaller_concurrency() -> None:
    entry = throttle_entry()
    for name in ("request_rate", "throttle_deadline", "RateLimited", "stats.throttled",
                 "stats.budget_wait", "stats.rates", "aioflux rate show", "aioflux rate reset"):
        assert name in entry, name
    assert "max_concurrency" not in entry
    assert {"request_rate", "throttle_deadline"} <= set(ClientConfig.__dataclass_fields__)
    assert "(300)" in entry and ClientConfig().throttle_deadline == 300.0
    assert issubclass(aioflux.RateLimited, aioflux.StorageError)
    assert {"throttled", "budget_wait", "rates"} <= set(RequestStats.__dataclass_fields__)


def test_the_state_and_its_commands_are_where_the_entry_says() -> None:
    entry = throttle_entry()
    (folder,) = re.findall(r"`(/dev/shm/aioflux-rate-<uid>/)`", entry)
    if state_dir().startswith("/dev/shm/"):
        assert re.fullmatch(folder.replace("<uid>", r"\d+") + "?", state_dir())
    commands = re.findall(r"`aioflux (rate [^`]*)`", entry)
    assert {c.split()[1] for c in commands} == {"show", "reset"}
    for command in commands:
        args = build_parser(["rate"]).parse_args(shlex.split(command))
        assert (args.command, args.action) == ("rate", command.split()[1])
