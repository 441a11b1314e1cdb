"""The ``aioflux`` command line.

Each command lives in a module under ``aioflux.cli`` (``_registry.HOMES``
names it, with the command's help) and registers itself with
:func:`command`; only the module of the command that runs is imported.
Every failure is one line on stderr, never a traceback, Ctrl-C during
start-up included. Exit codes:

* 0: done.
* 1: the operation failed (no such object or bucket, a URL that matches
  nothing, permission, network, checksum, a local file that cannot be read
  or written, a copy onto itself, a checkpoint root holding no checkpoint).
* 2: usage error: anything wrong with the command line itself, including a
  URL of no store this version serves (``ftp://x`` is unknown), a bad bucket
  name, an invalid ``--endpoint``, a number out of range or an unknown
  option (named by the subcommand it was given to, with the closest one).
* 130: interrupted (Ctrl-C); ``cp`` aborts its uploads in progress and
  removes its temporary files first.
* 141: stdout was closed early (``aioflux ls ... | head``); nothing printed.
* 143: terminated (SIGTERM, as ``timeout``, Kubernetes, systemd and CI
  cancellation send), handled as Ctrl-C is.
"""

import sys

# Not typing's TYPE_CHECKING: typing is a cost of its own (mypy reads any
# name TYPE_CHECKING as its flag). Deleted below: not a public name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._main import build_parser, version
    from ._registry import Command, UsageError, command

__all__ = ["Command", "UsageError", "build_parser", "command", "main", "version"]

_HOMES = {"Command": "._registry", "UsageError": "._registry", "build_parser": "._main",
          "command": "._registry", "version": "._main"}


def main(argv: "Sequence[str] | None" = None) -> int:
    """Run the CLI.

    Everything but this function is imported once it runs, inside the
    ``try``: Ctrl-C while the command starts (importing aiohttp, the stores,
    the command's module; parsing) is one line and exit 130, as it is while
    the command runs, not a traceback of the import it cut.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    try:
        from ._main import run

        return run(argv)
    except KeyboardInterrupt:
        print("aioflux: interrupted", file=sys.stderr)
        return 130  # EXIT_INTERRUPTED


if not TYPE_CHECKING:  # mypy reads the imports above

    def __getattr__(name: str) -> object:
        # The rest of the package's names, imported on first use.
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        return getattr(import_module(home, __name__), name)


del TYPE_CHECKING
