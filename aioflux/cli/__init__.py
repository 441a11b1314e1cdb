"""The ``aioflux`` command line.

Each command lives in its own module under ``aioflux.cli`` and registers
itself with :func:`command`. Every failure is one line on stderr, never a
traceback. Exit codes:

* 0: done.
* 1: the operation failed (no such object or bucket, a URL that matches
  nothing, permission, network, checksum, a local file that cannot be read
  or written, a copy onto itself).
* 2: usage error: anything wrong with the command line itself, including a
  URL of no store this version serves (``ftp://x`` is unknown), a bad bucket
  name, an invalid ``--endpoint`` or a number out of range.
* 130: interrupted (Ctrl-C); ``cp`` aborts its uploads in progress and
  removes its temporary files first.
* 141: stdout was closed early (``aioflux ls ... | head``); nothing printed.
* 143: terminated (SIGTERM, as ``timeout``, Kubernetes, systemd and CI
  cancellation send), handled as Ctrl-C is.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import io
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from .._core.errors import AiofluxError, NotFound
from ._registry import COMMANDS, Command, UsageError, command
from ._signals import sigterm_as_interrupt
from ._text import missing, one_line

__all__ = ["Command", "UsageError", "command", "main", "version"]

EPILOG = ("URLs: gs://bucket/name, s3://bucket/key, az://container/blob, file:///path or a "
          "local path (the same local store); az:// takes its account and credentials from "
          "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME (with a key, a SAS or "
          "an Entra ID sign-in). "
          "gs://bucket/a names the object 'a' and the folder 'a/' (everything under 'a/'), "
          "never 'a2' or 'acopy/'; gs://bucket/a/ names only the folder; a local path names "
          "its file and its directory the same way. Exit codes: 0 ok, 1 the operation failed "
          "(a URL that matches nothing included), "
          "2 usage error (bad arguments, a URL of no supported store such as ftp://), "
          "130 interrupted (Ctrl-C), 141 stdout closed early, 143 terminated (SIGTERM, "
          "handled as Ctrl-C).")

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 1, 2, 130, 141
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (exit 2), like every
    other failure of the CLI; ``--help`` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed distribution's version (``aioflux-storage``), or the
    package's own when it runs from a source tree that is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("aioflux-storage")
    except PackageNotFoundError:
        from .._version import __version__

        return __version__


def _load_commands() -> None:
    # Imported for their registration side effect.
    from . import (  # noqa: F401
        _bench,
        _cache,
        _ckpt,
        _clean,
        _copy,
        _demo,
        _emulator,
        _objects,
        _shards,
    )


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand.

    Returns:
        The parser.
    """
    _load_commands()
    parser = _Parser(prog="aioflux",
                     description="Fast Google Cloud Storage, S3 (and local files) for PyTorch.",
                     epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"aioflux {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for cmd in sorted(COMMANDS.values(), key=lambda c: c.name):
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, epilog=EPILOG)
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
    _print_names_as_they_are()
    with sigterm_as_interrupt() as terminated:
        return _run(args, terminated)


def _print_names_as_they_are() -> None:
    """Let stdout and stderr print any name a listing returns.

    A local file name that is not valid UTF-8 comes back with its bytes
    escaped as surrogates (``os.fsdecode``); a strict stdout (an
    ``en_US.UTF-8`` locale, ``PYTHONIOENCODING=utf-8:strict``) raised
    ``UnicodeEncodeError`` on it, a traceback midway through ``ls``. On a
    UTF-8 stream the original bytes are written back (as ``ls`` does, so
    ``aioflux ls | xargs`` finds the file); on any other, what the encoding
    cannot hold is printed as a backslash escape.
    """
    for stream in (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper):
            continue  # replaced by the caller (a test's capture): its own rules
        utf8 = codecs.lookup(stream.encoding).name == "utf-8"
        stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")


def _run(args: argparse.Namespace, terminated: threading.Event) -> int:
    try:
        return int(args._run(args))
    except UsageError as exc:
        print(f"aioflux {args.command}: error: {one_line(str(exc))} "
              f"(see aioflux {args.command} --help)", file=sys.stderr)
        return EXIT_USAGE
    except AiofluxError as exc:
        message = missing(str(exc), exc.name) if isinstance(exc, NotFound) else str(exc)
        print(f"aioflux {args.command}: {one_line(message)}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as cat and ls do.
        # stdout is pointed at /dev/null so the interpreter's final flush
        # cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # local files: missing, unreadable, disk full
        print(f"aioflux {args.command}: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except (KeyboardInterrupt, asyncio.CancelledError):
        if terminated.is_set():
            print(f"aioflux {args.command}: terminated", file=sys.stderr)
            return EXIT_TERMINATED
        print(f"aioflux {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
