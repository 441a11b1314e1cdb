#!/usr/bin/env bash
# The gpu_node scenario on a GPU machine that has its own Python and torch
# but no network: what it lacks travels as wheels.
#
#   perf/gpu_node.sh prepare   # here: aioflux's wheel and its dependencies'
#                              # (CPython 3.12, manylinux x86_64) into
#                              # dist/gpu-node-wheels/ (~30 MB; torch not included)
#   perf/gpu_node.sh run       # there, from the repository root: installs
#                              # them with pip --no-index, runs the scenario
#                              # (1 round; its CUDA rows, then its DataLoader
#                              # rows, each recorded when done; PARTS=loader
#                              # for the second alone), writes
#                              # gpu_node.txt (its tables),
#                              # gpu_node.jsonl (its samples) and
#                              # environment.txt under $OUT (default ./gpu-node-out)
#   perf/gpu_node.sh workers   # there, after `run` (its install): the workers
#                              # scenario's probe rows (CPU a sample and
#                              # samples/s at 2, 8, 16 workers, the copy
#                              # reference among them; MapDataset through
#                              # the DataLoader at 8 and 16; 1 round, ~4
#                              # minutes), workers.txt and workers.jsonl under $OUT
#   perf/gpu_node.sh disk      # there, after `run` (its install): save, load,
#                              # DCP save and load on a disk folder
#                              # ($AIOFLUX_PERF_DISK_DIR, default /var/tmp;
#                              # 8 rows, ~3.5 minutes), disk.txt under $OUT
#   perf/gpu_node.sh tests     # there, after `run` (its install): the tests
#                              # that take a CUDA path where there is one
#                              # (pinned pool, staged loads, round trips of
#                              # CUDA states; ~30 s), tests.txt under $OUT
#
# Extra arguments of `run` go to `python -m perf run gpu_node` (e.g.
# --param gib=2, --quick). Without CUDA the GPU rows are skipped and the
# DataLoader rows run on the CPU: `run --quick` checks the runner anywhere.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
wheels=${WHEELS:-$here/dist/gpu-node-wheels}
python=${PYTHON:-python3}
pyver=${PYVER:-3.12}  # the GPU machine's Python
# aioflux's dependencies besides torch (pyproject.toml), and their own.
deps='aiohttp google-auth[requests] google-crc32c httptools uvloop numpy'

prepare() {
    rm -rf "$wheels"
    mkdir -p "$wheels"
    "$python" -m pip wheel "$here" --no-deps -w "$wheels" -q
    "$python" -m pip download -q --only-binary=:all: --python-version "$pyver" \
        --implementation cp --abi "cp${pyver/./}" --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
        -d "$wheels" $deps
    du -sh "$wheels"
}

run() {
    local out=${OUT:-$here/gpu-node-out}
    mkdir -p "$out"
    local started=$SECONDS
    # The wheels are built here by `prepare`, from the tree as committed: a
    # session whose machine is fresh has none until it runs that.
    if ! compgen -G "$wheels/aioflux_storage-*.whl" > /dev/null; then
        echo "gpu_node.sh run: no aioflux wheel in $wheels: run '$0 prepare' first" >&2
        return 2
    fi
    # Into the machine's own environment (its torch stays): the wheels
    # here, nothing from an index; the dependencies it has already stay.
    # aioflux without its dependencies (torch's own would be resolved
    # again: setuptools, sympy...), then those it needs beyond torch.
    "$python" -m pip install -q --no-index --no-deps "$wheels"/aioflux_storage-*.whl
    "$python" -m pip install -q --no-index --find-links "$wheels" $deps
    {
        # Each line may fail (a tool the image lacks) without ending the run.
        "$python" -c "import sys, torch, aioflux; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available()); print('aioflux', aioflux.__version__, aioflux.__file__)" || echo "python check failed"
        nproc || true
        # Cores, threads a core, sockets: whether 16 workers share cores.
        lscpu 2>/dev/null | grep -E '^(Thread|Core|Socket|Model name|CPU max MHz|L3)' || true
        grep -E 'MemTotal|MemAvailable' /proc/meminfo || true
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
        df -h /dev/shm "${AIOFLUX_PERF_DISK_DIR:-/var/tmp}" || true
    } > "$out/environment.txt" 2>&1
    echo "installed in $((SECONDS - started)) s"
    cat "$out/environment.txt"
    # The harness runs from the repository root, so its contenders import
    # aioflux from the source folder: the commit the wheel was built from.
    cd "$here"
    local status=0 part
    : > "$out/gpu_node.txt"
    # Two runs, each recorded and copied out when it ends: the CUDA rows
    # (each pair with its references), then the DataLoader rows. A command
    # cut short by the machine's time limit keeps the part it finished.
    for part in ${PARTS:-cuda loader}; do
        "$python" -m perf run gpu_node --rounds 1 --param "part=$part" "$@" 2>&1 \
            | tee -a "$out/gpu_node.txt" || status=$?
        grep -F '"scenario": "gpu_node"' perf/results.jsonl > "$out/gpu_node.jsonl" || true
        echo "gpu_node $part done at $((SECONDS - started)) s (exit $status)"
    done
    echo "results under $out"
    return "$status"
}

# The probe rows only: item 4's bars are about a worker's cost on 16 cores,
# which 2 cores hide. Its data (1.1 GiB of shards, as many files) goes to
# /dev/shm/aioflux-perf-workers, removed after.
workers() {
    local out=${OUT:-$here/gpu-node-out}
    mkdir -p "$out"
    cd "$here"
    local status=0 rows=""
    for n in 2 8 16; do
        rows+="aioflux-w$n,plain-w$n,copy-w$n,aioflux-b64-w$n,map-w$n,mapplain-w$n,"
    done
    # MapDataset's DataLoader bar (the ShardDataset's are gpu_node's rows).
    for n in 8 16; do
        rows+="map-loader-w$n,mapplain-loader-w$n,"
    done
    "$python" -m perf run workers --rounds 1 --loan --only "${rows%,}" "$@" 2>&1 \
        | tee "$out/workers.txt" || status=$?
    grep -F '"scenario": "workers"' perf/results.jsonl > "$out/workers.jsonl" || true
    rm -rf /dev/shm/aioflux-perf-workers
    return "$status"
}

# The save, load and DCP rows on a disk folder: torch's save fsynced, the
# loads reading files dropped from the page cache (scenario gpu_node).
disk() {
    local out=${OUT:-$here/gpu-node-out}
    mkdir -p "$out"
    cd "$here"
    local status=0
    "$python" -m perf run gpu_node --rounds 1 --param part=cuda --param where=disk \
        "$@" 2>&1 | tee "$out/disk.txt" || status=$?
    grep -F '"scenario": "gpu_node"' perf/results.jsonl > "$out/gpu_node.jsonl" || true
    return "$status"
}

# The tests whose CUDA cases a machine without one skips, without the
# suite's conftest (it imports the S3 and Azure stores, whose SDKs the
# machine lacks; these tests use none of its fixtures).
tests() {
    local out=${OUT:-$here/gpu-node-out}
    mkdir -p "$out"
    cd "$here"
    # pytest-asyncio's options are unknown there: not an error for these.
    "$python" -m pytest --noconftest -p no:cacheprovider -q -rs \
        -W ignore::pytest.PytestConfigWarning \
        tests/torch/checkpoint/test_pinned_snapshots.py \
        tests/torch/checkpoint/test_device_direct.py \
        tests/torch/checkpoint/test_snapshot.py 2>&1 | tee "$out/tests.txt"
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    workers) shift; workers "$@" ;;
    disk) shift; disk "$@" ;;
    tests) tests ;;
    *) echo "usage: $0 prepare | run | workers | disk [python -m perf run options] | tests" >&2
       exit 2 ;;
esac
