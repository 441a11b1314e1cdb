"""The subcommand registry: each command module registers itself here."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COMMANDS", "Command", "Handler", "UsageError", "command"]

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A registered subcommand."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Handler


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str,
            configure: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
    """Register a subcommand handler.

    Args:
        name: subcommand name.
        help: one-line help.
        configure: adds the subcommand's arguments.

    Returns:
        A decorator that registers and returns the handler.
    """

    def register(run: Handler) -> Handler:
        COMMANDS[name] = Command(name, help, configure, run)
        return run

    return register


class UsageError(Exception):
    """Raised by a handler for a command line that cannot work (exit 2, one line),
    when argparse alone cannot tell (e.g. ``rm`` of a folder without ``-r``)."""
