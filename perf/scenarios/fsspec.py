"""fsspec: aioflux's fsspec filesystem against gcsfs and s3fs, one kind of work a run.

``--param op=`` picks the work (contenders are named ``<filesystem>-<op>``,
so each op keeps its own figures in the results). Any other parameter
makes another data set: its contenders are named
``<filesystem>-<op>-<parameters>`` (``aioflux-s3-parquet-files64-rows32768``),
so it never stands in for the op's own figures:

- ``cat``: list a folder of ``count`` objects of ``size`` bytes (2,000 x
  100 KiB; 200 with --quick) and ``cat`` them all;
- ``find``: ``find`` of a tree of ``count`` objects (100,000 of 1 byte;
  5,000 with --quick): a pyarrow dataset's or ``glob("**")``'s discovery;
- ``ranges``: a Parquet reader's requests through ``cat_ranges``: each
  file's last 64 KiB (its footer), then the chunks of ``columns`` (3 of 8)
  in every row group, over ``files`` Parquet files (8 x 32 MiB: ``rows``
  524,288 rows of an int64 key and 7 float64 columns, row groups of 65,536
  rows, uncompressed; 2 x 4 MiB with --quick);
- ``parquet``: ``pyarrow.parquet.read_table`` of that folder (256 MiB);
- ``get`` / ``put``: ``get_file`` / ``put_file`` of one object of ``size``
  bytes (1 GiB; 64 MiB with --quick) from / to a local file.

aioflux (``AiofluxFileSystem``, checksums checked: its defaults) on the
emulator's GCS face against gcsfs, and on its S3 face against s3fs; the
peers at their defaults (gcsfs ``consistency="none"``), each in its own
venv with pyarrow (``gcsfs-pyarrow``, ``s3fs-pyarrow``). ``cat`` and
``ranges`` also run ``aiohttp-bare``, the same calls on bare aiohttp at
aioflux's 128 requests in flight: the ceiling any client has at that bound
(``contenders/fsspec_bare.py``).
"""

from __future__ import annotations

import io

from perf.availability import project_imports
from perf.harness import Contender, Options, Plan, Target
from perf.seed import ObjectSet, ParquetSet

__all__ = ["OPS", "plan"]

OPS = ("cat", "find", "ranges", "parquet", "get", "put")
FOLDER = "fsspec/"
_KiB, _MiB = 1024, 1024 * 1024
# What contenders/fsspec_ops.py reads first of a Parquet file.
_FOOTER_GUESS = 64 * _KiB
_S3 = ("on the emulator's S3 face over plain http (path-style, region us-east-1, dummy AWS_* "
       "credentials)")
_FILESYSTEMS = {
    "aioflux-gs": (None, "AiofluxFileSystem('gs', endpoint=emulator) at the library's "
                         "defaults: crc32c checked on whole reads and get_file, writes "
                         "checked; sync calls on aioflux's loop thread"),
    "gcsfs": ("gcsfs-pyarrow", "GCSFileSystem(token='anon', endpoint_url=emulator) at its "
                               "defaults (consistency='none': nothing checked); the gRPC "
                               "bucket-type probe off (GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false)"),
    "aioflux-s3": (None, f"AiofluxFileSystem('s3', endpoint=S3 face) at the library's defaults, "
                         f"{_S3}"),
    "s3fs": ("s3fs-pyarrow", f"S3FileSystem(endpoint_url=S3 face) at its defaults, {_S3}"),
}

# The gcs-like profile's network (perf/shaper.py's PROFILE_NOTES): what
# no client can beat, so what bounds a ratio against a peer near it.
_TTFB, _STREAM, _HOST = 0.020, 100e6, 800e6
_IN_FLIGHT = 128  # aioflux's default max_concurrency


def _floor(op: str, items: int, nbytes: int) -> str:
    """The gcs-like network's least time for the op's bytes and round trips."""
    wire = nbytes / _HOST
    if op == "cat":  # a listing, then every object a round trip at 128 at once
        trips = -(-items // _IN_FLIGHT) * (_TTFB + nbytes / items / _STREAM)
        least, how = _TTFB + max(wire, trips), (
            f"one listing's round trip + max({nbytes / 1e6:.0f} MB at {_HOST / 1e6:.0f} MB/s, "
            f"{-(-items // _IN_FLIGHT)} waves of {_IN_FLIGHT} GETs at 20 ms)")
    elif op == "ranges":  # the footers, then the chunks
        least, how = 2 * _TTFB + wire, (f"2 round trips of 20 ms + {nbytes / 1e6:.0f} MB at "
                                        f"{_HOST / 1e6:.0f} MB/s")
    elif op == "parquet":  # listing, footer, chunks
        least, how = 3 * _TTFB + wire, (f"3 round trips of 20 ms + {nbytes / 1e6:.0f} MB at "
                                        f"{_HOST / 1e6:.0f} MB/s")
    else:
        least, how = _TTFB + wire, f"1 round trip + {nbytes / 1e6:.0f} MB at " \
                                   f"{_HOST / 1e6:.0f} MB/s"
    who = f"no contender with at most {_IN_FLIGHT} requests in flight" if op == "cat" \
        else "no contender"
    text = (f"the gcs-like network's floor for this op: {least:.2f} s ({how}): {who} is "
            f"faster, so a ratio against a peer is at most the peer's time / {least:.2f} s")
    if op in ("get", "put"):
        text += ("; the local file is written to / read from the machine's disk "
                 "(TMPDIR), whose speed bounds every contender too")
    return text


# The ceiling of the ops bound by requests in flight (no target: a reference).
_BARE_OPS = ("cat", "ranges")
_BARE = ("the ceiling at aioflux's bound on the GCS face: the same calls on bare aiohttp "
         "(uvloop, its own loop thread, 128 requests in flight), no retries, checks or "
         "coalescing (contenders/fsspec_bare.py)")


def _ready() -> str | None:
    return project_imports("import pyarrow.parquet, aioflux.fsspec; "
                           "aioflux.fsspec.AiofluxFileSystem")


def _chunk_bytes(data: ParquetSet, columns: list[str]) -> tuple[int, int]:
    """Ranges and bytes of the op ``ranges``: footers, then the columns' chunks."""
    import pyarrow.parquet as pq

    count = nbytes = 0
    for body in data.files:
        meta = pq.read_metadata(io.BytesIO(body))
        count += 1
        nbytes += min(len(body), _FOOTER_GUESS)
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        for g in range(meta.num_row_groups):
            for c in columns:
                count += 1
                nbytes += meta.row_group(g).column(names.index(c)).total_compressed_size
    return count, nbytes


def plan(options: Options) -> Plan:
    op = options.params.get("op", "")
    if op not in OPS:
        raise SystemExit(f"fsspec: pass --param op=... ({', '.join(OPS)})")
    common: tuple[str, ...] = ("--op", op)
    objects: list[ObjectSet | ParquetSet] = []
    if op == "cat":
        count = options.get("count", 200 if options.quick else 2000)
        size = options.get("size", 100 * _KiB)
        objects.append(ObjectSet(f"{FOLDER}small/", count, size))
        common += ("--prefix", f"{FOLDER}small/")
        items, nbytes = count, count * size
        what = f"list + cat of {count:,} objects x {size / _KiB:g} KiB"
    elif op == "find":
        count = options.get("count", 5000 if options.quick else 100_000)
        objects.append(ObjectSet(f"{FOLDER}tree/", count, 1))
        common += ("--prefix", f"{FOLDER}tree/")
        items, nbytes = count, 0
        what = f"find of a tree of {count:,} objects"
    elif op in ("ranges", "parquet"):
        files = options.get("files", 2 if options.quick else 8)
        rows = options.get("rows", 65_536 if options.quick else 524_288)
        data = ParquetSet(f"{FOLDER}parquet/", files, rows,
                          row_group=options.get("row_group", 65_536))
        objects.append(data)
        common += ("--prefix", f"{FOLDER}parquet/")
        mib = data.total_bytes / _MiB
        if op == "ranges":
            columns = options.params.get("columns", "c1,c3,c5")
            common += ("--columns", columns)
            items, nbytes = _chunk_bytes(data, columns.split(","))
            what = (f"cat_ranges of {files} Parquet files' footers (last 64 KiB), then of "
                    f"columns {columns} in every row group ({items} ranges, "
                    f"{nbytes / _MiB:.0f} MiB of {mib:.0f} MiB)")
        else:
            common += ("--rows", str(files * rows))
            items, nbytes = files, data.total_bytes
            what = (f"pyarrow.parquet.read_table of a folder of {files} Parquet files "
                    f"({mib:.0f} MiB, {files * rows:,} rows)")
    else:
        size = options.get("size", (64 if options.quick else 1024) * _MiB)
        common += ("--size", str(size))
        if op == "get":
            objects.append(ObjectSet(f"{FOLDER}big/", 1, size))
            common += ("--prefix", f"{FOLDER}big/")
        else:
            common += ("--prefix", f"{FOLDER}put/")
        items, nbytes = 1, size
        what = (f"{op}_file of one {size / _MiB:g} MiB object "
                f"{'into' if op == 'get' else 'from'} a local file")
    variant = "".join(f"-{k}{v}" for k, v in sorted(options.params.items()) if k != "op")
    label = op + variant
    contenders = [
        Contender(f"{fs}-{label}", "fsspec_ops.py", venv, (*common, "--fs", fs), note=note,
                  available=_ready if venv is None else None)
        for fs, (venv, note) in _FILESYSTEMS.items()
    ]
    if op in _BARE_OPS:
        contenders.append(Contender(f"aiohttp-bare-{label}", "fsspec_ops.py", None,
                                    (*common, "--fs", "aiohttp-bare"), note=_BARE))
    at_least = 1.5 if op in ("get", "put") else 2.0
    # find is no target of the issue's: its ratios are reported, not judged.
    targets = [] if op == "find" else [
        Target(f"gcsfs-{label}", at_least, f"aioflux-gs-{label}"),
        Target(f"s3fs-{label}", at_least, f"aioflux-s3-{label}")]
    return Plan(
        name="fsspec",
        description=f"fsspec {op}: {what}",
        bucket="perf-fsspec",
        objects=objects,
        contenders=contenders,
        baseline=f"aioflux-gs-{label}",
        targets=targets,
        notes=["each run is one op (--param op=...); the op's contenders are named "
               "<filesystem>-<op>",
               "checksums: aioflux checks crc32c as it ships (whole reads, get_file, every "
               "write); gcsfs and s3fs as they ship (gcsfs checks nothing; s3fs/botocore "
               "send a checksum with uploads and check none on reads)",
               "contenders/fsspec_ops.py does the same calls on every filesystem",
               *([] if op == "find" else [_floor(op, items, nbytes)])],
        timeout_s=900.0,
        expect_items=items,
        expect_bytes=nbytes,
        warm_read=op not in ("put", "find"),
        # Uploads: a fresh emulator faults in the memory of what it first
        # stores. Downloads: the first GiB a run writes to the local disk
        # cost whichever contender came first up to twice its time (aioflux
        # 2.49 s then 1.27 s, gcsfs 2.50 s then 2.44 s, in one run).
        # Listings: the emulator encodes each listed item once, on the first
        # listing (see scenarios/listing.py).
        warm_rounds=1 if op in ("get", "put", "find") else 0,
        seed_concurrency=8 if op == "get" else 64,
    )
