"""The subcommands: which module serves each (``HOMES``), and the registry
each module fills with :func:`command` when it is imported.

The table names every command and its one-line help without importing a
command module: each imports the stores and aiohttp (a second of start-up
on a busy machine), so ``aioflux --version``, ``aioflux --help`` and a
usage error import none, and a command imports only its own (as pip's
``commands_dict`` does).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator

__all__ = ["COMMANDS", "HOMES", "Command", "Handler", "Home", "UsageError", "action_parsers",
           "command", "load"]

Handler = Callable[[argparse.Namespace], int]


class Home:
    """Where a command lives (a module of ``aioflux.cli``) and its one-line help.

    A plain class: dataclasses (and inspect under it) cost ``aioflux
    --version`` more than argparse.
    """

    __slots__ = ("help", "module")

    def __init__(self, module: str, help: str) -> None:
        self.module, self.help = module, help


HOMES: dict[str, Home] = {
    "bench": Home("_bench", "Measure list/read/write/save/load throughput (bucket or emulator)."),
    "cache": Home("_cache", "Inspect or clear a local disk cache (cache_dir= of the datasets)."),
    "cat": Home("_objects", "Write an object's bytes to stdout."),
    "ckpt": Home("_ckpt", "Inspect a CheckpointManager's root on any store (list, history)."),
    "clean": Home("_clean",
                  "Delete leftover composed objects and abort abandoned multipart uploads."),
    "cp": Home("_copy", "Copy files and objects between any two stores (gs://, s3://, az://, "
                        "file://, local paths; from http(s)://)."),
    "demo": Home("_demo",
                 "Train on the bundled emulator: load, checkpoint, crash, resume, report."),
    "du": Home("_objects", "Total size and object count of what a URL names."),
    "emulator": Home("_emulator", "Run the GCS emulator on 127.0.0.1 (profile and fault flags)."),
    "ls": Home("_objects", "List the object and folder a URL names (-r: everything under it)."),
    "rate": Home("_rate", "Show or reset the request rates this machine's processes share."),
    "rm": Home("_objects", "Delete objects (-r: also the folder each URL names)."),
    "shards": Home("_shards", "Sharded datasets: list shards and their indexes, index, verify."),
    "stat": Home("_objects", "Show an object's metadata as JSON."),
}


class Command:
    """A registered subcommand."""

    __slots__ = ("configure", "name", "run")

    def __init__(self, name: str, configure: Callable[[argparse.ArgumentParser], None],
                 run: Handler) -> None:
        self.name, self.configure, self.run = name, configure, run


COMMANDS: dict[str, Command] = {}


def command(name: str,
            configure: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
    """Register a subcommand handler; its module and help are in ``HOMES``.

    Args:
        name: subcommand name.
        configure: adds the subcommand's arguments.

    Returns:
        A decorator that registers and returns the handler.
    """

    def register(run: Handler) -> Handler:
        COMMANDS[name] = Command(name, configure, run)
        return run

    return register


def load(name: str) -> Command:
    """The command ``name``, its module imported.

    Args:
        name: a name of ``HOMES``.

    Returns:
        The registered command.
    """
    importlib.import_module(f"{__package__}.{HOMES[name].module}")
    return COMMANDS[name]


class UsageError(Exception):
    """Raised by a handler for a command line that cannot work (exit 2, one line),
    when argparse alone cannot tell (e.g. ``rm`` of a folder without ``-r``)."""


def action_parsers(parser: argparse.ArgumentParser, actions: tuple[tuple[str, str], ...]
                   ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """A command's required ACTION: a subparser for each ``(action, help)``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    for action, text in actions:
        yield action, sub.add_parser(action, help=text, description=text)
