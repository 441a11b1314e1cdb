"""One save at a time through a DCP writer (one load through a reader), and
the writer's kept staged copy lent to one save.

``dcp.async_save`` stages the state, then runs the save in a thread of its
own with the writer it was given, and returns. torch's documented pattern
waits for one save's future before the next ``async_save``; nothing makes a
caller do so. A writer is one object across its saves: its ``path`` (set by
``reset``), ``save_id``, rank and the files it has written belong to the
save running now, and the kept staged copy to the save that will read it.
Unguarded, a second save through a busy writer moves the first save's
remaining files and its metadata into the second's checkpoint, and its
``stage`` overwrites the copy the first is still writing: both futures
succeed, one checkpoint has no metadata, and nothing says so.

So a save's steps take the writer's turn (:meth:`Turns.take`, at ``reset``
and ``set_up_storage_writer``, in the save's thread) and give it back when
the save is done (``finish`` on the rank that writes metadata, else
``write_data``) or when one of them raises. A failure the writer does not
see (a planner's, a collective's) leaves the turn with a save that has
ended, so a turn is waited for only while its holder's thread is inside
DCP's save (a frame of ``state_dict_saver`` on its stack); a thread that
has left it, or ended, cannot be saving through the writer, and the turn
is taken over. A turn taken outside DCP's save (the writer's steps called
by hand) is never waited for: no waiting can hang on a save that is over.

On several ranks (a process group of more than one) DCP runs collectives
after the writer's last step (the gather of write results) and after a
failed one (to share the failure): a save that started then would run its
collectives among them on the same group, and both saves would hang. There
the turn ends only once its holder's thread has left DCP's save. Which
waiting save goes next must also be the same on every rank: ``stage``
(``dcp.async_save``'s, in the caller's thread, in program order) gives its
staged state the next ticket (:meth:`Turns.issue`), and the save holding
that state on its stack claims it; a save without one (``dcp.save``) takes
the next ticket at its first step. Turns go in ticket order; a ticket whose
state died unsaved is passed over. Loads have no such step in the caller's
thread: on several ranks, loads through one reader from two threads may go
in a different order on each rank and hang, so there they must be one at a
time (one process, or ranks without a process group, wait as above).

The kept copy is lent by ``stage`` to the save whose state holds it, and
given back once that save's ``write_data`` has read it (:func:`holds`). A
``stage`` while it is lent stages into fresh host memory instead, as torch
does without the kept copy: it never waits, since the save holding the copy
may not have started yet, or may have failed before reading it (then the
copy stays lent and later saves copy afresh: slower, never wrong).

A reader is one object across its loads in the same way: ``reset`` points
its ``path`` at the checkpoint, ``set_up_storage_reader`` keeps its
metadata, and ``read_data`` reads the items by them. Unguarded, a second
``dcp.load`` through a reader whose first load is reading moves both under
the second checkpoint: both loads succeed, and the first state holds the
second checkpoint's tensors (the crc32c and lengths checked are that
checkpoint's too, so nothing fails). A load's steps take the reader's turn (``reset``,
``read_metadata``, ``set_up_storage_reader``) and ``read_data`` gives it
back, as for saves, with DCP's load (``state_dict_loader``) in place of
its save.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from ._dcp_stage import tensors

__all__ = ["LOADER", "SAVER", "Turns", "holds", "inside", "on_stack"]

# How often a save (load) waiting for the turn looks whether its holder has
# left DCP's save (load): one that failed unseen cannot give the turn back.
_LOOK_AGAIN_S = 0.05
# The module of ``dcp.save`` and ``dcp.async_save`` and their steps.
SAVER = "torch.distributed.checkpoint.state_dict_saver"
# The module of ``dcp.load`` and its steps.
LOADER = "torch.distributed.checkpoint.state_dict_loader"


class Turns:
    """A writer's (reader's) turn: held by the thread of the save (load)
    running now, one inside DCP's ``module`` (:data:`SAVER`, :data:`LOADER`)."""

    def __init__(self, module: str) -> None:
        self._module = module
        self._changed = threading.Condition()
        self._holder: threading.Thread | None = None
        self._held = -1  # the holder's ticket
        self._step = -1  # the holder's last step, in DCP's order
        self._issued = 0
        # Tickets whose save has not ended: the state a ticket was issued
        # for while no save has claimed it (weakly: a state that died will
        # not be saved), else None.
        self._open: dict[int, weakref.ref[Any] | None] = {}

    def issue(self, state: Any) -> None:
        """Give the save of ``state`` (a staged state, weakly referable) the
        next ticket; called in program order, the same on every rank."""
        with self._changed:
            self._open[self._next()] = weakref.ref(state)

    def take(self, step: int = 0, *, again: bool = False) -> None:
        """Hold the turn for DCP's ``step`` (its number in DCP's order) of a
        save (load) in this thread. A step no later than this thread's last
        one (earlier, where it may come ``again``) starts this thread's next
        save: its ticket is then claimed, and its turn waited for."""
        me = threading.current_thread()
        with self._changed:
            if self._holder is me:
                if step > self._step or (again and step == self._step):
                    self._step = step
                    return
                self._end()  # this thread's last save is over
            ticket = self._claim()
            try:
                while not self._free_for(ticket):
                    self._changed.wait(_LOOK_AGAIN_S)
            except BaseException:
                del self._open[ticket]  # its save will not run
                self._changed.notify_all()
                raise
            self._holder, self._held, self._step = me, ticket, step

    @contextlib.contextmanager
    def step(self, step: int = 0, *, again: bool = False) -> Iterator[None]:
        """A step of a save (load) under the turn (:meth:`take`), given back
        if the step raises (that ends the save)."""
        self.take(step, again=again)
        try:
            yield
        except BaseException:
            self.give_back()
            raise

    def give_back(self) -> None:
        """This thread's save (load) is done with the writer (reader): let
        the turn go now where no rank's collective follows; on several ranks
        it goes once this thread has left DCP's save (load)."""
        with self._changed:
            if self._holder is threading.current_thread() and not _ranks():
                self._end()

    def _next(self) -> int:
        self._issued += 1
        return self._issued - 1

    def _end(self) -> None:
        self._open.pop(self._held, None)
        self._holder, self._held, self._step = None, -1, -1
        self._changed.notify_all()

    def _claim(self) -> int:
        """The ticket of a state on this thread's stack (an ``async_save``'s,
        in DCP's save frame), else the next one."""
        for unsaved in [t for t, ref in self._open.items() if ref is not None and ref() is None]:
            del self._open[unsaved]  # its state died unsaved: no save will claim it
        for ticket, ref in list(self._open.items()):
            state = None if ref is None else ref()
            if state is not None and on_stack(state, sys._getframe(1)):
                self._open[ticket] = None
                return ticket
        ticket = self._next()
        self._open[ticket] = None
        return ticket

    def _free_for(self, ticket: int) -> bool:
        holder = self._holder
        if holder is not None:
            if inside(holder, self._module):
                return False
            self._end()  # its save is over, however it ended
        if not _ranks():
            return True  # no other rank to agree with: any order will do
        for unsaved in [t for t, ref in self._open.items() if ref is not None and ref() is None]:
            del self._open[unsaved]
        return ticket == min(self._open)


def _ranks() -> bool:
    """Whether DCP's collectives may take other processes (ranks): a
    default process group of more than one."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def on_stack(obj: object, frame: FrameType | None) -> bool:
    """Whether a local variable of ``frame`` or a frame below it (its
    callers) is ``obj``."""
    while frame is not None:
        if any(value is obj for value in frame.f_locals.values()):
            return True
        frame = frame.f_back
    return False


def inside(thread: threading.Thread, module: str) -> bool:
    """Whether ``thread`` runs a function of ``module`` now (an ended thread
    does not)."""
    if not thread.is_alive():  # its ident may be a new thread's already
        return False
    frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
    while frame is not None:
        if frame.f_globals.get("__name__") == module:
            return True
        frame = frame.f_back
    return False


def holds(planner: Any, marker: torch.Tensor) -> bool:
    """Whether the state a save's ``planner`` was set up with holds ``marker``
    (the same tensor object: the kept copy's). A planner that does not show
    its state (``state_dict``, as DCP's ``DefaultSavePlanner`` does) is taken
    to hold it: the save that reads the copy is then the one that ends first."""
    state = getattr(planner, "state_dict", None)
    return state is None or any(tensor is marker for tensor in tensors(state))
