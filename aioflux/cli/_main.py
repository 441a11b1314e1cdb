"""The command line's parser and its run: what ``aioflux.cli.main`` imports
once it can catch Ctrl-C (see the package). asyncio and the command's
module are imported only once the command line has parsed: ``--version``,
``--help`` and a usage error need neither."""

from __future__ import annotations

import argparse
import codecs
import io
import os
import sys

from ._registry import HOMES, UsageError, load
from ._text import missing, one_line

# Not typing's: typing, dataclasses and importlib.metadata would be most of
# the imports of `aioflux --version` (mypy reads any name TYPE_CHECKING as its flag).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Collection, Sequence
    from typing import Any, NoReturn

__all__ = ["build_parser", "run", "version"]

EPILOG = ("URLs: gs://bucket/name, s3://bucket/key, az://container/blob, "
          "http(s)://host/path, file:///path or a local path (the same local store); "
          "http(s):// is a web server's file, read only (stat, cat, cp from it, shards): no "
          "listing, no writes; az:// takes its account and credentials from "
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
    """aioflux's version: the code's own, which the build reads too (the
    installed distribution's metadata says the same, and importlib.metadata
    took more imports than the rest of ``aioflux --version``)."""
    from .._version import __version__

    return __version__


class _Version(argparse.Action):
    """``--version``, the version looked up only when asked: every command
    paid for importlib.metadata's imports."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"aioflux {version()}")
        parser.exit()


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser, every command listed with its help.

    Args:
        commands: the commands whose arguments are configured, their modules
            imported (default: all). Another command on the command line
            would parse as taking no arguments: :func:`run` configures the
            one it names.

    Returns:
        The parser.
    """
    parser = _Parser(prog="aioflux",
                     description="Fast object storage for PyTorch: Google Cloud Storage, S3, Azure "
                                 "Blob, local files, and web servers (http(s), read only).",
                     epilog=EPILOG)
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, home in sorted(HOMES.items()):
        p = sub.add_parser(name, help=home.help, description=home.help, epilog=EPILOG)
        if commands is None or name in commands:
            cmd = load(name)
            cmd.configure(p)
            p.set_defaults(_run=cmd.run)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run its command.

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
    # The top level takes no option with a value: a command is the first argument.
    named = argv[:1] if argv and argv[0] in HOMES else []
    parser = build_parser(named)
    if not named:
        _misplaced(parser, argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unrecognized(parser, args, extras)
    _print_names_as_they_are()
    from ._signals import sigterm_as_interrupt

    with sigterm_as_interrupt() as terminated:
        return _run(args, terminated)


def _misplaced(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """The usage error of a command's option given before the command
    (``aioflux --region us-west-2 cat ...``): argparse took its value for
    the command, or blamed a command it had not configured."""
    if not argv or not argv[0].startswith("-") or argv[0] in ("-h", "--help", "--version"):
        return
    command = next((a for a in argv if a in HOMES), None)
    if command is not None:
        parser.error(f"option {argv[0].partition('=')[0]} goes after the command "
                     f"(aioflux {command} {argv[0]} ...)")


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  extras: list[str]) -> NoReturn:
    """The usage error of arguments no parser took, said by the (sub)command
    they were given to, with the closest option for a mistyped one.

    argparse's own blamed the top level (``aioflux: error: unrecognized
    arguments: --recursve``), and an option it did not know left its value
    to the positionals: ``cp --concurency 4 a gs://b/y`` named the
    destination unrecognized. An unknown option is then the error, alone.
    """
    import difflib

    inner = _innermost(parser, args)
    options = [extra for extra in extras if extra.startswith("-") and extra != "-"]
    if not options:
        inner.error(f"unrecognized arguments: {' '.join(extras)}")
    known = [o for action in inner._actions for o in action.option_strings]
    said = []
    for option in options:
        given = option.partition("=")[0]
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        said.append(f"{option} (did you mean {close[0]}?)" if close else option)
    inner.error(f"unrecognized option{'s' if len(said) > 1 else ''} {', '.join(said)}")


def _innermost(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``aioflux shards ls``'s, say."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None))  # type: ignore[arg-type]
            if chosen is not None:
                return _innermost(chosen, args)
    return parser


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
    import asyncio

    from .._core.errors import AiofluxError, NotFound

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
    except ModuleNotFoundError as exc:  # a dependency missing: what to install, in one line
        print(f"aioflux {args.command}: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # local files: missing, unreadable, disk full
        print(f"aioflux {args.command}: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except (KeyboardInterrupt, asyncio.CancelledError):
        if terminated.is_set():
            print(f"aioflux {args.command}: terminated", file=sys.stderr)
            return EXIT_TERMINATED
        print(f"aioflux {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
