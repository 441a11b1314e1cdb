"""``python -m aioflux.testing``: run the emulator (see :func:`serve_main`)."""

from __future__ import annotations

import sys

from aioflux.testing._serve import serve_main

if __name__ == "__main__":
    sys.exit(serve_main())
