"""``aioflux emulator``: serve the bundled GCS emulator.

The flags are the emulator's own (``aioflux.testing.serve_main``); ``main``
hands them over unparsed. This registration only lists it in ``--help``.
"""

from __future__ import annotations

import argparse

from ._registry import command

__all__: list[str] = []


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("flags", nargs="*", help="see `aioflux emulator --help`")


@command("emulator", _configure)
def _run(args: argparse.Namespace) -> int:
    from ..testing import serve_main

    return serve_main(args.flags)
