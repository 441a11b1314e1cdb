"""read_cpu: the CPU a whole-object read costs a GiB, on every read path,
against the floor of a raw socket read in the same run (issue 61 item 5).

One object of 1 GiB (``size``; 64 MiB with --quick) and 16 of 64 MiB
(``parts``, ``part_size``; 4 with --quick), read whole, each contender in
its own process; the figure is that process's CPU (all its threads) over
its reads, a GiB: CPU is what a shared machine's load moves least, and
the servers (nginx, the emulator, Azurite) run in other processes, whose
CPU is not counted; the file reads (LocalStore, ``open(file URL)``) read
nginx's copy from the page cache. The floor: a blocking socket's ``recv_into`` of nginx's
answer into one fresh buffer of the object's size, and the same plus one
crc32c over it. Target: every path at most 1.15x the floor plus crc32c.
Both servers run unshaped (the emulator with no latency or caps, nginx
with no shaper in front, whatever ``--profile`` says): a shaped stream's
pace would be measured, not the reader's cost; record it with
``python -m perf run read_cpu --profile none``.
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Limit, Options, Plan
from perf.seed import ObjectSet

__all__ = ["plan"]

BIG = "read_cpu/big-"
PARTS = "read_cpu/part-"
# What every path may cost over the floor plus crc32c (issue 61).
TARGET = 1.15


def _nginx_ready() -> str | None:
    return project_imports(
        "import aioflux, tests.servers.nginx; tests.servers.nginx.install_nginx()"
    )


def _azurite_ready() -> str | None:
    return project_imports("import aioflux.azure, tests.servers.azurite; "
                           "tests.servers.azurite.install_azurite()")


def _aioflux_ready() -> str | None:
    return project_imports("import aioflux")


# (name, --path, prefix, what it calls)
_PATHS = (
    ("http-read", BIG, "HttpStore(scheme='http').read(host:port, name) from nginx"),
    ("http-open", BIG, "aioflux.open(http URL).read() from nginx: the reader engine"),
    ("gcs-read", BIG, "AsyncClient.read(bucket, name) from the emulator"),
    ("sync-read", BIG, "Client.read(bucket, name) from the emulator (the portal's thread "
                       "counted)"),
    ("gcs-fetch", BIG, "AsyncClient.fetch(size=, crc=, generation= of a stat): the engines' "
                       "read"),
    ("gcs-open", BIG, "aioflux.open(gs URL, client=Client).read(): the reader engine, as "
                      "checkpoint and DCP loads read an object"),
    ("s3-read", BIG, "S3Store.read(bucket, name) from the emulator's S3 face"),
    ("az-read", BIG, "AzureStore.read(container, name) from Azurite, started by the "
                     "contender (the blob nginx's file, uploaded untimed)"),
    ("local-read", BIG, "LocalStore.read(folder, name) of nginx's copy of the file (in the "
                        "page cache)"),
    ("local-open", BIG, "aioflux.open(file URL).read(): the file reader, as checkpoint and "
                        "DCP loads read a file"),
    ("download-many", PARTS, "aioflux.Downloader(client).download_many(the parts' stats)"),
    ("stream", PARTS, "AsyncClient.stream(bucket, the parts' prefix), the listing included"),
)


def plan(options: Options) -> Plan:
    size = options.get("size", (64 if options.quick else 1024) << 20)
    parts = options.get("parts", 4 if options.quick else 16)
    part_size = options.get("part_size", 64 << 20)
    floor_note = ("a blocking socket: GET, the head read by hand, the body by recv_into "
                  "straight into one fresh buffer of its size (left unset until the bytes "
                  "land)")
    contenders = [
        Contender("floor", "read_cpu_floor.py", None, ("--prefix", BIG), note=floor_note,
                  available=_nginx_ready),
        Contender("floor+crc32c", "read_cpu_floor.py", None, ("--prefix", BIG, "--crc"),
                  note=f"{floor_note}, then one crc32c over the buffer",
                  available=_nginx_ready),
    ]
    for name, prefix, note in _PATHS:
        ready = {"http-": _nginx_ready, "az-": _azurite_ready}.get(name[:name.find("-") + 1],
                                                                  _aioflux_ready)
        contenders.append(Contender(name, "read_cpu_aioflux.py", None,
                                    ("--path", name, "--prefix", prefix), note=note,
                                    available=ready))
    return Plan(
        name="read_cpu",
        description=(f"CPU seconds a GiB of whole-object reads: one {size / 2**20:g} MiB "
                     f"object (and {parts} x {part_size / 2**20:g} MiB for download_many "
                     "and stream), every read path against a raw socket's recv_into "
                     "(+ crc32c) from nginx in the same run"),
        bucket="perf-read-cpu",
        objects=[ObjectSet(BIG, 1, size), ObjectSet(PARTS, parts, part_size)],
        contenders=contenders,
        baseline="floor+crc32c",
        figures=[("cpu_s_per_gib", "CPU s a GiB")],
        limits=[Limit(name, "cpu_s_per_gib", "<=", TARGET, "s/GiB", "CPU a GiB",
                      of="floor+crc32c") for name, _, _ in _PATHS],
        ratios=False,
        notes=["nginx (Debian's, sendfile on, a worker a core) serves the objects mirrored "
               "from the emulator into a local directory (untimed); the GCS and S3 paths "
               "read from aioflux's emulator with no latency or bandwidth cap, each in "
               "another process than the reader's",
               "the figure is the reader's own CPU (user + system, its threads included) "
               "over its timed reads, a GiB: neither server's; the target is every path "
               f"at most {TARGET}x the floor + crc32c's median in the same run",
               "az-read starts Azurite (Node, another process) in its contender and "
               "uploads nginx's file to it untimed; local-read and local-open read nginx's "
               "copy of the file, read through once untimed (in the page cache, as "
               "sendfile finds it)",
               "every aioflux path checks what it reads as it always does: the length, "
               "the crc32c (GCS, S3: the server's; fetch, download_many, stream and the "
               "reader: a listing's or stat's too), the version answering; an http "
               "server states no checksum, so http reads check length and version only"],
        timeout_s=600.0,
        emulator_args=("--ttfb-ms", "0", "--bandwidth-mbps", "1e6",
                       "--host-bandwidth-mbps", "1e6"),
        warm_read=False,
        seed_concurrency=4,
    )
