"""Chaos: datasets and checkpoints through a FaultProxy in front of fake-gcs-server.

The proxy cuts connections at random byte offsets (2% per 64 KiB relayed
server -> client; a RST or a FIN mid-body) and loses 1% of answers whole
after the server acted (not for resumable uploads on fake-gcs-server, see
CKPT_CASES), so every read path must resume or retry and every
write path must survive a lost answer. Each sample encodes its own name and
a crc32c of itself, so lost, duplicated and corrupt samples are counted, not
guessed; every test also asserts that the proxy really cut connections (a
chaos test without cuts proves nothing).

Sizes are the full ones asked for (5 epochs x 2,000 objects per dataset
case, 20 cycles of ~50 MB), nothing reduced: on the 2-core machine, shared
with other jobs, the four dataset cases took 7-16 s each (plus ~5 s to seed
fake-gcs-server once), the checkpoint cycles 20-55 s on fake-gcs-server and
10-13 s on our emulator.
"""

from __future__ import annotations

import collections
import random
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.utils.data

import aioflux
from aioflux import AsyncClient, Client, ClientConfig, RetryPolicy, WriterOptions
from aioflux._core.concurrency.portal import get_portal
from aioflux._core.concurrency.window import gather_bounded
from aioflux._core.integrity.crc import crc32c
from aioflux._engines.compose import COMPOSED_PREFIX
from aioflux.testing import Emulator, FaultProxy, running_emulator
from aioflux.torch import (
    CheckpointManager,
    DatasetSettings,
    ObjectIterableDataset,
    ObjectMapDataset,
    Order,
)
from tests.conftest import unique_bucket

P_CUT = 0.02
# Answers lost whole, after the server acted: the case a per-64 KiB rate
# almost never hits for small answers (an upload's JSON, a delete's 204),
# and the one that tests whether retried writes, composes and deletes are
# idempotent.
P_CUT_ANSWER = 0.01
# Quick retries: a cut is retried at once. Only attempts that made no
# progress count against max_attempts (the resume rule), so 10 is plenty.
CHAOS_RETRY = RetryPolicy(max_attempts=10, initial_delay=0.001, max_delay=0.02)
CHAOS_CONFIG = ClientConfig(max_concurrency=16, retry=CHAOS_RETRY)

OBJECTS = 2000
EPOCHS = 5
KIB = 1024


def test_tally_counts_lost_duplicated_and_corrupt_samples() -> None:
    # The harness itself: a chaos test is only as good as its counting.
    bodies = [make_body(i) for i in range(4)]
    expected = {object_name(i): len(b) for i, b in enumerate(bodies)}
    assert all(len(b) == object_size(i) for i, b in enumerate(bodies))
    flipped = bytearray(bodies[2])
    flipped[len(flipped) // 2] ^= 1
    samples = [inspect_sample(b) for b in (bodies[0], bodies[0], flipped, bodies[3][:-1])]
    assert tally(samples, expected) == Tally(lost=3, duplicated=1, corrupt=2)
    assert tally([inspect_sample(b) for b in bodies], expected) == Tally(0, 0, 0)


def object_name(index: int) -> str:
    return f"d/{index:05d}"


def object_size(index: int) -> int:
    """1 KiB to 300 KiB, log-uniform: most bodies are small (many requests),
    a good share spans several 64 KiB chunks (so cuts land mid-body)."""
    rng = random.Random(index)
    return int(KIB * 300 ** rng.random())


def make_body(index: int) -> bytes:
    """``name\\n`` + pseudo-random bytes + crc32c of everything before it."""
    head = object_name(index).encode() + b"\n"
    payload = random.Random(-index).randbytes(max(0, object_size(index) - len(head) - 4))
    data = head + payload
    return data + struct.pack(">I", crc32c(data))


def inspect_sample(data: bytes | bytearray) -> tuple[str, int, bool]:
    """The transform: (name the sample claims, its size, whether its crc holds)."""
    data = bytes(data)
    name = data.split(b"\n", 1)[0].decode("utf-8", "replace")
    intact = len(data) >= 4 and crc32c(data[:-4]) == struct.unpack(">I", data[-4:])[0]
    return name, len(data), intact


@dataclass
class Tally:
    """Lost, duplicated and corrupt samples over one epoch."""

    lost: int
    duplicated: int
    corrupt: int


def tally(samples: list[tuple[str, int, bool]], expected: dict[str, int]) -> Tally:
    corrupt = sum(1 for name, size, ok in samples if not ok or expected.get(name) != size)
    seen = collections.Counter(name for name, size, ok in samples
                               if ok and expected.get(name) == size)
    return Tally(lost=sum(1 for n in expected if n not in seen),
                 duplicated=sum(c - 1 for c in seen.values() if c > 1), corrupt=corrupt)


@dataclass
class Seeded:
    proxy: FaultProxy
    bucket: str
    sizes: dict[str, int]


@pytest.fixture(scope="module")
def seeded(fake_gcs: Any) -> Iterator[Seeded]:
    """OBJECTS objects written straight to fake-gcs-server, and a proxy in front."""
    bucket = unique_bucket("chaos")

    async def write_all() -> None:
        async with AsyncClient(CHAOS_CONFIG, endpoint=fake_gcs.endpoint) as client:
            await client.create_bucket(bucket)
            await gather_bounded((client.write(bucket, object_name(i), make_body(i))
                                  for i in range(OBJECTS)), limit=16)

    get_portal().call(write_all())
    sizes = {object_name(i): object_size(i) for i in range(OBJECTS)}
    with FaultProxy(fake_gcs.endpoint, p_cut_response=P_CUT, p_cut_answer=P_CUT_ANSWER,
                    seed=20) as proxy:
        yield Seeded(proxy, bucket, sizes)


def leftover_composites(endpoint: str, bucket: str) -> list[str]:
    with Client(CHAOS_CONFIG, endpoint=endpoint) as client:
        return [o.name for o in client.list_objects(bucket, COMPOSED_PREFIX)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_datasets_lose_nothing_under_cuts(seeded: Seeded, fake_gcs: Any, kind: str,
                                          workers: int) -> None:
    """EPOCHS epochs x OBJECTS objects (1-300 KiB) through a DataLoader while
    the proxy cuts 2% of 64 KiB chunks and loses 1% of answers: no sample
    lost, duplicated or corrupt, no composite left behind."""
    proxy = seeded.proxy
    cuts_before = proxy.stats.response_cuts, proxy.stats.answer_cuts
    url = f"gs://{seeded.bucket}/d/"
    ds: ObjectMapDataset | ObjectIterableDataset
    if kind == "map":
        ds = ObjectMapDataset.from_prefix(url,
                                          settings=DatasetSettings(endpoint=proxy.endpoint,
                                                                   config=CHAOS_CONFIG),
                                          transform=inspect_sample)
    else:
        ds = ObjectIterableDataset.from_prefix(url,
                                               settings=DatasetSettings(endpoint=proxy.endpoint,
                                                                        config=CHAOS_CONFIG),
                                               transform=inspect_sample, order=Order(seed=3))
    assert len(ds.objects) == OBJECTS
    tallies = []
    started = time.monotonic()
    context = "fork" if workers else None
    for epoch in range(EPOCHS):
        loader: torch.utils.data.DataLoader[Any]
        if isinstance(ds, ObjectIterableDataset):
            ds.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=workers,
                                                 collate_fn=list, multiprocessing_context=context)
        else:
            loader = torch.utils.data.DataLoader(
                ds, batch_size=32, shuffle=True, num_workers=workers, collate_fn=list,
                generator=torch.Generator().manual_seed(epoch), multiprocessing_context=context)
        samples = [s for batch in loader for s in batch]
        tallies.append(tally(samples, seeded.sizes))
    elapsed = time.monotonic() - started
    cuts = (proxy.stats.response_cuts - cuts_before[0], proxy.stats.answer_cuts - cuts_before[1])
    print(f"{kind} workers={workers}: {EPOCHS} epochs in {elapsed:.1f} s, "
          f"(mid-body, answer) cuts {cuts}")
    assert tallies == [Tally(0, 0, 0)] * EPOCHS
    assert cuts[0] > 0 and cuts[1] > 0
    if workers == 0:
        # Small objects went through composites too, so their cleanup was cut at as well.
        assert ds._source.downloader.stats.composed_objects > 0
    assert leftover_composites(fake_gcs.endpoint, seeded.bucket) == []


CKPT_CYCLES = 20
PART = 5 * 1024 * 1024  # the smallest part the writer takes
# Saves send ~50 MB and get tiny answers: cuts on the request side, at a
# rate a 5 MiB resumable chunk survives 2 times in 3 (0.995 ** 80).
P_CUT_REQUEST = 0.005
# A part of the XML multipart path is sent again whole after a cut, and a
# cut part is an attempt without progress: with lost answers on top, a
# third to 40% of part attempts were cut (~95 request cuts and ~13 lost
# answers a run, ~1.2 GB sent for 1 GB saved). Ten attempts then failed a
# part up to 0.4 ** 10 = 1e-4 of the time: with this test's ~200 parts, a
# run in ~50 failed a save (seen once). 24 attempts: 3e-10 a part.
CKPT_CONFIG = ClientConfig(max_concurrency=16, retry=RetryPolicy(
    max_attempts=24, initial_delay=0.001, max_delay=0.02))


def make_state(step: int) -> dict[str, Any]:
    """~50 MB: float32, int64 and bfloat16 tensors of odd sizes, plus plain values."""
    g = torch.Generator().manual_seed(step)
    return {
        "model": {"w": torch.randn(8_000_001, generator=g),          # 32 MB
                  "b": torch.randn(4097, generator=g).to(torch.bfloat16)},
        "opt": {"m": torch.randint(0, 1 << 40, (2_000_003,), generator=g)},  # 16 MB
        "grad": torch.randn(500_000, generator=g).to(torch.bfloat16),       # 1 MB
        "step": step,
    }


def mismatched_tensors(got: Any, want: Any) -> int:
    """Tensors (and plain values) of ``want`` that ``got`` does not hold bit for bit."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return 1
        return sum(mismatched_tensors(got.get(k), v) for k, v in want.items())
    if isinstance(want, torch.Tensor):
        same = (isinstance(got, torch.Tensor) and got.dtype == want.dtype
                and got.shape == want.shape and torch.equal(got, want))
        return 0 if same else 1
    return 0 if got == want else 1


@dataclass(frozen=True)
class CkptChaos:
    """Where the checkpoint cycles run and what the proxy does to them."""

    server: str  # fixture name
    p_cut_request: float
    p_cut_answer: float
    part_size: int = PART  # the writer's parts, or resumable chunks


CKPT_CASES = {
    # fake-gcs-server has no XML multipart: saves go through the resumable
    # upload, and there only reads are cut. After a cut upload request no
    # client can resume on fake-gcs-server: it appends a re-sent chunk
    # whatever its Content-Range says, and answers the status query GCS
    # prescribes (``Content-Range: bytes */*``) by publishing what it has and
    # closing the session. aioflux then deletes that partial object and
    # raises ChecksumMismatch (nothing corrupt stays published); the same cuts
    # on the resumable path run against our emulator below.
    #
    # Its uploads are not cut, so their chunk size is not what this case
    # tests: 16 MiB chunks (still 4 a save) took fake-gcs-server ~40% less
    # CPU than 5 MiB ones (measured: 1.0 -> 0.6 s a cycle).
    "fake-gcs": CkptChaos("fake_gcs", p_cut_request=0.0, p_cut_answer=0.0,
                          part_size=16 * 1024 * 1024),
    # Our emulator: the XML multipart path, with answers lost as well.
    "emulator-multipart": CkptChaos("emulator", p_cut_request=P_CUT_REQUEST,
                                    p_cut_answer=P_CUT_ANSWER),
    # Our emulator without XML multipart (as fake-gcs-server), so saves take
    # the resumable path: cut chunks and lost answers are resumed from the
    # session's status, as on GCS.
    "emulator-resumable": CkptChaos("resumable_emulator", p_cut_request=P_CUT_REQUEST,
                                    p_cut_answer=P_CUT_ANSWER),
}


@pytest.fixture
def resumable_emulator() -> Iterator[Emulator]:
    with running_emulator(xml_multipart=False) as emu:
        yield emu


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(CKPT_CASES))
def test_checkpoints_survive_cuts(request: pytest.FixtureRequest, case: str) -> None:
    """CKPT_CYCLES save/load cycles of a ~50 MB state while the proxy cuts 2%
    of 64 KiB answer chunks and 0.5% of request chunks (and, on our emulator,
    loses 1% of answers): no failed save, no failed load, no mismatched
    tensor. Saves alternate between ``CheckpointManager.save``,
    ``save_async`` and ``torch.save`` into ``aioflux.open(url, "wb")``; loads
    between ``CheckpointManager.load`` and ``torch.load`` from
    ``aioflux.open(url, "rb")``."""
    chaos = CKPT_CASES[case]
    server: Any = request.getfixturevalue(chaos.server)
    bucket = unique_bucket("chaosckpt")
    with Client(CHAOS_CONFIG, endpoint=server.endpoint) as direct:
        direct.create_bucket(bucket)
    failed_saves: list[str] = []
    failed_loads: list[str] = []
    mismatched = 0
    with FaultProxy(server.endpoint, p_cut_response=P_CUT, p_cut_request=chaos.p_cut_request,
                    p_cut_answer=chaos.p_cut_answer, seed=21) as proxy, \
            Client(CKPT_CONFIG, endpoint=proxy.endpoint) as client:
        writer = WriterOptions(part_size=chaos.part_size, max_in_flight=3)
        mgr = CheckpointManager(f"gs://{bucket}/run", keep_last=2, client=client, writer=writer)
        started = time.monotonic()
        for step in range(CKPT_CYCLES):
            state = make_state(step)
            url = f"gs://{bucket}/plain/state-{step}.pt"
            way = step % 3
            try:
                if way == 0:
                    mgr.save(state, step)
                elif way == 1:
                    mgr.save_async(state, step).result(timeout=120)
                else:
                    with aioflux.open(url, "wb", client=client, writer=writer) as f:
                        torch.save(state, f)
            except Exception as exc:  # counted: the assertion below names them all
                failed_saves.append(f"step {step}: {exc!r}")
                continue
            try:
                if way == 2:
                    with aioflux.open(url, "rb", client=client) as r:
                        loaded = torch.load(r, weights_only=True)
                else:
                    loaded = mgr.load(step)
            except Exception as exc:  # counted, as above
                failed_loads.append(f"step {step}: {exc!r}")
                continue
            mismatched += mismatched_tensors(loaded, state)
        elapsed = time.monotonic() - started
        mgr.close()
        print(f"checkpoints on {case}: {CKPT_CYCLES} cycles in {elapsed:.1f} s, {proxy.stats}")
        counts = (len(failed_saves), len(failed_loads), mismatched)
        assert counts == (0, 0, 0), "\n".join(failed_saves + failed_loads)
        assert proxy.stats.response_cuts > 0
        assert proxy.stats.request_cuts > 0 or not chaos.p_cut_request
        assert proxy.stats.answer_cuts > 0 or not chaos.p_cut_answer
