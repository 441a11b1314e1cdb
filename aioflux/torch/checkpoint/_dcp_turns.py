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
from collections.abc import Iterator
from typing import Any

import torch

from ._dcp_stage import tensors

__all__ = ["LOADER", "SAVER", "Turns", "holds", "inside"]

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

    def take(self) -> None:
        """Wait while another thread holds the turn inside DCP's module, then hold it."""
        me = threading.current_thread()
        with self._changed:
            while not self._free_for(me):
                self._changed.wait(_LOOK_AGAIN_S)
            self._holder = me

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """A step of a save (load) under the turn: taken first, and given
        back if the step raises (that ends the save)."""
        self.take()
        try:
            yield
        except BaseException:
            self.give_back()
            raise

    def give_back(self) -> None:
        """Let the turn go, where this thread holds it."""
        with self._changed:
            if self._holder is threading.current_thread():
                self._holder = None
                self._changed.notify_all()

    def _free_for(self, me: threading.Thread) -> bool:
        holder = self._holder
        return holder is None or holder is me or not inside(holder, self._module)


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
