"""``python -m perf setup|run|list|report|examples``; see ``perf/README.md``."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from perf import examples, peers, scenarios
from perf.harness import Options, on_loan, run
from perf.report import MIN_ROUNDS, regenerate, unbacked_claims


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--param wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    setup = sub.add_parser("setup", help="build the peers' virtual environments under perf/.venvs")
    setup.add_argument("peers", nargs="*", help=f"some of {', '.join(peers.PEERS)} (default: all)")
    setup.add_argument("--force", action="store_true", help="rebuild even if up to date")

    sub.add_parser("list", help="list scenarios")
    sub.add_parser("examples", help="run the examples' peer sides in the peers' environments "
                                    "(perf/examples.py)")

    rep = sub.add_parser(
        "report",
        help="regenerate the tables in perf/RESULTS.md, README.md and docs/performance.md "
        "from the data",
    )
    rep.add_argument(
        "--check", action="store_true", help="only check they are current; exit 1 if not"
    )

    go = sub.add_parser("run", help="run a scenario and append its results to perf/results.jsonl")
    go.add_argument("scenario", choices=scenarios.names())
    go.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds (default 3, 1 with --quick)"
    )
    go.add_argument(
        "--quick", action="store_true", help="a small data set for a smoke test; not recorded"
    )
    go.add_argument("--only", default="", help="comma-separated contender names to run")
    go.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="scenario parameter"
    )
    go.add_argument(
        "--loan", action="store_true",
        help="a lent machine's one run (a GPU node's): its pairs show with the rounds it had",
    )
    go.add_argument("--emulator", default="auto", choices=["auto", "aioflux", "fake-gcs-server"])
    go.add_argument("--profile", default="gcs-like", help="aioflux emulator profile")
    record = go.add_mutually_exclusive_group()
    record.add_argument("--record", dest="record", action="store_true", default=None)
    record.add_argument("--no-record", dest="record", action="store_false")

    args = parser.parse_args(argv)
    if args.command == "setup":
        unknown = set(args.peers) - set(peers.PEERS)
        if unknown:
            raise SystemExit(f"unknown peers {sorted(unknown)}; known: {list(peers.PEERS)}")
        peers.build_all(args.peers or None, force=args.force)
        return 0
    if args.command == "report":
        stale = regenerate(check=args.check)
        for path in stale:
            print(f"{path}: {'out of date' if args.check else 'regenerated'}")
        claims = unbacked_claims()
        for claim in claims:
            print(f"{claim}: a ratio written by hand; cite a generated table or drop it")
        return 1 if (args.check and stale) or claims else 0
    if args.command == "examples":
        return examples.check_all()
    if args.command == "list":
        for name in scenarios.names():
            print(name)
        return 0

    options = Options(quick=args.quick, params=_params(args.param))
    plan = scenarios.load(args.scenario)(options)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - {c.name for c in plan.contenders}
        if unknown:
            raise SystemExit(
                f"unknown contenders {sorted(unknown)}; known: {[c.name for c in plan.contenders]}"
            )
        plan = dataclasses.replace(
            plan, contenders=[c for c in plan.contenders if c.name in wanted]
        )
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    record_it = args.record if args.record is not None else not args.quick
    if args.loan:
        plan = on_loan(plan, rounds)
    elif record_it and rounds < (plan.min_rounds or MIN_ROUNDS):
        print(f"[perf] {rounds} round(s): recorded, but the tables show no pair of fewer "
              f"than {MIN_ROUNDS}", flush=True)
    outcomes = run(
        plan,
        rounds=rounds,
        emulator_kind=args.emulator,
        profile=args.profile,
        record=record_it,
        quick=args.quick,
        params=options.params,
    )
    # Non-zero only when something that was meant to run failed or misread.
    return 1 if any(o.errors for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
