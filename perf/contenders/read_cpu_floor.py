"""read_cpu contender: the floor of a whole-object read's CPU.

One plain HTTP/1.1 GET to nginx over a blocking socket, the head read by
hand, the body received by ``recv_into`` straight into one fresh buffer
of the object's size (memory left unset until the bytes land: what any
reader of N bytes must at least pay, the kernel's copy and the pages'
first touch); ``--crc`` adds one crc32c over the buffer afterwards (the
check every aioflux read makes). No retries, no checks: the ceiling.
"""

from __future__ import annotations

import argparse
import os
import socket
import urllib.parse

from _contender import Manifest, Stopwatch, load, report
from _http_served import served

from aioflux._core.integrity.crc import crc32c
from aioflux._core.memory.buffers import unfilled


def _get(url: str) -> tuple[int, int]:
    """The body's length and, with --crc, its crc32c (else 0)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port or 80)) as sock:
        sock.sendall(f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     "Connection: close\r\n\r\n".encode("latin-1"))
        head = b""
        while b"\r\n\r\n" not in head:
            more = sock.recv(16384)
            if not more:
                raise SystemExit("nginx closed before the response head")
            head += more
        lines, _, start = head.partition(b"\r\n\r\n")
        if not lines.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"nginx answered {lines[:60]!r}")
        length = next(int(line.split(b":", 1)[1]) for line in lines.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        body = unfilled(length)
        view = memoryview(body)
        view[:len(start)] = start
        got = len(start)
        while got < length:
            n = sock.recv_into(view[got:])
            if not n:
                raise SystemExit(f"nginx closed after {got} of {length} bytes")
            got += n
    return length, crc32c(body) if ARGS.crc else 0


def main(manifest: Manifest) -> tuple[Stopwatch, int, int]:
    # nginx itself, no shaper in front: the shaper's Python relay paced one
    # stream at 100 MB/s, and CPU a GiB is measured against a server that
    # sends as fast as the reader takes (the emulator runs unshaped too).
    os.environ["PERF_PROFILE"] = "none"
    with served(manifest, ARGS.prefix) as urls:
        nbytes = 0
        with Stopwatch() as watch:
            for url in urls:
                nbytes += _get(url)[0]
    return watch, nbytes, len(urls)


if __name__ == "__main__":
    manifest, rest = load()
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--crc", action="store_true")
    ARGS = parser.parse_args(rest)
    watch, nbytes, items = main(manifest)
    report(watch, nbytes=nbytes, items=items,
           cpu_s_per_gib=round((watch.cpu_user_s + watch.cpu_sys_s) / (nbytes / 2**30), 4))
