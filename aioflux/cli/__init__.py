"""The ``aioflux`` command line.

Each command lives in its own module under ``aioflux.cli`` and registers
itself with :func:`command`. Exit codes: 0 ok, 1 an expected failure (one
line naming what failed, no traceback), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._errors import AiofluxError

__all__ = ["Command", "command", "main"]

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A registered subcommand."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Handler


_COMMANDS: dict[str, Command] = {}


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
        _COMMANDS[name] = Command(name, help, configure, run)
        return run

    return register


def _load_commands() -> None:
    # Imported for their registration side effect.
    from . import _bench, _ckpt, _clean, _copy, _demo, _emulator, _objects  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand.

    Returns:
        The parser.
    """
    _load_commands()
    parser = argparse.ArgumentParser(prog="aioflux",
                                     description="Fast Google Cloud Storage for PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for cmd in sorted(_COMMANDS.values(), key=lambda c: c.name):
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["emulator"]:
        # The emulator parses its own flags (it also runs as `python -m aioflux.testing`).
        from ..testing import serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except AiofluxError as exc:
        print(f"aioflux {args.command}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # local files: missing, unreadable, disk full
        print(f"aioflux {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
