"""CheckpointManager as a careful user on preemptible machines meets it: a
manager used after close(), a second writer saving the same step, a re-save
after a killed save (with and without its claim left behind), and a data
position holding numpy values. On the emulator and the local filesystem,
with the stored objects checked."""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

import pytest
import torch

import aioflux
from aioflux import BridgeError, Conflict, InvalidURL, StorageError, WriterOptions
from aioflux._core.concurrency.portal import call
from aioflux.torch import CheckpointManager
from tests.torch.conftest import Where

PART = 5 * 1024 * 1024


def _state(step: int) -> dict[str, object]:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(20_000, generator=g), "step": step}


def _leaves(where: Where, root: str, step: int) -> list[str]:
    """Every object in ``step``'s folder, relative to it."""
    folder = f"{root}/step-{step:012d}/"
    return sorted(n[len(folder):] for n in where.names(root) if n.startswith(folder))


@pytest.mark.timeout(60)
def test_save_async_after_close_is_refused_and_nothing_waits_for_it(where: Where) -> None:
    # close() stops the worker threads: a save_async after it used to join
    # the saves in flight, never to run, and the next close() (or the exit
    # hook at the end of the script) waited for it forever.
    mgr = CheckpointManager(where.url("closed"), client=where.client,
                            writer=WriterOptions(part_size=PART))
    mgr.save(_state(1), 1)
    mgr.close()
    with pytest.raises(BridgeError, match="closed"):
        mgr.save_async(_state(2), 2)
    mgr.close()  # returns: nothing is in flight
    mgr.wait()
    assert [c.step for c in mgr.list()] == [1]
    assert mgr.load()["step"] == 1


class _Gate:
    """Pickles only once ``go`` is set, after setting ``pickling``: holds a
    save between its checks and its writes."""

    def __init__(self) -> None:
        self.pickling = threading.Event()
        self.go = threading.Event()

    def __deepcopy__(self, memo: object) -> _Gate:
        return self  # the snapshot keeps it; torch.save pickles it in the background

    def __reduce__(self) -> tuple[Any, ...]:
        self.pickling.set()
        self.go.wait(60)
        return (collections.OrderedDict, ([("gate", 1)],))  # a type weights_only loads


@pytest.mark.timeout(120)
def test_a_second_writer_of_the_same_step_never_undoes_a_published_checkpoint(
        where: Where) -> None:
    # Two processes on one run (a preempted job still saving while its
    # replacement runs, a rank that should not save) both pass the "no
    # checkpoint at this step yet" check. Before the claim, the later one's
    # state.pt was published over the one the earlier one's manifest vouches
    # for: the step's checkpoint, reported saved, vanished from latest() and
    # list(). The later save's manifest fails with the documented Conflict.
    root = where.url("twin")
    late = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    early = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    gate = _Gate()
    try:
        pending = late.save_async({"w": torch.ones(30_000), "gate": gate}, 5,
                                  data_state={"at": "late"})
        assert gate.pickling.wait(60)  # past its checks, writing
        saved = early.save(_state(5), 5, data_state={"at": "early"})
        assert early.latest() == saved
        gate.go.set()
        with pytest.raises(Conflict, match="step 5 was saved by another writer"):
            pending.result(timeout=60)
        # The published checkpoint stands whole: listed, and it loads the
        # early save's state and data position.
        assert early.list() == [saved]
        state = early.load(5)
        assert state["step"] == 5 and torch.equal(state["w"], _state(5)["w"])
        assert early.load_data_state(5) == {"at": "early"}
        # The losing save left nothing behind.
        assert _leaves(where, "twin", 5) == sorted(["manifest.json", *saved.objects])
    finally:
        gate.go.set()
        late.close()
        early.close()


@pytest.mark.timeout(120)
def test_two_overwrites_of_a_step_race_and_the_loser_is_a_conflict(where: Where) -> None:
    # Both replace the same checkpoint, each from a folder of its own: the
    # first manifest swap wins and stands whole; the other's conditional swap
    # fails. It used to raise the manifest write's PreconditionFailed and
    # leave its whole state in its folder; it is the documented Conflict now,
    # and takes its objects with it.
    root = where.url("race")
    late = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    early = CheckpointManager(root, client=where.client, writer=WriterOptions(part_size=PART))
    gate = _Gate()
    try:
        early.save(_state(1), 5)
        pending = late.save_async({"w": torch.ones(30_000), "gate": gate}, 5, overwrite=True)
        assert gate.pickling.wait(60)  # past its checks, writing
        saved = early.save(_state(2), 5, overwrite=True)
        gate.go.set()
        with pytest.raises(Conflict, match="step 5 was saved by another writer"):
            pending.result(timeout=60)
        assert early.list() == [saved]
        assert torch.equal(early.load(5)["w"], _state(2)["w"])  # type: ignore[arg-type]
        assert _leaves(where, "race", 5) == sorted(["manifest.json", *saved.objects])
    finally:
        gate.go.set()
        late.close()
        early.close()


@pytest.mark.parametrize("claimed", [False, True], ids=["no-claim", "claim-left"])
def test_a_resave_after_a_killed_save_leaves_no_leftovers(where: Where, claimed: bool) -> None:
    # A save killed after its objects but before its manifest, then the
    # resumed run saves that step again (without keep_last, so no retention
    # pass ever deletes below it): what the killed save left must go. A
    # killed save's claim (it never dropped it) sends the new save's
    # objects into a folder of their own, and goes too.
    root = f"again-{claimed}"
    if claimed:
        where.put(f"{root}/step-000000000005/claim.json", b'{"pid": 1}')
    where.put(f"{root}/step-000000000005/state.pt", b"a killed save's state")
    where.put(f"{root}/step-000000000005/data_state.pt", b"a killed save's position")
    where.put(f"{root}/step-000000000005/replace-0123456789abcdef/state.pt", b"another")
    where.put(f"{root}/step-000000000005/notes.txt", b"the user's")
    with CheckpointManager(where.url(root), client=where.client,
                           writer=WriterOptions(part_size=PART)) as mgr:
        saved = mgr.save(_state(5), 5)
        assert mgr.load(5)["step"] == 5
    assert _leaves(where, root, 5) == sorted(["manifest.json", "notes.txt", *saved.objects])
    assert [name.startswith("replace-") for name in saved.objects] == [claimed]


@pytest.mark.parametrize("hours_ago", [0, 7, None])
def test_retention_spares_a_step_another_process_is_saving(where: Where,
                                                           hours_ago: int | None) -> None:
    # Another process's save of step 5, its state.pt stored and its manifest
    # not yet written: a pass of this manager's deleted its claim and
    # objects, and that save then reported success over nothing. A claim
    # older than the grace is a killed save's, whose leftovers go.
    import datetime as dt
    import json

    root = f"spare-{hours_ago}"
    # None: another tool's claim, its time without a zone (the pass failed
    # on it): no claim of a manager's, so a leftover.
    created = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=hours_ago or 0)
    when = created.isoformat() if hours_ago is not None else "2026-01-01T00:00:00"
    where.put(f"{root}/step-000000000005/claim.json",
              json.dumps({"pid": 1, "created": when}).encode())
    where.put(f"{root}/step-000000000005/state.pt", b"another process's state, being saved")
    with CheckpointManager(where.url(root), client=where.client) as mgr:
        mgr.save(_state(10), 10)
    assert _leaves(where, root, 5) == ([] if hours_ago != 0 else ["claim.json", "state.pt"])


def test_retention_spares_a_step_whose_claim_went_since_its_listing(where: Where) -> None:
    # The claim dropped between this pass's listing and its look at the
    # claim: that save has just published, its manifest unseen by the
    # listing. Taken for a killed save's, its state.pt was deleted.
    import datetime as dt
    import json

    root = "claim-went"
    claim = f"{root}/step-000000000005/claim.json"
    where.put(claim, json.dumps({"created": dt.datetime.now(dt.timezone.utc).isoformat()})
              .encode())
    where.put(f"{root}/step-000000000005/state.pt", b"published just now")
    with CheckpointManager(where.url(root), client=where.client) as mgr:
        real = mgr._store.scan

        def scan() -> Any:
            found = real()
            call(where.store.delete(where.bucket, where.base + claim))
            return found

        mgr._store.scan = scan  # type: ignore[method-assign]
        mgr.save(_state(10), 10)
    assert _leaves(where, root, 5) == ["state.pt"]


def test_two_managers_appending_to_the_history_at_once_keep_both_lines(where: Where) -> None:
    # A read-modify-write of history.jsonl: the other manager's line written
    # between this one's read and write was lost (the last writer won).
    from aioflux.torch.checkpoint._history import SaveRecord
    from aioflux.torch.checkpoint._retention import CheckpointStore

    root = "history-race"
    with CheckpointManager(where.url(root), client=where.client) as one, \
            CheckpointManager(where.url(root), client=where.client) as two:
        mine: CheckpointStore = one._store
        mine.append_history(SaveRecord(0, True, 0, 0, 0.0, 0.0, 0.0, "t0"))
        real, cut_in = mine.call, [False]

        def call(coro: Any) -> Any:
            result = real(coro)
            if isinstance(result, bytes) and not cut_in[0]:  # the history just read
                cut_in[0] = True
                two._store.append_history(SaveRecord(2, True, 0, 0, 0.0, 0.0, 0.0, "t2"))
            return result

        mine.call = call  # type: ignore[method-assign]
        mine.append_history(SaveRecord(1, True, 0, 0, 0.0, 0.0, 0.0, "t1"))
        assert cut_in[0]
        assert sorted(r.step for r in one.history()) == [0, 1, 2]


def test_a_data_state_holding_numpy_values_loads_back(tmp_path: Any) -> None:
    # save() takes any picklable data position; numpy scalars (an epoch
    # counter from numpy arithmetic, an RNG state) are common. The safe
    # unpickler refuses them, and load_data_state had no way to read it
    # back: the position was saved and could never be restored.
    np = pytest.importorskip("numpy")
    position = {"epoch": np.int64(3), "rng": np.random.default_rng(0).bit_generator.state}
    with CheckpointManager(tmp_path / "np") as mgr:
        mgr.save(_state(1), 1, data_state=position)
        with pytest.raises(StorageError, match="weights_only=False"):
            mgr.load_data_state()
        loaded = mgr.load_data_state(weights_only=False)
    assert loaded is not None and loaded["epoch"] == 3 and loaded["rng"] == position["rng"]


def test_manifests_are_read_concurrently(where: Where, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without keep_last every retention pass (and every list()) reads every
    # step's manifest: one after another, a root of a thousand checkpoints
    # took 20 s a pass at 20 ms a read.
    from aioflux.torch.checkpoint._retention import CheckpointStore

    check = CheckpointStore._complete
    running = peak = 0

    async def slow_check(self: CheckpointStore, step: int, objects: Any) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.02)
            return await check(self, step, objects)
        finally:
            running -= 1

    with CheckpointManager(where.url("many"), client=where.client) as mgr:
        for step in range(1, 41):
            mgr.save({"step": step}, step)
        monkeypatch.setattr(CheckpointStore, "_complete", slow_check)
        assert [c.step for c in mgr.list()] == list(range(1, 41))
        assert peak == 16  # the reads in flight, at most
        peak = 0
        mgr.save({"step": 41}, 41)  # its retention pass
        assert peak == 16


def test_a_root_keeps_its_leading_slashes(where: Where) -> None:
    # gs://b//run names objects "/run/..." (legal on GCS and S3); the
    # manager wrote them under "run/", a name the user did not give.
    if where.scheme == "file":
        pytest.skip("a path's '//' is one separator on a filesystem")
    bucket = where.url("x").split("/")[2]
    root = f"{where.scheme}://{bucket}//odd-root"
    with CheckpointManager(root, client=where.client) as mgr:
        saved = mgr.save(_state(3), 3)
        assert mgr.root == f"{root}/" and mgr.latest() == saved
    listed = list(aioflux.list_files(f"{root}/", client=where.client))
    assert f"{root}/step-000000000003/manifest.json" in listed
    assert list(aioflux.list_files(f"{where.scheme}://{bucket}/odd-root/",
                                   client=where.client)) == []
    with pytest.raises(InvalidURL, match="names only slashes"):
        CheckpointManager(f"{where.scheme}://{bucket}///", client=where.client)
