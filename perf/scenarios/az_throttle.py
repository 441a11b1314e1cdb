"""az_throttle (issue 50): the throttle scenario on Azure: many processes of
one node reading one container through a request-rate cap answered
503 ``ServerBusy``.

Azurite has no cap of its own, so the contender runs the capping proxy
the tests put in front of it (``tests/servers/capping_proxy.py``: a token bucket
of ``cap`` requests a second, a second's burst, every request counted,
answering Azure's ``ServerBusy`` past it) on a thread of its own
process, for the duration of a row, and hands its workers a connection
string naming it.

``cap`` is 100, not ``throttle``'s 200: Azurite (one Node process) and
the proxy (Python) serve 16 aioflux processes 134 to 300 requests/s on
this machine's two cores with no cap at all, from one run to another
(6,416 requests in 48 s, and in 21.6 s at ``--param cap=1000``), so a
cap of 200 was not always the limit, and the goodput measured Azurite.

For each process count (``procs``, "4,16"), each process reads its own
folder of ``per`` (400) blobs of ``size`` (4 KiB) with
``AzureStore.stream`` at default settings (the node-wide adaptive rate),
and with ``request_rate='off'``. The peers' Azure clients have no row
here: azure-storage-blob retries ``ServerBusy`` with a per-request
backoff only, as gcsfs and s3fs do in ``throttle``.

Figures as in ``throttle`` (``perf/contenders/_throttle.py``), from the
proxy's counters; the issue's four targets are Limits on the adaptive rows.
"""

from __future__ import annotations

from perf.harness import Contender, Limit, Options, Plan
from perf.scenarios.az_read import AZURITE, ready
from perf.scenarios.throttle import FIGURES, goals
from perf.seed import ObjectSet

__all__ = ["plan"]

PREFIX = "az-throttle/"


def contenders_for(n: int, cap: int) -> list[Contender]:
    common = ("--client", "aioflux-az", "--procs", str(n), "--cap", str(cap),
              "--prefix", PREFIX)
    return [
        Contender(f"aioflux-az-p{n}", "throttle_procs.py", None, common,
                  note=f"{n} processes, AzureStore.stream of its folder, default settings "
                       "(request_rate='adaptive', shared by the node), the store made "
                       "before the start", available=ready),
        Contender(f"aioflux-az-off-p{n}", "throttle_procs.py", None,
                  (*common, "--rate", "off"),
                  note="the same with ClientConfig(request_rate='off')", available=ready),
    ]


def plan(options: Options) -> Plan:
    procs = [int(p) for p in options.params.get("procs", "4,16").split(",")]
    per = options.get("per", 100 if options.quick else 400)
    size = options.get("size", 4096)
    cap = options.get("cap", 100)
    contenders: list[Contender] = []
    limits: list[Limit] = []
    for n in procs:
        contenders += contenders_for(n, cap)
        limits += goals(f"aioflux-az-p{n}")
    return Plan(
        name="az_throttle",
        description=f"{', '.join(map(str, procs))} processes, each reading {per} x "
                    f"{size / 1024:g} KiB blobs of its own from Azurite, through a cap of "
                    f"{cap} requests/s (503 ServerBusy)",
        bucket="perf-az-throttle",
        objects=[ObjectSet(f"{PREFIX}p{i:02d}/", per, size) for i in range(max(procs))],
        contenders=contenders,
        baseline=f"aioflux-az-p{procs[0]}",
        notes=[AZURITE,
               "tests/servers/capping_proxy.py in the contender's process: a token bucket "
               f"of {cap} requests and {cap}/s over every request (listings included), 503 "
               "ServerBusy past it; figures from its counters around each row's timed region",
               "separate processes build their stores untimed and start on one signal",
               "each row's proxy listens on a port of its own: a key the node's rate "
               "state has not seen, as a node meeting the cap for the first time",
               "no ratios: the rows run different process counts; the figures are the "
               "comparison"],
        warm_read=False,
        seed_concurrency=32,
        timeout_s=900.0,
        limits=limits,
        figures=FIGURES,
        ratios=False,
        azurite=True,
    )
