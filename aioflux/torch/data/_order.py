"""The epoch order both datasets share, its global batches, and resumable positions.

One rule makes a resume exact at any world size and worker count: an
epoch's *global* order is a permutation of the dataset's indices seeded by
``(seed, epoch)`` alone, and it is cut into *global batches* of
``batch_size * world_size`` samples. Global batch ``j`` is trained at step
``j`` of the epoch: rank ``r`` of ``w`` takes the ``r``-th contiguous
``1/w`` of it (a DataLoader batch of ``batch_size``), and DataLoader workers
take whole batches in turn (worker ``k`` of ``n`` the ``j``-th with
``j % n == k``), which is the order a DataLoader hands them out in.

Every rank must run the same number of steps (DDP all-reduces gradients at
each one), so a pass never leaves a rank short, as with
``DistributedSampler``: by default the rest of the order is padded to a
multiple of the world size with the epoch order's first samples (wrapping
around), so the short last global batch splits evenly; with ``drop_last``
the short last global batch is left out.

So "how far the epoch got" is one number every rank agrees on: the samples
of the global order consumed, a multiple of the global batch size. A job
resumed from it with another world size or worker count cuts the rest of
the same order into its own global batches: nothing is repeated or skipped,
and with the same global batch size the batches are the very same ones.

Consumed means trained on, not handed out: a DataLoader with workers asks
for batches ahead of the loop. :func:`track` counts on the consumer side;
with ``num_workers=0`` the sampler or dataset counts by itself, and under
torchdata's ``StatefulDataLoader`` the loader pairs each batch with the
state taken when it was made, so what it saves is consistent too.

The order is never made whole: :func:`epoch_order` computes a position's
index when it is asked for (a keyed Feistel permutation,
:mod:`aioflux.torch.data._permutation`), and :class:`RankBatches` asks for a
block of batches at a time. A position only means something under the order
it was counted in, so a state names it: its ``"fingerprint"`` (of the
object list) ends in ``/order-v2`` (:data:`ORDER_VERSION`). Version 1,
whose states have no such end, was ``random.shuffle`` of a list of every
index (8 bytes a sample in every process that iterated); version 2 is the
Feistel permutation. A state inside an epoch of another version is refused
with :class:`~aioflux.InvalidArgument` naming both; one at an epoch's
start (no sample consumed) names no place in any order and is taken.

Its ``"order"`` names the rest: ``"kind"``, a permutation of the indices
(:data:`PERMUTATION`: the samplers and ``ObjectIterableDataset``) or
``ShardDataset``'s shards, reads and samples (:data:`SHARDS`), and
``"shuffle"``. A state inside an epoch of another ``shuffle``, or shuffled
of another kind (in list order the two are the same), is refused the same
way; a state that records no ``shuffle`` is taken as it is.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch.utils.data

from ..._core.checks.arguments import as_int, check_bool, check_str
from ..._core.errors import InvalidArgument
from ..._core.memory.object_index import ObjectIndex
from ..._core.records.types import ObjectInfo
from ._permutation import Permutation, order_key
from ._rank_batches import RankBatches, pass_samples

__all__ = ["ORDER_VERSION", "PERMUTATION", "SHARDS", "DataProgress", "Pass", "RankBatches",
           "epoch_order", "fingerprint", "pass_samples", "track"]

T = TypeVar("T")

# Keys of a state dict. "samples" is the position in the global order.
_KEYS = ("epoch", "seed", "samples", "global_batch_size", "fingerprint")

#: The epoch order a position counts samples of (see the module): 2, the
#: Feistel permutation; 1 (a fingerprint with no ``/order-v``), the list
#: ``random.shuffle`` made.
ORDER_VERSION = 2
_VERSION_MARK = "/order-v"

#: The kinds of epoch order a state's ``"order"`` names: :func:`epoch_order`'s
#: permutation of the indices, and a sharded dataset's order of shards,
#: reads and samples (:class:`~aioflux.torch.data._shard_order.ShardOrder`).
PERMUTATION, SHARDS = "permutation", "shards"
_KIND_NAMES = {
    PERMUTATION: "a permutation of the samples (ResumableBatchSampler, ResumableSampler, "
                 "ObjectIterableDataset)",
    SHARDS: "ShardDataset's order of shards, reads and samples",
}
# A DataLoader worker's place ("worker"), each with its smallest value.
_WORKER_KEYS = {"id": 0, "num_workers": 1, "epoch": None, "start": 0, "next_batch": 0}
_START_OVER = ("start the epoch over: load the state with \"samples\": 0 (and no "
               "\"worker\")")


def epoch_order(count: int, seed: int, epoch: int, shuffle: bool) -> Permutation:
    """The global order of an epoch: depends on nothing but these arguments.

    Args:
        count: samples in the dataset.
        seed: base seed.
        epoch: epoch number.
        shuffle: permute (else ``0..count-1``).

    Returns:
        The dataset indices in epoch order, each computed when asked for: no
        memory a sample (an array would take 8 bytes a sample in every
        process, 8 GB at 1e9).
    """
    return Permutation(count, order_key("aioflux-order-v2", seed, epoch) if shuffle else None)


def fingerprint(objects: Sequence[ObjectInfo] | int) -> str:
    """A short digest of a dataset's object names in order (or of its length).

    A saved position only means something over the same object list.

    Args:
        objects: the dataset's objects, or its length when it has none.

    Returns:
        ``"<count>:<16 hex digits>"``.
    """
    if isinstance(objects, int):
        return f"{objects}:"
    digest = hashlib.sha256()
    names = objects.names() if isinstance(objects, ObjectIndex) else (o.name for o in objects)
    for name in names:
        digest.update(name.encode("utf-8", "surrogatepass"))
        digest.update(b"\n")
    return f"{len(objects)}:{digest.hexdigest()[:16]}"


@dataclasses.dataclass
class Pass:
    """One pass over an epoch in this process.

    Attributes:
        epoch: the epoch.
        start: position (samples of the global order) the pass began at.
        total: global batches from ``start`` to the end of the epoch.
        handed: global batches this process handed out so far (relative to
            ``start``; in a worker, one past the last batch it made).
        skip: global batches (relative) a restored worker has made already.
    """

    epoch: int
    start: int
    total: int
    handed: int = 0
    skip: int = 0


class DataProgress:
    """Epoch, position and the consumer-side count of one sampler or dataset.

    ``set_epoch(e)`` selects the next pass's epoch; without it each pass
    that begins in this process advances the epoch by one (so persistent
    DataLoader workers, which never see ``set_epoch``, move on too). A
    position restored by :meth:`load_state_dict` applies to the next pass of
    its epoch only, and survives a ``set_epoch`` of that same epoch (the
    usual ``for epoch in range(start, n): ds.set_epoch(epoch)`` loop).

    Args:
        op: the owner's name, for messages.
        count: samples in the dataset.
        fingerprint: :func:`fingerprint` of the dataset.
        seed: base seed of the order.
        batch_size: samples per rank per step.
        world_size: ranks.
        drop_last: leave out a short last global batch (else pad it, see
            :class:`RankBatches`).
        shuffle: whether the order is shuffled (an order in list order is
            the same under every :data:`ORDER_VERSION` and kind).
        kind: :data:`PERMUTATION` or :data:`SHARDS`, the order a position
            counts samples of.
    """

    def __init__(self, op: str, count: int, fingerprint: str, seed: int, batch_size: int,
                 world_size: int, drop_last: bool = False, shuffle: bool = True,
                 kind: str = PERMUTATION) -> None:
        self.op = op
        self.shuffle = shuffle
        self.kind = kind
        self.count = count
        # The object list's digest, and with it the order a position counts
        # samples of (a state's fingerprint).
        self.digest = fingerprint
        self.fingerprint = f"{fingerprint}{_VERSION_MARK}{ORDER_VERSION}"
        self.seed = seed
        self.batch_size = batch_size
        self.world_size = world_size
        self.drop_last = drop_last
        self.epoch = 0
        self.iterations = 0
        self.start = 0  # where the next pass of ``epoch`` begins
        self.restored_worker: dict[str, int] | None = None
        self.current: Pass | None = None
        # A track() counts the pass that begins at iteration ``tracked_at``
        # of ``epoch``; any other pass (a plain loop after it, which counts by
        # itself with num_workers=0) is not its business.
        self.tracking = False
        self.tracked_at = 0
        self.consumed = 0  # global batches the tracked loop took

    @property
    def global_batch(self) -> int:
        """Samples per global batch (``batch_size * world_size``)."""
        return self.batch_size * self.world_size

    def total_batches(self, start: int) -> int:
        """Global batches from ``start`` to the end of the epoch (as :class:`RankBatches`)."""
        samples = pass_samples(self.count, start, self.global_batch, self.world_size,
                               self.drop_last)
        return -(-samples // self.global_batch)

    def live(self) -> Pass:
        """The pass under way, else the one that would begin now (what ``len()`` counts)."""
        current = self.current
        if current is not None and current.handed < current.total:
            return current
        return self.peek()

    def rank_samples(self) -> int:
        """Samples one rank gets in :meth:`live`'s pass (an equal share on every rank)."""
        samples = pass_samples(self.count, self.live().start, self.global_batch,
                               self.world_size, self.drop_last)
        return samples // self.world_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (keeps a restored position of that epoch)."""
        if epoch != self.epoch or self.iterations:
            self.start, self.restored_worker = 0, None
        self.epoch, self.iterations = epoch, 0
        self.current = None
        self.tracking, self.consumed = False, 0  # a new pass: a track() counts it anew

    def peek(self) -> Pass:
        """The pass that would begin now, without beginning it."""
        epoch = self.epoch + self.iterations
        start = self.start if self.iterations == 0 else 0
        return Pass(epoch, start, self.total_batches(start))

    def begin(self, worker: int = 0, num_workers: int = 1) -> Pass:
        """Begin a pass in this process (a sampler's or a dataset's ``__iter__``).

        Args:
            worker: DataLoader worker id (0 without workers).
            num_workers: DataLoader workers (1 without workers).

        Returns:
            The pass; the caller advances ``handed`` as it hands out batches.
        """
        if self.tracking and self.iterations != self.tracked_at:
            # A pass the last track() does not count (it counted an earlier
            # one): this one counts what it hands out.
            self.tracking, self.consumed = False, 0
        current = self.peek()
        restored = self.restored_worker if self.iterations == 0 else None
        if restored is not None and restored["id"] == worker and \
                restored["num_workers"] == num_workers and restored["epoch"] == current.epoch:
            # A StatefulDataLoader restored this worker: same cut, fewer left.
            current = Pass(current.epoch, restored["start"],
                           self.total_batches(restored["start"]),
                           handed=restored["next_batch"], skip=restored["next_batch"])
        self.iterations += 1
        self.current = current
        return current

    def finish(self, current: Pass) -> None:
        """Mark a pass complete (its iterator ran to the end)."""
        current.handed = current.total

    def position(self) -> tuple[int, int]:
        """``(epoch, samples consumed)`` now; a finished epoch is the next one at 0."""
        current = self.current
        if current is None:
            head = self.peek()
            return head.epoch, head.start
        done = self.consumed if self.tracking else current.handed
        if done >= current.total:
            return current.epoch + 1, 0
        return current.epoch, min(self.count, current.start + done * self.global_batch)

    def state_dict(self) -> dict[str, Any]:
        """The position as a plain dict (see :meth:`load_state_dict`).

        Returns:
            ``{"epoch", "seed", "samples", "global_batch_size",
            "fingerprint", "order"}``; in a DataLoader worker also
            ``"worker"``: that worker's own place, which only a
            StatefulDataLoader with the same worker count restores. The
            fingerprint ends in the order's version (``/order-v2``);
            ``"order"`` is ``{"kind", "shuffle"}``.
        """
        epoch, samples = self.position()
        state: dict[str, Any] = {"epoch": epoch, "seed": self.seed, "samples": samples,
                                 "global_batch_size": self.global_batch,
                                 "fingerprint": self.fingerprint,
                                 "order": {"kind": self.kind, "shuffle": self.shuffle}}
        info = torch.utils.data.get_worker_info()
        if info is not None and self.current is not None:
            state["worker"] = {"id": info.id, "num_workers": info.num_workers,
                               "epoch": self.current.epoch, "start": self.current.start,
                               "next_batch": self.current.handed}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the saved epoch at the saved position, on the next pass.

        Args:
            state: what :meth:`state_dict` returned (any world size, worker
                count and global batch size; the same global batch size
                gives the same batches).

        Raises:
            InvalidArgument: not such a state (a key missing, a number that
                is not an int), another seed, another object list, a
                DataLoader worker's state at another global batch size, or a
                place inside an epoch of another order: another version or
                ``shuffle``, or shuffled, another kind.
        """
        op = f"{self.op}.load_state_dict"
        if not isinstance(state, Mapping) or any(k not in state for k in _KEYS):
            raise InvalidArgument(f"{op}: expected a dict with keys {', '.join(_KEYS)}, got "
                                  f"{state!r:.200}")
        seed, epoch, samples = (as_int(op, f"the state's \"{key}\"", state[key], minimum=None)
                                for key in ("seed", "epoch", "samples"))
        batch = as_int(op, "the state's \"global_batch_size\"", state["global_batch_size"],
                       minimum=1)
        worker = _worker(op, state.get("worker"))
        kind, shuffle = _saved_order(op, state)
        self._check_list(op, state)
        if samples > 0 or (worker is not None and (worker["start"] or worker["next_batch"])):
            self._check_order(op, state, f"a place inside epoch {epoch} ({samples} samples)",
                              kind, shuffle)
        if seed != self.seed:
            raise InvalidArgument(
                f"{op}: the state was saved with seed {seed}, this one has seed {self.seed}; "
                "the seed must stay fixed across a resume")
        if not 0 <= samples <= self.count:
            raise InvalidArgument(f"{op}: position {samples} outside the {self.count} samples")
        if worker is not None and batch != self.global_batch:
            # A worker's place counts global batches of the size it was saved
            # at: skipping as many of another size repeats or skips samples.
            raise InvalidArgument(
                f"{op}: the state is a DataLoader worker's (from StatefulDataLoader) saved at "
                f"global batch size {batch}, and this one's is {self.global_batch} "
                "(batch_size * world_size); a worker's state restores only at the same "
                "global batch size and worker count: to change them, resume with a plain "
                "DataLoader and track()")
        self.epoch, self.iterations, self.start = epoch, 0, samples
        self.restored_worker = worker
        self.current = None
        self.tracking, self.consumed = False, 0

    def _check_list(self, op: str, state: Mapping[str, Any]) -> None:
        """Refuse a state over another object list (whatever its order's version)."""
        head, mark, tail = str(state["fingerprint"]).rpartition(_VERSION_MARK)
        if (head if mark else tail) != self.digest:
            raise InvalidArgument(
                f"{op}: the state was saved over another object list (fingerprint "
                f"{state['fingerprint']}, this dataset {self.fingerprint}); a position only "
                "means something over the same objects in the same order")

    def _check_order(self, op: str, state: Mapping[str, Any], place: str, kind: str,
                     shuffle: bool | None) -> None:
        """Refuse ``place``, inside an epoch, counted in another order than this one's.

        The same count of samples covers other samples under another order:
        resumed, the epoch would repeat some and skip others in silence.
        """
        _, mark, version = str(state["fingerprint"]).rpartition(_VERSION_MARK)
        version = version if mark else "1"  # states of version 1 name none
        if version != str(ORDER_VERSION) and self.shuffle:
            raise InvalidArgument(
                f"{op}: the state is {place} of epoch order version {version}, and this "
                f"aioflux orders epochs by version {ORDER_VERSION}; a position only means "
                "something in the order it was counted in. Finish that epoch with the "
                f"aioflux that saved the state, or {_START_OVER}")
        if shuffle is not None and shuffle != self.shuffle:
            raise InvalidArgument(
                f"{op}: the state was saved with shuffle={shuffle}, this {self.op} has "
                f"shuffle={self.shuffle}; the state is {place}, and the epoch order depends "
                "on shuffle, so shuffle must stay fixed across a resume (a position under "
                f"another order would repeat some samples and skip others), or {_START_OVER}")
        if kind != self.kind and self.shuffle:
            raise InvalidArgument(
                f"{op}: the state is {place} of {_KIND_NAMES.get(kind, repr(kind))}, and "
                f"this {self.op} orders epochs as {_KIND_NAMES[self.kind]}; a position only "
                "means something in the order it was counted in (resumed here, the epoch "
                "would repeat some samples and skip others). Finish that epoch with what "
                f"saved the state, or {_START_OVER}")


def _saved_order(op: str, state: Mapping[str, Any]) -> tuple[str, bool | None]:
    """The kind of order a state counts in, and its ``shuffle`` (None: not recorded)."""
    order = state.get("order")
    if order is None:
        # Only ShardDataset recorded an "order" before states named their
        # kind, and it did so before order version 2: a state of version 2
        # without one counts in a permutation.
        return PERMUTATION, None
    if not isinstance(order, Mapping):
        raise InvalidArgument(f"{op}: the state's \"order\" must be a dict of the order's "
                              f"settings, got {order!r:.200}")
    kind = order.get("kind", SHARDS)  # ShardDataset's "order" named no kind at first
    check_str(op, "the state's order[\"kind\"]", kind)
    shuffle = order.get("shuffle")
    check_bool(op, "the state's order[\"shuffle\"]", shuffle, optional=True)
    return kind, shuffle


def _worker(op: str, worker: object) -> dict[str, int] | None:
    """A StatefulDataLoader worker's place in a state, checked (None: none)."""
    if worker is None:
        return None
    if not isinstance(worker, Mapping) or any(k not in worker for k in _WORKER_KEYS):
        raise InvalidArgument(f"{op}: the state's \"worker\" must be a dict with keys "
                              f"{', '.join(_WORKER_KEYS)}, got {worker!r:.200}")
    return {key: as_int(op, f"the state's worker[\"{key}\"]", worker[key], minimum=least)
            for key, least in _WORKER_KEYS.items()}


def track(progress: DataProgress, loader: Iterable[T]) -> Iterator[T]:
    """Yield ``loader``'s batches, counting each as one global batch consumed.

    A batch counts as consumed when the loop asks for the next one or calls
    ``state_dict()`` inside its body: the count is taken before the batch is
    handed over. The count is of this pass only: a later pass that does not
    run through ``track()`` counts by itself again.

    Args:
        progress: the sampler's or dataset's progress.
        loader: the DataLoader (batches of ``batch_size``, or none of its
            own: a ``batch_sampler`` cuts them).

    Returns:
        The loader's batches.

    Raises:
        InvalidArgument: the loader's ``batch_size`` is not the owner's
            (``None`` without a ``batch_sampler``: one sample at a time;
            checked at once, before any batch).
    """
    size = getattr(loader, "batch_size", None)
    shown: object = size
    if size is None and getattr(loader, "batch_sampler", 0) is None:
        # A DataLoader that batches nothing (batch_size=None, no
        # batch_sampler): each item it yields is one sample.
        size, shown = 1, "None (one sample at a time)"
    if size is not None and size != progress.batch_size:
        # Each loader batch counts as one of ours: a resume would repeat (or
        # skip) the samples between the two sizes.
        raise InvalidArgument(
            f"{progress.op}.track: the DataLoader's batch_size is {shown} but this "
            f"{progress.op}'s is {progress.batch_size} (track() counts each loader batch "
            f"as one of its batches, so a resume would repeat or skip samples); give both "
            f"the same: DataLoader(..., batch_size={progress.batch_size}), or build the "
            f"{progress.op} with batch_size={size}")
    return _tracked(progress, loader)


def _tracked(progress: DataProgress, loader: Iterable[T]) -> Iterator[T]:
    head = progress.peek()
    progress.tracking, progress.consumed = True, 0
    progress.tracked_at = progress.iterations
    progress.current = head
    iterations = progress.iterations
    try:
        for batch in loader:
            progress.consumed += 1
            yield batch
        # Ran to the end: the epoch is done whatever the count says, and so
        # is the pass (one that ran in workers only is finished here too, or
        # len() would go on counting it).
        if progress.current is not None:
            progress.consumed = max(progress.consumed, progress.current.total)
            progress.finish(progress.current)
    finally:
        if progress.iterations == iterations:
            # The pass ran in workers only: this process moves on to the next
            # epoch too, as a pass begun here does, also when the loop left
            # early (a few steps an epoch): else every pass repeated the
            # first batches of the same epoch.
            progress.iterations += 1
