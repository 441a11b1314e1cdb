"""throttle (issue 50): many processes of one node reading one bucket through
a request-rate cap.

The emulator caps object reads at ``cap`` (200) per second, and object
writes apart at ``cap`` too, as GCS limits a bucket's reads and writes
apart (``--qps``; a token bucket of one second's burst per kind, answering
429 on the JSON API and 503 ``SlowDown`` on the S3 face,
``aioflux/testing/_runtime.py`` and ``_s3_common.py``). The streams read
only; an ``ObjectMapDataset`` batch of small objects is a compose and a delete
(writes) and one GET, so its writes meet their cap first.

For each process count (``procs``, "4,16"), each process reads its own
folder of ``per`` (400) objects of ``size`` (4 KiB):

- aioflux, separate processes: ``AsyncClient.stream`` of the folder at
  default settings (the node-wide adaptive rate), and with
  ``request_rate='off'``; ``S3Store.stream`` on the S3 face (503
  ``SlowDown``) at default settings;
- aioflux, DataLoader workers: ``ObjectMapDataset`` with ``num_workers=N``
  (``start``: fork, or spawn with ``--param spawn=1``), adaptive and off,
  over every process's folder whatever N, in batches of 8: 16 x 400
  objects are 1,600 writes, ~8 s at the cap, the issue's shortest job (in
  a shorter one, the writes in flight when the burst runs out, refused
  before any refusal has come back, are a larger share: 3 batches a
  worker, 48 of 16 workers);
- aioflux, separate processes, through the tests' capping proxy holding
  ``bursts`` (0.05, 0.1 and 1) seconds of tokens in front of the emulator
  (a service's burst is unknown and may be small), and the same for a
  short job (``short`` objects a process, 100: 16 x 100 is ~8 s at the
  cap; 4 x 400 is the other ~8 s job); the proxy also tells what the node
  was served in the third second after its first refusal;
- gcsfs ``cat`` per process (JSON API); s3fs ``cat`` per process and
  botocore's adaptive retry mode (8 threads a process on one client, and
  N threads of one process on one client) on the S3 face.

Figures (``perf/contenders/_throttle.py``): the admitted requests a second
over the cap (of the kind admitted most), the share of requests throttled
(of the kind throttled most), failed workers, the slowest worker's time
over the fastest, and on the proxy's rows the requests it admitted a second
from 2 to 3 s after its first refusal, over the cap. The issue's targets
are Limits on the aioflux adaptive rows. Seeding runs through the cap (2 uploads at a
time stay under it) and there is no warm read (it would be throttled).
"""

from __future__ import annotations

from perf.availability import project_imports
from perf.harness import Contender, Limit, Options, Plan
from perf.seed import ObjectSet

__all__ = ["FIGURES", "goals", "plan"]

PREFIX = "throttle/"
#: a DataLoader batch: a compose of this many objects, a GET and a delete
LOADER_BATCH = 8
SHORT_PREFIX = "throttle-short/"
#: the figures' columns (``perf/contenders/_throttle.summarize``)
FIGURES = [("goodput_of_cap", "goodput x cap"), ("throttled_pct", "throttled %"),
           ("failures", "failed workers"), ("slowest_fastest", "slowest/fastest"),
           ("served_3s_of_cap", "served 2-3 s after the 1st throttle x cap"),
           ("requests", "requests"), ("throttled", "throttled")]


def _ready() -> str | None:
    return project_imports("import aioflux")


def _ready_torch() -> str | None:
    return project_imports("import aioflux.torch; aioflux.torch.ObjectMapDataset")


def goals(name: str, throttled: float = 5.0) -> list[Limit]:
    """The issue's four targets on one contender's figures (throttled: the
    most percent, 10 for a burst of 0.05 s, where the first volley of 16
    processes alone can exceed the bucket)."""
    return [Limit(name, "goodput_of_cap", ">=", 0.9, "x cap", "goodput"),
            Limit(name, "throttled_pct", "<=", throttled, "%", "throttled"),
            Limit(name, "failures", "<=", 0.0, "", "failed workers"),
            Limit(name, "slowest_fastest", "<=", 1.3, "x", "slowest/fastest")]


def contenders_for(n: int, cap: int, per: int, objects: int, start: str) -> list[Contender]:
    common = ("--procs", str(n), "--cap", str(cap), "--prefix", PREFIX)
    loader = ("--workers", str(n), "--per-worker", str(objects // n), "--batch",
              str(LOADER_BATCH), "--cap", str(cap), "--prefix", PREFIX, "--start", start)
    s3 = "on the emulator's S3 face (503 SlowDown), dummy credentials, path style"
    return [
        Contender(f"aioflux-p{n}", "throttle_procs.py", None, ("--client", "aioflux", *common),
                  note=f"{n} processes, AsyncClient.stream of its folder, default settings "
                       "(request_rate='adaptive', shared by the node)", available=_ready),
        Contender(f"aioflux-off-p{n}", "throttle_procs.py", None,
                  ("--client", "aioflux", "--rate", "off", *common),
                  note="the same with ClientConfig(request_rate='off')", available=_ready),
        Contender(f"aioflux-s3-p{n}", "throttle_procs.py", None,
                  ("--client", "aioflux-s3", *common),
                  note=f"{n} processes, S3Store.stream of its folder, default settings, "
                       f"the store made before the start (as botocore's clients are), {s3}",
                  available=_ready),
        Contender(f"aioflux-dl-w{n}", "throttle_loader.py", None, loader,
                  note=f"ObjectMapDataset.from_prefix, Subset of {n} x {objects // n}, "
                       f"DataLoader(batch {LOADER_BATCH}, num_workers={n}, {start})",
                  available=_ready_torch),
        Contender(f"aioflux-dl-off-w{n}", "throttle_loader.py", None,
                  ("--rate", "off", *loader),
                  note="the same with request_rate='off'", available=_ready_torch),
        Contender(f"gcsfs-p{n}", "throttle_procs.py", "gcsfs-pyarrow",
                  ("--client", "gcsfs", *common),
                  note=f"{n} processes, GCSFileSystem(endpoint_url=emulator).cat(paths), "
                       "its default retries"),
        Contender(f"s3fs-p{n}", "throttle_procs.py", "s3fs-pyarrow",
                  ("--client", "s3fs", *common),
                  note=f"{n} processes, S3FileSystem(endpoint_url=S3 face).cat(paths) {s3}"),
        Contender(f"botocore-adaptive-p{n}", "throttle_procs.py", "s3fs-pyarrow",
                  ("--client", "botocore", *common),
                  note=f"{n} processes, botocore client with Config(retries={{'mode': "
                       f"'adaptive'}}), 8 threads on it, GetObject each {s3}"),
        Contender(f"botocore-adaptive-t{n}", "throttle_procs.py", "s3fs-pyarrow",
                  ("--client", "botocore", "--threads", *common),
                  note=f"{n} threads of one process on one adaptive botocore client {s3}"),
    ]


def burst_contenders(n: int, cap: int, bursts: list[float], short: int) -> list[Contender]:
    """aioflux rows through a capping proxy of small bursts: the whole
    folders, and (16 processes) a short job of ``short`` objects each."""
    rows: list[Contender] = []
    for burst in bursts:
        common = ("--client", "aioflux", "--procs", str(n), "--cap", str(cap),
                  "--burst", f"{burst:g}")
        note = (f"{n} processes, AsyncClient.stream of its folder, default settings, through "
                f"tests/servers/capping_proxy.py at {cap}/s holding {burst:g} s of tokens (429)")
        rows.append(Contender(f"aioflux-p{n}-burst{burst:g}", "throttle_procs.py", None,
                              (*common, "--prefix", PREFIX), note=note, available=_ready))
        if n >= 16:
            rows.append(Contender(f"aioflux-p{n}-short-burst{burst:g}", "throttle_procs.py",
                                  None, (*common, "--prefix", SHORT_PREFIX),
                                  note=f"{note}; {short} objects a process (~8 s at the cap)",
                                  available=_ready))
    return rows


def plan(options: Options) -> Plan:
    procs = [int(p) for p in options.params.get("procs", "4,16").split(",")]
    bursts = [float(b) for b in options.params.get("bursts", "0.05,0.1,1").split(",") if b]
    short = options.get("short", 100)
    per = options.get("per", 100 if options.quick else 400)
    size = options.get("size", 4096)
    cap = options.get("cap", 200)
    start = "spawn" if options.get("spawn", 0) else "fork"
    most = max(procs)
    contenders: list[Contender] = []
    limits: list[Limit] = []
    for n in procs:
        contenders += contenders_for(n, cap, per, most * per, start)
        limits += goals(f"aioflux-p{n}") + goals(f"aioflux-dl-w{n}") + goals(f"aioflux-s3-p{n}")
        rows = burst_contenders(n, cap, bursts, short)
        contenders += rows
        for row in rows:
            limits += goals(row.name, 10.0 if "burst0.05" in row.name else 5.0)
            limits.append(Limit(row.name, "served_3s_of_cap", ">=", 0.85, "x cap",
                                "served 2-3 s after the 1st throttle"))
    return Plan(
        name="throttle",
        description=f"{', '.join(map(str, procs))} processes or DataLoader workers, each "
                    f"reading {per} x {size / 1024:g} KiB of its own, through a cap of "
                    f"{cap} requests/s",
        bucket="perf-throttle",
        objects=[ObjectSet(f"{PREFIX}p{i:02d}/", per, size) for i in range(most)]
        + [ObjectSet(f"{SHORT_PREFIX}p{i:02d}/", short, size) for i in range(most)
           if most >= 16],
        contenders=contenders,
        baseline=f"aioflux-p{procs[0]}",
        notes=[f"emulator --qps {cap}: a token bucket of {cap} requests and {cap}/s over "
               "the object reads of both faces, and another over the writes (GCS limits "
               "them apart); figures from its /_aioflux_stats counters around each "
               "contender's timed region (the listing of a stream counts), of the kind "
               "admitted most (goodput) and the kind throttled most (throttled %)",
               f"DataLoader workers start by {start}; a worker's time is the arrival of "
               "its last batch from the epoch's start",
               "separate processes build their clients untimed and start on one signal",
               "the burst rows: tests/servers/capping_proxy.py in the contender's process at "
               f"{cap}/s "
               f"holding {', '.join(f'{b:g}' for b in bursts)} s of tokens in front of the "
               "emulator (its own bucket, a second's, behind it), figures from the proxy's "
               "counters; each row's proxy listens on a port of its own",
               "every aioflux row and round starts from a fresh node rate state for the "
               "bucket (perf/contenders/_throttle.fresh_rate): not paced, nothing owed, the "
               "slow start closed, as a node meeting the cap for the first time",
               "no ratios: the rows run different process counts and protocols; the "
               "figures are the comparison"],
        emulator_args=("--qps", str(cap)),
        warm_read=False,
        seed_concurrency=2,
        timeout_s=900.0,
        limits=limits,
        figures=FIGURES,
        ratios=False,
    )
