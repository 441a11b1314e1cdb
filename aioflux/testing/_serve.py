"""``aioflux emulator`` / ``python -m aioflux.testing``: serve the emulator.

On start, ``aioflux emulator listening on URL`` (the GCS APIs) and then
``aioflux emulator S3 API on URL2`` (the S3 face, unless ``--s3-port -1``)
are printed to stdout, once both listen (the perf harness parses both). The
server then runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from aioflux.testing._errors import ApiError
from aioflux.testing._profile import GCS_LIKE_PROFILE, NO_PROFILE, EmulatorProfile, Faults
from aioflux.testing._server import Emulator, new_event_loop
from aioflux.testing._store import Store

__all__ = ["S3_READY_PREFIX", "build_parser", "serve_main"]

S3_READY_PREFIX = "aioflux emulator S3 API on "


def _port(lowest: int) -> Callable[[str], int]:
    """An argparse type: a port number from ``lowest`` to 65535 (99999 was
    taken and wrapped to 34463 by the socket layer)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
        if not lowest <= value <= 65535:
            raise argparse.ArgumentTypeError(f"a port from {lowest} to 65535, got {value}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    # One line per usage error, as every aioflux command prints.
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "aioflux emulator") -> argparse.ArgumentParser:
    """Return the argument parser of the ``emulator`` command.

    Args:
        prog: program name shown in the help.
    """
    p = _Parser(prog=prog, description="Run the aioflux GCS emulator (and its S3 face).")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port(0), default=0,
                   help="port (default 0 = pick a free one)")
    p.add_argument("--s3-port", type=_port(-1), default=0,
                   help="port of the path-style S3 face over the same store (default 0 = pick "
                        "a free one; -1 = no S3 face)")
    p.add_argument("--s3-region", default="us-east-1",
                   help="region the S3 face reports (default us-east-1)")
    p.add_argument(
        "--profile",
        choices=("none", "gcs-like"),
        default="none",
        help="gcs-like = 20 ms to first byte, 100 MB/s per connection, 800 MB/s per host",
    )
    p.add_argument("--ttfb-ms", type=float, help="time to first byte, milliseconds")
    p.add_argument("--bandwidth-mbps", type=float, help="per-connection cap, MB/s (1e6 B/s)")
    p.add_argument("--host-bandwidth-mbps", type=float,
                   help="the host's cap (a NIC's) on all connections together, each way, MB/s")
    p.add_argument("--qps", type=float,
                   help="object reads/s cap, and apart from it writes/s cap; excess "
                        "requests get 429")
    p.add_argument("--qps-burst", type=float, default=1.0, metavar="SECONDS",
                   help="seconds of --qps each token bucket holds, what it admits at once "
                        "after a lull (default 1.0)")
    p.add_argument("--tail-fraction", type=float, default=0.0,
                   help="fraction of media GETs held back before the first byte")
    p.add_argument("--tail-delay-ms", type=float, nargs=2, default=(500.0, 2000.0),
                   metavar=("LOW", "HIGH"), help="that wait, drawn uniformly (default 500 2000)")
    p.add_argument("--p-429", type=float, default=0.0, help="probability of an injected 429")
    p.add_argument("--p-503", type=float, default=0.0, help="probability of an injected 503")
    p.add_argument("--p-reset", type=float, default=0.0, help="probability of a mid-body reset")
    p.add_argument("--p-stall", type=float, default=0.0, help="probability of a mid-body stall")
    p.add_argument("--stall-seconds", type=float, default=1.0, help="length of a stall")
    p.add_argument("--seed", type=int, help="seed of the fault and tail RNGs")
    p.add_argument(
        "--bucket", action="append", default=[], metavar="NAME", help="pre-create (repeatable)"
    )
    return p


def _knobs(args: argparse.Namespace) -> tuple[EmulatorProfile, Faults]:
    base = GCS_LIKE_PROFILE if args.profile == "gcs-like" else NO_PROFILE
    profile = EmulatorProfile(
        ttfb=base.ttfb if args.ttfb_ms is None else args.ttfb_ms / 1000.0,
        bandwidth=base.bandwidth if args.bandwidth_mbps is None else args.bandwidth_mbps * 1e6,
        host_bandwidth=(base.host_bandwidth if args.host_bandwidth_mbps is None
                        else args.host_bandwidth_mbps * 1e6),
        qps_limit=base.qps_limit if args.qps is None else args.qps,
        qps_burst=args.qps_burst,
        tail_fraction=args.tail_fraction,
        tail_delay=(args.tail_delay_ms[0] / 1000.0, args.tail_delay_ms[1] / 1000.0),
        tail_seed=args.seed,
    )
    faults = Faults(
        p_429=args.p_429,
        p_503=args.p_503,
        p_reset=args.p_reset,
        p_stall=args.p_stall,
        stall_seconds=args.stall_seconds,
        seed=args.seed,
    )
    return profile, faults


async def _serve(args: argparse.Namespace, profile: EmulatorProfile, faults: Faults) -> None:
    emu = Emulator(profile, faults, host=args.host, port=args.port,
                   s3_port=None if args.s3_port < 0 else args.s3_port,
                   s3_region=args.s3_region)
    for name in args.bucket:
        emu.create_bucket(name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not available on Windows event loops, nor off the main thread.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with emu:
        print(f"aioflux emulator listening on {emu.endpoint}", flush=True)
        if args.s3_port >= 0:
            print(f"{S3_READY_PREFIX}{emu.s3_endpoint}", flush=True)
        await stop.wait()


# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Let this process reuse the memory it frees instead of returning it.

    The emulator stores object bodies in buffers of up to a multipart
    part's size. glibc maps every buffer above a moving threshold with its
    own mmap and unmaps it on free, so overwriting a 1 GiB checkpoint made
    the next one fault in fresh pages again: ~540k page faults and ~5 s of
    kernel time per save on the 2-core perf VM, more than the client spent.
    Serving buffers up to 32 MiB (glibc's limit) from the heap and keeping
    up to 1 GiB of freed heap cut that in half (perf/scenarios/ckpt_save.py).
    Only called in the emulator's own process; a no-op without glibc.

    Returns:
        True if the allocator took the settings.
    """
    path = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(path).mallopt if path else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
                and mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def serve_main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator until SIGINT/SIGTERM.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status (0 on a clean stop, 2 on bad arguments).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        profile, faults = _knobs(args)
    except ValueError as exc:
        parser.error(str(exc))  # exits with status 2
    probe = Store()
    for name in args.bucket:
        try:
            probe.create_bucket(name)
        except ApiError as exc:
            # Checked before binding, so a bad name is a usage error, not a traceback.
            parser.error(f"--bucket {name!r}: {exc.message}")
    keep_freed_memory()
    runner = asyncio.Runner(loop_factory=new_event_loop)
    try:
        runner.run(_serve(args, profile, faults))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"aioflux emulator: {exc}", file=sys.stderr)
        return 1
    finally:
        runner.close()
    return 0
